"""Values a datagram carries, in-process (issue 26, item 1): every stamp the store can hold is
formatted without raising, a member's out-of-window ``sent_at`` is shown clamped and counted
while its signed value is kept, and no numeric field the wire accepts breaks a later call."""

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from m2mc.middleware import crypto, wire
from m2mc.middleware.channel import GroupChannel
from m2mc.middleware.manager import Config, GroupManager
from m2mc.middleware.types import (SENT_AT_EARLIEST_MS, SENT_AT_MAX_AHEAD_MS, ChatMessage, iso_millis,
                                   shown_sent_at)
from tests.testbed.arrivals import arriving

STORABLE = st.integers(-(2**63), 2**63 - 1)  # what an SQLite INTEGER (the store's columns) holds
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
YEAR_10000 = 253_402_300_800_000  # 10000-01-01T00:00:00Z in ms
NOW = 1_790_000_000_000  # 2026-09-21, a receiver's wall clock in ms


@given(STORABLE)
def test_iso_millis_formats_every_value_the_store_can_hold(epoch_ms):
    assert ISO.fullmatch(iso_millis(epoch_ms))


def test_iso_millis_is_exact_inside_datetimes_range_and_pinned_at_its_ends():
    assert iso_millis(0) == "1970-01-01T00:00:00.000Z"
    assert iso_millis(1_764_106_800_123) == "2025-11-25T21:40:00.123Z"
    assert iso_millis(-1) == "1969-12-31T23:59:59.999Z"
    assert iso_millis(2**63 - 1) == "9999-12-31T23:59:59.999Z"
    assert iso_millis(-(2**63)) == "0001-01-01T00:00:00.000Z"


@given(STORABLE, STORABLE)
def test_a_shown_stamp_lies_in_its_window_and_is_the_senders_when_that_does(sent_at, received_at):
    shown = shown_sent_at(sent_at, received_at)
    latest = max(received_at, SENT_AT_EARLIEST_MS) + SENT_AT_MAX_AHEAD_MS
    assert SENT_AT_EARLIEST_MS <= shown <= latest
    assert (shown == sent_at) == (SENT_AT_EARLIEST_MS <= sent_at <= latest)
    message = ChatMessage("g", ("p", 1), None, "n", "t", sent_at, received_at)
    assert message.to_json()["sent_at"] == iso_millis(shown)
    assert message.to_json()["sent_at_clamped"] == (shown != sent_at)


@pytest.fixture(scope="module")
def manager(tmp_path_factory):
    # Never started: its sockets stay closed, so everything below is in-process.
    m = GroupManager(Config(tmp_path_factory.mktemp("values"), name="Ann", iface="127.0.0.1", zeroconf=False,
                            max_held=1_000))
    m.gid = m.create_group("values")
    m.mal = crypto.Identity.generate()
    feed(m, wire.encode(m.mal, wire.Join(wire.sign_member(m.mal, m.gid, "Mal", 1, True))), control=True)
    yield m
    m.store.close()


def feed(manager, *datagrams, control=False):
    (manager._on_control_datagrams if control else manager._on_data_datagrams)(arriving(datagrams))
    manager.flush()


def test_a_members_far_future_and_far_past_stamps_are_shown_clamped_and_counted(manager, tmp_path):
    gid, mal = manager.gid, manager.mal
    before = manager.stats_dict()["sent_at_clamped"]
    stamps = {"year 10000": YEAR_10000, "the end of int64": 2**63 - 1, "the epoch": 0}
    for seqno, (text, sent_at) in enumerate(stamps.items(), start=1):
        feed(manager, wire.encode(mal, wire.signed_data(mal, gid, seqno, None, sent_at, "Mal", text)))
    rows = {row["text"]: row for row in (m.to_json() for m in manager.history(gid))}
    print({text: rows[text]["sent_at"] for text in stamps})
    for text, sent_at in stamps.items():
        shown = rows[text]["sent_at"]
        assert rows[text]["sent_at_clamped"] and ISO.fullmatch(shown)
        assert shown[:4] in ("2020", *(str(year) for year in range(2024, 2100))), shown
    assert manager.stats_dict()["sent_at_clamped"] - before == len(stamps)
    # The signed stamp is kept: a relay of the stored message still verifies.
    stored = manager.store.fetch(gid, [(mal.pid, 1)])[0]
    assert stored.sent_at == YEAR_10000 and wire.verify_stored(gid, stored)
    path = tmp_path / "export.jsonl"
    assert manager.export_log(path, gid) == len(manager.history(gid))
    exported = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(ISO.fullmatch(row["sent_at"]) and ISO.fullmatch(row["received_at"]) for row in exported)


seqnos = st.integers(1, wire.MAX_SEQNO)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seqnos, st.none() | st.tuples(st.just("p" * 32), seqnos), st.integers(0, wire.MAX_SEQNO))
def test_no_value_a_member_may_send_breaks_history_or_export(manager, tmp_path_factory, seqno, parent, sent_at):
    gid, mal = manager.gid, manager.mal
    feed(manager, wire.encode(mal, wire.signed_data(mal, gid, seqno, parent, sent_at, "Mal", "x")),
         wire.encode(mal, wire.Heartbeat(gid, seqno)),
         wire.encode(mal, wire.Nak(gid, manager.core.pid, ((seqno, seqno),))),
         wire.encode(mal, wire.SyncReq(gid, seqno, ((mal.pid, ((seqno, seqno),)),))))
    manager.core.handle_timer(1e9)
    manager.core.datagrams_to_send()
    assert all(ISO.fullmatch(m.to_json()["sent_at"]) for m in manager.history(gid))
    manager.export_log(tmp_path_factory.mktemp("export") / "log.jsonl", gid)
    assert manager.stats_dict()["pending"] >= 0


def test_sync_progress_stays_within_what_qt_signals_carry():
    """A SYNC_RESP's ``remaining`` feeds the progress shown by the app, whose signals carry C ints."""
    ann, mal = crypto.Identity.generate(), crypto.Identity.generate()
    with pytest.raises(wire.WireError, match="remaining"):
        wire.encode(mal, wire.SyncResp("g", ann.pid, 1, 2**40, ()))
    channel = GroupChannel("g", ann)
    channel.start_sync(0.0)
    for responder in (mal, crypto.Identity.generate()):  # two responders, each at the bound: the sum is bounded too
        channel.receive(responder.pid, wire.SyncResp("g", ann.pid, 1, wire.MAX_SYNC_REMAINING, ()), 1.0)
    progress = [event for event in channel.events() if type(event).__name__ == "SyncProgress"]
    assert progress and all(0 <= event.expected <= 2**31 - 1 for event in progress), progress
