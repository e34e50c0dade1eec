"""A download's decisions (middleware/file_download.py) against simulated sources in virtual time
(tests/testbed/file_sources.py): no socket, no file, no clock.  Several sources at once, one of
them stalling, lying about chunks, vanishing mid-download; a restart resumes from the chunks held.
Each chunk is fetched once: the bytes hashed are the file's size, plus the garbage a liar gets to
send before it is dropped."""

from __future__ import annotations

from m2mc.middleware import file_core
from m2mc.middleware.file_core import WINDOW_BYTES
from m2mc.middleware.file_download import MAX_SOURCES, STALLED_RETRY, Download, Timing
from m2mc.middleware.files import BAD_CHUNKS_TO_DROP, CHUNK_DEADLINE, MAX_CHUNK, MIN_SOURCE_RATE, chunk_deadline
from tests.testbed.file_sources import FileSim, SimSource, sample_file

CHUNKS = 2 * WINDOW_BYTES // (256 * 1024)  # two sources' windows of sample_file's chunks: no source holds them all


def test_honest_sources_fetch_every_chunk_once_and_the_offerer_only_as_a_fallback() -> None:
    offer, data = sample_file(CHUNKS)
    sim = FileSim(offer, data, [SimSource("ann"), SimSource("bob"), SimSource("cid")])
    sim.run()
    assert sim.finished_at is not None and sim.whole()
    assert sim.good_bytes == offer.size and sim.bad_bytes == sim.unchecked_bytes == 0
    assert len(sim.asked) == CHUNKS  # each chunk asked once, of one source
    # The offerer (ann) is asked only for chunks no other source holds: here none.
    assert not sim.asked_of("ann") and sim.asked_of("bob") and sim.asked_of("cid")


def test_a_stalled_source_is_dropped_at_its_deadline_and_its_chunks_are_asked_of_the_others() -> None:
    offer, data = sample_file(CHUNKS)
    sim = FileSim(offer, data, [SimSource("ann"), SimSource("bob"), SimSource("stall", stall=True)])
    sim.run()
    assert sim.finished_at is not None and sim.whole()
    stalled = sim.asked_of("stall")
    assert stalled, "the stalling source was never asked: the test proves nothing"
    assert [pid for _, pid, stalled in sim.closed if stalled] == ["stall"] and sim.download.stalls == {"stall": 1}
    assert all(sim.served_by[index] != "stall" for index in stalled)  # its chunks came from the others
    assert sim.good_bytes == offer.size  # each once
    # Dropped once silent for CHUNK_DEADLINE after it was asked (within its chunk's deadline; not a
    # poll later), and not asked again before its back-off is over.
    bound = min(CHUNK_DEADLINE, chunk_deadline(offer.chunk_size))
    assert sim.finished_at - 1000.0 < bound + 1.0
    assert sim.connects["stall"] == 1 and sim.download.retry_at["stall"] >= 1000.0 + bound + STALLED_RETRY


def test_a_silent_source_of_4_mib_chunks_is_dropped_once_silent_not_at_its_chunks_deadline() -> None:
    """A 4 MiB chunk is due within 19 s (its length at MIN_SOURCE_RATE): a source that sends
    nothing at all is dropped after CHUNK_DEADLINE of silence."""
    offer, data = sample_file(8, chunk_size=4 * 2**20)
    sim = FileSim(offer, data, [SimSource("ann"), SimSource("bob"), SimSource("stall", stall=True)])
    sim.run()
    assert sim.finished_at is not None and sim.whole()
    assert sim.asked_of("stall"), "the silent source was never asked: the test proves nothing"
    dropped = [when for when, pid, stalled in sim.closed if stalled and pid == "stall"]
    assert chunk_deadline(offer.chunk_size) > 18.0
    assert dropped and dropped[0] - 1000.0 <= CHUNK_DEADLINE + 0.1, dropped
    assert sim.finished_at - 1000.0 < CHUNK_DEADLINE + 1.0


def test_a_slow_source_whose_bytes_keep_coming_is_not_taken_for_silent() -> None:
    """The only source sends 4 MiB chunks just above MIN_SOURCE_RATE: each takes 13.7 s, far longer
    than the silence bound, but its bytes keep coming, so it is never dropped."""
    offer, data = sample_file(3, chunk_size=4 * 2**20)
    slow = SimSource("ann", rate=1.2 * MIN_SOURCE_RATE)
    sim = FileSim(offer, data, [slow])
    sim.run()
    assert sim.finished_at is not None and sim.whole()
    assert 4 * 2**20 / slow.rate > 4 * CHUNK_DEADLINE  # the test proves something
    assert not sim.closed or not any(stalled for _, _, stalled in sim.closed), sim.closed
    assert sim.connects["ann"] == 1


def test_a_source_that_lies_about_chunks_is_dropped_after_a_few_and_never_written() -> None:
    offer, data = sample_file(CHUNKS)
    sim = FileSim(offer, data, [SimSource("ann"), SimSource("liar", liar=True), SimSource("bob")])
    sim.run()
    assert sim.finished_at is not None and sim.whole()
    plan = sim.download.plan
    assert plan is not None and "liar" in plan.dropped and plan.bad["liar"] == BAD_CHUNKS_TO_DROP
    # Closed as it was dropped, not when the download ended.
    assert [pid for when, pid, _ in sim.closed if when < sim.finished_at] == ["liar"]
    assert "liar" not in sim.served_by.values()
    assert sim.bad_bytes == BAD_CHUNKS_TO_DROP * offer.chunk_size  # hashed garbage: only until it is dropped
    assert sim.good_bytes == offer.size
    assert sim.connects["liar"] == 1  # a dropped source is not reached again


def test_a_source_that_vanishes_mid_download_leaves_its_chunks_to_the_others() -> None:
    offer, data = sample_file(CHUNKS)
    sim = FileSim(offer, data, [SimSource("ann"), SimSource("gone", vanish_after=5), SimSource("bob"),
                                SimSource("far", reachable=False)])
    sim.run()
    assert sim.finished_at is not None and sim.whole()
    assert sum(1 for who in sim.served_by.values() if who == "gone") == 5
    lost = sim.asked_of("gone") - {i for i, who in sim.served_by.items() if who == "gone"}
    assert lost, "nothing was in flight to the vanishing source: the test proves nothing"
    assert sim.good_bytes == offer.size  # nothing fetched twice
    # Its chunks were asked of the others as it went, not after a chunk deadline.
    assert sim.finished_at - 1000.0 < 1.0 and not any(stalled for _, _, stalled in sim.closed)


def test_a_restart_fetches_only_the_chunks_not_held() -> None:
    offer, data = sample_file(CHUNKS)
    first = FileSim(offer, data, [SimSource("ann"), SimSource("bob", rate=5e6)])
    first.run(stop_when=lambda: len(first.written) >= CHUNKS // 2)
    assert first.finished_at is None and 0 < sum(first.have) < CHUNKS
    held = bytearray(first.have)  # the bitmap, as a restart reads it, and the hash list saved
    again = FileSim(offer, data, [SimSource("ann"), SimSource("bob")], have=bytearray(held),
                    leaves=first.download.leaves)
    again.run()
    assert again.finished_at is not None and again.whole()
    held_bytes = sum(offer.chunk_length(i) for i in range(CHUNKS) if held[i] and not again.written.get(i))
    assert again.good_bytes == offer.size - held_bytes
    assert not set(again.written) & {i for i in range(CHUNKS) if held[i]}  # no chunk held is asked again


def test_a_download_that_gets_nothing_gives_its_slot_to_one_waiting() -> None:
    offer, data = sample_file(8)
    sim = FileSim(offer, data, [SimSource("ann", stall=True)], waiting=True)
    sim.run()
    assert sim.finished_at is None and sim.gave_up_at is not None
    assert sim.gave_up_at - 1000.0 >= max(5.0, chunk_deadline(offer.chunk_size))
    assert not sim.download.links and sim.download.plan is None
    download = sim.download
    assert download.turn_ended(auto=True) is None  # it got the hash list: that turn counts
    for turn in range(2):  # turns that get nothing: a download the user asked for waits on
        download.begin(2000.0 + turn, sim.have, download.timing)
        assert download.turn_ended(auto=False) is None
    download.begin(3000.0, sim.have, download.timing)
    assert "no member served it" in download.turn_ended(auto=True)  # an auto-download fails


def test_the_last_source_place_is_kept_for_the_offerer() -> None:
    offer, data = sample_file(8)
    members = [f"m{i:02}" for i in range(12)]
    download = Download(offer, "m11", "me")
    download.begin(0.0, bytearray(offer.chunks), Timing())
    commands = download.tick(0.0, members + ["me"], False)
    reached = [command.pid for command in commands]
    assert len(reached) == MAX_SOURCES and reached[0] == "m11" and "me" not in reached


def test_a_chunk_frame_asks_nothing_until_its_chunk_is_checked() -> None:
    """A chunk's request is freed when the chunk is checked, not when its frame comes: a pass over
    the sources' windows at each frame would find them full (wasted work per chunk)."""
    offer, data = sample_file(CHUNKS)
    sim = FileSim(offer, data, [SimSource("ann"), SimSource("bob")])
    download, in_frame, pumps_in_frames = sim.download, [False], []
    frame, pump = download.frame, download._pump

    def watched_frame(*args):
        in_frame[0] = True
        try:
            return frame(*args)
        finally:
            in_frame[0] = False

    def watched_pump(now):
        if in_frame[0]:
            pumps_in_frames.append(now)
        return pump(now)

    download.frame, download._pump = watched_frame, watched_pump
    sim.run()
    assert sim.finished_at is not None and sim.whole() and not pumps_in_frames


def _most_asked(sim: FileSim) -> tuple[int, int]:
    """Runs ``sim``; the most chunks asked and not yet checked, of all its sources together and of
    any one, at any moment."""
    most = [0, 0]

    def look() -> bool:
        counts = [link.outstanding for link in sim.download.links.values() if link.connected]
        most[0], most[1] = max(most[0], sum(counts)), max([most[1], *counts])
        return False

    sim.run(stop_when=look)
    assert sim.finished_at is not None and sim.whole()
    return most[0], most[1]


def test_a_download_of_the_largest_chunks_from_the_most_sources_holds_at_most_its_window() -> None:
    """8 sources of 4 MiB chunks (a file of 1 GiB and more) ask at most the download's 64 MiB
    together; one source alone still has its whole 16 MiB."""
    offer, _ = sample_file(2, chunk_size=MAX_CHUNK, tail=MAX_CHUNK)
    assert offer.chunk_size == MAX_CHUNK == 4 * 2**20
    assert MAX_SOURCES * file_core.window(offer, MAX_SOURCES) * MAX_CHUNK <= file_core.DOWNLOAD_WINDOW_BYTES
    assert file_core.window(offer, 1) * MAX_CHUNK == WINDOW_BYTES


def test_many_sources_share_the_download_s_window_and_few_have_their_own(monkeypatch) -> None:
    """What a slow disk can make a download hold is bounded by the download's window, not by its
    sources' count: eight slow sources get a share each, two get their whole window."""
    chunk = 256 * 1024
    monkeypatch.setattr(file_core, "WINDOW_BYTES", 8 * chunk)
    monkeypatch.setattr(file_core, "DOWNLOAD_WINDOW_BYTES", 32 * chunk)
    offer, data = sample_file(120, chunk_size=chunk)
    many = FileSim(offer, data, [SimSource(f"s{i}", rate=1e6) for i in range(MAX_SOURCES)])
    together, each = _most_asked(many)
    assert len(set(many.served_by.values())) == MAX_SOURCES - 1  # all but the offerer, the fallback
    assert together <= 32 and each <= 4 and together > 8  # the download's window, shared: 4 each
    few = FileSim(offer, data, [SimSource(pid, rate=1e6) for pid in ("ann", "bob", "cat")])
    assert _most_asked(few) == (16, 8)  # bob and cat each their own window (ann, the offerer, is the fallback)
