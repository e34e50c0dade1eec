"""One group's relay tree at one peer, between the tree's core (:mod:`middleware.relay`) and the
wire (``wire.encode_relay``): which members relay, the pairwise key of each, the bytes of what was
relayed (to push it on), writer refs back to pids, and the stamps that refuse a replayed datagram.
Sans-I/O like the rest: the peer core hands it datagrams, members and ``now``, and sends what it
returns.  Only members multicast does not reach take part, and only once there are more than
:data:`RELAY_MIN_MEMBERS` of them: below that the writer's own copy to each costs little.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Callable, Iterable, cast

from . import crypto, wire
from .addresses import Endpoint
from .relay import Graft, IHave, MessageId, Prune, Push, RelayTree

RELAY_MIN_MEMBERS = 8
"""Unicast-only members of a group past which its messages go along the tree instead of one copy
from the writer to each: with 8, the writer's 8 copies are what the tree lets a writer send."""

MAX_CACHED_BYTES = 8 * 2**20
"""Bytes of relayed datagrams kept to push on and to answer GRAFTs; the oldest give way (a message
no longer kept is still repaired by the group's NAK and sync)."""

CACHE_FOR = 30.0
"""Seconds a relayed datagram is kept at most (announcements name the last 10 s: relay.RECENT_FOR)."""

MAX_FLOODED = 4096
"""Beacons (HEARTBEAT, GOODBYE) remembered as passed on, so one that comes back by another branch
(two members' rings differing for a moment) goes no further."""

REPLAY_WINDOW = 64
"""Stamps below a sender's highest that are still taken once (datagrams reordered on the way)."""


STATS = ("relay_pushes_sent", "relay_beacons_sent", "relay_control_sent", "relay_control_bytes_sent", "relay_received",
         "relay_replays_refused", "relay_unauthentic_dropped", "relay_garbage")
"""Counters each group's relay keeps (``stats``; the peer core's ``stats`` sums them): control
bytes count whole IHAVEs, GRAFTs and PRUNEs, and the ranges riding on a push."""


class GroupRelay:
    def __init__(self, identity: crypto.Identity, gid: str) -> None:
        self.identity = identity
        self.gid = gid
        self.tag = wire.relay_group_tag(gid)
        self.tree = RelayTree(gid, identity.pid)
        self.members: frozenset[str] = frozenset()
        self._keys: dict[str, tuple[bytes, bytes | None]] = {}  # pid -> (its dh, the pairwise key)
        self._refs: dict[bytes, str | None] = {}  # writer ref -> pid; None where two members share it
        self._refs_of = 0  # the number of current members the refs were made from
        self._cache: OrderedDict[MessageId, tuple[float, bytes]] = OrderedDict()
        self._cached_bytes = 0
        self._seen: dict[str, tuple[int, set[int]]] = {}  # sender -> (highest stamp, stamps in the window)
        self._stamp = 0
        self._flooded: OrderedDict[bytes, None] = OrderedDict()
        self._beacons: list[tuple[str, bytes]] = []  # (neighbour, a writer's beacon) to push
        self.stats = dict.fromkeys(STATS, 0)

    @property
    def active(self) -> bool:
        """Whether this group's messages go along the tree (else each member gets the writer's copy)."""
        return len(self.members) > RELAY_MIN_MEMBERS

    # -- who relays ---------------------------------------------------------------------
    def set_members(self, members: Iterable[str], now: float) -> None:
        """The members this peer relays with: current, up, proven at an endpoint by reach, not
        reached by multicast, and holding a direct-message key (the pairwise key comes from it)."""
        members = frozenset(members) - {self.identity.pid}
        if members != self.members:
            self.members = members
            # Below the threshold this peer writes no RELAY, but passes on what others push to it.
            self.tree.set_members(sorted(members), now)
            for pid in set(self._keys) - members:
                del self._keys[pid]
            for pid in set(self._seen) - members:
                del self._seen[pid]

    def key(self, pid: str, dh: bytes | None) -> bytes | None:
        """The pairwise key with member ``pid`` whose signed record holds ``dh`` (None: no key);
        kept for the members relayed with only."""
        if not dh or pid not in self.members:
            return None
        known = self._keys.get(pid)
        if known is not None and known[0] == dh:
            return known[1]
        key = self.identity.relay_key(self.gid, pid, dh)
        self._keys[pid] = (dh, key)
        return key

    def resolve(self, ref: bytes, current: Callable[[], Iterable[str]]) -> str | None:
        """The current member a writer ref names, if exactly one does."""
        if ref not in self._refs:
            pids = list(current())
            if len(pids) == self._refs_of:
                return None
            self._refs.clear()
            for pid in pids:
                try:
                    own = wire.writer_ref(pid)
                except wire.WireError:
                    continue
                self._refs[own] = None if own in self._refs else pid
            self._refs_of = len(pids)
        return self._refs.get(ref)

    # -- what comes in ----------------------------------------------------------------------
    def accept(self, datagram: wire.RelayDatagram, data: bytes, dh: bytes | None) -> bool:
        """Whether ``data`` is fresh and authentic from member ``datagram.sender`` (whose record
        holds ``dh``): one of the members this peer relays with (anyone else's costs a look-up),
        its tag made with the pairwise key, and its stamp not seen before."""
        key = self.key(datagram.sender, dh) if datagram.sender in self.members else None
        if key is None or not wire.relay_authentic(data, key):
            self.stats["relay_unauthentic_dropped"] += 1
            return False
        highest, window = self._seen.get(datagram.sender, (-1, set()))
        stamp = datagram.stamp
        if stamp > highest:
            window = {s for s in window if s > stamp - REPLAY_WINDOW}
            window.add(stamp)
            highest = stamp
        elif stamp <= highest - REPLAY_WINDOW or stamp in window:
            self.stats["relay_replays_refused"] += 1
            return False
        else:
            window.add(stamp)
        self._seen[datagram.sender] = (highest, window)
        return True

    def received(self, mid: MessageId, inner: bytes, sender: str, now: float) -> None:
        """A relayed datagram, verified and from a current member's hand: pushed on down the tree."""
        self.stats["relay_received"] += 1
        self._keep(mid, inner, now)
        self.tree.received(mid, sender, now)

    def publish(self, mid: MessageId, data: bytes, now: float) -> None:
        """This peer wrote the datagram ``data``, whose first message is ``mid``."""
        self._keep(mid, data, now)
        self.tree.publish(mid, now)

    def flood(self, writer: str, data: bytes, sender: str | None) -> bool:
        """``writer``'s signed beacon ``data`` (a HEARTBEAT or GOODBYE: presence, and its highest
        seqno), from neighbour ``sender`` (None: written here), passed down ``writer``'s tree once,
        best effort: beacons come again, so none is announced or pulled.  False if seen before."""
        digest = hashlib.blake2s(data, digest_size=16).digest()
        if digest in self._flooded:
            return False
        self._flooded[digest] = None
        if len(self._flooded) > MAX_FLOODED:
            self._flooded.popitem(last=False)
        if self.members:
            view = set(self.tree.view)
            self._beacons += [(pid, data) for pid in self.tree.tree(writer)[1] if pid != sender and pid in view]
        return True

    def garbage(self, sender: str, now: float) -> None:
        self.stats["relay_garbage"] += 1
        self.tree.garbage(sender, now)

    def ranges(self, ranges: wire.RelayRanges, current: Callable[[], Iterable[str]]) -> tuple:
        out = []
        for ref, first, last in ranges:
            pid = self.resolve(ref, current)
            if pid is not None:
                out.append((pid, first, last))
        return tuple(out)

    # -- what goes out ------------------------------------------------------------------------
    def datagrams(self, wall: float, endpoint_of: Callable[[str], Endpoint | None],
                  dh_of: Callable[[str], bytes | None]) -> list[tuple[bytes, Endpoint]]:
        """The tree's pushes and control, encoded and tagged, each with its neighbour's proven
        endpoint (``endpoint_of``; none: not sent) and under the key from its record's ``dh_of``."""
        out = []
        beacons, self._beacons = self._beacons, []
        items: list = [*self.tree.datagrams_to_send(), *beacons]
        for pid, item in items:
            endpoint = endpoint_of(pid)
            key = self.key(pid, dh_of(pid))
            if endpoint is None or key is None:
                continue
            ranges = tuple((wire.writer_ref(writer), first, last) for writer, first, last in getattr(item, "ranges", ()))
            self._stamp = min(wire.MAX_STAMP, max(self._stamp + 1, int(wall * 1000)))
            inner, writers = b"", cast(tuple[bytes, ...], ())
            if isinstance(item, bytes):
                kind, inner = wire.MsgType.RELAY, item
                self.stats["relay_beacons_sent"] += 1
            elif isinstance(item, Push):
                cached = self._cache.get(item.mid)
                if cached is None:
                    continue  # given way: the group's repair finds it
                kind, inner = wire.MsgType.RELAY, cached[1]
                self.stats["relay_pushes_sent"] += 1
            elif isinstance(item, Prune):
                kind, writers = wire.MsgType.PRUNE, tuple(wire.writer_ref(w) for w in item.writers)
            else:
                kind = wire.MsgType.IHAVE if isinstance(item, IHave) else wire.MsgType.GRAFT
            data = wire.encode_relay(key, kind, self.identity.pid, self.gid, self._stamp, ranges=ranges,
                                     writers=writers, inner=inner)
            if kind is not wire.MsgType.RELAY:
                self.stats["relay_control_sent"] += 1
                self.stats["relay_control_bytes_sent"] += len(data)
            else:  # what rides on a push: its ranges
                self.stats["relay_control_bytes_sent"] += len(data) - len(inner) - wire.RELAY_OVERHEAD - 1
            out.append((data, endpoint))
        return out

    def get_timer(self) -> float | None:
        return self.tree.get_timer()

    def handle_timer(self, now: float) -> None:
        self.tree.handle_timer(now)
        while self._cache and next(iter(self._cache.values()))[0] < now - CACHE_FOR:
            self._drop_oldest()

    def _keep(self, mid: MessageId, data: bytes, now: float) -> None:
        if mid in self._cache:
            return
        self._cache[mid] = (now, data)
        self._cached_bytes += len(data)
        while self._cached_bytes > MAX_CACHED_BYTES:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        _, (_, data) = self._cache.popitem(last=False)
        self._cached_bytes -= len(data)


__all__ = ["GroupRelay", "RELAY_MIN_MEMBERS", "Graft", "IHave", "Prune", "Push"]
