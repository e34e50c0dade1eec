"""RangeSet against a plain set of ints: removal, the smallest values, and intersection by ranges."""

import random

from m2mc.middleware.rangeset import RangeSet


def canonical(values):
    out = []
    for value in sorted(values):
        if out and out[-1][1] == value - 1:
            out[-1] = (out[-1][0], value)
        else:
            out.append((value, value))
    return out


def test_remove_discard_first_and_intersection_match_a_set():
    for trial in range(2_000):
        rng = random.Random(trial)
        values = set(rng.sample(range(60), rng.randint(0, 40)))
        ranges = RangeSet(values)
        for _ in range(3):
            start = rng.randint(0, 60)
            end = rng.randint(start, 65)
            if rng.random() < 0.5:
                ranges.remove_range(start, end)
                values -= set(range(start, end))
            else:
                ranges.discard(start)
                values.discard(start)
            assert ranges.ranges() == canonical(values), trial
        assert ranges.first(5) == sorted(values)[:5]
        asked, at = [], 0
        while at < 60:
            first = at + rng.randint(0, 5)
            last = first + rng.randint(0, 8)
            asked.append((first, last))
            at = last + 2
        both = ranges.intersection(asked, 10**6)
        assert RangeSet.from_ranges(both).ranges() == canonical(v for first, last in asked for v in range(first, last + 1)
                                                                if v in values)


def test_intersection_costs_ranges_not_values():
    held = RangeSet.from_ranges([(1, 10**9)])
    asked = [(1 + i * 5_000, i * 5_000 + 4_999) for i in range(4_900)]
    assert held.intersection(asked, 500) == asked[:500]  # 24.5 million values, answered by ranges
