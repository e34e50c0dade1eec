"""Where each datagram a peer sends goes: a message and its scope in, destinations out.

Pure functions over values (no I/O, no clock, no state): the peer core (:mod:`middleware.peer_core`)
gathers what reach and the groups know into a scope, asks here for each message's route, and stages
the datagrams.  The fan-out rules, in one place:

* **Control messages** (ADV, GROUPS_INFO, JOIN, LEAVE) go to the control multicast address and, as a
  unicast copy, to every proven peer that multicast does not reach; an announcement (an ADV naming
  no group) also goes to the subnet's broadcast address.
* **A group's messages** go to the group's multicast address and, as unicast copies, to its members
  that multicast does not reach, except that once the group's relay tree is active
  (:mod:`middleware.relay_link`), what the tree carries (chat batches and beacons) goes to the
  tree's members along the tree instead of one copy from every writer.
* **Site relays**: while some of a group's members are heard by multicast (this peer's site) and
  others only by unicast, one or two members of each site carry its traffic across
  (:func:`site_relays`, :func:`site_targets`) and the others send nothing across.
* **The relay tree's members**: the proven current members multicast does not reach, heard lately,
  with a direct-message key; none while any member's multicast reaches this peer (see
  :func:`relay_members`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Collection, Iterable, Sequence

from . import wire
from .addresses import Broadcast, Destination, Endpoint, GroupAddress

RELAYED = (wire.DataBatch, wire.Heartbeat, wire.Goodbye)
"""What a group's relay tree carries: chat, pushed and announced; beacons, passed down once."""

SITE_RELAYS = 2
"""Members per site that carry a group's traffic to the other site: two, so one that leaves or
crashes loses nothing while it is replaced."""


@dataclass(frozen=True, slots=True)
class Route:
    """Where one datagram goes: its destinations (the multicast address first), how many of them
    are unicast copies, and whether the group's relay tree takes it too."""

    destinations: tuple[Destination, ...]
    copies: int = 0
    tree: bool = False
    across: tuple[Endpoint, ...] = ()
    """Other sites' relays, which get it as a site relay's copy (:func:`.wire.encode_site`)."""


@dataclass(frozen=True, slots=True)
class GroupScope:
    """What routing needs to know of one joined group for one flush.

    ``copies``: the endpoints of its members multicast does not reach, each of which gets a
    unicast copy of everything; ``tree_copies``: of those, the ones outside an active relay tree,
    which still get copies of what the tree carries; ``tree``: whether the tree is active;
    ``site``: whether this peer hears some of the group's members by multicast, its site (then
    ``across`` are where it sends a site relay's copy of what the site says: the other site's relay
    paired with it, and the members of its own site that do not hear its multicast, ``deaf``, which
    also get what comes from across; all none unless it is one of its site's relays)."""

    address: GroupAddress
    copies: tuple[Endpoint, ...] = ()
    tree_copies: tuple[Endpoint, ...] = ()
    tree: bool = False
    site: bool = False
    across: tuple[Endpoint, ...] = ()
    deaf: tuple[Endpoint, ...] = ()


def is_announcement(message: wire.Message) -> bool:
    """An ADV that names no group: this peer saying it is here, which the subnet hears too."""
    return type(message) is wire.Adv and not message.gids


def control_route(message: wire.Message, control_group: GroupAddress, unicast: Sequence[Endpoint],
                  port: int) -> Route:
    """A control message: the control address, a copy to each peer multicast does not reach
    (``unicast``), and the subnet's broadcast for an announcement."""
    destinations: tuple[Destination, ...] = (control_group, *unicast)
    if is_announcement(message):
        destinations += (Broadcast(port),)
    return Route(destinations, len(unicast))


def beacon_route(unicast: Sequence[Endpoint], port: int) -> Route:
    """The periodic announcement to the subnet, and to the peers multicast does not reach."""
    return Route((Broadcast(port), *unicast))


def group_scope(address: GroupAddress, unicast: Iterable[tuple[str, Endpoint]], is_current: Callable[[str], bool],
                tree_members: Collection[str] | None = None) -> GroupScope:
    """A group's scope: ``unicast`` are the proven peers multicast does not reach (pid, endpoint),
    of which the group's current members get copies; ``tree_members`` are those of an active relay
    tree (None: no tree is active)."""
    members = [(pid, endpoint) for pid, endpoint in unicast if is_current(pid)]
    copies = tuple(endpoint for _, endpoint in members)
    if tree_members is None:
        return GroupScope(address, copies, copies, False)
    outside = tuple(endpoint for pid, endpoint in members if pid not in tree_members)
    return GroupScope(address, copies, outside, True)


def site_scope(address: GroupAddress, me: str, here: Sequence[str], remote: Iterable[tuple[str, Endpoint]],
               deaf: Iterable[tuple[str, Endpoint]] = ()) -> GroupScope:
    """The scope of a group where this peer (``me``) hears members ``here`` by multicast: its site.
    ``remote``: the members proven at an endpoint and not heard by multicast (another site);
    ``deaf``: members heard by multicast that said they do not hear this peer's (filtered one way),
    which this site's relays copy everything to, as they cannot hear it."""
    if me not in site_relays(me, here):
        return GroupScope(address, site=True)
    deaf_endpoints = tuple(endpoint for _, endpoint in sorted(deaf))
    return GroupScope(address, site=True, across=site_targets(me, here, remote) + deaf_endpoints,
                      deaf=deaf_endpoints)


def site_relays(me: str, site: Iterable[str]) -> list[str]:
    """The relays of this peer's site (``site``: the current members it hears by multicast, and up):
    the :data:`SITE_RELAYS` lowest pids, itself counted.  Every member of a site hears the same
    members, so each works out the same relays without a word."""
    return sorted({me, *site})[:SITE_RELAYS]


def site_targets(me: str, site: Iterable[str], remote: Iterable[tuple[str, Endpoint]]) -> tuple[Endpoint, ...]:
    """Where this peer sends what its site says, across: nowhere unless it is one of its site's relays;
    then to the other site's relays (``remote``: the proven current members multicast does not
    reach, up, by pid: the lowest are the relays that site chooses).  Two relays on each side go in
    pairs, the first to the first and the second to the second, so each datagram crosses twice at
    most, and once more only where a side has one relay."""
    here = site_relays(me, site)
    if me not in here:
        return ()
    there = sorted(remote)[:SITE_RELAYS]
    if len(here) == 1 or len(there) <= 1:
        return tuple(endpoint for _, endpoint in there)
    return (there[here.index(me)][1],)


def group_route(scope: GroupScope, message: wire.Message) -> Route:
    """One of the group's messages: its multicast address, plus copies, fewer where the tree carries it;
    in a group that spans sites, a site relay's copy to the other site's relays, if this peer is one."""
    if scope.site:
        return Route((scope.address,), len(scope.across), False, scope.across)
    tree = scope.tree and type(message) in RELAYED
    copies = scope.tree_copies if tree else scope.copies
    return Route((scope.address, *copies), len(copies), tree)


def relay_members(current: Iterable[str], me: str, relaying: Iterable[str], heard_by_multicast: Callable[[str], bool],
                  last_heard: Callable[[str], float | None], has_key: Callable[[str], bool], now: float,
                  offline_after: float) -> list[str]:
    """Who relays a group with this peer (``me``): of the proven members multicast does not reach
    (``relaying``), the group's ``current`` ones heard within ``offline_after`` (``last_heard``:
    in the group, or proving their endpoint), with a direct-message key (``has_key``).  None while
    any current member's multicast reaches this peer: then the group spans subnets, whose two sides
    would make rings of each other's members that disagree: site relays carry it across instead
    (:func:`site_targets`; protocol.md, "Site relays")."""
    current = set(current)
    if any(pid != me and heard_by_multicast(pid) for pid in current):
        return []
    return [pid for pid in relaying
            if pid in current and has_key(pid) and now - _or_never(last_heard(pid)) <= offline_after]


def _or_never(at: float | None) -> float:
    return -1e18 if at is None else at


__all__ = ["GroupScope", "RELAYED", "Route", "SITE_RELAYS", "beacon_route", "control_route", "group_route",
           "group_scope", "is_announcement", "relay_members", "site_relays", "site_scope", "site_targets"]
