"""Where a datagram goes to or comes from: a multicast group, or one peer's unicast endpoint.

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


Destination = GroupAddress | Endpoint
