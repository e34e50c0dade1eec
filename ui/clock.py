"""A message's time as the views show and a screen reader reads it, in local time, without Qt."""

from __future__ import annotations

from datetime import date, datetime

from ..middleware.types import FIRST_FORMATTABLE_MS, LAST_FORMATTABLE_MS, utc_datetime

_DAY_MS = 24 * 3600 * 1000


def local_datetime(epoch_ms: int) -> datetime:
    """A stamp in local time, for any integer the store can hold (beyond datetime's years 1..9999,
    a day inside them, so that no time zone pushes it over)."""
    moment = utc_datetime(min(max(epoch_ms, FIRST_FORMATTABLE_MS + _DAY_MS), LAST_FORMATTABLE_MS - _DAY_MS))
    try:
        return moment.astimezone()
    except (OverflowError, OSError, ValueError):  # a platform whose local time stops short of it
        return moment


def clock(epoch_ms: int, today: date | None = None) -> str:
    """A message's time, short: the time alone today, with day and month this year, and with the
    year too in any other year (so a stamp years away never passes for a recent one)."""
    moment = local_datetime(epoch_ms)
    today = today or datetime.now().date()
    if moment.date() == today:
        return moment.strftime("%H:%M")
    if moment.year == today.year:
        return moment.strftime("%d %b %H:%M")
    return moment.strftime("%d %b %Y %H:%M")
