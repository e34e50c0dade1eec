"""Dates in the app (issue 26): any stamp the store can hold is shown without raising, a sender's
stamp out of its window is shown clamped and said to be, and a date not in this year names its year."""

import time
from datetime import date, datetime

from hypothesis import given
from hypothesis import strategies as st
from PySide6.QtCore import QEvent
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QApplication, QToolTip

from conftest import ANN, BOB, CAT
from m2mc.middleware.types import SENT_AT_EARLIEST_MS, ChatMessage, Member
from m2mc.ui.delegate import clock, full_date

GID = ""  # the messages' own gid: inject_group takes them into the group it makes
STORABLE = st.integers(-(2**63), 2**63 - 1)  # what an SQLite INTEGER (the store's columns) holds


def local_ms(*fields) -> int:
    return int(datetime(*fields).timestamp() * 1000)


def test_clock_names_the_year_only_when_it_is_not_this_year():
    today = date(2026, 11, 26)
    assert clock(local_ms(2026, 11, 26, 9, 5), today) == "09:05"
    assert clock(local_ms(2026, 3, 2, 9, 5), today) == "02 Mar 09:05"
    assert clock(local_ms(2025, 11, 26, 9, 5), today) == "26 Nov 2025 09:05"
    assert clock(local_ms(2100, 1, 1, 9, 5), today) == "01 Jan 2100 09:05"


@given(STORABLE)
def test_clock_and_full_date_format_every_value_the_store_can_hold(epoch_ms):
    assert clock(epoch_ms) and full_date(epoch_ms)


def test_far_future_and_far_past_messages_render_with_clamped_dates(qtbot, window, backend):
    now = int(time.time() * 1000)
    # 2**63 - 1024: the latest stamp a clock kept in float seconds (as every peer's is) can sign.
    stamps = {"from year 292 million": 2**63 - 1024, "from 1970": 0, "from now": now}
    seqnos = (2**63 - 1, 1, 1)  # the largest seqno the wire takes, too
    history = [ChatMessage(GID, (who.pid, seqno), None, who.name, text, sent_at, now)
               for who, seqno, (text, sent_at) in zip((ANN, BOB, CAT), seqnos, stamps.items())]
    me = Member(backend.pid, backend.name)
    gid = backend.manager.inject_group("Dates", members=(ANN, BOB, CAT, me), joined=True, history=history).gid
    arrived = {m.text: m.received_at for m in backend.manager.history(gid)}
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and len(window.current.tree) == len(history))
    view = window.conversation.tree_view
    assert not view.grab().isNull()  # every row painted
    delegate = view.itemDelegate()
    shown = {}
    for message in history:
        index = window.conversation._view_index(message.mid)
        geometry = delegate._geometry(view.visualRect(index), index)
        shown[message.text] = geometry["meta"]
        centre = geometry["time"].center()
        QApplication.sendEvent(view.viewport(), QHelpEvent(QEvent.Type.ToolTip, centre,
                                                           view.viewport().mapToGlobal(centre)))
        qtbot.waitUntil(QToolTip.isVisible)
        tip = QToolTip.text()
        assert ("sender's clock" in tip) == (message.text != "from now"), tip
        QToolTip.hideText()
    print(shown)
    assert shown["from year 292 million"] == clock(arrived["from year 292 million"] + 24 * 3600 * 1000)  # a day after it arrived
    assert shown["from 1970"] == clock(SENT_AT_EARLIEST_MS)  # 1 January 2020
    assert shown["from now"] == clock(now)
