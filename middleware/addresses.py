"""Where a datagram goes to or comes from: a multicast group, one peer's unicast endpoint, or the subnet.

Plain values, no I/O: the peer core addresses what it sends with them, and the
transport (:mod:`middleware.transport`) maps them to sockets.  The two are
different types, never equal to each other, so a group and a peer that share
a host and port cannot be confused.
"""

from __future__ import annotations

from dataclasses import dataclass


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


Destination = GroupAddress | Endpoint | Broadcast
