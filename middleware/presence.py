"""Presence without I/O: who this peer has heard from lately, and when to say "still here".

Only fresh evidence from a member of a group this peer is in counts as hearing
it: a chat message never seen before, a HEARTBEAT or GOODBYE whose signed
wall-clock ``at`` is fresh (:meth:`Presence.fresh_at`), its own JOIN that
changed its record, a direct message taken in.  A signature says who wrote a
datagram, never when it was sent: a replayed GOODBYE must not show an online
member offline, nor a replayed HEARTBEAT a departed one online (issue 41,
row 9).  The peer core keeps strangers out of the table.  A member that has
been idle sends one beacon per group every ``BEACON_INTERVAL`` seconds: the
group's ordinary HEARTBEAT (its highest seqno, which receivers already
handle, and ``at``), so a private group's beacon stays sealed.  A member that
sends anything else is not idle and sends no beacon; one that has just started
or joined beacons at once, so members see it online without waiting a period.

``at`` is fresh when it lies within ``CLOCK_SKEW`` of this peer's wall clock
(``AT_FRESH_FOR`` more into the past: a beacon may have queued), is newer than
the last ``at`` taken from the sender (a GOODBYE may share its millisecond with
the beacon before it), and has not fallen more than ``AT_FRESH_FOR`` behind
the time that passed here since then (a beacon captured and held back).

Status, as the GUI shows it:

* **online**: heard within ``ONLINE_FOR`` seconds (a beacon period and slack);
* **away**: heard within ``OFFLINE_AFTER`` seconds, so one beacon was missed;
* **offline**: not heard for longer (its app closed, or the machine left the
  LAN), or never heard since this peer started.

"Left the group" is GJLP membership and stays apart from all three.

Two things make it quick where beacons alone would take a period:

* a member whose app closes says **goodbye** (one GOODBYE per group), and shows
  offline at once rather than "away" for a while;
* a member heard again after being offline (a restart, a return to the LAN)
  gets a beacon from this peer in each group they share within a second, not
  up to a beacon period later, so its new view of who is online fills at once.
  At most one such early beacon per group every ``EARLY_BEACON_GAP`` seconds,
  however many return: a member that restarts in a loop cannot make this peer
  send more.

Bounded against strangers: at most ``MAX_TRACKED`` pids are remembered (a
signature is cheap to make under a fresh key), the longest unheard going
first; a pid costs one dict entry.
"""

from __future__ import annotations

from collections import OrderedDict

BEACON_INTERVAL = 30.0
AT_FRESH_FOR = 30.0  # s: how late a beacon's ``at`` may be, beyond the clocks' skew
CLOCK_SKEW = 300.0  # s: how far apart two members' wall clocks may be
ONLINE_FOR = 40.0
OFFLINE_AFTER = 50.0
MAX_TRACKED = 10_000
EARLY_BEACON_GAP = 5.0

ONLINE = "online"
AWAY = "away"
OFFLINE = "offline"


class Presence:
    """Last-heard times per pid, and per group the time this peer last spoke (``now`` passed in)."""

    def __init__(self, max_tracked: int = MAX_TRACKED) -> None:
        self.max_tracked = max_tracked
        self._heard: OrderedDict[str, float] = OrderedDict()  # least recently heard first
        self._spoke: dict[str, float] = {}  # gid -> when this peer last sent on it
        self._early: dict[str, float] = {}  # gid -> when it last had an early beacon (beacon_soon)
        # pid -> (the last ``at`` taken from it, in ms; this peer's wall time then): see fresh_at.
        self._at: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self.stale_dropped = 0  # HEARTBEATs and GOODBYEs whose ``at`` was not fresh (replays)

    def heard(self, pid: str, now: float) -> bool:
        """Note ``pid`` as heard; True when it was offline until now (never heard, gone silent,
        or said goodbye): it has just come (back)."""
        returning = self.status(pid, now) == OFFLINE
        self._heard[pid] = now
        self._heard.move_to_end(pid)
        while len(self._heard) > self.max_tracked:
            self._heard.popitem(last=False)
        return returning

    def fresh_at(self, pid: str, at: int, wall: float, goodbye: bool = False) -> bool:
        """Whether ``pid``'s HEARTBEAT (or GOODBYE) signed at ``at`` (wall-clock ms) is fresh
        evidence at this peer's wall time ``wall`` (s); if so it is the sender's latest."""
        last = self._at.get(pid)
        seconds = at / 1000
        fresh = wall - CLOCK_SKEW - AT_FRESH_FOR <= seconds <= wall + CLOCK_SKEW
        if fresh and last is not None:
            last_at, last_wall = last
            if at == last_at and not goodbye and wall - last_wall < 1.0:
                return False  # its beacons in two groups, signed in one flush: the first counted, no replay
            fresh = (at >= last_at if goodbye else at > last_at) and \
                seconds >= last_at / 1000 + (wall - last_wall) - AT_FRESH_FOR
        if not fresh:
            self.stale_dropped += 1
            return False
        self._at[pid] = (at, wall)
        self._at.move_to_end(pid)
        while len(self._at) > self.max_tracked:
            self._at.popitem(last=False)
        return True

    def gone(self, pid: str) -> None:
        """``pid`` said goodbye: offline until it is heard again."""
        self._heard.pop(pid, None)

    def opened(self, gid: str, now: float) -> None:
        """This peer has just started in ``gid`` or joined it: its beacon is due now, so members see
        it online at once (what it sends first, sync requests, is no evidence to them)."""
        self._spoke[gid] = now - BEACON_INTERVAL

    def beacon_soon(self, gid: str, now: float) -> None:
        """Someone in ``gid`` has just come back: the group's beacon is due now, or, if an early one
        went out there lately, once ``EARLY_BEACON_GAP`` has passed since (one set for later
        already covers this).  (What this peer sent before they came, they did not hear; and only
        fresh evidence shows a member online, so a restarted one waits for this, not for any
        datagram of ours.)"""
        early = self._early.get(gid, now - EARLY_BEACON_GAP)
        if early > now:
            return  # one is set for then
        at = max(now, early + EARLY_BEACON_GAP)
        self._early[gid] = at
        spoke = self._spoke.get(gid)
        due = at if spoke is None else min(at, spoke + BEACON_INTERVAL)  # (the regular one may come first)
        self._spoke[gid] = due - BEACON_INTERVAL

    def status(self, pid: str, now: float) -> str:
        at = self._heard.get(pid)
        if at is None:
            return OFFLINE
        silent = now - at
        if silent <= ONLINE_FOR:
            return ONLINE
        return AWAY if silent <= OFFLINE_AFTER else OFFLINE

    def last_heard(self, pid: str) -> float | None:
        return self._heard.get(pid)

    def spoke(self, gid: str, now: float) -> None:
        """This peer sent something on ``gid``: no beacon is due there for a while."""
        self._spoke[gid] = now

    def forget(self, gid: str) -> None:
        self._spoke.pop(gid, None)
        self._early.pop(gid, None)

    def beacons_due(self, gids: list[str], now: float) -> list[str]:
        """The groups this peer has been silent on for a beacon period; each is marked as spoken."""
        due = []
        for gid in gids:
            last = self._spoke.get(gid)
            if last is None:  # a beacon a period from now (one just opened beacons at once: opened)
                self._spoke[gid] = now
            elif now >= last + BEACON_INTERVAL:  # the sum get_timer() gives: no float gap between them
                due.append(gid)
                self._spoke[gid] = now
        return due

    def get_timer(self, gids: list[str]) -> float | None:
        """When the next beacon is due, or None with no groups."""
        times = [self._spoke[gid] + BEACON_INTERVAL for gid in gids if gid in self._spoke]
        return min(times) if times else None


__all__ = ["Presence", "BEACON_INTERVAL", "AT_FRESH_FOR", "CLOCK_SKEW", "ONLINE_FOR", "OFFLINE_AFTER", "ONLINE", "AWAY", "OFFLINE"]
