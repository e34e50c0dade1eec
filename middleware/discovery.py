"""Zeroconf (DNS-SD) announcements of the groups this peer belongs to, and a browser for others'.

Each joined group is registered as a ``_m2mc._udp.local.`` service.  Its
instance name is for people (RFC 6763 section 4.1.1): the group's description
and this peer's name, e.g. ``Lunch on Friday — Ann (3f2a)``, the pid's first
characters keeping it unique on the LAN (zeroconf renames it on a clash).  The
TXT record (under 400 bytes) says what a browser shows before it knows more:
``gid``, ``desc``, ``members`` (count), ``private`` (0/1), ``creator`` (the
start of the creator's pid) and ``v`` (the wire version).  It carries no
address, port or key parameters: a zeroconf sighting only names a gid, and
the group becomes joinable once its creator's signed descriptor has been
fetched over GJLP and verified (:meth:`middleware.gjlp.Gjlp.note_zeroconf`).
Every member registers its own instance, so the group stays visible while any
member is on the network.  Zeroconf is bound to the chosen interface only, IPv4 only.

A sighting is resolved from zeroconf's cache first: a real announcement carries its SRV, TXT
and A records with its PTR.  Only what the cache cannot tell costs mDNS queries, and those
resolutions are limited to RESOLVE_BURST at once and RESOLVES_PER_SECOND after (the others are
skipped and counted, ``resolves_skipped``, until the service is announced again), so a flood of
bare PTR records cannot make this peer query the LAN thousands of times.  Each sighting is
handed on with the address its A record names, for the per-address limit on descriptor fetches
(:meth:`middleware.gjlp.Gjlp.note_zeroconf`); anyone can claim any address there, so the limit
is fairness, while the bound on what the fetches cost holds whatever arrives.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Callable

from zeroconf import IPVersion, ServiceStateChange
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from . import wire

log = logging.getLogger(__name__)

SERVICE_TYPE = "_m2mc._udp.local."
MAX_TXT_BYTES = 400
TXT_DESC_BYTES = 120
INSTANCE_BYTES = 63  # a DNS label

RESOLVE_BURST = 16
RESOLVES_PER_SECOND = 2.0

FoundCallback = Callable[[str, str, bool, int, str], None]  # gid, desc, private, member count, address


def _txt(properties: dict[bytes, bytes | None], key: str) -> str:
    value = properties.get(key.encode())
    return value.decode("utf-8", "replace") if value else ""


def _clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, on a character boundary."""
    return text.encode()[:limit].decode("utf-8", "ignore")


def instance_name(desc: str, peer_name: str, pid: str) -> str:
    """A readable, unique DNS-SD instance name: ``<desc> — <peer name> (<pid start>)``."""
    tail = f" — {_clip(peer_name, 24)} ({pid[:4]})"
    return _clip(" ".join(desc.split()), INSTANCE_BYTES - len(tail.encode())) + tail


def txt_properties(gid: str, desc: str, private: bool, member_count: int, creator: str) -> dict[str, str]:
    return {"v": str(wire.VERSION), "gid": gid, "desc": _clip(desc, TXT_DESC_BYTES), "members": str(member_count),
            "private": "1" if private else "0", "creator": creator[:16]}


def parse_service(properties: dict[bytes, bytes | None]) -> tuple[str, str, bool, int] | None:
    """(gid, desc, private, member count) from TXT records, or None if they are not ours or broken."""
    try:
        if _txt(properties, "v") != str(wire.VERSION):
            return None
        gid = _txt(properties, "gid")
        if len(gid) != wire.GID_CHARS or not gid.isalnum() or not gid.islower():
            return None
        desc = _txt(properties, "desc")[:wire.MAX_DESC]
        members = int(_txt(properties, "members") or 0)
    except ValueError:
        return None
    return gid, desc, _txt(properties, "private") == "1", min(max(0, members), 1_000_000)


class ZeroconfDiscovery:
    def __init__(self, interface: str, pid: str, on_found: FoundCallback) -> None:
        self.interface = interface
        self.pid = pid
        self.on_found = on_found
        self._zc: AsyncZeroconf | None = None
        self._browser: AsyncServiceBrowser | None = None
        self._registered: dict[str, AsyncServiceInfo] = {}
        # Registration probes for ~1.5 s; an update sent meanwhile would make the probe
        # see our own name as taken.  So the operations on one group run one at a time.
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task] = set()
        self._resolve_tokens = float(RESOLVE_BURST)
        self._resolve_at = time.monotonic()
        self.resolves_skipped = 0

    async def start(self) -> None:
        self._zc = AsyncZeroconf(interfaces=[self.interface], ip_version=IPVersion.V4Only)
        self._browser = AsyncServiceBrowser(self._zc.zeroconf, SERVICE_TYPE, handlers=[self._on_change])

    def _service(self, gid: str, desc: str, private: bool, member_count: int, peer_name: str, creator: str,
                 port: int) -> AsyncServiceInfo:
        name = self._registered[gid].name if gid in self._registered else \
            f"{instance_name(desc, peer_name, self.pid)}.{SERVICE_TYPE}"
        return AsyncServiceInfo(
            SERVICE_TYPE, name,
            addresses=[socket.inet_aton(self.interface)],
            port=port,
            properties=txt_properties(gid, desc, private, member_count, creator),
            server=f"m2mc-{self.pid[:16]}.local.",
        )

    async def announce(self, gid: str, desc: str, private: bool, member_count: int, peer_name: str,
                       creator: str = "", port: int = 9) -> None:
        """Register (or update) this peer's announcement of group ``gid``."""
        async with self._locks.setdefault(gid, asyncio.Lock()):
            if self._zc is None:
                return
            service = self._service(gid, desc, private, member_count, peer_name, creator, port)
            try:
                if gid in self._registered:
                    await (await self._zc.async_update_service(service))
                else:
                    self._registered[gid] = service
                    await (await self._zc.async_register_service(service, allow_name_change=True))
            except Exception as exc:  # zeroconf raises its own types for name conflicts and shutdown
                log.warning("zeroconf announcement of %s failed: %r", gid, exc)

    async def withdraw(self, gid: str) -> None:
        async with self._locks.setdefault(gid, asyncio.Lock()):
            await self._withdraw(gid)

    async def _withdraw(self, gid: str) -> None:
        service = self._registered.pop(gid, None)
        if service is not None and self._zc is not None:
            try:
                await (await self._zc.async_unregister_service(service))
            except Exception as exc:
                log.warning("zeroconf withdrawal of %s failed: %s", gid, exc)

    def _on_change(self, zeroconf, service_type: str, name: str, state_change: ServiceStateChange) -> None:
        if state_change not in (ServiceStateChange.Added, ServiceStateChange.Updated) or self._zc is None:
            return
        info = AsyncServiceInfo(service_type, name)
        if info.load_from_cache(self._zc.zeroconf):
            self._found(info)
        elif self._take_resolve_token():
            task = asyncio.ensure_future(self._resolve(info))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            self.resolves_skipped += 1

    def _take_resolve_token(self) -> bool:
        now = time.monotonic()
        self._resolve_tokens = min(float(RESOLVE_BURST),
                                   self._resolve_tokens + (now - self._resolve_at) * RESOLVES_PER_SECOND)
        self._resolve_at = now
        if self._resolve_tokens < 1:
            return False
        self._resolve_tokens -= 1
        return True

    async def _resolve(self, info: AsyncServiceInfo) -> None:
        if self._zc is not None and await info.async_request(self._zc.zeroconf, 3000):
            self._found(info)

    def _found(self, info: AsyncServiceInfo) -> None:
        parsed = parse_service(info.properties or {})
        if parsed is None:
            log.debug("ignoring malformed DNS-SD service %s", info.name)
            return
        addresses = info.parsed_addresses(IPVersion.V4Only)
        self.on_found(*parsed, addresses[0] if addresses else "")

    async def close(self) -> None:
        if self._zc is None:
            return
        for task in list(self._tasks):
            task.cancel()
        if self._browser is not None:
            await self._browser.async_cancel()
        await self._zc.async_unregister_all_services()
        await self._zc.async_close()
        self._zc = None
