"""m2mc-peer's JSON-RPC in process: a JsonRpcPeer over a GroupManager that opens no socket, and
an awaitable ``rpc(method, **params) -> (result, error message)`` that goes through the same
line handling as stdin does."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Awaitable, Callable

from m2mc.app.peer import JsonRpcPeer
from m2mc.middleware.manager import Config, GroupManager

Rpc = Callable[..., Awaitable[tuple[Any, str]]]


def in_process_peer(data_dir: Path, name: str = "Pat",
                    write: Callable[[dict], None] | None = None) -> tuple[JsonRpcPeer, Rpc]:
    """The peer (its ``manager`` never started) and its ``rpc``; close with ``peer.manager.store.close()``."""
    peer = JsonRpcPeer(write or (lambda line: None))
    peer.manager = GroupManager(Config(data_dir, name=name, iface="127.0.0.1", zeroconf=False), peer)

    async def rpc(method: str, **params: Any) -> tuple[Any, str]:
        answer = peer.handle_line(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        answer = await answer if isinstance(answer, asyncio.Future) else answer
        return answer.get("result"), answer.get("error", {}).get("message", "")

    return peer, rpc
