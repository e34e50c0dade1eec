"""File transfer's protocol core (middleware/file_core.py) without sockets: frames cut however the
bytes come, seals, the handshake both ways and its refusals, requests, and which chunk frames a
receiver keeps, driven through the chunk plan as a download's connections would drive it."""

from __future__ import annotations

import os
import struct

import msgpack
import pytest

from m2mc.middleware import file_core as core
from m2mc.middleware.crypto import Identity
from m2mc.middleware.files import BAD_CHUNKS_TO_DROP, ChunkPlan, FileOffer, leaf_hash

GID = "g" * 26
MID = "mid-1"


def wire(*frames: list) -> bytes:
    return b"".join(b"".join(bytes(piece) for piece in frame) for frame in frames)


# -- framing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cut", [1, 3, 4, 5, 4096, 70_000, 1 << 20])
def test_frames_come_whole_and_in_order_however_the_bytes_are_cut(cut):
    chunk = os.urandom(300_000)
    frames = [core.encode(core.HAVE_ONE, struct.pack(">I", 7)), core.encode(core.CHUNK, struct.pack(">I", 2), chunk),
              core.encode(core.HASHES, os.urandom(1000)), core.encode(core.GET, struct.pack(">I", 9))]
    data = wire(*frames)
    taken = []
    cutter = core.FrameCutter(1 << 20, take=lambda n: taken.append(n) or bytearray(n))
    got = []
    for at in range(0, len(data), cut):
        got += cutter.feed(data[at:at + cut])
    opened = [core.open_frame(body, None) for body in got]
    assert [kind for kind, _ in opened] == [core.HAVE_ONE, core.CHUNK, core.HASHES, core.GET]
    assert core.split_chunk(opened[1][1]) == (2, memoryview(chunk))
    assert bytes(opened[0][1]) == struct.pack(">I", 7) and core.index_of(opened[3][1]) == 9
    assert taken == [1 + 4 + len(chunk)]  # only the chunk got a buffer of its own
    assert cutter.wanted() == 1  # between frames: any byte is worth waking for


def test_a_frame_longer_than_the_limit_or_empty_is_refused_and_nothing_after_it_is_cut():
    cutter = core.FrameCutter(1000)
    good = wire(core.encode(core.HAVE_ONE, b"\0\0\0\1"))
    assert len(cutter.feed(good + struct.pack(">I", 2000) + good)) == 1
    assert isinstance(cutter.error, core.TransferError)
    assert cutter.feed(good) == []
    empty = core.FrameCutter(1000)
    empty.feed(struct.pack(">I", 0))
    assert empty.error is not None
    with pytest.raises(core.TransferError):
        core.check_length(1000 + core.SEAL_BYTES + 1, 1000)
    core.check_length(1000 + core.SEAL_BYTES, 1000)  # a sealed frame's tag fits


def test_a_sealed_stream_opens_in_order_and_a_frame_replayed_or_tampered_does_not():
    to_server, _ = core.session_keys(os.urandom(32), os.urandom(32), os.urandom(32))
    out, into = core.Seal(to_server), core.Seal(to_server)
    first = wire(core.encode(core.GET, b"\0\0\0\1", seal=out))
    second = wire(core.encode(core.GET, b"\0\0\0\2", seal=out))
    assert b"\0\0\0\1" not in first[5:]
    cutter = core.FrameCutter(64)
    bodies = cutter.feed(first + second)
    assert core.open_frame(bodies[0], into) == (core.GET, b"\0\0\0\1")
    with pytest.raises(core.TransferError):  # the first again: its counter is spent
        core.open_frame(bodies[0], into)
    tampered = bytearray(bodies[1])
    tampered[0] ^= 1
    with pytest.raises(core.TransferError):
        core.open_frame(bytes(tampered), core.Seal(to_server))


# -- the handshake ----------------------------------------------------------------------------


def handshake(client_id: Identity, server_id: Identity, *, server_pid: str | None = None, members=None):
    """Run HELLO, CHALLENGE and PROOF between the two sides through frames on a byte wire."""
    members = {client_id.pid} if members is None else members
    client = core.ClientHandshake(client_id, GID, MID, server_pid or server_id.pid, os.urandom(32))
    server = core.ServerHandshake(server_id, os.urandom(32))
    s_cut, c_cut = core.FrameCutter(core.MAX_HANDSHAKE_FRAME), core.FrameCutter(core.MAX_HANDSHAKE_FRAME)
    [hello] = s_cut.feed(wire(core.encode(core.HELLO, client.hello())))
    challenge = server.hello(*core.open_frame(hello, None), lambda gid, pid: gid == GID and pid in members)
    if challenge is None:
        return client, server, None
    [answer] = c_cut.feed(wire(core.encode(core.CHALLENGE, challenge)))
    proof = client.challenged(*core.open_frame(answer, None))
    [proved] = s_cut.feed(wire(core.encode(core.PROOF, proof)))
    return client, server, server.proven(*core.open_frame(proved, None))


def test_a_member_and_the_member_it_meant_to_reach_prove_their_keys_and_share_seals():
    ann, bob = Identity.generate(), Identity.generate()
    client, server, hello = handshake(bob, ann)
    assert hello is not None and hello.pid == bob.pid and (hello.gid, hello.mid) == (GID, MID)
    assert client.seals(None) == (None, None) and server.seals(b"") == (None, None)  # an open group
    key = os.urandom(32)
    c_out, c_in = client.seals(key)
    s_in, s_out = server.seals(key)
    assert s_in.open(c_out.seal(b"\x09ask")) == b"\x09ask"
    assert c_in.open(s_out.seal(b"\x04have")) == b"\x04have"
    fresh_out, fresh_in = client.seals(key)
    with pytest.raises(core.TransferError):  # each direction has its own key
        fresh_in.open(fresh_out.seal(b"x"))


def test_a_stranger_gets_no_challenge_and_a_malformed_hello_is_refused():
    ann, mal = Identity.generate(), Identity.generate()
    _, server, hello = handshake(mal, ann, members=set())
    assert hello is None and server.client is None
    server = core.ServerHandshake(ann, os.urandom(32))
    for kind, payload in [(core.PROOF, msgpack.packb([core.VERSION, GID, MID, mal.public_key, os.urandom(32)])),
                          (core.HELLO, msgpack.packb(["m2mc-file0", GID, MID, mal.public_key, os.urandom(32)])),
                          (core.HELLO, msgpack.packb([core.VERSION, GID, MID, mal.public_key[:31], os.urandom(32)])),
                          (core.HELLO, msgpack.packb([core.VERSION, GID, MID, mal.public_key]))]:
        with pytest.raises(core.TransferError):
            server.hello(kind, payload, lambda gid, pid: True)


def test_a_server_that_is_not_the_member_meant_or_signs_wrong_is_not_proven():
    ann, bob, mal = Identity.generate(), Identity.generate(), Identity.generate()
    with pytest.raises(core.NotProven):  # Mal answers where Bob meant to reach Ann
        handshake(bob, mal, server_pid=ann.pid)
    client = core.ClientHandshake(bob, GID, MID, ann.pid, os.urandom(32))
    forged = msgpack.packb([ann.public_key, os.urandom(32), mal.sign(b"anything")])
    with pytest.raises(core.NotProven):
        client.challenged(core.CHALLENGE, forged)
    with pytest.raises(core.TransferError):
        client.challenged(core.HAVE, forged)


def test_a_client_whose_proof_is_for_another_server_or_nonce_is_not_proven():
    ann, bob, mal = Identity.generate(), Identity.generate(), Identity.generate()
    server = core.ServerHandshake(ann, os.urandom(32))
    hello = core.ClientHandshake(bob, GID, MID, ann.pid, os.urandom(32)).hello()
    assert server.hello(core.HELLO, hello, lambda gid, pid: True) is not None
    nonce = msgpack.unpackb(hello)[4]
    replayed = bob.sign(core.client_signed(GID, MID, nonce, os.urandom(32), ann.public_key))
    with pytest.raises(core.NotProven):
        server.proven(core.PROOF, replayed)
    with pytest.raises(core.NotProven):  # Mal's signature over the right text is not Bob's
        server.proven(core.PROOF, mal.sign(core.client_signed(GID, MID, nonce, server.nonce, ann.public_key)))
    with pytest.raises(core.NotProven):
        server.proven(core.GET, bob.sign(core.client_signed(GID, MID, nonce, server.nonce, ann.public_key)))
    assert server.proven(core.PROOF, bob.sign(core.client_signed(GID, MID, nonce, server.nonce,
                                                                 ann.public_key))).pid == bob.pid


# -- requests and chunks --------------------------------------------------------------------


def test_a_proven_client_may_ask_for_the_hash_list_or_a_chunk_and_nothing_else():
    assert core.request(core.GET_HASHES, b"") is None
    assert core.request(core.GET, struct.pack(">I", 41)) == 41
    for kind, payload in [(core.GET, b"\0\0\1"), (core.CHUNK, b"\0\0\0\1"), (core.HELLO, b"")]:
        with pytest.raises(core.TransferError):
            core.request(kind, payload)
    with pytest.raises(core.TransferError):
        core.index_of(b"\0\0\0\0\0")
    with pytest.raises(core.TransferError):
        core.split_chunk(memoryview(b"\0\0"))


CHUNK_SIZE = 64 * 1024


def a_file(chunks: int = 6) -> tuple[FileOffer, list[bytes], list[bytes]]:
    data = [os.urandom(CHUNK_SIZE) for _ in range(chunks - 1)] + [os.urandom(1000)]
    leaves = [leaf_hash(d) for d in data]
    return FileOffer("f", CHUNK_SIZE * (chunks - 1) + 1000, "x", "0" * 64, CHUNK_SIZE, "0" * 64), leaves, data


def arrive(plan: ChunkPlan, offer: FileOffer, leaves: list[bytes], pid: str, frame_bytes: bytes) -> str:
    """A CHUNK frame from ``pid`` as a download's connection takes it: cut, opened, admitted,
    checked against its leaf, then stored.  What became of it."""
    [body] = core.FrameCutter(core.MAX_FRAME).feed(frame_bytes)
    kind, payload = core.open_frame(body, None)
    outcome = core.heard(plan, offer, leaves, pid, kind, payload, 1.0, 0.5)
    if outcome.chunk is None:
        return "refused" if outcome.freed else "ignored"
    index, data = outcome.chunk
    return "stored" if core.taken(plan, leaves, pid, index, leaf_hash(data)) else "bad"


def test_a_lying_source_s_wrong_index_wrong_length_and_wrong_bytes_are_refused_and_it_is_dropped():
    """Refused unchecked: an index past the file, or not asked of it, or held already; refused and
    counted: a wrong length; hashed and counted: wrong bytes."""
    offer, leaves, data = a_file()
    plan = ChunkPlan(offer.chunks, spare="ann", me="bob")
    plan.add_source("mal", b"\1" * offer.chunks)
    plan.add_source("ann", b"\1" * offer.chunks)
    assert plan.pick("mal", 4) == [0, 1, 2, 3]
    chunk = lambda index, body: wire(core.encode(core.CHUNK, struct.pack(">I", index), body))  # noqa: E731
    assert arrive(plan, offer, leaves, "mal", chunk(offer.chunks, data[0])) == "ignored"  # past the file's end
    assert arrive(plan, offer, leaves, "mal", chunk(4, data[4])) == "ignored"  # not asked of it: never hashed
    assert plan.bad.get("mal", 0) == 0
    assert arrive(plan, offer, leaves, "mal", chunk(1, data[1][:-1])) == "refused"  # a chunk's length is fixed
    assert arrive(plan, offer, leaves, "mal", chunk(2, data[0])) == "bad"  # chunk 0's bytes under index 2
    assert "mal" not in plan.dropped
    assert arrive(plan, offer, leaves, "mal", chunk(3, os.urandom(CHUNK_SIZE))) == "bad"
    assert plan.bad["mal"] == BAD_CHUNKS_TO_DROP and "mal" in plan.dropped and "mal" not in plan.sources
    assert not any(plan.have) and plan.inflight == {}  # what it was asked for goes to others
    assert plan.pick("mal", 4) == []
    picked = plan.pick("ann", 10)
    assert picked == list(range(offer.chunks))
    for index in picked:
        assert arrive(plan, offer, leaves, "ann", chunk(index, data[index])) == "stored"
    assert plan.complete
    assert arrive(plan, offer, leaves, "ann", chunk(0, data[0])) == "ignored"  # held already: not written again


def test_a_resumed_download_asks_only_for_the_chunks_its_bitmap_lacks():
    offer, leaves, data = a_file()
    have = bytearray(b"\1\0\1\1\0\0")
    plan = ChunkPlan(offer.chunks, have, spare="ann", me="bob")
    plan.add_source("ann", b"\1" * offer.chunks)
    assert plan.held == 3 and plan.pick("ann", 10) == [1, 4, 5]
    for index in (1, 4, 5):
        frame = wire(core.encode(core.CHUNK, struct.pack(">I", index), data[index]))
        assert arrive(plan, offer, leaves, "ann", frame) == "stored"
    assert plan.complete and have == bytearray(b"\1" * 6)


# -- a download driven through the core: frames both ways, no sockets ---------------------------


class Server:
    """A source as the core sees it: requests cut from its bytes, chunks (or lies) framed back."""

    def __init__(self, data: list[bytes], lie=None) -> None:
        self.data, self.lie = data, lie
        self.cutter = core.FrameCutter(64)
        self.served = 0

    def answer(self, wire_in: bytes) -> bytes:
        out = []
        for body in self.cutter.feed(wire_in):
            index = core.request(*core.open_frame(body, None))
            assert index is not None
            self.served += 1
            index, chunk = self.lie(index, self.data) if self.lie else (index, self.data[index])
            out.append(wire(core.encode(core.CHUNK, struct.pack(">I", index), chunk)))
        return b"".join(out)


def download(offer: FileOffer, leaves: list[bytes], servers: dict[str, Server], have: bytearray | None = None,
             spare: str = "ann") -> tuple[ChunkPlan, dict[int, bytes]]:
    """Bob fetches ``offer`` from ``servers`` (each claiming every chunk) as file_transfer's loop
    would: asks per window, each answer cut into frames and heard, chunks checked and taken."""
    plan = ChunkPlan(offer.chunks, have, spare=spare, me="bob", deadline=3.0)
    written: dict[int, bytes] = {}
    owed = {pid: 0 for pid in servers}
    cutters = {pid: core.FrameCutter(core.MAX_FRAME) for pid in servers}
    for pid in servers:
        plan.add_source(pid, b"\1" * offer.chunks)
    for now in range(100):
        owed = {pid: n for pid, n in owed.items() if pid not in plan.dropped}
        for pid, picked in core.asks(plan, owed, core.window(offer), False, float(now)).items():
            owed[pid] += len(picked)
            answer = servers[pid].answer(core.encode_many(core.GET, [struct.pack(">I", i) for i in picked]))
            for body in cutters[pid].feed(answer):
                kind, payload = core.open_frame(body, None)
                outcome = core.heard(plan, offer, leaves, pid, kind, payload, float(now), 0.5)
                owed[pid] -= outcome.freed
                if outcome.chunk is not None:
                    index, chunk = outcome.chunk
                    digest = leaf_hash(chunk)
                    if digest == leaves[index]:
                        written[index] = bytes(chunk)  # written only when it matches, before it is taken
                    owed[pid] -= 1
                    core.taken(plan, leaves, pid, index, digest)
        if plan.complete:
            break
    return plan, written


def test_a_download_through_the_core_comes_whole_from_the_honest_source_when_another_lies():
    offer, leaves, data = a_file(40)
    shift = lambda index, data: ((index + 1) % len(data), data[index])  # noqa: E731  (the right bytes, a wrong index)
    servers = {"ann": Server(data), "mal": Server(data, lie=shift)}
    plan, written = download(offer, leaves, servers)
    assert plan.complete and [written[i] for i in range(offer.chunks)] == data
    assert "mal" in plan.dropped and plan.bad["mal"] == BAD_CHUNKS_TO_DROP  # the rest of its answer: unhashed
    assert not any(index in plan.inflight for index in range(offer.chunks))


def test_a_resumed_download_through_the_core_fetches_only_what_its_bitmap_lacks():
    offer, leaves, data = a_file(40)
    have = bytearray(1 if i % 3 else 0 for i in range(offer.chunks))
    servers = {"ann": Server(data)}
    plan, written = download(offer, leaves, servers, have)
    assert plan.complete and sorted(written) == [i for i in range(offer.chunks) if i % 3 == 0]
    assert servers["ann"].served == len(written)
    assert all(written[i] == data[i] for i in written)


def test_a_chunk_the_offerer_sent_elsewhere_frees_its_request_and_is_asked_again_later():
    offer, leaves, data = a_file(8)
    plan = ChunkPlan(offer.chunks, spare="ann", me="bob")
    plan.add_source("ann", b"\1" * offer.chunks)
    assert core.asks(plan, {"ann": 0}, 4, True, 0.0) == {}  # settling: the offerer waits
    [picked] = core.asks(plan, {"ann": 0}, 4, False, 0.0).values()
    assert picked == [0, 1, 2, 3]
    outcome = core.heard(plan, offer, leaves, "ann", core.ELSEWHERE, struct.pack(">I", 0), 10.0, 0.5)
    assert (outcome.freed, outcome.ask_at) == (1, 10.5)
    assert core.heard(plan, offer, leaves, "mal", core.ELSEWHERE, struct.pack(">I", 1), 10.0, 0.5).freed == 0
    assert core.asks(plan, {"ann": 3}, 4, False, 10.1) == {"ann": [4]}  # not chunk 0 before 10.5
    assert core.asks(plan, {"ann": 3}, 4, False, 10.6) == {"ann": [0]}
    missing = core.heard(plan, offer, leaves, "ann", core.MISSING, struct.pack(">I", 1), 11.0, 0.5)
    assert missing.freed == 1 and 1 not in plan.inflight
    assert core.heard(plan, offer, leaves, "ann", core.HAVE_ONE, struct.pack(">I", 1), 11.0, 0.5).holds


def test_a_chunk_not_asked_keeps_no_deadline_alive_and_one_asked_does():
    offer, leaves, data = a_file(8)
    plan = ChunkPlan(offer.chunks, spare="ann", me="bob", deadline=3.0)
    plan.add_source("mal", b"\1" * offer.chunks)
    assert core.asks(plan, {"mal": 0}, 1, False, 0.0) == {"mal": [0]}
    unasked = struct.pack(">I", 5) + data[5]
    for now in (2.0, 4.0):
        assert core.heard(plan, offer, leaves, "mal", core.CHUNK, unasked, now, 0.5).chunk is None
    assert plan.stalled(4.0) == ["mal"]  # its unasked chunks did not keep it alive
    asked = core.heard(plan, offer, leaves, "mal", core.CHUNK, struct.pack(">I", 0) + data[0], 2.9, 0.5)
    assert asked.chunk is not None and plan.stalled(4.0) == []


def test_the_offerer_sends_a_later_asker_elsewhere_once_per_chunk_and_a_chunk_not_held_is_missing():
    from m2mc.middleware.files import FirstAskers

    have = bytearray(b"\1\1\0\1")
    askers = FirstAskers(len(have))
    connected = {"bob", "cat"}.__contains__
    get = lambda index: struct.pack(">I", index)  # noqa: E731
    assert core.answer(core.GET_HASHES, b"", have, askers, "bob", connected) == (core.HASHES, None)
    assert core.answer(core.GET, get(0), have, askers, "bob", connected) == (core.CHUNK, 0)
    assert core.answer(core.GET, get(0), have, askers, "cat", connected) == (core.ELSEWHERE, 0)
    assert core.answer(core.GET, get(0), have, askers, "cat", connected) == (core.CHUNK, 0)  # asked again: served
    assert core.answer(core.GET, get(1), have, askers, "cat", lambda pid: pid == "cat") == (core.CHUNK, 1)
    assert core.answer(core.GET, get(1), have, askers, "bob", lambda pid: pid == "bob") == (core.CHUNK, 1)  # cat gone
    assert core.answer(core.GET, get(2), have, None, "bob", connected) == (core.MISSING, 2)  # not held
    assert core.answer(core.GET, get(9), have, askers, "bob", connected) == (core.MISSING, 9)  # past the file
    with pytest.raises(core.TransferError):
        core.answer(core.HAVE, get(0), have, askers, "bob", connected)


def test_a_download_s_bitmap_claims_a_chunk_only_once_written_and_durable_only_after_a_sync():
    """Writes applied to a bitmap as file_transfer makes them: the 1s of the chunks written at each
    report, a resume point every ``every`` bytes whose 2s follow its sync; after a kill -9 the
    bitmap claims nothing unwritten, after a power cut only the 1s are checked again."""
    bitmap = bytearray(10)
    disk: set[int] = set()  # chunks written to the file
    marks = core.ResumeMarks(every=3 * 100)

    def apply(writes):
        for offset, data in writes:
            bitmap[offset:offset + len(data)] = data

    disk.update({0, 1})  # the file's writes come first
    assert [marks.stored(index, 100) for index in (0, 1)] == [False, False]
    assert bitmap == bytearray(10)  # no report yet: nothing claimed
    apply(marks.marks())
    assert bitmap[:3] == b"\1\1\0" and marks.marks() == []
    disk.add(2)
    assert marks.stored(2, 100)  # 300 bytes since the last resume point: one is due
    apply(marks.marks())
    synced = marks.resume_point()
    assert synced == [0, 1, 2] and marks.unsynced == [] and not marks.stored(5, 100)
    disk.add(5)
    assert all(i in disk for i, mark in enumerate(bitmap) if mark)  # a kill -9 here: nothing claimed unwritten
    apply(core.bitmap_writes(synced, core.DURABLE))  # the sync is done
    apply(marks.marks())
    assert bitmap == bytearray(b"\2\2\2\0\0\1\0\0\0\0")
    assert [i for i, mark in enumerate(bitmap) if mark == 1] == marks.unsynced == [5]  # a power cut: checked again
    marks.forget()
    assert marks.unsynced == [] and core.runs([7, 3, 4, 9, 8]) == [(3, 2), (7, 3)]


def test_a_second_copy_of_a_chunk_being_checked_is_not_hashed_again():
    offer, leaves, data = a_file(4)
    plan = ChunkPlan(offer.chunks, spare="ann", me="bob")
    plan.add_source("mal", b"\1" * offer.chunks)
    assert core.asks(plan, {"mal": 0}, 4, False, 0.0) == {"mal": [0, 1, 2, 3]}
    frame = struct.pack(">I", 1) + data[1]
    first = core.heard(plan, offer, leaves, "mal", core.CHUNK, frame, 1.0, 0.5)
    assert first.chunk is not None
    for _ in range(3):  # sent again while the first is hashed: dropped unhashed, nothing freed
        again = core.heard(plan, offer, leaves, "mal", core.CHUNK, frame, 1.0, 0.5)
        assert again.chunk is None and again.freed == 0
    assert core.taken(plan, leaves, "mal", 1, leaf_hash(data[1])) and plan.checking == set()
    assert core.heard(plan, offer, leaves, "mal", core.CHUNK, frame, 2.0, 0.5).chunk is None  # held now
    wrong = core.heard(plan, offer, leaves, "mal", core.CHUNK, struct.pack(">I", 2) + data[0], 2.0, 0.5)
    assert not core.taken(plan, leaves, "mal", 2, leaf_hash(wrong.chunk[1]))  # garbage: its slot is free again
    assert 2 not in plan.checking and 2 not in plan.inflight and plan.bad["mal"] == 1
