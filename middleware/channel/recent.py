"""Seqnos of one sender seen lately (NAKed or repaired), each remembered for a window of time."""

from __future__ import annotations

from typing import Sequence

from ..rangeset import RangeSet

RECENT_SLICES = 8  # what was NAKed or repaired lately is kept in this many slices of its window


class RecentRanges:
    """Seqnos of one sender seen lately (NAKed or repaired), each for about ``window`` seconds.

    Kept in time slices of ``window / RECENT_SLICES``: an entry is forgotten with its slice,
    between ``window`` and ``window * (1 + 1 / RECENT_SLICES)`` after it came, so memory is at
    most ``RECENT_SLICES + 1`` range sets.  (A single set forgotten as a whole once its oldest
    entry was old forgot a NAK heard a moment ago with it, and the members that had held their
    own NAK back for it asked again before its repair could come.)"""

    __slots__ = ("slices",)

    def __init__(self) -> None:
        self.slices: list[tuple[float, list[float], RangeSet]] = []  # (started, [last added], seqnos)

    def _live(self, now: float, window: float) -> list[tuple[float, list[float], RangeSet]]:
        slices = self.slices
        while slices and now - slices[0][1][0] > window:
            del slices[0]
        return slices

    def _current(self, now: float, window: float) -> RangeSet:
        slices = self._live(now, window)
        if not slices or now - slices[-1][0] > window / RECENT_SLICES:
            slices.append((now, [now], RangeSet()))
        slices[-1][1][0] = now
        return slices[-1][2]

    def add(self, seqno: int, now: float, window: float) -> None:
        self._current(now, window).add(seqno)

    def add_range(self, start: int, end: int, now: float, window: float) -> None:
        self._current(now, window).add_range(start, end)

    def intersection(self, ranges: Sequence[tuple[int, int]], max_ranges: int, now: float,
                     window: float) -> list[tuple[int, int]]:
        """The parts of inclusive ``ranges`` (ascending, disjoint) seen within ``window``."""
        slices = self._live(now, window)
        if len(slices) == 1:
            return slices[0][2].intersection(ranges, max_ranges)
        found = RangeSet()
        for _, _, seqnos in slices:
            for first, last in seqnos.intersection(ranges, max_ranges):
                found.add_range(first, last + 1)
        return found.ranges()[:max_ranges]

    def forgotten_at(self, ranges: Sequence[tuple[int, int]], now: float, window: float) -> float:
        """When the last of ``ranges`` seen within ``window`` is forgotten (``now`` if none is)."""
        until = now
        for _, last, seqnos in self._live(now, window):
            if seqnos.intersection(ranges, 1):
                until = max(until, last[0] + window)
        return until
