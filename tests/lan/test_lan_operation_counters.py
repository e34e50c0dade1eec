"""A member's operation at the counter limit, on a namespace LAN (issue 26, item 2).

Ann and Bob run real peers; Mal's host is the attacker.  Mal's peer joined and
posted once, then stopped; its key then signs, with the product's codec, a
topic setting and an unpin whose counters are 2**53 - 1, the most the wire
lets through.  Before issue 26 every later operation had to carry 2**53 and
was refused on every peer, the author's own included, while each call still
answered with a mid; a restart replayed the freeze.  Now every honest edit,
reaction, pin and topic setting is applied on every peer, and again after a
restart.
"""

import time

import pytest

from tests.testbed.lan import MemberAttack
from m2mc.middleware import wire
from m2mc.middleware.chatops import encode
from m2mc.middleware.obg import MAX_COUNTER

pytestmark = pytest.mark.netns

APPLIED_WITHIN = 10.0
"""Seconds for an honest operation to show on every peer after the attack."""


def shown(peer, gid, mid):
    """The topic and what the operations made of message ``mid``, as ``peer`` shows them."""
    topic = next(g for g in peer.call("list_groups") if g["gid"] == gid)["topic"]
    message = next(m for m in peer.call("history", {"gid": gid}) if m["mid"] == mid)
    return topic, message["text"], message["edited"], message["reactions"], message["pinned"]


def test_an_operation_at_the_counter_limit_freezes_no_honest_operation_also_after_a_restart(tmp_path):
    attack = MemberAttack(tmp_path, ("Ann", "Bob"), "Counters")
    try:
        ann, bob = attack.peers
        gid, mal = attack.gid, attack.mal
        hello = ann.call("send", {"gid": gid, "text": "hello", "parent": None})["mid"]
        bob.wait_for(lambda: any(m["mid"] == hello for m in bob.delivered(gid)), what="Ann's message")
        now = int(time.time() * 1000)
        top = MAX_COUNTER - 1
        hello_mid = (hello.split(":")[0], int(hello.split(":")[1]))
        datagrams = [wire.encode(mal, wire.signed_data(mal, gid, 2, None, now, "Mal",
                                                       encode("topic", None, top, "Mal's")))]
        datagrams.append(wire.encode(mal, wire.signed_data(mal, gid, 3, hello_mid, now, "Mal",
                                                        encode("pin", None, top, on=False))))
        attack.send(datagrams)
        for peer in (ann, bob):
            peer.wait_for(lambda p=peer: shown(p, gid, hello)[0] == "Mal's", what="Mal's topic")

        started = time.monotonic()
        ann.call("set_topic", {"gid": gid, "text": "Friday lunch"})
        ann.call("edit", {"gid": gid, "mid": hello, "text": "hello, edited"})
        bob.call("react", {"gid": gid, "mid": hello, "emoji": "👍", "on": True})
        bob.call("pin", {"gid": gid, "mid": hello, "on": True})
        expected = ("Friday lunch", "hello, edited", 1, {"👍": [bob.pid]}, True)
        for peer in (ann, bob):
            peer.wait_for(lambda p=peer: shown(p, gid, hello) == expected, timeout=APPLIED_WITHIN,
                          what="every honest operation applied")
        took = time.monotonic() - started
        print(f"after a counter of 2**53-1: four honest operations applied on both peers in {took:.2f} s; "
              f"rejected: {[p.call('stats')['operations_rejected'] for p in (ann, bob)]}")
        assert [p.call("stats")["operations_rejected"] for p in (ann, bob)] == [0, 0]

        bob = attack.restart(bob)
        assert shown(bob, gid, hello) == expected  # the store's replay freezes nothing either
        bob.call("set_topic", {"gid": gid, "text": "after Bob's restart"})
        bob.call("pin", {"gid": gid, "mid": hello, "on": False})
        expected = ("after Bob's restart",) + expected[1:4] + (False,)
        for peer in (ann, bob):
            peer.wait_for(lambda p=peer: shown(p, gid, hello) == expected, timeout=APPLIED_WITHIN,
                          what="operations after the restart applied")
    finally:
        attack.close()
