"""The sans-I/O part of files (middleware/files.py): the offer and its bounds, the hash tree, safe
names, the chunk plan (who is asked for what, bad chunks), the caps and the progress gate."""

from __future__ import annotations

import hashlib
import os

import pytest

from m2mc.middleware import kinds
from m2mc.middleware.files import (BAD_CHUNKS_TO_DROP, MAX_CHUNKS, MIN_CHUNK, Caps, ChunkPlan, FileOffer,
                                   HandshakeSlots, SlotQueue, name_fits,
                                   FirstAskers, OfferError, ProgressGate, check_fetch, chunk_size_for, human_size, leaf_hash,
                                   offer_caption, parse_offer, readable_text, safe_name, split_leaves, tree_root, unique_name)
from m2mc.middleware.types import UsageError

FILE_MARKER = kinds.body(kinds.FILE_OFFER, "")  # how a file offer's body opens (middleware.kinds)

H = hashlib.sha256


def offer_of(data: bytes, name: str = "report.pdf", chunk: int = MIN_CHUNK) -> tuple[FileOffer, list[bytes]]:
    leaves = [leaf_hash(data[i:i + chunk]) for i in range(0, max(len(data), 1), chunk)]
    return FileOffer(name, len(data), "application/pdf", H(data).hexdigest(), chunk, tree_root(leaves).hex()), leaves


def test_the_tree_pairs_leaves_with_a_node_prefix_and_moves_an_odd_one_up():
    a, b, c = (H(x).digest() for x in (b"a", b"b", b"c"))
    assert tree_root([a]) == a
    ab = H(b"\x01" + a + b).digest()
    assert tree_root([a, b]) == ab
    assert tree_root([a, b, c]) == H(b"\x01" + ab + c).digest()
    with pytest.raises(ValueError):
        tree_root([])


def test_a_hash_list_is_taken_only_if_it_matches_the_offer_root():
    data = os.urandom(3 * MIN_CHUNK + 5)
    offer, leaves = offer_of(data)
    assert offer.chunks == 4 and offer.chunk_length(3) == 5
    assert split_leaves(b"".join(leaves), offer) == leaves
    forged = list(leaves)
    forged[2] = H(b"garbage").digest()
    with pytest.raises(OfferError, match="root"):
        split_leaves(b"".join(forged), offer)
    with pytest.raises(OfferError, match="chunks"):
        split_leaves(b"".join(leaves[:3]), offer)


def test_an_offer_round_trips_through_its_message_text():
    offer, _ = offer_of(os.urandom(1000))
    text = offer.to_text()
    assert text.startswith(FILE_MARKER)
    assert parse_offer(text) == offer


def test_a_new_offer_s_leaves_are_blake3_and_an_earlier_release_s_offer_reads_as_sha256(tmp_path):
    import json

    import blake3

    from m2mc.middleware.file_transfer import offer_from_file
    data = os.urandom(3 * MIN_CHUNK + 5)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    offer, leaves = offer_from_file(path)
    chunk = offer.chunk_size
    assert offer.leaf == "blake3" and json.loads(kinds.split(offer.to_text())[1])["leaf"] == "blake3"
    assert leaves == [blake3.blake3(data[i:i + chunk]).digest() for i in range(0, len(data), chunk)]
    assert tree_root(leaves).hex() == offer.root and offer.sha256 == hashlib.sha256(data).hexdigest()
    assert offer.leaf_of(data[:chunk]) == leaves[0] != hashlib.sha256(data[:chunk]).digest()

    earlier, earlier_leaves = offer_from_file(path, "sha256")  # an earlier release's: no "leaf" field
    text = earlier.to_text()
    assert '"leaf"' not in text and parse_offer(text) == earlier and parse_offer(text).leaf == "sha256"
    assert earlier_leaves[0] == hashlib.sha256(data[:chunk]).digest() == earlier.leaf_of(data[:chunk])
    assert earlier.sha256 == offer.sha256 and earlier.root != offer.root


@pytest.mark.parametrize("change, reason", [
    ({"chunk": 1024}, "chunk size"),  # a million tiny chunks: the chunk size is bounded below
    ({"chunk": MIN_CHUNK + 1}, "power of two"),
    ({"chunk": 8 * 2**20}, "chunk size"),
    ({"size": 2**40 + 1, "chunk": 4 * 2**20}, "size"),  # past 1 TiB
    ({"size": MIN_CHUNK * MAX_CHUNKS + 1, "chunk": MIN_CHUNK}, "at most"),  # too many chunks
    ({"size": -1}, "size"),
    ({"size": True}, "type"),
    ({"sha256": "AB" * 32}, "hex"),
    ({"root": "00"}, "hex"),
    ({"mime": "text/\x00plain"}, "MIME"),
    ({"name": 7}, "type"),
    ({"leaf": "md5"}, "leaf hash"),  # a hash this peer cannot check with is no offer it can fetch
    ({"leaf": 3}, "leaf hash"),
])
def test_a_hostile_offer_is_refused_with_the_bound_it_breaks(change, reason):
    import json
    fields = {"name": "a", "size": 10, "mime": "text/plain", "sha256": "0" * 64, "chunk": MIN_CHUNK, "root": "1" * 64}
    fields.update(change)
    with pytest.raises(OfferError, match=reason):
        parse_offer(FILE_MARKER + json.dumps(fields))
    with pytest.raises(OfferError):
        parse_offer(FILE_MARKER + "[1, 2]")
    with pytest.raises(OfferError):
        parse_offer(FILE_MARKER + "{")


def test_a_terabyte_offer_is_well_formed_within_the_chunk_bounds():
    chunk = chunk_size_for(2**40)
    assert chunk == 4 * 2**20 and 2**40 // chunk == MAX_CHUNKS
    offer = parse_offer(FILE_MARKER + '{"name":"big","size":%d,"mime":"x/y","sha256":"%s","chunk":%d,"root":"%s"}'
                        % (2**40, "0" * 64, chunk, "0" * 64))
    assert offer.chunks == MAX_CHUNKS
    assert chunk_size_for(20 * 2**20) == 256 * 1024 and chunk_size_for(256 * 2**20) == 2**20
    assert chunk_size_for(2**30) == 4 * 2**20
    with pytest.raises(UsageError, match="too large.*max file size"):
        check_fetch(offer, 64 * 2**30, 2**50)
    small, _ = offer_of(b"x" * 100)
    with pytest.raises(UsageError, match="not enough free space"):
        check_fetch(small, 2**30, 99)
    check_fetch(small, 2**30, 100)


@pytest.mark.parametrize("name, safe", [
    ("../../etc/passwd", "passwd"),
    ("..\\..\\windows\\system32\\cmd.exe", "cmd.exe"),
    ("/absolute/path.txt", "path.txt"),
    ("..", "file"),
    ("", "file"),
    (".bashrc", "bashrc"),
    ("a\x00b\x1fc\x7f\u202ed.txt", "abcd.txt"),  # control and bidi format characters
    ("line\u2028break.txt", "linebreak.txt"),
    ('what?*<>|".txt', "what______.txt"),
    ("CON.txt", "file_CON.txt"),
    ("trailing. ", "trailing"),
])
def test_names_are_made_safe(name, safe):
    assert safe_name(name) == safe


def test_a_long_name_keeps_its_extension_within_255_bytes():
    name = safe_name("é" * 300 + ".tar.gz")
    assert len(name.encode()) <= 255 and name.endswith(".gz")


def test_a_name_clash_gets_a_new_name_never_the_same():
    taken = {"photo.jpg", "photo (2).jpg", "README"}
    assert unique_name("photo.jpg", taken.__contains__) == "photo (3).jpg"
    assert unique_name("README", taken.__contains__) == "README (2)"
    assert unique_name("../photo.jpg", taken.__contains__) == "photo (3).jpg"


def chunks_and_leaves(count: int) -> tuple[list[bytes], list[bytes]]:
    chunks = [os.urandom(64) for _ in range(count)]
    return chunks, [leaf_hash(c) for c in chunks]


def test_the_offerer_is_asked_only_for_what_no_other_source_holds():
    plan = ChunkPlan(10, spare="offerer")
    plan.add_source("offerer", b"\x01" * 10)
    plan.add_source("bob", bytes([1, 1, 1, 0, 0, 0, 0, 0, 0, 0]))
    asked = plan.pick("offerer", 10)  # this receiver's stripes of them (Bob fetches too)
    assert asked and set(asked) <= set(range(3, 10))
    assert sorted(plan.pick("bob", 10)) == [0, 1, 2]
    assert plan.pick("offerer", 10) == [] and plan.pick("bob", 10) == []  # all in flight


def test_a_source_announces_chunks_as_it_gets_them_and_a_gone_source_frees_its_chunks():
    plan = ChunkPlan(4, spare="offerer")
    plan.add_source("offerer", b"\x01" * 4)
    plan.add_source("cat", b"\x00" * 4)
    plan.source_has("cat", 2)
    assert 2 not in plan.pick("offerer", 4)
    assert plan.pick("cat", 4) == [2]
    plan.drop_source("cat")
    assert 2 in plan.pick("offerer", 4)  # nobody else has it now


def test_bitmap_and_window_limits():
    chunks, leaves = chunks_and_leaves(6)
    have = bytearray([1, 0, 0, 1, 0, 0])
    plan = ChunkPlan(6, have)
    assert plan.held == 2 and not plan.complete
    plan.add_source("ann", b"\x01" * 6)
    first = plan.pick("ann", 2)
    assert len(first) == 2 and not set(first) & {0, 3}
    for index in first + plan.pick("ann", 5):
        assert plan.received("ann", index, chunks[index], leaves)
        plan.stored(index)
    assert plan.complete and have == bytearray(b"\x01" * 6)
    assert not plan.received("ann", 1, chunks[1], leaves)  # not needed any more: not written twice


def test_a_bad_chunk_is_dropped_counted_and_fetched_elsewhere_and_a_garbage_server_is_dropped():
    chunks, leaves = chunks_and_leaves(8)
    plan = ChunkPlan(8, spare="ann")
    plan.add_source("ann", b"\x01" * 8)
    plan.add_source("eve", b"\x01" * 8)  # a member that serves garbage
    asked = plan.pick("eve", 1)
    assert not plan.received("eve", asked[0], b"garbage", leaves)
    assert plan.bad_chunks == 1 and asked[0] not in plan.inflight
    assert asked[0] not in plan.pick("eve", 8)  # never asked of eve again
    plan.drop_source("eve")
    plan.add_source("eve", b"\x01" * 8)
    assert asked[0] in plan.pick("ann", 8)  # the offerer, though eve has it: eve refused it
    for _ in range(BAD_CHUNKS_TO_DROP - 1):
        index = plan.pick("eve", 1)[0]
        plan.received("eve", index, b"x" * 64, leaves)
    assert "eve" in plan.dropped and "eve" not in plan.sources
    plan.add_source("eve", b"\x01" * 8)  # reconnecting does not bring it back
    assert "eve" not in plan.sources
    assert plan.bad_chunks == BAD_CHUNKS_TO_DROP


def test_a_chunk_found_bad_on_disk_is_fetched_again():
    plan = ChunkPlan(2, bytearray(b"\x01\x01"))
    assert plan.complete
    plan.lost(1)
    plan.add_source("ann", b"\x01\x01")
    assert plan.pick("ann", 2) == [1]


def test_caps_bound_uploads_per_member_and_in_all():
    caps = Caps(per_peer=2, total=3)
    bob = [caps.acquire("bob")[0], caps.acquire("bob")[0]]
    assert None not in bob and caps.acquire("bob") == (None, None)  # per member
    cat, _ = caps.acquire("cat")
    dan, evicted = caps.acquire("dan")  # the total is reached: Bob, holding two, gives one up
    assert dan is not None and evicted == bob[0]
    assert caps.acquire("eve") == (None, None)  # one each, all busy: refused
    caps.release(cat)
    assert caps.acquire("eve")[0] is not None
    assert caps.refused == 2 and caps.evicted == 1


def test_an_idle_upload_slot_gives_way_and_a_few_keys_cannot_hold_every_slot():
    """Four sybils with four proven connections each hold all 16 slots: a member with none still
    gets one, from an idle slot first, else from a key holding two or more."""
    caps = Caps(per_peer=4, total=16, idle=2.0)
    slots = {sybil: [caps.acquire(sybil, now=0.0)[0] for _ in range(4)] for sybil in ("s1", "s2", "s3", "s4")}
    for sybil in ("s2", "s3", "s4"):
        for slot in slots[sybil]:
            caps.touch(slot, 1.0)  # s1 asked nothing since 0.0
    bob, evicted = caps.acquire("bob", now=2.5)
    assert bob is not None and evicted in slots["s1"]  # the idlest
    caps.touch(bob, 2.5)
    for slot in [*slots["s2"], *slots["s3"], *slots["s4"], *slots["s1"]]:
        caps.touch(slot, 3.0)  # all busy now
    cat, evicted = caps.acquire("cat", now=3.0)
    assert cat is not None and evicted is not None and caps.holds(bob)  # a sybil's, never Bob's only one
    assert caps.active["bob"] == 1 and caps.active["cat"] == 1
    # Busy and each holding one slot, the keys are even: a newcomer is refused.
    even = Caps(per_peer=4, total=2, idle=2.0)
    even.acquire("bob", now=0.0), even.acquire("cat", now=0.0)
    assert even.acquire("dan", now=1.0) == (None, None)
    assert even.acquire("dan", now=2.0)[0] is not None  # idle 2 s: gives way
    print(f"16 slots under 4 sybils: {caps.evicted} given way, {caps.refused} refused")


def test_handshake_slots_per_address_and_a_flood_gives_way_before_members():
    slots = HandshakeSlots(per_address=8, total=16)
    flood = [slots.admit("10.0.0.66", now=i)[0] for i in range(12)]
    assert flood[8:] == [None] * 4 and slots.refused == 4  # its 8 per address
    second = [slots.admit("10.0.0.67", now=20 + i)[0] for i in range(8)]
    assert None not in second and len(slots) == 16
    member, evicted = slots.admit("10.0.0.2", now=30)
    assert member is not None and evicted == flood[0]  # the oldest of an address holding most
    slots.named_member(member)
    # More addresses of the flood: each takes an unnamed flood slot, never the member's.
    for i in range(40):
        slot, evicted = slots.admit(f"10.0.1.{i}", now=40 + i)
        assert slot is not None and evicted != member
    assert len(slots) == 16 and member in slots._slots
    # 64 addresses with one connection each: a member's newest connection still gets in.
    spread = HandshakeSlots(per_address=8, total=64)
    for i in range(64):
        spread.admit(f"10.0.2.{i}", now=i)
    late, evicted = spread.admit("10.0.0.3", now=100)
    assert late is not None and evicted is not None
    assert spread.admit("10.0.0.3", now=101) == (None, None)  # its second would hold more than the flood's one
    print(f"handshake slots: {slots.refused} refused, {slots.evicted} gave way; the member kept its slot")


def test_progress_is_told_at_most_four_times_a_second_and_the_end_always():
    gate = ProgressGate()
    told = [t / 100 for t in range(0, 200) if gate.allow("f", t / 100)]
    assert len(told) == 8
    assert gate.allow("f", 1.991, final=True)
    assert gate.allow("other", 1.992)


def test_receivers_fetching_together_split_the_offerers_chunks_by_stripes_and_help_from_the_far_end():
    have = bytearray(64)
    plan = ChunkPlan(64, have, spare="ann", me="me")
    plan.add_source("ann", b"\x01" * 64)
    plan.add_source("bob", b"\x00" * 64)  # fetching too: "bob" < "me", so the even stripes (of 8) are his
    assert plan.pick("ann", 4) == [8, 9, 10, 11]  # this receiver's first stripe, lowest first
    mine = [*range(8, 16), *range(24, 32), *range(40, 48), *range(56, 64)]
    assert plan.pick("ann", 64) == mine[4:]
    assert plan.pick("ann", 3) == []  # its stripes asked but not come: bob's are left to bob
    for index in mine:
        plan.inflight.pop(index, None)
        plan.stored(index)
    assert plan.pick("ann", 3) == [55, 54, 53]  # its stripes done: bob's, from the far end
    plan.source_has("bob", 0)
    assert 0 not in plan.pick("ann", 64) and plan.pick("bob", 4) == [0]


def test_a_chunk_a_source_cannot_serve_after_all_is_asked_of_others_and_never_of_it_again():
    plan = ChunkPlan(2, spare="ann", me="me")
    plan.add_source("ann", b"\x01\x01")
    assert plan.pick("ann", 2) == [0, 1]
    plan.source_lacks("ann", 1)  # its file changed or went away
    assert plan.pick("ann", 2) == []
    plan.add_source("cat", b"\x00\x01")
    assert plan.pick("cat", 2) == [1]


def test_an_offer_reads_as_its_caption_wherever_text_is_shown():
    offer = FileOffer("holiday photo.png", 3 * 2**20 + 2**19, "image/png", "a" * 64, 262_144, "b" * 64)
    assert offer_caption(offer) == "\U0001F4CE holiday photo.png · 3.5 MB · image/png"
    assert readable_text(offer.to_text(), {}) == offer_caption(offer)  # the one helper every view uses
    assert readable_text(FILE_MARKER + "{not json", {}) == "\U0001F4CE a file offer that cannot be read"
    assert [human_size(n) for n in (0, 1, 1023, 1024, 15 * 2**20, 2**40)] == \
        ["0 bytes", "1 byte", "1023 bytes", "1.0 KB", "15 MB", "1.0 TB"]


def test_the_offerer_sends_a_later_asker_to_the_first_once_and_only_while_the_first_is_connected():
    askers = FirstAskers(4)
    connected = {"bob", "cat"}.__contains__
    assert askers.serve("bob", 1, connected)
    assert askers.serve("bob", 1, connected)  # asked again by its first asker: served again
    assert not askers.serve("cat", 1, connected)  # Bob asked first: Cat gets it from Bob
    assert askers.serve("cat", 1, connected)  # once only: Bob may have failed
    assert askers.serve("dan", 2, connected) and askers.serve("cat", 2, connected)  # Dan has left
    assert askers.serve("cat", 9, connected)  # out of range: the server answers MISSING


def test_a_chunk_sent_elsewhere_is_asked_of_a_holder_at_once_and_of_the_offerer_only_later():
    plan = ChunkPlan(4, spare="ann", me="me")
    plan.add_source("ann", b"\x01" * 4)
    assert plan.pick("ann", 4, now=0.0) == [0, 1, 2, 3]
    plan.elsewhere("ann", 2, until=0.5)
    assert plan.pick("ann", 4, now=0.1) == []
    plan.add_source("bob", b"\x00\x00\x01\x00")  # the receiver that asked first, announcing it
    assert plan.pick("bob", 4, now=0.1) == [2]
    plan.drop_source("bob")  # gone before it sent the chunk
    assert plan.pick("ann", 4, now=0.4) == [] and plan.pick("ann", 4, now=0.5) == [2]


def test_elsewhere_and_missing_free_only_a_request_slot_that_was_asked_of_that_source():
    """A holder (or the offerer) answering ELSEWHERE or MISSING for chunks nobody asked of it would, if
    believed, free request slots it never held and be sent ever more requests at once."""
    plan = ChunkPlan(8, spare="ann", me="me")
    plan.add_source("ann", b"\x01" * 8)
    asked_ann = plan.pick("ann", 2, now=0.0)
    plan.add_source("eve", b"\x01" * 8)  # a member holding the file, and hostile
    asked_eve = plan.pick("eve", 2, now=0.0)
    assert asked_eve and asked_ann
    assert not plan.elsewhere("eve", asked_eve[0], until=0.5)  # only the offerer sends a chunk elsewhere
    assert not plan.elsewhere("ann", asked_eve[0], until=0.5)  # not asked of Ann
    assert plan.inflight[asked_eve[0]] == "eve"
    assert plan.elsewhere("ann", asked_ann[0], until=0.5) and not plan.elsewhere("ann", asked_ann[0], until=0.5)
    assert not plan.source_lacks("eve", asked_ann[1]) and plan.source_lacks("eve", asked_eve[0])
    assert not plan.source_lacks("eve", 99)


def test_a_silent_source_s_chunks_go_back_to_the_offerer_once_overdue():
    """Mal claims every chunk and sends none: past its deadline it is stalled, and once dropped
    the offerer, the fallback, is asked for them; a source that keeps sending is never stalled."""
    plan = ChunkPlan(8, spare="ann", me="bob", deadline=3.0)
    plan.add_source("ann", b"\x01" * 8)
    plan.add_source("mal", b"\x01" * 8)
    assert plan.pick("ann", 8, now=0.0) == []  # Mal claims them all: the offerer is spared
    asked = plan.pick("mal", 4, now=0.0)
    assert len(asked) == 4 and plan.next_due() == 3.0
    assert plan.stalled(2.9) == [] and plan.stalled(3.0) == ["mal"]
    plan.drop_source("mal")
    assert plan.next_due() is None
    assert sorted(plan.pick("ann", 8, now=3.0)) == list(range(8))  # all of them, Mal's in flight too
    # A source that sends pushes its deadline on, chunk by chunk.
    chunks, leaves = chunks_and_leaves(4)
    slow = ChunkPlan(4, deadline=3.0)
    slow.add_source("cat", b"\x01" * 4)
    slow.pick("cat", 4, now=0.0)
    for at, index in ((2.0, 0), (4.5, 1), (7.0, 2)):
        assert slow.stalled(at) == []
        slow.arrived("cat", at)
        assert slow.received("cat", index, chunks[index], leaves)
        slow.stored(index)
    assert slow.next_due() == 10.0 and slow.stalled(10.0) == ["cat"]
    slow.arrived("cat", 9.0)
    slow.received("cat", 3, chunks[3], leaves)
    assert slow.next_due() is None and slow.stalled(100.0) == []  # owes nothing: no deadline


def test_download_slots_go_to_asked_downloads_before_auto_ones_first_come_first_served():
    slots = SlotQueue(2)
    assert slots.request("a1", auto=True) and slots.request("a2", auto=True)
    assert not slots.request("a3", auto=True) and not slots.request("u1", auto=False)
    assert not slots.request("a4", auto=True)
    slots.promote("a4")  # the user asked for it meanwhile
    assert slots.waiting == 3
    assert slots.release("a1") == ["u1"]  # a yielding download goes to the back: the asked one first
    assert slots.request("a1", auto=True) is False
    assert slots.release("a2") == ["a4"]
    assert slots.withdraw("u1") == ["a3"]  # cancelled while holding: the next in line
    assert slots.withdraw("a1") == [] and slots.waiting == 0


@pytest.mark.parametrize("length", [251, 252, 253, 254, 255])
def test_a_name_of_251_to_255_bytes_is_saved_so_that_its_partial_name_fits(length):
    name = "é" * ((length - 4) // 2) + "x" * ((length - 4) % 2) + ".pdf"
    assert len(name.encode()) == length and safe_name(name) == name
    saved = unique_name(name, lambda n: False, lambda n: name_fits(n, "/home/ann/Downloads"))
    assert saved.endswith(".pdf") and len((saved + ".part").encode()) <= 255
    again = unique_name(name, {saved}.__contains__, lambda n: name_fits(n, "/home/ann/Downloads"))
    assert again.endswith(" (2).pdf") and len((again + ".part").encode()) <= 255


def test_on_windows_a_name_fits_max_path_with_its_partial_suffix_and_reserved_names_are_renamed():
    folder = "C:\\Users\\ann\\Downloads\\" + "x" * 180  # 205 characters
    fits = lambda n: name_fits(n, folder, windows=True)  # noqa: E731
    saved = unique_name("quarterly report " * 10 + ".xlsx", lambda n: False, fits)
    assert saved.endswith(".xlsx") and len(folder) + 1 + len(saved) + len(".part") <= 259
    assert name_fits(saved, folder) and not name_fits(saved + "x" * 3, folder, windows=True)
    with pytest.raises(UsageError):
        unique_name("report.xlsx", lambda n: False, lambda n: name_fits(n, "C:\\" + "y" * 250, windows=True))
    for reserved in ("CON.txt", "nul", "COM\u00b9.log", "CONIN$", "lpt9.tar.gz", "AUX .txt"):
        assert safe_name(reserved).startswith("file_"), reserved


def test_an_upload_slot_being_served_is_never_idle_however_long_its_answer_takes():
    caps = Caps(per_peer=4, total=1, idle=2.0)
    slot, _ = caps.acquire("bob", now=0.0)
    caps.touch(slot, 0.5, serving=True)  # a 4 MiB chunk going out on a slow link
    assert caps.acquire("cat", now=10.0) == (None, None)
    caps.touch(slot, 10.0)  # sent: now it asks nothing
    assert caps.acquire("cat", now=12.0) == (1, slot)
