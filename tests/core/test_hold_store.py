"""The hold store loses nothing: held messages are bounded in bytes and count, and an
evicted message is a gap again, fetched once its parent is delivered (in-process LAN)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from m2mc.middleware import crypto, wire
from m2mc.middleware.channel import HELD_OVERHEAD, GroupChannel
from m2mc.middleware.mop import DEFAULT_MAX_HELD_BYTES
from tests.testbed.sim import GID, SimLan

HOLD_BOUND = 10
# Done-when bound of issue 16: 12,000 maximum-size held messages grow RSS by at most this.
MAX_RSS_GROWTH = 150 * 1024 * 1024


def with_hold_bound(lan, max_held):
    """Every peer's hold store bounded to ``max_held`` messages (before any traffic)."""
    for peer in lan.peers:
        orderer = peer.channel.orderer
        assert orderer.pending == 0 and not orderer.delivered_ranges()
        peer.channel.orderer = type(orderer)(max_held=max_held)
    return lan


def lose_for(lan, peer, send):
    """Run ``send()`` while ``peer``'s link is down, so it alone misses the message."""
    lan.cut.add(peer.pid)
    try:
        return send()
    finally:
        lan.cut.discard(peer.pid)


def test_replies_evicted_from_the_hold_store_are_delivered_once_their_parent_arrives():
    """Issue 16's case: hold bound 10, 50 replies to a parent one member missed.  Before,
    that member delivered 11 of the 51 messages, the 40 evicted ones lost for good."""
    lan = with_hold_bound(SimLan(3), HOLD_BOUND)
    writer, victim = lan.peers[0], lan.peers[1]
    parent = lose_for(lan, victim, lambda: lan.send(writer, "the question"))
    replies = [lan.send(writer, f"answer {i}", parent) for i in range(50)]
    lan.step_until(lan.now + 0.002)  # all 50 arrived; the parent is not asked for yet
    assert victim.channel.pending == HOLD_BOUND
    assert victim.channel.orderer.evicted == 40
    lan.settle(30)
    assert set(victim.order) == {parent, *replies}
    assert victim.order[0] == parent
    assert victim.channel.pending == 0 and not victim.channel.missing(writer.pid)


def test_an_evicted_chain_is_fetched_link_by_link():
    """Each reply answers the one before; the evicted ones wait for parents that were
    themselves evicted, and come back one after another."""
    lan = with_hold_bound(SimLan(3), HOLD_BOUND)
    writer, victim = lan.peers[0], lan.peers[2]
    parent = lose_for(lan, victim, lambda: lan.send(writer, "root"))
    chain = [parent]
    for i in range(40):
        chain.append(lan.send(writer, f"link {i}", chain[-1]))
    lan.step_until(lan.now + 0.002)
    assert victim.channel.orderer.evicted == 30
    lan.settle(60)
    assert victim.order == chain


def test_evicted_messages_are_not_asked_for_while_their_parent_is_missing():
    """A hostile member's replies to a parent that never comes: evicting them costs no NAKs
    for them (only for the parent), however many there are."""
    lan = with_hold_bound(SimLan(3), HOLD_BOUND)
    victim = lan.peers[0]
    mallory = lan.peers[2].identity  # a member: whatever admits senders lets it in
    for seqno in range(1, 201):
        reply = wire.signed_data(mallory, GID, seqno, ("ghost" * 6, 1), 0, "m", f"orphan {seqno}")
        victim.channel.receive(mallory.pid, reply, lan.now, mallory.public_key)
    assert victim.channel.orderer.evicted == 190
    assert victim.channel.missing(mallory.pid) == []
    lan.settle(5)
    naks = [m for m in victim.channel.datagrams_to_send() if isinstance(m, wire.Nak)]
    assert not naks and victim.channel.stats["naks_sent"] <= 8  # the ghost parent's, no more


def test_held_bytes_are_bounded_and_counted():
    channel = GroupChannel(GID, crypto.Identity.generate(), max_held_bytes=1_000_000)
    mallory = crypto.Identity.generate()
    text = "\U0001F600" * wire.MAX_TEXT  # the largest text: 32 KB as UTF-8, 32 KB in memory
    for seqno in range(1, 101):
        data = wire.Data(GID, seqno, ("ghost" * 6, seqno), 0, "m" * wire.MAX_NAME, text, b"p" * 200)
        channel.receive(mallory.pid, data, 1.0, mallory.public_key)
    held = channel.orderer.held_bytes
    assert held <= 1_000_000 and held > 1_000_000 - sys.getsizeof(text) - HELD_OVERHEAD - 300
    assert channel.pending + channel.orderer.evicted == 100 and channel.pending < 31


RSS_SCRIPT = r"""
import sys
from m2mc.middleware import crypto, wire
from m2mc.middleware.channel import GroupChannel

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

identity, mallory = crypto.Identity.generate(), crypto.Identity.generate()
channel = GroupChannel("g-rss", identity)
text = "\U0001F600" * wire.MAX_TEXT
count = int(sys.argv[1])
datagrams = []
# Maximum-size messages, each answering a parent that never comes, as the wire hands them over.
def datagram(seqno):
    return wire.encode(mallory, wire.signed_data(mallory, "g-rss", seqno, ("f" * 32, seqno), 0, "m" * 64,
                                                 text[:wire.MAX_TEXT - seqno % 7]))
before = rss()
for seqno in range(1, count + 1):
    envelope = wire.decode(datagram(seqno))
    channel.receive(envelope.sender, envelope.message, 1.0, envelope.public_key)
after = rss()
print(before, after, channel.pending, channel.orderer.evicted, channel.orderer.held_bytes)
"""


def test_12000_maximum_size_held_messages_grow_rss_by_at_most_150_mb():
    """Before the byte bound, 12,000 of them added 760 MB (issue 16)."""
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", RSS_SCRIPT, "12000"], capture_output=True, text=True,
                            timeout=300, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    assert result.returncode == 0, result.stderr
    before, after, pending, evicted, held_bytes = map(int, result.stdout.split())
    print(f"RSS {before / 2**20:.1f} MB -> {after / 2**20:.1f} MB (+{(after - before) / 2**20:.1f} MB); "
          f"held {pending} ({held_bytes / 2**20:.1f} MB), evicted {evicted}")
    assert pending + evicted == 12_000 and evicted > 0
    assert held_bytes <= DEFAULT_MAX_HELD_BYTES
    assert after - before <= MAX_RSS_GROWTH


@pytest.mark.parametrize("impl", ["compiled", "python"])
def test_the_python_reference_evicts_alike(impl):
    """The eviction -> gap path works with either orderer (the tests compare them)."""
    from m2mc.middleware import mop
    if impl == "compiled" and mop.CompiledSbOrderer is None:
        pytest.skip("the compiled core is not built")
    cls = mop.CompiledSbOrderer if impl == "compiled" else mop.PySbOrderer
    lan = SimLan(2)
    for peer in lan.peers:
        peer.channel.orderer = cls(max_held=3)
    writer, victim = lan.peers
    parent = lose_for(lan, victim, lambda: lan.send(writer, "q"))
    replies = [lan.send(writer, f"a{i}", parent) for i in range(12)]
    lan.settle(20)
    assert type(victim.channel.orderer) is cls and victim.channel.orderer.evicted == 9
    assert set(victim.order) == {parent, *replies}
