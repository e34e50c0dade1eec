"""Reach: which peers this one can get datagrams to, and by which path, where multicast may not flow.

A peer heard by multicast is reached by multicast.  A peer that is not, or that says
this peer's multicast does not reach it (HELLO's ``unheard``, repeated every
:data:`REPORT_INTERVAL` to every proven peer not heard by multicast), gets unicast
copies of what this peer sends to the control channel and to the groups they share
(:class:`~middleware.peer_core.PeerCore` adds them), provided its unicast endpoint has
proven itself.  Filtering that works one way only is so covered as well.

Endpoints come from invites, the user, the peer cache, broadcast announcements and
peer exchange.  None is believed until the handshake: this peer sends HELLO(nonce)
there; the other answers, from that endpoint, with a signed HELLO that echoes the nonce
(and carries a nonce of its own, which this peer echoes back).  Only an echoed nonce
proves that the signer is at the endpoint.  Until then an endpoint gets nothing but
HELLOs, at most :data:`HELLO_BUDGET` per :data:`HELLO_WINDOW`, and one address at most
:data:`HOST_HELLO_BUDGET` whatever its ports, so a forged source address can aim about
700 bytes a minute at its victim through an endpoint heard by broadcast or multicast.  Twice
that (:data:`SOUGHT_BUDGET_FACTOR`, :meth:`Reach._factor`) where a handshake has only these
HELLOs to succeed with: where direct messages wait for a member and the endpoint is where its
signed multicast comes from (:meth:`Reach.seek`), for an endpoint the user chose (an invite's,
or one added by hand), one that said HELLO first, one a proven peer listed and one the peer
cache remembers.  A HELLO with a forged source is of the inbound kind, so a forged source can
aim about 1,650 bytes a minute at its victim through each peer that hears it, and no more.

Against a hostile LAN (issue 41, rows 1 and 10–13):

* Where a peer is reached moves only on fresh evidence (:meth:`Reach.heard`'s ``fresh``: the
  peer core says whether a datagram said something new, a message never seen or a beacon whose
  signed time is newer than the last): a replayed datagram, from wherever it comes, moves
  neither the address a member's multicast comes from nor when it was last heard.
* Members come first: the unicast copies go to every member that needs them before any
  stranger, and strangers get at most :data:`MAX_STRANGER_COPIES`; a full table of proven peers
  gives way by a stranger's row first (the peer core's cache does the same).
* One hint source (the proven peer whose PEER_LIST named the endpoints) causes at most
  :data:`HINT_HELLO_BUDGET` HELLOs per :data:`HELLO_WINDOW` in all, and all sources that share
  no group at most :data:`STRANGER_HINT_HELLO_BUDGET` together; one holds at most
  :data:`HINT_CANDIDATES` places in the probe table, and a stranger's hint gives way first when
  it is full; a hint that proves true gives its HELLO back.
* No hint, however it came, names a broadcast, multicast, network or unspecified address
  (:func:`hint_refused`, with the networks of this peer's interfaces in :attr:`Reach.networks`).

No I/O and no clock: datagrams, ``now`` and ``wall`` go in; HELLOs, events and a
deadline come out.
"""

from __future__ import annotations

import ipaddress
import random
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from . import wire
from .addresses import Endpoint, Via

# How a peer's endpoint was first learnt (the `peers` call shows it); "inbound": it said HELLO first.
FOUND_BY = ("multicast", "broadcast", "cache", "invite", "exchange", "manual", "inbound")

HELLO_BUDGET = 3  # HELLOs to one unproven endpoint per window
HOST_HELLO_BUDGET = 4  # HELLOs to all unproven endpoints of one address per window (twice this: the reflection bound)
HELLO_WINDOW = 60.0
HELLOS_PER_SECOND = 50  # all HELLOs to unproven endpoints together
PROBE_RETRY = 1.0  # a probe unanswered is sent again after 1 s, then 2 s (HELLO_BUDGET in all)
# Both budgets are this many times larger where a lost HELLO would otherwise hold up a join, a
# pair of members or a conversation for the window (Reach._factor): where direct messages wait for
# a member (Reach.seek) and the endpoint probed is the one its signed multicast comes from, and
# for endpoints from an invite, the user, the other side's HELLO, peer exchange or the cache.
SOUGHT_BUDGET_FACTOR = 2
# A peer not heard by multicast for this long is reached by unicast: more than two of the
# presence beacons (30 s) that every member sends to every group, so one lost beacon is no switch.
MULTICAST_FRESH = 65.0
# A broadcast announcement is probed only if the same peer's multicast has not arrived
# within this time: where multicast flows, the two come together and nothing is probed.
BROADCAST_GRACE = 1.0
REPORT_INTERVAL = 20.0  # "your multicast does not reach me", to each proven peer it concerns
# A newly proven peer's exchange is sent again once this much later: a lost PEER_LIST would
# otherwise wait for the next report (REPORT_AFTER), and peers behind a router would wait that
# long to hear of each other.
RELIST_AFTER = 2.0
# A peer proven this recently is not yet said to be unheard: an idle peer sends multicast only
# with its presence beacons (every 30 s), so silence says nothing before one has had its turn.
REPORT_AFTER = 35.0
CACHE_PROBE_INTERVAL = 60.0
CACHE_EXPIRY = 31 * 24 * 3600.0
MAX_ENDPOINTS = 256  # endpoints being probed; the oldest gives way (a stranger's flood costs only probes)
MAX_PEERS = 1024  # proven peers; the least recently heard gives way
MAX_UNICAST_COPIES = 64  # peers one datagram is copied to by unicast; members first, then the most recently heard
# Of those, at most this many strangers (proven peers sharing no group): they only learn of groups
# by them, and a stranger's fresh keys cost nothing, so they never take a member's place.
MAX_STRANGER_COPIES = 8
# HELLOs that the entries of one hint source (the proven peer whose PEER_LIST named them) may cause
# per HELLO_WINDOW, whatever the addresses: 16 HELLOs of about 206 bytes with headers, 3.3 KB a
# minute.  A hint that proves true gives its HELLO back, so a true list is worked through in turn.
HINT_HELLO_BUDGET = 16
HINT_CANDIDATES = 64  # places in the probe table one hint source's entries may hold (one PEER_LIST's)
# The same for all hint sources that share no group with this peer, together: a key costs nothing,
# so what many strangers' lists cause is bounded in all (64 HELLOs, about 13 KB, a minute).
STRANGER_HINT_HELLO_BUDGET = 4 * HINT_HELLO_BUDGET


def hint_refused(host: str, networks: Iterable[ipaddress.IPv4Network] = ()) -> bool:
    """Whether ``host`` may never be probed: it is not one host's unicast address.  Multicast,
    limited broadcast, unspecified and reserved (240/4) addresses are refused by themselves; the
    network and broadcast addresses of ``networks`` (this peer's interfaces' subnets, where the
    netmask is known) too, since a HELLO there would reach every host of the subnet."""
    try:
        address = ipaddress.IPv4Address(host)
    except ValueError:
        return True
    if address.is_multicast or address.is_unspecified or address.is_reserved or address.packed[0] == 0:
        return True  # (240/4 holds 255.255.255.255; 0/8 means "this network")
    for network in networks:
        if network.prefixlen < 31 and address in network and address in (network.network_address,
                                                                         network.broadcast_address):
            return True
    return False


@dataclass(slots=True)
class Candidate:
    """An endpoint being probed: it has not proven who is there yet."""

    endpoint: Endpoint
    found_by: str
    pid: str | None  # who it is said to be (by the cache or a broadcast); None from an invite or the user
    probe_at: float | None  # the next HELLO; None once the budget is spent
    nonces: list[bytes] = field(default_factory=list)  # of the HELLOs sent within the window: any may come back
    sent: list[float] = field(default_factory=list)  # HELLOs sent there within the window
    hint: str | None = None  # the proven peer whose PEER_LIST named it: its HELLOs count against that one's budget


@dataclass(slots=True)
class ReachedPeer:
    """A peer whose endpoint has proven itself, and how it is heard."""

    pid: str
    name: str
    endpoint: Endpoint
    found_by: str
    proven_at: float
    last_heard: float
    unheard_until: float | None = None  # it said our multicast does not reach it; believed until then
    # Its latest HELLO nonce, echoed by this peer: direct messages carry it too (sealed), so the
    # handshake completes with whichever datagram gets through (``Reach.echo_for``).
    echo: bytes = b""
    answers: list[float] = field(default_factory=list)  # HELLOs answered within the window


@dataclass(frozen=True, slots=True)
class PeerReached:
    """``pid`` proved that it is at ``endpoint``: the peer core advertises to it and caches it."""

    pid: str
    endpoint: Endpoint
    found_by: str


class Reach:
    def __init__(self, pid: str, name: str, rng: random.Random | None = None,
                 is_member: Callable[[str], bool] | None = None) -> None:
        """``is_member(pid)``: whether ``pid`` shares a group with this peer (members come first;
        without it every peer counts as one, as where no membership is known)."""
        self.pid = pid
        self.name = name
        self.own: set[Endpoint] = set()  # this peer's endpoints, as the transport bound them
        self.is_member: Callable[[str], bool] = is_member or (lambda pid: True)
        # The networks of this peer's interfaces (the manager sets them from netif): their
        # network and broadcast addresses are never probed (hint_refused).
        self.networks: set[ipaddress.IPv4Network] = set()
        self._rng = rng or random.Random()
        self._candidates: OrderedDict[Endpoint, Candidate] = OrderedDict()  # oldest first
        self._peers: OrderedDict[str, ReachedPeer] = OrderedDict()  # least recently heard first
        self._by_endpoint: dict[Endpoint, str] = {}
        self._multicast_heard: OrderedDict[str, float] = OrderedDict()  # least recently heard first
        # Where each peer heard by multicast sends from: its endpoint, unproven (a source can be
        # forged), passed on in peer exchange as a hint for peers that multicast does not join.
        self._multicast_source: dict[str, Endpoint] = {}
        self._outbox: list[tuple[wire.Hello | wire.PeerList, Endpoint]] = []
        self._events: list[PeerReached] = []
        self._hellos_this_second: tuple[float, int] = (0.0, 0)
        self._host_hellos: OrderedDict[str, list[float]] = OrderedDict()  # per address, within the window
        self._cache_probe_at: float | None = None
        # Peers that direct messages wait for: where their multicast comes from is probed even
        # though multicast reaches them (direct messages go only to a proven endpoint).
        self._sought: OrderedDict[str, None] = OrderedDict()
        self._report_at: float | None = 0.0
        self._relist: dict[str, float] = {}  # newly proven pid -> when its exchange goes again
        self._hint_hellos: OrderedDict[str, list[float]] = OrderedDict()  # per hint source, within the window
        self._stranger_hint_hellos: list[float] = []  # of all hint sources sharing no group, within the window
        self.hellos_refused = 0  # HELLOs not sent: the endpoint's budget or the global rate was spent
        self.hints_refused = 0  # endpoints never probed: a broadcast, multicast, network or unspecified address
        self.candidates_evicted = 0
        self.peer_lists_ignored = 0  # from peers not proven, or not from their endpoint

    # -- what the peer core tells it ----------------------------------------------------

    def add(self, endpoint: Endpoint, found_by: str, now: float, pid: str | None = None,
            delay: float = 0.0, hint: str | None = None) -> None:
        """A place where a peer may be: probe it (after ``delay``) unless it is already proven.
        ``hint``: the proven peer whose PEER_LIST named it (its HELLOs share that one's budget)."""
        assert found_by in FOUND_BY, found_by
        if endpoint in self.own or pid == self.pid or endpoint in self._by_endpoint:
            return
        if hint_refused(endpoint.host, self.networks):
            self.hints_refused += 1
            return
        candidate = self._candidates.get(endpoint)
        if candidate is not None:
            if candidate.probe_at is None and not self._spent(candidate, now):
                candidate.probe_at = now + delay
            return
        if hint is not None:
            held = [c for c in self._candidates.values() if c.hint == hint]
            if len(held) >= HINT_CANDIDATES:  # one source's hints give way to each other, not to the rest
                del self._candidates[held[0].endpoint]
                self.candidates_evicted += 1
        if len(self._candidates) >= MAX_ENDPOINTS:
            # A stranger's hint gives way first (the oldest), so no list of theirs pushes out an
            # invite's, the cache's or a member's; then the oldest.
            victim = next((c.endpoint for c in self._candidates.values()
                           if c.hint is not None and not self.is_member(c.hint)), next(iter(self._candidates)))
            del self._candidates[victim]
            self.candidates_evicted += 1
        self._candidates[endpoint] = Candidate(endpoint, found_by, pid, now + delay, hint=hint)

    def probe_soon(self, endpoint: Endpoint, pid: str, now: float) -> None:
        """``pid`` sends to this peer from ``endpoint`` by unicast, so it has proven this peer's
        endpoint, while this peer has not proven its (the echo of a HELLO was lost): probe it now,
        within the budgets, rather than after the back-off of its retries (up to 16 s); at most one
        HELLO a :data:`PROBE_RETRY`, however often it sends."""
        self.add(endpoint, "inbound", now, pid)
        candidate = self._candidates.get(endpoint)
        if candidate is not None and not self._spent(candidate, now) and not (
                candidate.sent and now - candidate.sent[-1] < PROBE_RETRY):
            candidate.probe_at = now

    def add_cached(self, cached: list[tuple[str, Endpoint, float]], now: float, wall: float) -> None:
        """The peer cache at start: ``(pid, endpoint, last seen wall time)``; expired ones are
        skipped, and members are probed first (the HELLO rate is shared)."""
        for pid, endpoint, seen in sorted(cached, key=lambda row: not self.is_member(row[0])):
            if wall - seen <= CACHE_EXPIRY:
                self.add(endpoint, "cache", now, pid)
        self._cache_probe_at = now + CACHE_PROBE_INTERVAL

    def heard(self, pid: str, source: Endpoint | None, via: Via, now: float, fresh: bool = True) -> None:
        """A verified datagram from ``pid`` that came ``via`` multicast (to a group's address or the
        control address), broadcast or unicast.

        ``fresh``: it said something new (a message never seen, a beacon signed later than the
        last one).  A signature proves who wrote a datagram, not who sent it or when: a replay,
        from the attacker's own address or a forged one, moves nothing here (where ``pid``'s
        multicast comes from, whether it is heard by multicast, when it was last heard)."""
        if not fresh:
            return
        if via in (Via.MULTICAST, Via.CONTROL):
            heard = self._multicast_heard
            heard[pid] = now
            heard.move_to_end(pid)
            if source is not None:
                self._multicast_source[pid] = source
            if len(heard) > 4 * MAX_PEERS:
                self._multicast_source.pop(heard.popitem(last=False)[0], None)
        peer = self._peers.get(pid)
        if peer is None:
            return
        peer.last_heard = now
        self._peers.move_to_end(pid)

    def hello(self, sender: str, hello: wire.Hello, source: Endpoint, now: float) -> bool:
        """A HELLO from ``source``, signed by ``sender``.  Returns whether it echoed a nonce of ours
        (its endpoint is proven now): fresh evidence that ``sender`` is there, which no replay is."""
        if sender == self.pid:
            return False
        candidate = self._candidates.get(source)
        peer = self._peers.get(sender)
        echoed = bool(hello.echo and candidate is not None and hello.echo in candidate.nonces)
        if echoed and candidate is not None and candidate.pid in (None, sender):
            del self._candidates[source]
            hint = candidate.hint
            hint_sent = self._hint_hellos.get(hint) if hint is not None else None
            if hint is not None and hint_sent:
                hint_sent.pop()  # a true hint: its HELLO goes back to its source's budget
                if not self.is_member(hint) and self._stranger_hint_hellos:
                    self._stranger_hint_hellos.pop()
            peer = self._prove(sender, hello.name, source, candidate.found_by, now)
        if peer is not None and peer.endpoint == source:
            peer.unheard_until = now + 2.5 * REPORT_INTERVAL if hello.unheard else None
        proven = echoed and peer is not None and peer.endpoint == source
        if not hello.nonce:
            return proven
        if peer is not None and peer.endpoint == source:  # proven: answer, but not faster than budgeted
            peer.echo = hello.nonce
            peer.answers = [at for at in peer.answers if at > now - HELLO_WINDOW]
            if len(peer.answers) < 4 * HELLO_BUDGET:
                peer.answers.append(now)
                self._outbox.append((wire.Hello(b"", hello.nonce, self.name, self._reports_unheard(peer, now)),
                                     source))
            else:
                self.hellos_refused += 1
            return proven
        # Unproven: answer with an echo and a nonce of ours, within the endpoint's budget.
        if candidate is None:
            self.add(source, "inbound", now, sender)
            candidate = self._candidates.get(source)
            if candidate is None:
                return proven
            candidate.probe_at = None  # this answer is its probe
        self._send_hello(candidate, now, echo=hello.nonce)
        return proven

    def moved(self, old: Endpoint | None, new: Endpoint, now: float) -> None:
        """This peer's endpoint moved from ``old`` to ``new`` (a new address, another interface):
        one HELLO from there to every proven peer, which answers with a nonce of its own and,
        once this peer echoes it, proves the new endpoint as it proves any (:meth:`hello`).
        Nothing but these HELLOs is sent on the move, and only to endpoints proven already."""
        if old is not None:
            self.own.discard(old)
        self.own.add(new)
        for peer in self._peers.values():
            self._outbox.append((wire.Hello(self._rng.randbytes(wire.NONCE_BYTES), b"", self.name), peer.endpoint))

    def seek(self, pid: str, now: float) -> None:
        """Direct messages wait for ``pid``: probe the endpoint its multicast comes from, unless
        that is its proven endpoint already (at most :data:`MAX_ENDPOINTS` peers are sought)."""
        self._sought[pid] = None
        self._sought.move_to_end(pid)
        if len(self._sought) > MAX_ENDPOINTS:
            self._sought.popitem(last=False)
        source = self._multicast_source.get(pid)
        peer = self._peers.get(pid)
        if source is not None and (peer is None or peer.endpoint != source):
            self.add(source, "multicast", now, pid)

    # -- what it tells the peer core ----------------------------------------------------

    def pid_at(self, endpoint: Endpoint) -> str | None:
        """Whose proven endpoint ``endpoint`` is, if anyone's (a datagram's source can be forged:
        this says where a peer proved to be, not who sent a datagram)."""
        return self._by_endpoint.get(endpoint)

    def endpoint(self, pid: str) -> Endpoint | None:
        """Where ``pid`` has proven to be, if anywhere."""
        peer = self._peers.get(pid)
        return None if peer is None else peer.endpoint

    def echo_for(self, pid: str) -> bytes:
        """The latest HELLO nonce proven ``pid`` asked this peer to echo (b"" if none): a sealed
        datagram to ``pid`` may carry it, so that ``pid`` proves this peer's endpoint by it
        should the HELLO that echoed it be lost (see :meth:`hello`, which takes it as an echo)."""
        peer = self._peers.get(pid)
        return b"" if peer is None else peer.echo

    def unicast_peers(self, now: float) -> list[tuple[str, Endpoint]]:
        """Proven peers not heard by multicast lately (at most :data:`MAX_UNICAST_COPIES`): what
        goes to multicast goes to these by unicast too.  Members first, most recently heard
        first; then strangers, at most :data:`MAX_STRANGER_COPIES`, so however many keys a
        stranger proves, no member's copy is left out for them."""
        members: list[tuple[str, Endpoint]] = []
        strangers: list[tuple[str, Endpoint]] = []
        for peer in reversed(self._peers.values()):
            if self._gets_copies(peer, now):
                if self.is_member(peer.pid):
                    members.append((peer.pid, peer.endpoint))
                    if len(members) == MAX_UNICAST_COPIES:
                        break
                elif len(strangers) < MAX_STRANGER_COPIES:
                    strangers.append((peer.pid, peer.endpoint))
        return (members + strangers)[:MAX_UNICAST_COPIES]

    def unicast_members(self, now: float) -> list[str]:
        """Every proven member that gets unicast copies (:meth:`unicast_peers` without its cap):
        the members a group's relay tree is made of, where copies no longer go one from each writer."""
        return [peer.pid for peer in self._peers.values() if self._gets_copies(peer, now) and self.is_member(peer.pid)]

    def heard_by_multicast(self, pid: str, now: float) -> bool:
        """Whether ``pid``'s multicast has reached this peer lately."""
        return not self._unheard(pid, now)

    def last_heard(self, pid: str) -> float | None:
        """When proven ``pid`` last proved itself or said something fresh (None: not proven)."""
        peer = self._peers.get(pid)
        return None if peer is None else peer.last_heard

    def path(self, pid: str, now: float) -> str | None:
        """"unicast" for a proven peer that gets unicast copies, "multicast" for one heard by
        multicast, else None (this peer does not know how to reach it)."""
        peer = self._peers.get(pid)
        if peer is not None and self._gets_copies(peer, now):
            return "unicast"
        return None if self._unheard(pid, now) else "multicast"

    def address_of(self, pid: str, now: float) -> Endpoint | None:
        """Where ``pid`` is reached by unicast: its proven endpoint, else where its latest fresh
        multicast came from (unproven, but only a datagram that said something new moves it, so a
        replay cannot point it elsewhere; whoever connects there must prove it is ``pid``, as
        files do)."""
        peer = self._peers.get(pid)
        if peer is not None:
            return peer.endpoint
        return self._multicast_source.get(pid)

    def peers(self, now: float) -> list[dict]:
        """Every peer known by endpoint or heard by multicast, for the ``peers`` call."""
        rows: dict[str, dict[str, Any]] = {}
        for pid, at in self._multicast_heard.items():
            if now - at <= MULTICAST_FRESH:
                rows[pid] = {"pid": pid, "name": "", "endpoints": [], "found_by": "multicast",
                             "reached_by": "multicast", "last_heard": at}
        for peer in self._peers.values():
            row = rows.setdefault(peer.pid, {"pid": peer.pid})
            row.update(name=peer.name, endpoints=[str(peer.endpoint)], found_by=peer.found_by,
                       reached_by=self.path(peer.pid, now), last_heard=max(peer.last_heard,
                                                                            row.get("last_heard", 0.0)))
        return list(rows.values())

    def peer_list(self, sender: str, peer_list: wire.PeerList, source: Endpoint, now: float) -> None:
        """Peer exchange: taken only from a proven peer, at its endpoint; each entry is probed."""
        peer = self._peers.get(sender)
        if peer is None or peer.endpoint != source:
            self.peer_lists_ignored += 1
            return
        for pid, host, port in peer_list.peers:
            endpoint = Endpoint(host, port)
            known = self._peers.get(pid)
            if pid != self.pid and (known is None or known.endpoint != endpoint):
                self.add(endpoint, "exchange", now, pid, hint=sender)

    def datagrams_to_send(self) -> list[tuple[wire.Hello | wire.PeerList, Endpoint]]:
        outbox, self._outbox = self._outbox, []
        return outbox

    def events(self) -> list[PeerReached]:
        events, self._events = self._events, []
        return events

    def get_timer(self) -> float | None:
        deadlines = [c.probe_at for c in self._candidates.values() if c.probe_at is not None]
        if self._cache_probe_at is not None:
            deadlines.append(self._cache_probe_at)
        if self._report_at is not None and self._peers:
            deadlines.append(self._report_at)
        deadlines.extend(self._relist.values())
        return min(deadlines) if deadlines else None

    def handle_timer(self, now: float, cached: list[tuple[str, Endpoint, float]] | None = None,
                     wall: float | None = None) -> None:
        """Send the probes that are due; every :data:`CACHE_PROBE_INTERVAL`, probe the cached
        peers not heard lately (``cached``: the store's cache, asked for only then)."""
        for candidate in list(self._candidates.values()):
            if candidate.probe_at is None or candidate.probe_at > now:
                continue
            if candidate.pid is not None and not self._unheard(candidate.pid, now) and candidate.pid not in self._sought:
                del self._candidates[candidate.endpoint]  # multicast reaches it: nothing to probe
                continue
            self._send_hello(candidate, now)
        for pid, due in list(self._relist.items()):
            if due <= now:
                del self._relist[pid]
                peer = self._peers.get(pid)
                if peer is not None:
                    self._exchange(peer, now)  # once more: a lost PEER_LIST is not asked for
        if self._report_at is not None and now >= self._report_at and self._peers:
            self._report_at = now + REPORT_INTERVAL
            for peer in list(self._peers.values()):
                if self._unheard(peer.pid, now) and now - peer.proven_at >= REPORT_AFTER:
                    self._outbox.append((wire.Hello(b"", b"", self.name, True), peer.endpoint))
                    self._send_peer_list(peer.pid, peer.endpoint, now)  # again: a lost one is not asked for
        if self._cache_probe_at is not None and now >= self._cache_probe_at:
            self._cache_probe_at = now + CACHE_PROBE_INTERVAL
            for pid, endpoint, seen in cached or []:
                if wall is not None and wall - seen > CACHE_EXPIRY:
                    continue
                known = self._peers.get(pid)
                if known is None or now - known.last_heard > MULTICAST_FRESH:
                    if known is not None and known.endpoint == endpoint:
                        self._forget(pid)  # silent: prove it again
                    self.add(endpoint, "cache", now, pid)

    def cache_probe_due(self, now: float) -> bool:
        return self._cache_probe_at is not None and now >= self._cache_probe_at

    # -- internals ----------------------------------------------------------------------

    def _gets_copies(self, peer: ReachedPeer, now: float) -> bool:
        """Whether what goes to multicast goes to ``peer`` by unicast too: its multicast does not
        reach this peer, or it said this peer's does not reach it."""
        return self._unheard(peer.pid, now) or peer.unheard_until is not None and peer.unheard_until > now

    def _reports_unheard(self, peer: ReachedPeer, now: float) -> bool:
        return self._unheard(peer.pid, now) and now - peer.proven_at >= REPORT_AFTER

    def _unheard(self, pid: str, now: float) -> bool:
        """Whether ``pid``'s multicast has not reached this peer lately."""
        return now - self._multicast_heard.get(pid, -1e18) > MULTICAST_FRESH

    def _factor(self, candidate: Candidate) -> int:
        """How many times the usual budgets ``candidate`` gets (see :data:`SOUGHT_BUDGET_FACTOR`): an
        endpoint the user chose (an invite's, one added by hand) is worth the same retries, since a
        join by invite waits for it (three HELLOs at 10 % loss each way failed one join in twenty).
        So are one that said HELLO first (inbound), one a proven peer listed (exchange) and one
        remembered (cache): each side answers the other's HELLOs out of its own budget, and a side
        that has proven the other says HELLO no more, so with three each a lost datagram or two left
        a pair unproven for the window where multicast does not flow.  At 10 % loss on a simulated
        LAN with no multicast, invite chains (Bob by Ann's invite, Cat by Bob's) lost a join or a
        message for 60 s in 9 of 600 runs, and after all three restarted in 11 of 200 more; none
        with six (tests/core/test_reach.py, the invite chain).  A forged HELLO is of the inbound
        kind, so a forged source gets six HELLOs a minute aimed at an endpoint, eight at an address.
        Endpoints heard by broadcast or multicast keep three: where multicast flows no handshake
        waits on them, and a broadcast's source is as easily forged."""
        pid = candidate.pid
        sought = pid is not None and pid in self._sought and self._multicast_source.get(pid) == candidate.endpoint
        return SOUGHT_BUDGET_FACTOR if sought or candidate.found_by not in ("multicast", "broadcast") else 1

    def _spent(self, candidate: Candidate, now: float) -> bool:
        candidate.sent = [at for at in candidate.sent if at > now - HELLO_WINDOW]
        return len(candidate.sent) >= HELLO_BUDGET * self._factor(candidate)

    def _host_spent(self, host: str, now: float, factor: int = 1) -> bool:
        sent = self._host_hellos.get(host)
        if sent is None:
            return False
        sent[:] = [at for at in sent if at > now - HELLO_WINDOW]
        return len(sent) >= HOST_HELLO_BUDGET * factor

    def _send_hello(self, candidate: Candidate, now: float, echo: bytes = b"") -> None:
        second, count = self._hellos_this_second
        if now - second >= 1.0:
            second, count = now, 0
        host = candidate.endpoint.host
        factor = self._factor(candidate)
        # The global rate never holds up a member's handshake (its pid, from the cache, its own HELLO
        # or a proven peer's list, shares a group): a stranger's hundreds of cached or listed keys
        # would otherwise delay it by the back-off (rows 10 and 12 of issue 41).
        rated = count >= HELLOS_PER_SECOND and not (candidate.pid is not None and self.is_member(candidate.pid))
        if self._spent(candidate, now) or self._host_spent(host, now, factor) or rated:
            self.hellos_refused += 1
            candidate.probe_at = None if self._spent(candidate, now) else now + PROBE_RETRY
            return
        hint_sent = None
        if candidate.hint is not None:
            hint_sent = self._hint_hellos.setdefault(candidate.hint, [])
            hint_sent[:] = [at for at in hint_sent if at > now - HELLO_WINDOW]
            if len(hint_sent) >= HINT_HELLO_BUDGET:  # its source's budget is spent: try when it frees
                self.hellos_refused += 1
                candidate.probe_at = hint_sent[0] + HELLO_WINDOW
                return
            if not self.is_member(candidate.hint):
                shared = self._stranger_hint_hellos
                shared[:] = [at for at in shared if at > now - HELLO_WINDOW]
                if len(shared) >= STRANGER_HINT_HELLO_BUDGET:  # strangers' lists together: spent
                    self.hellos_refused += 1
                    candidate.probe_at = shared[0] + HELLO_WINDOW
                    return
                shared.append(now)
            hint_sent.append(now)
            self._hint_hellos.move_to_end(candidate.hint)
            if len(self._hint_hellos) > MAX_PEERS:
                self._hint_hellos.popitem(last=False)
        self._hellos_this_second = (second, count + 1)
        self._host_hellos.setdefault(host, []).append(now)
        self._host_hellos.move_to_end(host)
        if len(self._host_hellos) > HELLOS_PER_SECOND * HELLO_WINDOW:  # so the oldest's window has passed
            self._host_hellos.popitem(last=False)
        nonce = self._rng.randbytes(wire.NONCE_BYTES)
        candidate.nonces = [*candidate.nonces[-(HELLO_BUDGET * factor - 1):], nonce]
        candidate.sent.append(now)
        tries = len(candidate.sent)
        candidate.probe_at = now + PROBE_RETRY * 2 ** (tries - 1) if tries < HELLO_BUDGET * factor else None
        self._outbox.append((wire.Hello(nonce, echo, self.name), candidate.endpoint))

    def _prove(self, pid: str, name: str, endpoint: Endpoint, found_by: str, now: float) -> ReachedPeer:
        old = self._peers.get(pid)
        if old is not None:
            self._by_endpoint.pop(old.endpoint, None)
            found_by = old.found_by if old.endpoint == endpoint else found_by
        elif len(self._peers) >= MAX_PEERS:
            # The least recently heard stranger gives way; a member only when no stranger is left.
            self._forget(next((p for p in self._peers if not self.is_member(p)), next(iter(self._peers))))
        peer = ReachedPeer(pid, name, endpoint, found_by, now, now)
        self._peers[pid] = peer
        self._peers.move_to_end(pid)
        self._by_endpoint[endpoint] = pid
        self._events.append(PeerReached(pid, endpoint, found_by))
        self._exchange(peer, now)
        if old is None or old.endpoint != endpoint:
            self._relist[pid] = now + RELIST_AFTER
        return peer

    def _exchange(self, peer: ReachedPeer, now: float) -> None:
        """Peer exchange, between peers that multicast does not join: the newcomer learns the
        peers proven here and those heard here by multicast (a neighbour of this peer's, told, then
        proves itself to the newcomer), and the proven ones that multicast does not join learn of it."""
        if self._unheard(peer.pid, now):
            self._send_peer_list(peer.pid, peer.endpoint, now)
        entry = wire.PeerList(((peer.pid, peer.endpoint.host, peer.endpoint.port),))
        for other in [p for p in reversed(self._peers.values()) if p.pid != peer.pid][:wire.MAX_PEER_LIST]:
            if self._unheard(other.pid, now):
                self._outbox.append((entry, other.endpoint))

    def _send_peer_list(self, pid: str, endpoint: Endpoint, now: float) -> None:
        """To ``pid``, which multicast does not join to this peer: the peers proven here, and
        where those heard here by multicast send from (the most recent first)."""
        entries = {p.pid: p.endpoint for p in reversed(self._peers.values()) if p.pid != pid}
        for heard_pid in reversed(self._multicast_heard):
            if len(entries) >= wire.MAX_PEER_LIST or now - self._multicast_heard[heard_pid] > MULTICAST_FRESH:
                break
            source = self._multicast_source.get(heard_pid)
            if source is not None and heard_pid != pid:
                entries.setdefault(heard_pid, source)
        if entries:
            rows = tuple((p, e.host, e.port) for p, e in list(entries.items())[:wire.MAX_PEER_LIST])
            self._outbox.append((wire.PeerList(rows), endpoint))

    def _forget(self, pid: str) -> None:
        self._relist.pop(pid, None)
        peer = self._peers.pop(pid, None)
        if peer is not None:
            self._by_endpoint.pop(peer.endpoint, None)
