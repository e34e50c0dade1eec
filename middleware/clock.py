"""The middleware's two clocks: one monotonic clock for every deadline, wall time for stamps.

Deadlines (repair and sync timers, presence, flush pacing) are measured on
:func:`now`, which is ``time.monotonic()``: the clock asyncio's default loop
uses for ``loop.time()``, so a deadline can be handed to ``loop.call_at``
unchanged, and a wall clock stepped by NTP or by hand moves no timer.  Wall
time (:func:`wall`) only stamps what people read: a message's ``sent_at`` and
``received_at``, a group's ``created_at`` and ``last_seen``.  The protocol
cores read neither: the asyncio adapter (:mod:`middleware.manager`) reads both
and passes them in.
"""

from __future__ import annotations

import time


def now() -> float:
    """Seconds on the monotonic clock (the same scale as the event loop's ``loop.time()``)."""
    return time.monotonic()


def wall() -> float:
    """Seconds since the epoch, for stamps that people read; never for a deadline."""
    return time.time()
