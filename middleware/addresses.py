"""Where a datagram goes to or comes from: a multicast group, one peer's unicast endpoint, or the
subnet; and how one arrived (:class:`Arrival`).

Plain values, no I/O (a computer's name is resolved by the lookup the caller passes to
:func:`resolve_endpoint`): the peer core addresses what it sends with them, and the
transport (:mod:`middleware.transport`) maps them to sockets.  The two are
different types, never equal to each other, so a group and a peer that share
a host and port cannot be confused.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence


@dataclass(frozen=True, slots=True)
class GroupAddress:
    """A multicast group's address and port: everyone listening there gets the datagram."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One peer's unicast UDP endpoint: where a datagram came from, or where one peer gets it."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Broadcast:
    """Every subnet broadcast address of the peer's interface, at ``port``: the transport knows
    the subnets, the core only asks for the LAN segment to hear it."""

    port: int

    def __str__(self) -> str:
        return f"broadcast:{self.port}"


class Via(enum.StrEnum):
    """How a datagram reached this peer."""

    MULTICAST = "multicast"  # to a group's multicast address
    CONTROL = "control"  # to the control multicast address
    UNICAST = "unicast"  # to this peer's endpoint (the message's type says which channel it is for)
    BROADCAST = "broadcast"  # to the control port at the subnet's broadcast address
    RELAYED = "relayed"  # inside another member's datagram: a relay tree's push, or a site relay's copy


@dataclass(frozen=True, slots=True)
class Arrival:
    """Where a datagram came from and how.  ``source``: the endpoint the socket saw (None where
    nobody knows, as in a simulation); spoofable, so never taken as who sent it."""

    source: Endpoint | None
    via: Via

    @property
    def multicast(self) -> bool:
        """Whether it came by multicast, to a group's address or the control address."""
        return self.via is Via.MULTICAST or self.via is Via.CONTROL

    def __str__(self) -> str:
        return f"{self.via} from {self.source}"


def parse_endpoint(text: str, default_port: int | None = None) -> Endpoint:
    """``host:port`` (an IPv4 address; the port may be left out when ``default_port`` is given)
    as an :class:`Endpoint`; ValueError with a reason a person can act on."""
    import ipaddress

    if not isinstance(text, str) or not text.strip():
        raise ValueError("an address looks like 192.168.1.20:47477")
    host, sep, port_text = text.strip().rpartition(":")
    if not sep:
        host, port_text = text.strip(), ""
    try:
        address = ipaddress.IPv4Address(host)
    except ValueError:
        raise ValueError(f"{host!r} is not an IPv4 address (an address looks like 192.168.1.20:47477)") from None
    if address.is_multicast or address.is_unspecified or int(address) == 0xFFFFFFFF:
        raise ValueError(f"{host} is not one peer's address")
    if not port_text:
        if default_port is None:
            raise ValueError(f"{text!r} has no port (an address looks like 192.168.1.20:47477)")
        return Endpoint(str(address), default_port)
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"{port_text!r} is not a port (1 to 65535)")
    return Endpoint(str(address), int(port_text))


# How long add_peer waits for an answer from the address given before it says nobody answered.
ANSWER_WAIT = 10.0

Lookup = Callable[..., Sequence[tuple[Any, ...]]]


def resolve_endpoint(text: str, default_port: int | None, lookup: Lookup) -> Endpoint:
    """``host:port`` as :func:`parse_endpoint` takes it, or with a computer's name as host
    (``bob-pc:47477``), resolved once to its IPv4 address by ``lookup`` (``socket.getaddrinfo`` in
    the manager, a table in tests).  IPv6 is refused with a reason: the transport speaks IPv4 only."""
    import ipaddress
    import socket  # for its constants only: the lookup is the caller's

    if not isinstance(text, str) or not text.strip():
        raise ValueError("an address looks like 192.168.1.20:47477 or bob-pc:47477")
    text = text.strip()
    if text.startswith("[") or text.count(":") > 1:
        raise ValueError(f"{text} is an IPv6 address: M2MC speaks IPv4 only (give the computer's "
                         "IPv4 address, e.g. 192.168.1.20:47477, or its name)")
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = text, ""
    if not host or all(c.isdigit() or c == "." for c in host):
        return parse_endpoint(text, default_port)  # an IPv4 address, or a mistyped one: its own reason
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        pass
    else:
        return parse_endpoint(text, default_port)
    if port_text and (not port_text.isdigit() or not 1 <= int(port_text) <= 65535):
        raise ValueError(f"{port_text!r} is not a port (1 to 65535)")
    try:
        found = lookup(host, None, socket.AF_INET, socket.SOCK_DGRAM)
    except (OSError, UnicodeError):
        found = []
    if not found:
        raise ValueError(f"no computer named {host!r} is known here (try its IPv4 address, e.g. 192.168.1.20:47477)")
    address = found[0][4][0]
    return parse_endpoint(f"{address}:{port_text}" if port_text else address, default_port)


def answered_at(peers: Iterable[dict], endpoint: Endpoint) -> dict | None:
    """The row of ``peers`` (the ``peers`` call's rows) of the peer proven at ``endpoint``, if one is."""
    return next((row for row in peers if str(endpoint) in row.get("endpoints", [])), None)


Destination = GroupAddress | Endpoint | Broadcast
