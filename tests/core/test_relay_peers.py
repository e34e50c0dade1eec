"""Relay trees inside whole peers (PeerCore, middleware/relay_link.py), on the simulated LAN of
tests/testbed/peer_sim.py with multicast dropped: past 8 members that multicast does not reach,
a writer's messages go along the tree (RELAY) instead of one copy to each member; nothing is lost;
only proven endpoints are aimed at; members reached by multicast keep it; a relay that relays
nothing or relays garbage is routed around and loses its place."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from m2mc.middleware import relay as relay_core
from m2mc.middleware import wire
from m2mc.middleware.addresses import Arrival, Endpoint, GroupAddress, Via
from m2mc.middleware.memory_store import MemoryStore
from tests.testbed.faults import FaultInjector
from tests.testbed.peer_sim import PeerLan


class RelayLan(PeerLan):
    """Unicast endpoints; multicast dropped unless ``multicast``; every datagram counted by sender
    and kind; ``silent`` peers send no RELAY (they still announce); ``unproven`` collects any
    relay-tree datagram aimed at an endpoint its sender never proved."""

    multicast = False
    silent: set[str] = set()

    def transmit(self, sender, datagrams):
        kept = []
        for datagram in datagrams:
            if isinstance(datagram.destination, GroupAddress) and not self.multicast:
                continue
            data = datagram.data
            if wire.is_relay(data):
                kind = wire.MsgType(data[1]).name
                if sender.core.reach.pid_at(datagram.destination) is None:
                    self.unproven.append((sender.name, datagram.destination))
                if kind == "RELAY":
                    if sender.name in self.silent:
                        continue
                    inner = wire.parse_relay(data).inner
                    own = wire.sent_by(inner, sender.pid.encode())
                    kind = "RELAY " + ("own " if own else "") + wire.MsgType(inner[2]).name
            elif wire.site_payload(data) is not None:
                kind = "site " + wire.MsgType(data[3]).name
            elif isinstance(datagram.destination, Endpoint) and data[:3] != bytes((0x93, 2, 14)):
                try:
                    kind = "copy " + wire.MsgType(data[2]).name
                except ValueError:
                    kind = "other"
            else:
                kind = "other"
            self.counts[sender.name][kind] += 1
            kept.append(datagram)
        super().transmit(sender, kept)


def make_lan(n: int, seed: int = 7, multicast: bool = False, drop: float = 0.0) -> tuple[RelayLan, str]:
    RelayLan.multicast = multicast
    lan = RelayLan.__new__(RelayLan)
    lan.counts = {f"peer{i}": Counter() for i in range(n)}
    lan.unproven = []
    lan.silent = set()
    RelayLan.__init__(lan, [MemoryStore() for _ in range(n)], FaultInjector(drop=drop, rng=random.Random(seed)),
                      seed, unicast=True)
    if not multicast:  # each peer is told the others' addresses, as invites would
        for node in lan.nodes:
            lan.run(node, lambda core: [core.add_peer(other.endpoint, lan.now) for other in lan.nodes
                                        if other is not node])
    lan.settle(3.0)
    gid = lan.create_group(lan.nodes[0])
    lan.join_until_all(gid, rounds=10)
    lan.settle(5.0)
    assert all(len(node.core.gjlp.groups[gid].current()) == n for node in lan.nodes)
    return lan, gid


def write(lan: RelayLan, gid: str, count: int, every: float = 0.1, writers=None) -> list[tuple[str, str]]:
    writers = writers or lan.nodes
    texts = []
    for i in range(count):
        node = writers[i % len(writers)]
        text = f"message {i} from {node.name}"
        lan.send(node, gid, text)
        texts.append((node.name, text))
        lan.settle(every)
    return texts


def delivered_everywhere(lan: RelayLan, gid: str, texts, skip=()) -> list[str]:
    missing = []
    for node in lan.nodes:
        if node.name in skip:
            continue
        have = {m.text for m in node.history(gid)}
        missing += [f"{node.name} lacks {text!r}" for _, text in texts if text not in have]
    return missing


@pytest.fixture(scope="module")
def twelve():
    lan, gid = make_lan(12)
    return lan, gid


def test_past_eight_unicast_members_a_writer_pushes_along_the_tree_and_nothing_is_lost(twelve):
    lan, gid = twelve
    for node in lan.nodes:
        relay = node.core.joined[gid].relay
        assert relay.active and len(relay.members) == 11, node.name
        assert 1 <= len(relay.tree.view) <= relay_core.MAX_VIEW
    before = {name: Counter(c) for name, c in lan.counts.items()}
    texts = write(lan, gid, 36)
    lan.settle(3.0)
    assert delivered_everywhere(lan, gid, texts) == []
    sent = {name: lan.counts[name] - before[name] for name in lan.counts}
    relays = sum(c["RELAY DATA_BATCH"] + c["RELAY own DATA_BATCH"] for c in sent.values())
    copies = sum(c["copy DATA_BATCH"] for c in sent.values())
    assert copies == 0, "no writer copies a message to each member any more"
    assert relays / (len(texts) * len(lan.nodes)) <= 4, "each host sends at most 4 copies of a message on average"
    # each writer pushes its own message to at most its view (6), where fan-out sent 11
    own = sum(c["RELAY own DATA_BATCH"] for c in sent.values())
    assert own <= relay_core.MAX_VIEW * len(texts)
    assert lan.unproven == [], "every relay-tree datagram goes to an endpoint its sender proved"
    control = sum(node.core.stats_dict()["relay_control_bytes_sent"] for node in lan.nodes)
    assert control > 0


def test_a_writers_own_pushes_are_at_most_its_view():
    lan, gid = make_lan(10, seed=3)
    writer = lan.nodes[4]
    before = Counter(lan.counts[writer.name])
    texts = write(lan, gid, 5, every=0.3, writers=[writer])
    lan.settle(2.0)
    assert delivered_everywhere(lan, gid, texts) == []
    pushed = (lan.counts[writer.name] - before)["RELAY own DATA_BATCH"]
    assert pushed <= relay_core.MAX_VIEW * len(texts), pushed  # fan-out: 9 copies each
    assert (lan.counts[writer.name] - before)["copy DATA_BATCH"] == 0


def test_with_eight_or_fewer_unicast_members_each_gets_the_writers_copy_as_before():
    lan, gid = make_lan(6, seed=5)
    assert not any(node.core.joined[gid].relay.active for node in lan.nodes)
    before = Counter(lan.counts["peer0"])
    texts = write(lan, gid, 3, writers=[lan.nodes[0]])
    lan.settle(2.0)
    assert delivered_everywhere(lan, gid, texts) == []
    sent = lan.counts["peer0"] - before
    assert sent["RELAY own DATA_BATCH"] == 0 and sent["copy DATA_BATCH"] == 3 * 5


def test_members_reached_by_multicast_keep_multicast():
    lan, gid = make_lan(10, seed=11, multicast=True)
    texts = write(lan, gid, 5)
    lan.settle(2.0)
    assert delivered_everywhere(lan, gid, texts) == []
    assert not any(node.core.joined[gid].relay.active for node in lan.nodes)
    assert not any(kind.startswith("RELAY") or kind == "IHAVE" for c in lan.counts.values() for kind in c)


def test_a_relay_that_relays_nothing_is_routed_around_within_5_s_and_loses_its_place():
    lan, gid = make_lan(12, seed=13)
    silent = lan.nodes[5]
    lan.silent = {silent.name}
    honest = [node for node in lan.nodes if node is not silent]
    sent_at = {}
    texts = []
    for i in range(40):
        node = honest[i % len(honest)]
        text = f"around {i}"
        lan.send(node, gid, text)
        sent_at[text] = lan.now
        texts.append((node.name, text))
        lan.settle(0.1)
    lan.settle(5.0)
    assert delivered_everywhere(lan, gid, texts) == []
    # within 5 s: each message's delivery time at every honest member
    late = []
    for node in honest:
        for message in node.history(gid):
            if message.text in sent_at and message.mid[0] != node.pid:
                delay = message.received_at / 1000 - sent_at[message.text]
                if delay > 5.0:
                    late.append((node.name, message.text, delay))
    assert late == []
    shut_out = [node.name for node in honest if silent.pid in node.core.joined[gid].relay.tree.distrusted(lan.now)]
    neighbours = [node.name for node in honest
                  if silent.pid in relay_core.view_of(gid, node.pid, node.core.joined[gid].relay.tree.ring)]
    assert shut_out and set(shut_out) <= set(neighbours), (shut_out, neighbours)


def test_a_relay_that_relays_garbage_loses_its_place_at_once_and_nothing_of_it_is_delivered(twelve):
    lan, gid = twelve
    victim = lan.nodes[0]
    relay = victim.core.joined[gid].relay
    hostile = next(node for node in lan.nodes if node.pid in relay.tree.view)
    key = hostile.core.joined[gid].relay.key(victim.pid, victim.core.identity.direct_public)
    assert key is not None
    forged_inner = bytearray(wire.encode(hostile.core.identity, wire.Heartbeat(gid, 1)))
    forged_inner[-1] ^= 1  # a bad signature
    count = len(victim.history(gid))
    data = wire.encode_relay(key, wire.MsgType.RELAY, hostile.pid, gid, 2**40, inner=bytes(forged_inner))
    lan.run(victim, lambda core: core.receive(data, Arrival(hostile.endpoint, Via.UNICAST), lan.now, lan.now))
    assert hostile.pid in relay.tree.distrusted(lan.now)
    assert len(victim.history(gid)) == count
    assert relay.stats["relay_garbage"] == 1


def test_a_stranger_cannot_make_a_member_push_or_prune():
    lan, gid = make_lan(10, seed=17)
    from m2mc.middleware import crypto
    stranger = crypto.Identity.generate()
    victim = lan.nodes[1]
    key = stranger.relay_key(gid, victim.pid, victim.core.identity.direct_public)
    before = Counter(lan.counts[victim.name])
    stats = victim.core.stats_dict()
    for kind, fields in ((wire.MsgType.GRAFT, {"ranges": ((wire.writer_ref(lan.nodes[0].pid), 1, 4000),)}),
                         (wire.MsgType.PRUNE, {"writers": (wire.writer_ref(lan.nodes[0].pid),)})):
        data = wire.encode_relay(key, kind, stranger.pid, gid, 5, **fields)
        lan.run(victim, lambda core: core.receive(data, Arrival(Endpoint("10.77.0.99", 47477), Via.UNICAST), lan.now, lan.now))
    assert victim.core.stats_dict()["not_member_dropped"] == stats["not_member_dropped"] + 2
    assert not any(kind.startswith("RELAY") for kind in lan.counts[victim.name] - before)


def test_a_member_that_hears_another_by_multicast_builds_no_tree_and_relays_for_its_site():
    lan, gid = make_lan(10, seed=19)
    node, neighbour = lan.nodes[2], lan.nodes[3]
    assert node.core.joined[gid].relay.active
    lan.run(node, lambda core: core.reach.heard(neighbour.pid, None, "multicast", lan.now))  # one on its subnet
    assert not node.core.joined[gid].relay.active
    before = Counter(lan.counts[node.name])
    write(lan, gid, 2, writers=[node])
    lan.settle(2.0)
    sent = lan.counts[node.name] - before
    # It and its neighbour are their site's two relays (test_site_relays.py): each message goes, as a
    # site relay's copy, to the one relay of the other site paired with it, not to every member.
    assert sent["RELAY own DATA_BATCH"] == 0 and sent["copy DATA_BATCH"] == 0
    assert sent["site DATA_BATCH"] == 2
    assert lan.unproven == []
