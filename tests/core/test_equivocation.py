"""Equivocation converges: a writer who signs two versions of one message cannot split the
group.  Every member keeps the version whose signed bytes hash lowest and multicasts both
versions, so members that saw only one learn of the other (in-process LAN here; the
namespace LAN with real peers and a restart in test_lan_member_attacks.py)."""

import hashlib

import pytest

from m2mc.middleware import crypto, wire
from m2mc.middleware.channel import Conflict
from tests.testbed.sim import GID, SimLan


def version_hash(message: wire.Data, sender: str) -> bytes:
    return hashlib.sha256(crypto.message_bytes(GID, sender, message.seqno, message.parent, message.sent_at,
                                               message.name, message.text)).digest()


@pytest.mark.parametrize("texts", [("lunch at noon", "lunch at one"), ("yes", "no"), ("a", "b"), ("x", "y")])
def test_members_that_saw_different_versions_all_end_with_the_lowest_hash(texts):
    lan = SimLan(5)
    mallory = lan.peers[4].identity  # a member, so admitted however strictly; its own peer stays quiet
    first, second = (wire.signed_data(mallory, GID, 1, None, 5, "Mal", text) for text in texts)
    kept = min((first, second), key=lambda m: version_hash(m, mallory.pid))
    seen_only_first, seen_only_second, seen_both, late = lan.peers[:4]
    # Targeted: one member gets only the first, one only the second, one both; one neither.
    for peer, versions in ((seen_only_first, [first]), (seen_only_second, [second]), (seen_both, [first, second])):
        for version in versions:
            peer.channel.receive(mallory.pid, version, lan.now, mallory.public_key)
        peer.collect()
        lan.transmit(peer)
    started = lan.now
    lan.settle(30)
    for peer in lan.peers[:4]:
        stored = peer.stored[(mallory.pid, 1)]
        assert (stored.text, stored.sig) == (kept.text, kept.sig), peer.pid
        assert peer.channel.stats["conflicts"] == 1
        assert [e.mid for e in peer.events if isinstance(e, Conflict)] == [(mallory.pid, 1)]
    # Suppression: a few evidence datagrams in all, not one per member per round.
    evidence = lan.datagrams - 3
    assert evidence <= 2 * 4, evidence
    assert lan.now - started <= 30


def test_evidence_is_relayed_again_for_a_member_that_missed_it():
    """A member whose link was down when the evidence first went out learns of it from a
    later round."""
    lan = SimLan(4)
    mallory = lan.peers[3].identity
    versions = [wire.signed_data(mallory, GID, 1, None, 5, "Mal", text) for text in ("one", "two")]
    kept = min(versions, key=lambda m: version_hash(m, mallory.pid))
    lost = next(v for v in versions if v is not kept)
    detector, offline = lan.peers[:2]
    offline.channel.receive(mallory.pid, lost, lan.now, mallory.public_key)
    offline.collect()
    lan.cut.add(offline.pid)
    for version in versions:
        detector.channel.receive(mallory.pid, version, lan.now, mallory.public_key)
    detector.collect()
    lan.transmit(detector)
    lan.settle(1)  # round 0 went out while the link was down
    assert offline.stored[(mallory.pid, 1)].text == lost.text
    lan.cut.discard(offline.pid)
    lan.settle(30)
    assert offline.stored[(mallory.pid, 1)].text == kept.text
    assert offline.channel.stats["conflicts"] == 1


def test_the_store_keeps_the_evidence_and_replaces_the_loser_in_place(tmp_path):
    from m2mc.middleware.store import Store
    from m2mc.middleware.types import ChatMessage

    mallory = crypto.Identity.generate()
    store = Store(tmp_path / "db.sqlite3")
    first = wire.signed_data(mallory, GID, 1, None, 5, "Mal", "first")
    second = wire.signed_data(mallory, GID, 1, ("p" * 32, 3), 6, "Mal", "second")
    store.add_messages([ChatMessage(GID, (mallory.pid, s), None, "Mal", f"other {s}", 1, 2, 0, first.sig,
                                    mallory.public_key) for s in (2, 3)]
                       + [ChatMessage(GID, (mallory.pid, 1), None, "Mal", "first", 5, 2, 0, first.sig,
                                      mallory.public_key)])
    kept = wire.StoredMessage(mallory.pid, 1, second.parent, 6, "Mal", "second", mallory.public_key, second.sig)
    lost = wire.StoredMessage(mallory.pid, 1, None, 5, "Mal", "first", mallory.public_key, first.sig)
    store.save_conflict(GID, kept, lost)
    assert store.replace_message(GID, kept)
    assert not store.replace_message(GID, wire.StoredMessage(mallory.pid, 9, None, 0, "", "x", b"", b""))
    store.commit()
    store.close()
    store = Store(tmp_path / "db.sqlite3")
    assert store.conflicts(GID) == [(kept, lost)]
    assert [m.text for m in store.history(GID)] == ["other 2", "other 3", "second"]
    assert store.fetch(GID, [(mallory.pid, 1)]) == [kept] and wire.verify_stored(GID, kept)
    store.close()
