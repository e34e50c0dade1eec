"""Operations over the real channel cores on a simulated lossy LAN (in-process, hand-driven clock).

Each peer feeds what its GroupChannel delivers, in S_b order, to its own
GroupOperations, as GroupManager does; operations are composed from each
peer's own state, so concurrent ones really did not see each other.
"""

import random

from m2mc.middleware.chatops import GroupOperations, encode
from tests.testbed.faults import FaultInjector
from m2mc.middleware.types import ChatMessage
from tests.testbed.sim import GID, SimLan, SimPeer


class OpsPeer:
    """A SimPeer's operations, fed with what it delivered so far."""

    def __init__(self, peer: SimPeer) -> None:
        self.peer = peer
        self.ops = GroupOperations(GID)
        self.fed = 0
        self.chat: list[ChatMessage] = []

    def feed(self) -> None:
        order, stored = self.peer.order, self.peer.stored
        batch = []
        for mid in order[self.fed:]:
            m = stored[mid]
            batch.append(ChatMessage(GID, mid, m.parent, m.name, m.text, m.sent_at, m.sent_at))
        self.fed = len(order)
        self.chat += self.ops.take(batch).messages

    def state(self):
        views = [self.ops.view(m) for m in self.chat]
        return ({v.mid: (v.text, v.edited, v.deleted, v.reactions, v.pinned) for v in views},
                self.ops.topic(), self.ops.pinned(), self.ops.core.pending)


def operate(lan: SimLan, who: OpsPeer, kind: str, target=None, **fields):
    who.feed()
    text = who.ops.compose(who.peer.pid, kind, target, **fields)
    mid = lan.send(who.peer, text, target)
    who.feed()
    return mid


def run_workload(lan: SimLan, peers: list[OpsPeer], rng: random.Random, rounds: int, away: OpsPeer | None = None):
    """Chat, then every member sets the topic, pins and unpins, reacts, edits and deletes, concurrently."""
    def step():
        lan.step_until(lan.now + rng.uniform(0.0, 0.03))
        for p in peers:
            p.feed()

    active = [p for p in peers if p is not away]
    messages = []
    for i in range(9):
        who = active[i % len(active)]
        messages.append(lan.send(who.peer, f"message {i}"))
        step()
    for p in peers:
        p.feed()
    for n in range(rounds):
        for who in active:
            known = [m.mid for m in who.chat]
            if not known:
                continue
            target = rng.choice(known)
            kind = rng.choice(["topic", "pin", "react", "react", "edit", "delete"])
            if kind == "topic":
                operate(lan, who, "topic", text=f"topic {n} by {who.peer.pid[:4]}")
            elif kind == "pin":
                operate(lan, who, "pin", target, on=rng.random() < 0.6)
            elif kind == "react":
                operate(lan, who, "react", target, emoji=rng.choice("👍❤😂"), on=rng.random() < 0.7)
            else:
                own = [m for m in known if m[0] == who.peer.pid and not who.ops.core.is_deleted(m)]
                if own and (kind == "edit" or rng.random() < 0.3):
                    operate(lan, who, kind, rng.choice(own), text=f"edited in round {n}")
        step()
    return messages


def test_every_member_converges_on_text_reactions_pins_and_topic_at_20_percent_loss():
    lan = SimLan(3, FaultInjector(drop=0.2, duplicate=0.05, reorder=0.3, rng=random.Random(21)), seed=21)
    peers = [OpsPeer(p) for p in lan.peers]
    rng = random.Random(4)
    run_workload(lan, peers, rng, rounds=25)
    # a forged edit: the third member edits the first member's message
    victim = next(m for m in peers[2].chat if m.mid[0] == lan.peers[0].pid)
    lan.send(lan.peers[2], encode("edit", None, 10**6, "forged text"), victim.mid)
    lan.settle(60)
    for p in peers:
        p.feed()
    states = [p.state() for p in peers]
    assert states[0] == states[1] == states[2]
    texts, topic, pinned, pending = states[0]
    assert pending == 0 and topic[0].startswith("topic")
    assert all(p.ops.rejected == 1 for p in peers)  # the forged edit, everywhere
    assert all(p.ops.view(victim).text != "forged text" for p in peers)
    edited = [p.ops.view(m) for p in peers[:1] for m in p.chat if p.ops.view(m).edited]
    reacted = [p.ops.view(m) for p in peers[:1] for m in p.chat if p.ops.view(m).reactions]
    assert edited and reacted and pinned is not None
    assert sum(p.channel.stats["naks_sent"] for p in lan.peers) > 0  # loss was repaired


def test_a_returning_member_catches_up_through_msp():
    lan = SimLan(3, FaultInjector(drop=0.05, rng=random.Random(8)), seed=8)
    peers = [OpsPeer(p) for p in lan.peers]
    away = peers[2]
    lan.cut.add(away.peer.pid)
    run_workload(lan, peers, random.Random(5), rounds=15, away=away)
    lan.settle(2)
    assert away.state() != peers[0].state()
    lan.cut.clear()
    away.peer.channel.start_sync(lan.now)
    lan.transmit(away.peer)
    lan.settle(60)
    for p in peers:
        p.feed()
    assert away.state() == peers[0].state() == peers[1].state()
    assert away.state()[1] != ("", "")
