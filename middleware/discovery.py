"""Zeroconf (DNS-SD) announcements of the groups this peer belongs to, and a browser for others'.

Each joined group is registered as a ``_m2mc._udp.local.`` service whose TXT
records say what a newcomer needs: ``gid``, ``desc``, ``members`` (count),
``addr`` and ``port`` (the group's data channel), ``private`` (0/1).  Every
member registers its own instance, so the group stays visible while any member
is on the network.  What the browser finds is handed to a callback that feeds
the same known-groups table as GJLP.  Zeroconf is bound to the chosen interface
only, IPv4 only.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import socket
from typing import Callable

from zeroconf import IPVersion, ServiceStateChange
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from . import wire

log = logging.getLogger(__name__)

SERVICE_TYPE = "_m2mc._udp.local."

FoundCallback = Callable[[wire.GroupInfo, int], None]


def _txt(properties: dict[bytes, bytes | None], key: str) -> str:
    value = properties.get(key.encode())
    return value.decode("utf-8", "replace") if value else ""


def parse_service(properties: dict[bytes, bytes | None]) -> tuple[wire.GroupInfo, int] | None:
    """A group and its member count from TXT records, or None if they are not ours or broken."""
    try:
        info = wire.GroupInfo(
            gid=_txt(properties, "gid"),
            desc=_txt(properties, "desc"),
            addr=_txt(properties, "addr"),
            port=int(_txt(properties, "port")),
            private=_txt(properties, "private") == "1",
            members=(),
            left=(),
            salt=bytes.fromhex(_txt(properties, "salt")),
            key_check=bytes.fromhex(_txt(properties, "check")),
        )
        members = int(_txt(properties, "members") or 0)
        # Validate exactly as a datagram would be.
        for name, check in wire.GroupInfo.FIELDS:
            check(wire._to_wire(getattr(info, name)), name)
        socket.inet_aton(info.addr)
    except (ValueError, OSError, wire.WireError):
        return None
    return info, max(0, members)


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

    async def start(self) -> None:
        self._zc = AsyncZeroconf(interfaces=[self.interface], ip_version=IPVersion.V4Only)
        self._browser = AsyncServiceBrowser(self._zc.zeroconf, SERVICE_TYPE, handlers=[self._on_change])

    def _instance_name(self, gid: str) -> str:
        digest = hashlib.sha256(f"{gid}\0{self.pid}".encode()).hexdigest()[:20]
        return f"m2mc-{digest}.{SERVICE_TYPE}"

    def _service(self, group: wire.GroupInfo, member_count: int) -> AsyncServiceInfo:
        return AsyncServiceInfo(
            SERVICE_TYPE,
            self._instance_name(group.gid),
            addresses=[socket.inet_aton(self.interface)],
            port=group.port,
            properties={
                "gid": group.gid,
                "desc": group.desc.encode()[:200],
                "members": str(member_count),
                "addr": group.addr,
                "port": str(group.port),
                "private": "1" if group.private else "0",
                "salt": group.salt.hex(),
                "check": group.key_check.hex(),
            },
            server=f"m2mc-{self.pid[:16]}.local.",
        )

    async def announce(self, group: wire.GroupInfo, member_count: int) -> None:
        """Register (or update) this peer's announcement of ``group``."""
        async with self._locks.setdefault(group.gid, asyncio.Lock()):
            await self._announce(group, member_count)

    async def _announce(self, group: wire.GroupInfo, member_count: int) -> None:
        if self._zc is None:
            return
        service = self._service(group, member_count)
        try:
            if group.gid in self._registered:
                await (await self._zc.async_update_service(service))
            else:
                self._registered[group.gid] = service
                await (await self._zc.async_register_service(service, allow_name_change=False))
        except Exception as exc:  # zeroconf raises its own types for name conflicts and shutdown
            log.warning("zeroconf announcement of %s failed: %r", group.gid, exc)

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
        if state_change in (ServiceStateChange.Added, ServiceStateChange.Updated):
            task = asyncio.ensure_future(self._resolve(service_type, name))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _resolve(self, service_type: str, name: str) -> None:
        if self._zc is None:
            return
        info = AsyncServiceInfo(service_type, name)
        if not await info.async_request(self._zc.zeroconf, 3000):
            return
        parsed = parse_service(info.properties or {})
        if parsed is None:
            log.debug("ignoring malformed DNS-SD service %s", name)
            return
        self.on_found(*parsed)

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
