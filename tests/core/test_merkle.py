"""The compiled Merkle trees (middleware/_merkle.c) against crypto.py's reference."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from m2mc.middleware import crypto

_merkle = pytest.importorskip("m2mc.middleware._merkle", reason="never skipped in CI: the next test fails first")


def test_the_compiled_trees_are_built_and_used():
    """The install compiles _merkle.c; a silent fallback would cost every peer a fifth of its CPU per message."""
    assert crypto._merkle is not None, "middleware._merkle did not build (C compiler and libssl-dev installed?)"
    assert crypto.message_tree is (crypto._merkle.tree if crypto.COMPILED else crypto._py_message_tree)


@settings(max_examples=300, deadline=None)
@given(
    messages=st.lists(st.binary(max_size=300), min_size=1, max_size=70),
    signature=st.binary(min_size=64, max_size=64),
    high=st.integers(0, 7),
    top_hashes=st.integers(0, 3),
)
def test_compiled_trees_and_proofs_match_the_reference(messages, signature, high, top_hashes):
    root, levels = _merkle.tree(messages)
    assert (root, levels) == crypto._py_message_tree(list(messages))
    if (high << len(crypto._level_sizes(len(messages)))) + len(messages) > 0xFFFF:
        return
    top = os.urandom(32 * top_hashes)
    proofs = _merkle.proofs(levels, len(messages), signature, high, top)
    assert proofs == crypto._py_message_proofs(levels, len(messages), signature, high, top)


def test_every_proof_climbs_to_the_root():
    messages = [f"message {i}".encode() for i in range(13)]
    root, levels = _merkle.tree(messages)
    for index, (message, proof) in enumerate(zip(messages, _merkle.proofs(levels, 13, b"S" * 64, 0, b""))):
        reached, rest = crypto._climb(crypto._leaf(message), int.from_bytes(proof[64:66], "big"), proof[66:])
        assert (reached, rest) == (root, 0), index


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="1..4096 leaves"):
        _merkle.tree([])
    with pytest.raises(TypeError, match="message 1 is str"):
        _merkle.tree([b"a", "b"])
    _, levels = _merkle.tree([b"a", b"b", b"c"])
    with pytest.raises(ValueError, match="do not fit"):
        _merkle.proofs(levels, 5, b"s", 0, b"")
    with pytest.raises(ValueError, match="2 bytes"):
        _merkle.proofs(levels, 3, b"s", 1 << 15, b"")
    with pytest.raises(TypeError):
        _merkle.proofs(levels, 3, "s", 0, b"")


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 32), min_size=1, max_size=8),
    junk=st.lists(st.tuples(st.integers(0, 400), st.binary(max_size=140)), max_size=3),
    data=st.data(),
)
def test_compact_proofs_match_the_reference_and_expand_back(sizes, junk, data):
    identity = crypto.Identity.generate()
    _, _, proofs = crypto.sign_burst(identity, [[b"m%d" % i for i in range(size)] for size in sizes])
    flat = [proof for datagram in proofs for proof in datagram]
    if data.draw(st.booleans()):  # messages of other bursts in between
        other = crypto.sign_burst(identity, [[b"x"]])[2][0][0]
        flat.insert(data.draw(st.integers(0, len(flat))), other)
    for position, raw in junk:  # anything else a store may hold
        flat.insert(min(position, len(flat)), raw)
    compact = _merkle.compact_proofs(flat)
    assert compact == crypto._py_compact_proofs(flat)
    assert _merkle.expand_proofs(compact) == crypto._py_expand_proofs(compact) == flat


def test_damaged_compact_proofs_raise_clear_errors():
    proofs = crypto.sign_burst(crypto.Identity.generate(), [[b"a", b"b", b"c"]])[2][0]
    compact = _merkle.compact_proofs(proofs)
    for damaged in ([compact[1]], [b"\x09\x00" + b"x" * 66], [b"\x02\x01"], [compact[0], b"\x00\x09" + b"y" * 66], [b"\x01"]):
        for expand in (_merkle.expand_proofs, crypto._py_expand_proofs):
            with pytest.raises(ValueError, match="compact proof"):
                expand(damaged)
