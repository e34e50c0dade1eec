"""A set of non-negative integers kept as sorted, disjoint, half-open ranges.

Seqnos from one sender arrive almost in order, so the set is nearly always a
single range and costs O(1) memory however many seqnos it holds; every gap adds
one range.  Membership is a bisect; adding the next seqno in order is O(1).

Values that do not extend the last range go to a small hash set first and are
merged into the ranges in batches, so heavily shuffled input costs amortized
O(1) per value instead of a list insertion (a memmove of all ranges) each.  The
batch never outgrows half the ranges (or 2,048 values), so memory stays
proportional to the gaps.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Iterable, Iterator


class RangeSet:
    """Integers as ``[start0, end0, start1, end1, ...]`` boundaries (ends exclusive)."""

    __slots__ = ("_bounds", "_loose")

    COMPACT_MIN = 2048

    def __init__(self, values: Iterable[int] = ()) -> None:
        self._bounds: list[int] = []
        self._loose: set[int] = set()
        for value in values:
            self.add(value)

    @classmethod
    def from_ranges(cls, ranges: Iterable[tuple[int, int]]) -> RangeSet:
        """Build from inclusive ``(first, last)`` ranges in any order."""
        result = cls()
        for first, last in ranges:
            result.add_range(first, last + 1)
        return result

    def __contains__(self, value: int) -> bool:
        # An odd insertion point means ``value`` falls inside [start, end).
        return bisect_right(self._bounds, value) & 1 == 1 or value in self._loose

    def add(self, value: int) -> bool:
        """Add ``value``; return False if it was already present."""
        bounds, loose = self._bounds, self._loose
        if bounds and bounds[-1] == value and (not loose or value not in loose):
            bounds[-1] = value + 1  # the next one in order: extend the last range
            return True
        if not bounds:
            if loose and value in loose:
                return False
            bounds += (value, value + 1)
            return True
        if bisect_right(bounds, value) & 1 or value in loose:
            return False
        loose.add(value)
        if len(loose) > max(self.COMPACT_MIN, len(bounds) >> 1):
            self._compact()
        return True

    def _compact(self) -> None:
        """Merge the loose values into the ranges in one linear pass."""
        if not self._loose:
            return
        runs: list[int] = []
        for value in sorted(self._loose):
            if runs and runs[-1] == value:
                runs[-1] = value + 1
            else:
                runs += (value, value + 1)
        self._loose.clear()
        merged: list[int] = []
        old, i, j = self._bounds, 0, 0
        while i < len(old) or j < len(runs):
            if j >= len(runs) or (i < len(old) and old[i] <= runs[j]):
                start, end = old[i], old[i + 1]
                i += 2
            else:
                start, end = runs[j], runs[j + 1]
                j += 2
            if merged and merged[-1] >= start:
                merged[-1] = max(merged[-1], end)
            else:
                merged += (start, end)
        self._bounds = merged

    def take_run(self, start: int) -> int:
        """Remove the run of consecutive values that begins at ``start``; return its end
        (exclusive), which is ``start`` itself when ``start`` is absent."""
        end, bounds, loose = start, self._bounds, self._loose
        while True:
            if end in loose:
                loose.discard(end)
                end += 1
                continue
            i = bisect_right(bounds, end)
            if not i & 1:
                return end
            stop = bounds[i]
            if bounds[i - 1] == end:
                del bounds[i - 1 : i + 1]
            else:  # values below ``end`` stay
                bounds[i] = end
            end = stop

    def add_range(self, start: int, end: int) -> None:
        """Add every integer in ``[start, end)``, merging with ranges it touches."""
        if end <= start:
            return
        self._compact()
        bounds = self._bounds
        lo = bisect_left(bounds, start)  # odd: start lies in (or touches) a range
        hi = bisect_right(bounds, end)  # odd: end lies in (or touches) a range
        bounds[lo:hi] = ([start] if not lo & 1 else []) + ([end] if not hi & 1 else [])

    def remove_range(self, start: int, end: int) -> None:
        """Remove every integer in ``[start, end)``."""
        if end <= start:
            return
        self._compact()
        bounds = self._bounds
        lo = bisect_left(bounds, start)  # odd: a range begins below start and keeps [.., start)
        hi = bisect_right(bounds, end)  # odd: a range ends above end and keeps [end, ..)
        bounds[lo:hi] = ([start] if lo & 1 else []) + ([end] if hi & 1 else [])

    def discard(self, value: int) -> None:
        self.remove_range(value, value + 1)

    def first(self, count: int) -> list[int]:
        """The ``count`` smallest values, ascending."""
        self._compact()
        b, out = self._bounds, []
        for i in range(0, len(b), 2):
            if len(out) >= count:
                break
            out.extend(range(b[i], min(b[i + 1], b[i] + count - len(out))))
        return out

    def intersection(self, ranges: Iterable[tuple[int, int]], max_ranges: int) -> list[tuple[int, int]]:
        """The parts of inclusive ``ranges`` (ascending, disjoint) held here, as inclusive ranges:
        at most ``max_ranges`` of them.  Costs O(ranges * log(own ranges)), whatever they span."""
        self._compact()
        bounds, out = self._bounds, []
        for first, last in ranges:
            # Own ranges that overlap [first, last]: from the one holding (or after) first.
            i = bisect_right(bounds, first)
            i -= i & 1
            while i < len(bounds) and bounds[i] <= last:
                out.append((max(first, bounds[i]), min(last, bounds[i + 1] - 1)))
                if len(out) >= max_ranges:
                    return out
                i += 2
        return out

    def ranges(self) -> list[tuple[int, int]]:
        """Inclusive ``(first, last)`` ranges, ascending."""
        self._compact()
        b = self._bounds
        return [(b[i], b[i + 1] - 1) for i in range(0, len(b), 2)]

    def gaps(self, upto: int, start: int = 1) -> list[tuple[int, int]]:
        """Inclusive ranges within ``[start, upto]`` that are missing from the set."""
        missing = []
        expected = start
        for first, last in self.ranges():
            if first > upto:
                break
            if first > expected:
                missing.append((expected, first - 1))
            expected = max(expected, last + 1)
        if expected <= upto:
            missing.append((expected, upto))
        return missing

    def max(self) -> int | None:
        self._compact()
        return self._bounds[-1] - 1 if self._bounds else None

    def __len__(self) -> int:
        self._compact()
        b = self._bounds
        return sum(b[i + 1] - b[i] for i in range(0, len(b), 2))

    def __bool__(self) -> bool:
        return bool(self._bounds or self._loose)

    def __iter__(self) -> Iterator[int]:
        self._compact()
        b = self._bounds
        for i in range(0, len(b), 2):
            yield from range(b[i], b[i + 1])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RangeSet) and self.ranges() == other.ranges()

    def __repr__(self) -> str:
        return f"RangeSet({self.ranges()})"
