"""Attacks by a member in good standing, on a namespace LAN with three real peers and the
member's host as the attacker: equivocation, and a flood of maximum-size replies whose
parents never come.  The attacker's key is a real member's (it joined, posted, then
stopped its peer), so these bounds hold however strictly senders are admitted."""

import time

import pytest

from tests.testbed.lan import MemberAttack, rss_bytes
from m2mc.middleware import wire

pytestmark = pytest.mark.netns

# Done-when bounds of issue 16.
EQUIVOCATION_CONVERGES = 30.0
MAX_RSS_GROWTH = 150 * 1024 * 1024
FLOOD = 12_000


@pytest.fixture
def attack(tmp_path):
    setup = MemberAttack(tmp_path, ("Ann", "Bob", "Cat"))
    yield setup
    setup.close()


def test_equivocation_converges_and_its_warning_survives_a_restart(attack):
    ann, bob, cat = attack.peers
    gid, mal = attack.gid, attack.mal
    now = int(time.time() * 1000)
    versions = [wire.signed_data(mal, gid, 2, None, now, "Mal", text)
                for text in ("meet at the north door", "meet at the south door")]
    # Ann is sent only the first, Cat only the second, Bob both.
    started = time.monotonic()
    for version, deaf in zip(versions, (2, 0)):
        attack.block(deaf)
        attack.send([wire.encode(mal, version)])
        time.sleep(0.2)
        attack.block(deaf, on=False)
    mid = f"{mal.pid}:2"

    def converged():
        histories = [[m["text"] for m in p.call("history", {"gid": gid}) if m["mid"] == mid] for p in (ann, bob, cat)]
        texts = {text for history in histories for text in history}
        return all(len(history) == 1 for history in histories) and len(texts) == 1 and texts

    texts = ann.wait_for(converged, timeout=EQUIVOCATION_CONVERGES, what="one text on every peer")
    took = time.monotonic() - started
    print(f"equivocation converged {took:.2f} s after the first version was sent, on {texts}")
    for peer in (ann, bob, cat):
        assert peer.call("stats")["conflicts"] == 1
        peer.wait_notification("warning", lambda p: mal.pid in p["text"], timeout=5)

    ann = attack.restart(ann)
    assert ann.call("stats")["conflicts"] == 1
    ann.wait_notification("warning", lambda p: p["gid"] == gid and mal.pid in p["text"], timeout=5)
    assert {m["text"] for m in ann.call("history", {"gid": gid}) if m["mid"] == mid} == texts


def test_12000_maximum_size_replies_to_missing_parents_grow_rss_by_at_most_150_mb(attack):
    ann, bob, cat = attack.peers
    gid, mal = attack.gid, attack.mal
    text = "\U0001F600" * wire.MAX_TEXT  # 32 KB as UTF-8, the largest a message can be
    flood = [wire.encode(mal, wire.signed_data(mal, gid, seqno, ("f" * 32, seqno), 0, "M" * wire.MAX_NAME,
                                               text[:wire.MAX_TEXT - seqno % 7]))
             for seqno in range(2, FLOOD + 2)]
    before = {peer.name: rss_bytes(peer.proc.pid) for peer in attack.peers}
    attack.send(flood, pause=0.001)  # faster, the kernel drops fragments of 32 KB datagrams

    def absorbed():  # every datagram handled (fragments of 32 KB datagrams get lost at this pace)
        counts = [ann.call("stats")["datagrams_in"]]
        time.sleep(1)
        counts.append(ann.call("stats")["datagrams_in"])
        return counts[0] == counts[1]

    ann.wait_for(absorbed, timeout=120, what="the flood")
    stats = ann.call("stats")
    assert stats["pending"] + stats["evicted"] >= FLOOD * 0.8, stats
    growth = {peer.name: rss_bytes(peer.proc.pid) - before[peer.name] for peer in attack.peers}
    print(f"{FLOOD} maximum-size held replies: held {stats['pending']} ({stats['held_bytes'] / 2**20:.1f} MB), "
          f"evicted {stats['evicted']}; RSS growth "
          + ", ".join(f"{name} +{grown / 2**20:.1f} MB" for name, grown in growth.items()))
    assert stats["held_bytes"] <= 64 * 2**20
    assert max(growth.values()) <= MAX_RSS_GROWTH
    # Still a working member: a real message gets through.
    mid = bob.call("send", {"gid": gid, "text": "still talking", "parent": None})["mid"]
    ann.wait_for(lambda: any(m["mid"] == mid for m in ann.delivered(gid)), timeout=10, what="a real message")
