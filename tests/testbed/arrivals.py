"""Datagrams as a transport hands them to the adapter: each with the endpoint it came from."""

from __future__ import annotations

from collections.abc import Iterable

from m2mc.middleware.addresses import Endpoint

# TEST-NET-1 (RFC 5737): an address no real host has.
STRANGER = Endpoint("192.0.2.7", 47477)


def arriving(datagrams: Iterable[bytes], source: Endpoint = STRANGER) -> list[tuple[bytes, Endpoint]]:
    return [(data, source) for data in datagrams]
