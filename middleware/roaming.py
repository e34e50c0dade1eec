"""Following the network, without I/O: which interface and address the peer uses, when to move,
and what the user is told.

In one day a laptop gets a new DHCP address, moves from the dock's cable to Wi-Fi, brings a VPN
up and down and sleeps through meetings.  The asyncio adapter polls the interfaces
(:func:`middleware.netif.interfaces`) every :data:`WATCH_INTERVAL` and hands them in, with the
route's source address and what the transport could and could not send since; the follower
answers with what to do (:class:`Move` the transport to another address, :class:`Resync` after a
link came back or a sleep) and tells the user's state as :class:`~middleware.events.NetworkChanged`
events: ``connected``, ``reconnecting`` (moving to a new address) and ``offline`` (with the cause).

Which address, by what the user asked for:

* ``--iface ADDRESS``: that address alone.  When it is gone the peer is offline and says so; it
  never moves (tests pin a peer this way).
* ``--iface NAME``: that interface, whatever address it has now.
* neither: a usable LAN (up, multicast, not loopback, not a virtual bridge nor a VPN tunnel:
  :attr:`~middleware.netif.InterfaceInfo.usable_lan`).  The one in use is kept while it stays
  usable, so a second interface coming up moves nothing; else the one holding the default route;
  else the first.  With no LAN at all the peer stays where it is, offline, and moves to the first
  LAN that comes up (from loopback too, where it started with none).

A datagram that cannot be sent is not silent: when a watch period saw send failures and no
send succeed, the peer is offline with the failure's cause until a send succeeds.  An address
that vanishes is "reconnecting" for :data:`OFFLINE_GRACE` before it is offline: a DHCP renewal
removes the old address a moment before it adds the new, and that moment is no outage.  A gap in the
watch's ticks longer than :data:`SLEEP_GAP` is a sleep (the machine's, or the process stopped):
the peer resyncs every group at once.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Iterable

from .events import NetworkChanged
from .netif import InterfaceInfo

WATCH_INTERVAL = 0.5  # seconds between looks at the interfaces
# A tick this late means the loop did not run: the machine slept or the process was stopped.
SLEEP_GAP = 5.0
# How long no usable address is "reconnecting" before it is "offline": longer than a DHCP client's
# gap between removing an address and adding the next, shorter than a user's patience.
OFFLINE_GRACE = 1.0

CONNECTED = "connected"
RECONNECTING = "reconnecting"
OFFLINE = "offline"


@dataclass(frozen=True, slots=True)
class Move:
    """Rebind the transport to ``address`` on ``interface``, then re-announce and resync."""

    interface: str
    address: str


@dataclass(frozen=True, slots=True)
class Resync:
    """The address is unchanged but this peer may have missed traffic: ask every group, beacon now."""

    reason: str


Action = Move | Resync


def as_address(text: str | None) -> str | None:
    """``text`` as an IPv4 address, or None when it is an interface name (or nothing)."""
    if not text:
        return None
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        return None


class NetworkFollower:
    """The interface and address in use, and the user's state; ``now`` is passed in."""

    def __init__(self, wanted: str | None = None) -> None:
        self.wanted = wanted or None  # --iface as given
        self.wanted_address = as_address(wanted)
        self.interface: str | None = None
        self.address: str | None = None
        self.state = RECONNECTING
        self.reason = ""
        self._moving: tuple[str, str] | None = None  # a Move handed out, not yet bound
        self._present = True  # the address in use was on the host at the last look
        self._last_tick: float | None = None
        self._lost_at: float | None = None  # when a look first found no address to use
        self._events: list[NetworkChanged] = []

    # -- what the adapter tells it -----------------------------------------------------

    def bound(self, interface: str | None, address: str, now: float, usable: bool = True) -> None:
        """The transport is bound to ``address`` (on ``interface``); ``usable``: it is a LAN
        (not a loopback fallback), so peers elsewhere can be reached."""
        self.interface, self.address = interface, address
        self._moving = None
        self._present = True
        self._last_tick = now  # a sleep before the first look is a gap from here
        if usable:
            self._set(CONNECTED, "")
        else:
            self._set(OFFLINE, "no network: only this computer is reached")

    def move_failed(self, reason: str, now: float) -> None:
        """A :class:`Move` could not bind; the next look tries again."""
        self._moving = None
        self._set(OFFLINE, reason)

    def observe(self, interfaces: Iterable[InterfaceInfo], now: float, route_source: str | None = None,
                send_failure: str | None = None, sent: int = 0) -> list[Action]:
        """A look at the network: ``interfaces`` as they are, the default route's source address,
        and since the last look the cause of the latest failed send (if any) and how many sends
        succeeded."""
        interfaces = list(interfaces)
        actions: list[Action] = []
        slept = self._last_tick is not None and now - self._last_tick > SLEEP_GAP
        self._last_tick = now
        target, why_none = self._choose(interfaces, route_source)
        current = (self.interface, self.address)
        present = any((i.name, i.address) == current for i in interfaces)
        if target is None:
            self._present = present
            if self._lost_at is None:
                self._lost_at = now
            if self._moving is None:
                if self.state != OFFLINE and now - self._lost_at < OFFLINE_GRACE:
                    self._set(RECONNECTING, "")  # "Reconnecting…": where to is not known yet
                else:
                    self._set(OFFLINE, why_none)
            return actions
        self._lost_at = None
        if (target.name, target.address) != current or not self._present:
            # A new address, another interface, or the same one back after it was gone (its
            # memberships went with it): bind afresh.
            if self._moving != (target.name, target.address):
                self._moving = (target.name, target.address)
                actions.append(Move(target.name, target.address))
            self._present = present
            self._set(RECONNECTING, f"on {target.name} ({target.address})")
            return actions
        if self._moving is not None:
            return actions
        if send_failure and not sent:
            self._set(OFFLINE, f"cannot send: {send_failure}")
            return actions
        if self.state != CONNECTED or slept:
            actions.append(Resync("woke" if slept else "network back"))
        self._set(CONNECTED, "")
        return actions

    def events(self) -> list[NetworkChanged]:
        events, self._events = self._events, []
        return events

    def view(self) -> NetworkChanged:
        """The state as it is now, as the last event told it."""
        return NetworkChanged(self.state, self.interface or "", self.address or "", self.reason)

    # -- internals ----------------------------------------------------------------------

    def _choose(self, interfaces: list[InterfaceInfo], route_source: str | None) -> tuple[InterfaceInfo | None, str]:
        """The address to use, or None and why there is none."""
        if self.wanted_address is not None:
            held = [i for i in interfaces if i.address == self.wanted_address]
            if not held:
                return None, f"address {self.wanted_address} is no longer on this computer"
            if not held[0].up:
                return None, f"{held[0].name} is down"
            return held[0], ""
        if self.wanted is not None:
            named = [i for i in interfaces if i.name == self.wanted]
            if not named:
                return None, f"no network: {self.wanted} is gone"
            up = [i for i in named if i.up]
            if not up:
                return None, f"no network: {self.wanted} is down"
            return next((i for i in up if i.address == self.address), up[0]), ""
        lans = [i for i in interfaces if i.usable_lan]
        if not lans:
            return None, "no network"
        for rule in (lambda i: (i.name, i.address) == (self.interface, self.address),
                     lambda i: i.address == route_source):
            for lan in lans:
                if rule(lan):
                    return lan, ""
        return lans[0], ""

    def _set(self, state: str, reason: str) -> None:
        if (state, reason) != (self.state, self.reason):
            self.state, self.reason = state, reason
            self._events.append(self.view())
