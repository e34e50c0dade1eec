"""Site relays inside whole peers (PeerCore, middleware/routing.py), on the simulated LAN of
tests/testbed/peer_sim.py cut in two subnets: multicast reaches only the sender's own site, unicast
crosses.  Each site keeps multicast; one or two members per site carry the group across and
multicast what comes from there; nobody else sends across; every message reaches every member;
a relay that says goodbye is replaced at once; only proven endpoints are aimed at."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from m2mc.middleware import crypto, routing, wire
from m2mc.middleware.addresses import Arrival, Endpoint, GroupAddress, Via
from m2mc.middleware.memory_store import MemoryStore
from tests.testbed.faults import FaultInjector
from tests.testbed.peer_sim import PeerLan

SITE = 6  # members per site


def site_of(index: int) -> int:
    return index // SITE


class SiteLan(PeerLan):
    """Two subnets of ``SITE`` peers: a multicast datagram reaches its sender's site only.  Every
    datagram that crosses is noted (sender, receiver's site, the inner message type), and any
    site relay's copy aimed at an endpoint its sender never proved.  ``deaf`` peers hear no multicast
    (theirs is heard: filtered one way)."""

    deaf: frozenset[int] = frozenset()

    def transmit(self, sender, datagrams):
        source = self.nodes.index(sender)
        crossing = []
        for datagram in datagrams:
            destination = datagram.destination
            if isinstance(destination, GroupAddress):
                self.sent["control" if destination.host.endswith("77.77") else "group"] += 1
                for index, node in enumerate(self.nodes):
                    if node is not sender and site_of(index) == site_of(source) and index not in self.deaf:
                        self._send(source, index, datagram)
                continue
            if isinstance(destination, Endpoint):
                index = next(i for i, node in enumerate(self.nodes) if node.endpoint == destination)
                inner = wire.site_payload(datagram.data)
                if inner is not None and sender.core.reach.pid_at(destination) is None:
                    self.unproven.append((sender.name, destination))
                if site_of(index) != site_of(source):
                    data = inner if inner is not None else datagram.data
                    try:
                        kind = wire.MsgType(data[1] if wire.is_relay(data) else data[2]).name
                    except ValueError:
                        kind = "other"
                    self.crossed.append((sender.name, site_of(index), kind, inner is not None))
            crossing.append(datagram)
        super().transmit(sender, [d for d in crossing if isinstance(d.destination, Endpoint)])


def make_sites(seed: int = 5, n: int = 2 * SITE, deaf: frozenset[int] = frozenset(),
               warmup: float = 3.0) -> tuple[SiteLan, str]:
    lan = SiteLan.__new__(SiteLan)
    lan.crossed, lan.unproven, lan.deaf = [], [], deaf
    SiteLan.__init__(lan, [MemoryStore() for _ in range(n)], FaultInjector(rng=random.Random(seed)), seed,
                     unicast=True)
    for node in lan.nodes:  # each is told the other site's addresses (and a deaf one's), as invites would
        here = lan.nodes.index(node)
        lan.run(node, lambda core: [core.add_peer(other.endpoint, lan.now) for i, other in enumerate(lan.nodes)
                                    if i != here and (site_of(i) != site_of(here) or {i, here} & deaf)])
    lan.settle(warmup)
    gid = lan.create_group(lan.nodes[0])
    lan.join_until_all(gid, rounds=15, size=n)
    lan.settle(5.0)
    assert all(len(node.core.gjlp.groups[gid].current()) == n for node in lan.nodes)
    return lan, gid


def write(lan: SiteLan, gid: str, count: int, writers) -> list[str]:
    texts = []
    for i in range(count):
        node = writers[i % len(writers)]
        texts.append(f"message {i} from {node.name}")
        lan.send(node, gid, texts[-1])
        lan.settle(0.2)
    return texts


def missing(lan: SiteLan, gid: str, texts, skip=()) -> list[str]:
    out = []
    for node in lan.nodes:
        if node.name not in skip:
            have = {m.text for m in node.history(gid)}
            out += [f"{node.name} lacks {text!r}" for text in texts if text not in have]
    return out


def relays_of(lan: SiteLan, site: int, skip=()) -> list[str]:
    return sorted(n.pid for i, n in enumerate(lan.nodes) if site_of(i) == site and n.name not in skip)[:2]


@pytest.fixture(scope="module")
def sites():
    return make_sites()


def test_each_site_keeps_multicast_and_only_its_two_relays_carry_the_group_across(sites):
    lan, gid = sites
    lan.crossed.clear()
    writers = [lan.nodes[i] for i in (1, 4, 7, 10, 0, 6)]
    texts = write(lan, gid, 24, writers)
    lan.settle(3.0)
    assert missing(lan, gid, texts) == []
    batches = [c for c in lan.crossed if c[2] == "DATA_BATCH"]
    for site in (0, 1):
        relays = {n.name for n in lan.nodes if n.pid in relays_of(lan, site)}
        senders = Counter(name for name, to, _, _ in lan.crossed if to != site and
                          site_of(int(name.removeprefix("peer"))) == site)
        assert set(senders) <= relays, f"only site {site}'s relays {relays} send across, not {set(senders) - relays}"
        into = [c for c in batches if c[1] == 1 - site]
        assert len(into) <= 2 * len(texts), "at most two copies of a message cross each way"
        assert len(into) >= len(texts), "every message crosses"
    assert all(wrapped for *_, wrapped in batches), "what crosses is a site relay's copy"
    assert lan.unproven == [], "a site relay's copies go to endpoints its sender proved"
    stats = [n.core.stats_dict() for n in lan.nodes]
    assert sum(s["site_forwarded"] for s in stats) > 0 and sum(s["site_remulticast"] for s in stats) > 0


def test_the_relays_are_chosen_alike_by_every_member_of_a_site():
    assert routing.site_relays("c", ["b", "d", "a"]) == ["a", "b"]
    ann, bob = Endpoint("10.0.0.1", 1), Endpoint("10.0.0.2", 1)
    remote = [("y", bob), ("x", ann), ("z", Endpoint("10.0.0.3", 1))]
    assert routing.site_targets("a", ["b", "c"], remote) == (ann,)  # first to first
    assert routing.site_targets("b", ["a", "c"], remote) == (bob,)  # second to second
    assert routing.site_targets("c", ["a", "b"], remote) == ()  # not a relay: nothing across
    assert routing.site_targets("a", [], remote[:1]) == (bob,)
    assert routing.site_targets("a", ["b"], remote[:1]) == (bob,)  # two here, one there: both to it
    assert routing.site_targets("a", [], remote) == (ann, bob)  # alone here: to both there


def test_a_relay_that_says_goodbye_is_replaced_at_once_and_nothing_is_lost():
    lan, gid = make_sites(seed=9)
    first = next(n for n in lan.nodes if n.pid == relays_of(lan, 0)[0])
    lan.run(first, lambda core: core.say_goodbye())
    lan.kill(first)
    lan.settle(1.0)
    lan.crossed.clear()
    texts = write(lan, gid, 12, [n for n in lan.nodes if n is not first])
    lan.settle(4.0)  # within 5 s of its goodbye, the site has a new pair of relays
    assert missing(lan, gid, texts, skip=(first.name,)) == []
    new = {n.name for n in lan.nodes if n.pid in relays_of(lan, 0, skip=(first.name,))}
    senders = {name for name, to, _, _ in lan.crossed if to == 1 and site_of(int(name.removeprefix("peer"))) == 0}
    assert senders and senders <= new, (senders, new)


def test_only_a_members_copy_from_a_proven_member_is_taken_and_multicast_again(sites):
    lan, gid = sites
    victim, relay, writer = lan.nodes[1], lan.nodes[7], lan.nodes[8]  # the relay and the writer: the other site
    assert victim.core.reach.pid_at(relay.endpoint) == relay.pid
    stranger = crypto.Identity.generate()

    def beacon(identity, seqno: int) -> bytes:
        return wire.encode_site(wire.encode(identity, wire.Heartbeat(gid, seqno, int(lan.now * 1000))))

    def hand(data: bytes, source: Endpoint) -> tuple[int, int]:
        before = victim.core.stats_dict()
        lan.run(victim, lambda core: core.receive(data, Arrival(source, Via.UNICAST), lan.now, lan.now))
        after = victim.core.stats_dict()
        return (after["not_member_dropped"] - before["not_member_dropped"],
                after["site_remulticast"] - before["site_remulticast"])

    seqno = writer.core.joined[gid].channel.next_seqno - 1
    assert hand(beacon(writer.core.identity, seqno), Endpoint("10.77.0.99", 47477)) == (1, 0), "from an unproven endpoint"
    assert hand(beacon(stranger, 1), relay.endpoint) == (1, 0), "a stranger's datagram, from a member"
    assert hand(beacon(writer.core.identity, seqno), relay.endpoint) == (0, 1), "a member's, from a member"
    assert hand(beacon(writer.core.identity, seqno), relay.endpoint) == (0, 0), "each once"


def test_a_member_that_hears_no_multicast_on_a_site_gets_everything_from_its_relays():
    # Within 45 s it tells the others it does not hear them (reach's report, 35 s after it is proven).
    lan, gid = make_sites(seed=3, n=SITE, deaf=frozenset({5}), warmup=45.0)
    deaf = lan.nodes[5]
    assert all(node.core.reach.path(deaf.pid, lan.now) == "unicast" for node in lan.nodes[:5])
    texts = write(lan, gid, 10, lan.nodes)
    lan.settle(3.0)
    assert missing(lan, gid, texts) == []
    relays = set(relays_of(lan, 0, skip=(deaf.name,)))
    assert {n.pid for n in lan.nodes[:5] if n.core.joined[gid].site_relay} == relays
    assert lan.unproven == []


def test_a_relay_that_crashes_loses_nothing_while_the_other_pair_carries():
    lan, gid = make_sites(seed=11)
    first = next(n for n in lan.nodes if n.pid == relays_of(lan, 1)[0])
    lan.kill(first)  # no goodbye: the others still count it as a relay for a presence timeout
    lan.crossed.clear()
    texts = write(lan, gid, 12, [n for n in lan.nodes if n is not first])
    lan.settle(3.0)
    assert missing(lan, gid, texts, skip=(first.name,)) == []
    second = next(n for n in lan.nodes if n.pid == relays_of(lan, 1)[1])
    into_0 = {name for name, to, kind, _ in lan.crossed if to == 0 and kind == "DATA_BATCH"}
    assert into_0 == {second.name}, into_0


def test_a_site_copy_is_one_byte_before_the_writers_datagram():
    inner = bytes((0x96, 2, 1)) + b"x" * 40
    assert wire.site_payload(wire.encode_site(inner)) == inner
    assert wire.site_payload(inner) is None
    with pytest.raises(wire.WireError):
        wire.encode_site(b"x" * wire.MAX_DATAGRAM)
