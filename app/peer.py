"""m2mc-peer: the middleware without a GUI, driven by JSON-RPC 2.0 over stdin/stdout.

One JSON object per line in each direction; logs go to stderr.  Requests are
answered after the work they caused has been committed to the store and sent,
so a script that saw ``{"mid": …}`` knows the message is safe.  Events arrive
as notifications (no id), made in :meth:`JsonRpcPeer.__call__`.

Whatever arrives on stdin gets an answer and never stops the loop: malformed
JSON, ids that are not a string, number or null, nesting past ``MAX_NESTING``,
lines past ``MAX_LINE_BYTES``, batches (JSON-RPC 2.0 section 6) of up to
``MAX_BATCH`` requests, and failures of the disk underneath (-32000 saying what
happened).  NaN and Infinity are neither read nor written.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import logging
import math
import os
import signal
import sqlite3
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from ..middleware.addresses import ANSWER_WAIT
from ..middleware.manager import Config, GroupManager
from ..middleware.netif import forced_portable
from ..middleware.transport import TransportError
from ..middleware.events import (DirectDelivered, DirectStatusChanged, Event, FileProgress, GroupsDiscovered,
                                 MemberRemoved, RemovedFromGroup, RoleChanged,
                                 MemberJoined, MemberLeft, MessagesDelivered, MessagesUpdated, NetworkChanged,
                                 SyncProgress, TopicChanged, WarningRaised)
from ..middleware.mentions import DEFAULT_MENTIONS_LISTED, MAX_MENTIONS_LISTED
from ..middleware.store_api import SearchQueryError
from ..middleware.types import ChatMessage, UsageError, format_mid, iso_millis, parse_mid

from .cli import add_common_options, add_file_options, default_data_dir

log = logging.getLogger("m2mc.peer")

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, APP_ERROR = -32700, -32600, -32601, -32602, -32000
INTERNAL_ERROR = -32603
MAX_LINE_BYTES = 1 << 20  # one request line; a send's 8,000 characters take at most 48 KB of JSON
MAX_NESTING = 32  # arrays and objects inside each other; our requests need 3
MAX_BATCH = 1_000  # requests in one batch
READ_CHUNK = 1 << 16
MAX_WHOLE_HISTORY = 10_000
"""'history' without paging parameters answers groups of up to this many stored messages."""
DEFAULT_HISTORY_PAGE = 50
MAX_HISTORY_PAGE = 1_000
DEFAULT_SEARCH_RESULTS = 20
MAX_SEARCH_RESULTS = 200


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class JsonRpcPeer:
    """Maps JSON-RPC methods onto a GroupManager and, as its listener, its events onto notifications."""

    def __init__(self, write: Callable[[dict], None]) -> None:
        self.write = write
        self.manager: GroupManager | None = None
        self.stopping = asyncio.Event()
        self.methods: dict[str, Callable[[dict], Any]] = {
            "whoami": self.whoami,
            "create_group": self.create_group,
            "list_groups": self.list_groups,
            "join_group": self.join_group,
            "leave_group": self.leave_group,
            "set_role": self.set_role,
            "remove_member": self.remove_member,
            "set_admins_only": self.set_admins_only,
            "send": self.send,
            "edit": self.edit,
            "delete": self.delete,
            "react": self.react,
            "pin": self.pin,
            "set_topic": self.set_topic,
            "history": self.history,
            "search": self.search,
            "thread": self.thread,
            "mentions": self.mentions,
            "export_log": self.export_log,
            "stats": self.stats,
            "network": self.network,
            "advertise": self.advertise,
            "invite": self.invite,
            "add_peer": self.add_peer,
            "peers": self.peers,
            "presence": self.presence,
            "send_direct": self.send_direct,
            "direct_history": self.direct_history,
            "list_conversations": self.list_conversations,
            "mark_direct_read": self.mark_direct_read,
            "read_receipts": self.read_receipts,
            "shutdown": self.shutdown,
            "send_file": self.send_file,
            "fetch_file": self.fetch_file,
            "cancel_file": self.cancel_file,
            "files": self.files,
        }

    # -- events -> notifications -------------------------------------------------

    def notify(self, method: str, params: dict) -> None:
        self.write({"jsonrpc": "2.0", "method": method, "params": params})

    def __call__(self, event: Event) -> None:
        """The one place events become notifications: the table of them in the JSON-RPC reference is
        tested against this ``match`` (tests/core/test_jsonrpc_notifications.py); events without an arm are not told."""
        match event:
            case MessagesDelivered(messages=messages):
                for message in messages:
                    self.notify("delivered", message_json(message))
            case MessagesUpdated(messages=messages):
                for message in messages:
                    self.notify("updated", message_json(message))
            case GroupsDiscovered(groups):
                for group in groups:
                    self.notify("group_discovered", {
                        "gid": group.gid, "desc": group.desc, "members": group.member_count,
                        "private": group.private, "sources": sorted(group.sources),
                    })
            case MemberJoined(gid, member):
                self.notify("member_joined", {"gid": gid, "pid": member.pid, "name": member.name})
            case MemberLeft(gid, member):
                self.notify("member_left", {"gid": gid, "pid": member.pid, "name": member.name})
            case SyncProgress(gid, received, expected):
                self.notify("sync_progress", {"gid": gid, "received": received, "expected": expected})
            case WarningRaised(gid, text):
                self.notify("warning", {"gid": gid, "text": text})
            case FileProgress(gid, mid, state, held, size):
                self.notify("file_progress", {"gid": gid, "mid": mid, "state": state, "bytes": held, "size": size})
            case TopicChanged(gid, topic, by):
                self.notify("topic_changed", {"gid": gid, "topic": topic, "by": by})
            case DirectDelivered(messages=direct_messages):
                for direct in direct_messages:
                    self.notify("direct_delivered", direct.to_json())
            case DirectStatusChanged(peer, mid, status):
                self.notify("direct_status", {"peer": peer, "mid": format_mid(mid), "status": status})
            case RoleChanged(gid, pid, name, role, by, by_name):
                self.notify("role_changed", {"gid": gid, "pid": pid, "name": name, "role": role, "by": by,
                                             "by_name": by_name})
            case MemberRemoved(gid, pid, name, by, by_name):
                self.notify("member_removed", {"gid": gid, "pid": pid, "name": name, "by": by, "by_name": by_name})
            case RemovedFromGroup(gid, desc, by, by_name):
                self.notify("removed_from_group", {"gid": gid, "desc": desc, "by": by, "by_name": by_name,
                                                   "text": f"{by_name} removed you from {desc}"})
            case NetworkChanged(state, interface, address, reason):
                self.notify("network", {"state": state, "interface": interface, "address": address,
                                        "reason": reason})

    # -- methods ------------------------------------------------------------------------

    @property
    def running(self) -> GroupManager:
        """The manager the methods call: main() sets it before the first request is read."""
        if self.manager is None:
            raise RpcError(APP_ERROR, "the peer has not started")
        return self.manager

    def whoami(self, params: dict) -> dict:
        return {"pid": self.running.pid, "name": self.running.name}

    async def create_group(self, params: dict) -> dict:
        # The key derivation runs off the loop; the answer comes once the group is stored.
        return {"gid": await self.running.create_group_async(_param(params, "desc", str),
                                                             _optional_str(params, "passphrase"))}

    def list_groups(self, params: dict) -> list:
        return [group.to_json() for group in self.running.groups()]

    async def join_group(self, params: dict) -> dict:
        passphrase = _optional_str(params, "passphrase")
        if "invite" in params and "gid" not in params:
            return {"gid": await self.running.join_invite_async(_param(params, "invite", str), passphrase)}
        return {"gid": await self.running.join_group_async(_param(params, "gid", str), passphrase)}

    def invite(self, params: dict) -> dict:
        return {"invite": self.running.invite(_param(params, "gid", str))}

    async def add_peer(self, params: dict) -> dict:
        # Answered once the peer there has answered (or an error saying nobody did): a plain success
        # for an address where nobody listens told a script nothing (issue 45).
        wait = params.get("wait", ANSWER_WAIT)
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 60:
            raise RpcError(INVALID_PARAMS, "wait must be a number of seconds from 0 to 60")
        return await self.running.add_peer_async(_param(params, "address", str), float(wait))

    def peers(self, params: dict) -> list:
        return self.running.peers()

    def presence(self, params: dict) -> dict:
        return self.running.presence_of(_param(params, "gid", str))

    def leave_group(self, params: dict) -> dict:
        self.running.leave_group(_param(params, "gid", str))
        return {}

    def set_role(self, params: dict) -> dict:
        self.running.set_role(_param(params, "gid", str), _param(params, "pid", str), _param(params, "role", str))
        return {}

    def set_admins_only(self, params: dict) -> dict:
        self.running.set_admins_only(_param(params, "gid", str), _on_param(params))
        return {}

    def remove_member(self, params: dict) -> dict:
        if "new_passphrase" in params:
            raise RpcError(INVALID_PARAMS, "new_passphrase is not supported yet: after a re-key, new members join by "
                                           "an invite")
        self.running.remove_member(_param(params, "gid", str), _param(params, "pid", str))
        return {}

    def send(self, params: dict) -> dict:
        gid = _param(params, "gid", str)
        text = _param(params, "text", str)
        parent = _parent_param(params)
        mentions = params.get("mentions", [])
        if not isinstance(mentions, list) or not all(isinstance(pid, str) for pid in mentions):
            raise RpcError(INVALID_PARAMS, "invalid parameter 'mentions' (expected a list of pids)")
        return {"mid": format_mid(self.running.send(gid, text, parent, mentions))}

    def mentions(self, params: dict) -> list:
        limit = params.get("limit", DEFAULT_MENTIONS_LISTED)
        if type(limit) is not int or not 1 <= limit <= MAX_MENTIONS_LISTED:
            raise RpcError(INVALID_PARAMS, f"invalid parameter 'limit' (expected an integer 1..{MAX_MENTIONS_LISTED})")
        return [message_json(message) for message in self.running.mentions(limit)]

    def edit(self, params: dict) -> dict:
        gid, mid = _param(params, "gid", str), _mid_param(params)
        return {"mid": format_mid(self.running.edit(gid, mid, _param(params, "text", str)))}

    def delete(self, params: dict) -> dict:
        gid, mid = _param(params, "gid", str), _mid_param(params)
        return {"mid": format_mid(self.running.delete(gid, mid))}

    def react(self, params: dict) -> dict:
        gid, mid = _param(params, "gid", str), _mid_param(params)
        return {"mid": format_mid(self.running.react(gid, mid, _param(params, "emoji", str), _on_param(params)))}

    def pin(self, params: dict) -> dict:
        gid, mid = _param(params, "gid", str), _mid_param(params)
        return {"mid": format_mid(self.running.pin(gid, mid, _on_param(params)))}

    def set_topic(self, params: dict) -> dict:
        gid = _param(params, "gid", str)
        return {"mid": format_mid(self.running.set_topic(gid, _param(params, "text", str)))}

    def history(self, params: dict) -> list:
        gid = _param(params, "gid", str)
        before, after = _optional_int(params, "before"), _optional_int(params, "after")
        limit = _optional_int(params, "limit", 1, MAX_HISTORY_PAGE)
        if before is None and after is None and limit is None:
            count = self.running.message_count(gid)
            if count > MAX_WHOLE_HISTORY:
                raise RpcError(APP_ERROR, f"group {gid} holds {count} messages, more than the {MAX_WHOLE_HISTORY} "
                                          "'history' returns in one answer: ask for pages with 'before' or 'after' "
                                          f"(a message's 'order') and 'limit' (at most {MAX_HISTORY_PAGE})")
            return [message_json(message) for message in self.running.history(gid)]
        page = self.running.history_page(gid, before, after, DEFAULT_HISTORY_PAGE if limit is None else limit)
        return [{**message_json(message), "order": message.order} for message in page]

    def search(self, params: dict) -> dict:
        query = _param(params, "query", str)
        if not query.strip():
            raise RpcError(INVALID_PARAMS, "empty search query: give at least one word")
        order = params.get("order", "relevance")
        if order not in ("relevance", "time"):
            raise RpcError(INVALID_PARAMS, "invalid parameter 'order' (expected \"relevance\" or \"time\")")
        cursor = _optional_str(params, "cursor")
        if cursor is not None and not (cursor.isascii() and cursor.isdigit() and len(cursor) <= 9):
            raise RpcError(INVALID_PARAMS, "invalid parameter 'cursor' (pass back the 'cursor' of a previous answer)")
        limit = _optional_int(params, "limit", 1, MAX_SEARCH_RESULTS)
        limit = DEFAULT_SEARCH_RESULTS if limit is None else limit
        offset = int(cursor) if cursor is not None else 0
        try:
            found = self.running.search(
                query, gid=_optional_str(params, "gid"), sender=_optional_str(params, "sender"),
                since=_optional_time(params, "since"), until=_optional_time(params, "until"), limit=limit + 1,
                offset=offset, by_time=order == "time", direct=True)
        except SearchQueryError as exc:
            raise RpcError(INVALID_PARAMS, f"bad search query {query[:200]!r}: {exc} (use words, \"phrases\", "
                                           "prefix*, AND, OR, NOT; put other characters inside double quotes)") from None
        results = [{"gid": hit.gid, "mid": format_mid(hit.mid), "sender": hit.mid[0], "sent_at": iso_millis(hit.sent_at),
                    "order": hit.order, "snippet": hit.snippet, "thread_root": format_mid(root),
                    **({"direct": True, "peer": hit.peer} if hit.peer is not None else {})}
                   for hit, root in found[:limit]]
        return {"results": results, "cursor": str(offset + limit) if len(found) > limit else None}

    def thread(self, params: dict) -> list:
        gid = _param(params, "gid", str)
        try:
            root = parse_mid(_param(params, "root", str))
        except ValueError as exc:
            raise RpcError(INVALID_PARAMS, f"bad root: {exc}") from None
        thread = self.running.thread(gid, root)
        if not thread:
            raise RpcError(APP_ERROR, f"no message {format_mid(root)} in group {gid}")
        return [message_json(message) for message in thread]

    def export_log(self, params: dict) -> dict:
        path = _param(params, "path", str)
        gid = params.get("gid")
        if gid is not None and not isinstance(gid, str):
            raise RpcError(INVALID_PARAMS, "'gid' must be a string")
        direct = params.get("direct", False)
        if not isinstance(direct, bool):
            raise RpcError(INVALID_PARAMS, "invalid parameter 'direct' (expected true or false)")
        try:
            count = self.running.export_log(path, gid, direct)
        except OSError as exc:
            raise RpcError(APP_ERROR, f"cannot write {path}: {exc.strerror or exc}") from None
        return {"path": str(Path(path)), "messages": count}

    def stats(self, params: dict) -> dict:
        return self.running.stats_dict()

    def network(self, params: dict) -> dict:
        return self.running.network_state()

    def send_direct(self, params: dict) -> dict:
        pid = _param(params, "pid", str)
        text = _param(params, "text", str)
        parent = _parent_param(params)
        return {"mid": format_mid(self.running.send_direct(pid, text, parent))}

    def direct_history(self, params: dict) -> list:
        pid = _param(params, "pid", str)
        before, limit = params.get("before"), params.get("limit")
        for key, value in (("before", before), ("limit", limit)):
            if value is not None and (type(value) is not int or value < 0):
                raise RpcError(INVALID_PARAMS, f"invalid parameter {key!r} (expected a natural number)")
        return [message.to_json() for message in self.running.direct_history(pid, before, limit)]

    def list_conversations(self, params: dict) -> list:
        return [view.to_json() for view in self.running.conversations()]

    def mark_direct_read(self, params: dict) -> dict:
        self.running.mark_direct_read(_param(params, "pid", str), _mid_param(params))
        return {}

    def read_receipts(self, params: dict) -> dict:
        on = params.get("on")
        if not isinstance(on, bool):
            raise RpcError(INVALID_PARAMS, "missing or invalid parameter 'on' (expected true or false)")
        self.running.set_read_receipts(on)
        return {"on": on}

    def advertise(self, params: dict) -> dict:
        self.running.advertise()
        return {}

    async def send_file(self, params: dict) -> dict:
        gid, path = _param(params, "gid", str), _param(params, "path", str)
        mid, sha256 = await self.running.send_file(gid, path, _parent_param(params))
        return {"mid": format_mid(mid), "sha256": sha256}

    def fetch_file(self, params: dict) -> dict:
        gid, mid = _param(params, "gid", str), _mid_param(params)
        return self.running.fetch_file(gid, mid, _optional_str(params, "dest"))

    def cancel_file(self, params: dict) -> dict:
        gid, mid = _param(params, "gid", str), _mid_param(params)
        return self.running.cancel_file(gid, mid)

    def files(self, params: dict) -> list:
        return self.running.file_list(_param(params, "gid", str))

    def shutdown(self, params: dict) -> dict:
        self.stopping.set()
        return {}

    # -- dispatch -------------------------------------------------------------------------

    def handle_line(self, line: str) -> dict | list | None | asyncio.Future:
        """One request line -> its response: an object, a list for a batch, None when nothing is
        due, or a future of one of those when a method awaits (a join that derives a key)."""
        try:
            request = json.loads(line, parse_constant=_no_constant, parse_float=_finite_float)
        except RecursionError:
            return _error(None, INVALID_REQUEST, f"malformed request: nested deeper than {MAX_NESTING} levels")
        except ValueError as exc:  # JSONDecodeError, NaN/Infinity, an integer of over 4,300 digits
            return _error(None, PARSE_ERROR, f"malformed request: cannot parse it as JSON ({str(exc)[:200]})")
        if _nesting_exceeds(request, MAX_NESTING):
            return _error(None, INVALID_REQUEST, f"malformed request: nested deeper than {MAX_NESTING} levels")
        if type(request) is not list:
            return self.handle_request(request)
        if not request:
            return _error(None, INVALID_REQUEST, "malformed request: an empty batch")
        if len(request) > MAX_BATCH:
            return _error(None, INVALID_REQUEST, f"batch of {len(request)} requests; the limit is {MAX_BATCH}")
        responses = [response for response in map(self.handle_request, request) if response is not None]
        if any(isinstance(response, asyncio.Future) for response in responses):
            return asyncio.ensure_future(_gather_batch(responses))
        return responses or None

    def handle_request(self, request: Any) -> dict | None | asyncio.Future:
        """One request object -> its response (None for a notification; a future of it for a
        method that awaits)."""
        if not isinstance(request, dict):
            return _error(None, INVALID_REQUEST, "malformed request: expected a JSON-RPC 2.0 object with a 'method'")
        rid = request.get("id")
        if not _valid_id(rid):
            return _error(None, INVALID_REQUEST, "malformed request: 'id' must be a string, a number or null")
        if request.get("jsonrpc") != "2.0" or not isinstance(request.get("method"), str):
            return _error(rid, INVALID_REQUEST, "malformed request: expected a JSON-RPC 2.0 object with a 'method'")
        params = request.get("params", {})
        if params is None:
            params = {}
        method = self.methods.get(request["method"])
        try:
            if method is None:
                raise RpcError(METHOD_NOT_FOUND, f"unknown method {request['method']!r:.60}")
            if not isinstance(params, dict):
                raise RpcError(INVALID_PARAMS, "params must be an object")
            result = method(params)
            if asyncio.iscoroutine(result):
                return asyncio.ensure_future(self._finish(request, result))
        except RpcError as exc:
            return _error(rid, exc.code, exc.message) if "id" in request else None
        except UsageError as exc:
            return _error(rid, APP_ERROR, str(exc)) if "id" in request else None
        except (sqlite3.Error, OSError) as exc:  # the disk under the data dir (full, gone, read-only)
            log.error("method %s: storage failed: %s", request["method"], exc)
            return _error(rid, APP_ERROR, f"storage failed: {exc}") if "id" in request else None
        except Exception as exc:  # a bug must not kill the peer: report it and go on
            log.exception("method %s failed", request["method"])
            return _error(rid, APP_ERROR, f"internal error: {exc}") if "id" in request else None
        if "id" not in request:
            return None
        return {"jsonrpc": "2.0", "id": rid, "result": result}


    async def _finish(self, request: dict, pending) -> dict | None:
        rid = request.get("id")
        try:
            result = await pending
        except (RpcError, UsageError) as exc:
            code = exc.code if isinstance(exc, RpcError) else APP_ERROR
            return _error(rid, code, str(exc)) if "id" in request else None
        except (sqlite3.Error, OSError) as exc:  # the disk under the data dir (full, gone, read-only)
            log.error("method %s: storage failed: %s", request["method"], exc)
            return _error(rid, APP_ERROR, f"storage failed: {exc}") if "id" in request else None
        except Exception as exc:
            log.exception("method %s failed", request["method"])
            return _error(rid, APP_ERROR, f"internal error: {exc}") if "id" in request else None
        return {"jsonrpc": "2.0", "id": rid, "result": result} if "id" in request else None


def message_json(message: ChatMessage) -> dict:
    """A message as JSON-RPC shows it: its ``kind``, and a file offer (middleware.files) has its fields as
    ``file`` (middleware.kinds.exported)."""
    return message.to_json()


def _param(params: dict, key: str, kind: type) -> Any:
    value = params.get(key)
    if not isinstance(value, kind):
        raise RpcError(INVALID_PARAMS, f"missing or invalid parameter {key!r} (expected {kind.__name__})")
    return value


def _mid_param(params: dict) -> tuple[str, int]:
    try:
        return parse_mid(_param(params, "mid", str))
    except ValueError as exc:
        raise RpcError(INVALID_PARAMS, f"bad mid: {exc}") from None


def _parent_param(params: dict) -> tuple[str, int] | None:
    parent_text = params.get("parent")
    if parent_text is not None and not isinstance(parent_text, str):
        raise RpcError(INVALID_PARAMS, "bad parent: 'parent' must be a mid string '<pid>:<seqno>' or null")
    try:
        return parse_mid(parent_text) if parent_text is not None else None
    except ValueError as exc:
        raise RpcError(INVALID_PARAMS, f"bad parent: {exc}") from None


def _on_param(params: dict) -> bool:
    on = params.get("on", True)
    if not isinstance(on, bool):
        raise RpcError(INVALID_PARAMS, "invalid parameter 'on' (expected true or false)")
    return on


def _optional_int(params: dict, key: str, low: int = 0, high: int = 2**62) -> int | None:
    value = params.get(key)
    if value is None:
        return None
    if type(value) is not int or not low <= value <= high:
        raise RpcError(INVALID_PARAMS, f"invalid parameter {key!r} (expected an integer from {low} to {high})")
    return value


def _optional_time(params: dict, key: str) -> int | None:
    """An ISO-8601 time (as 'sent_at' is written) as ms since the epoch."""
    value = _optional_str(params, key)
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise RpcError(INVALID_PARAMS, f"invalid parameter {key!r} (expected an ISO-8601 time such as "
                                       "2026-01-31T09:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def _optional_str(params: dict, key: str) -> str | None:
    value = params.get(key)
    if value is not None and not isinstance(value, str):
        raise RpcError(INVALID_PARAMS, f"invalid parameter {key!r} (expected a string)")
    return value


def _error(rid: Any, code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


async def _gather_batch(responses: list) -> list | None:
    """A batch's answers once those of its awaiting methods are in (None: nothing is due)."""
    done = [await r if isinstance(r, asyncio.Future) else r for r in responses]
    return [response for response in done if response is not None] or None


def _unsent_as_error(response: dict | list, unsent: dict[str, str]) -> dict | list:
    """A ``send`` whose message could not be stored (so was taken back) answers with the reason."""
    if isinstance(response, list):
        return [_unsent_as_error(r, unsent) for r in response]
    result = response.get("result")
    if type(result) is dict and result.get("mid") in unsent:
        return _error(response["id"], APP_ERROR, unsent[result["mid"]])
    return response


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _valid_id(rid: Any) -> bool:
    """JSON-RPC 2.0 section 4: a string, a number or null (booleans are not numbers here)."""
    return rid is None or type(rid) in (str, int) or type(rid) is float and math.isfinite(rid)


def _nesting_exceeds(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest deeper than ``limit`` (iteratively: no recursion to overflow)."""
    stack = [(value, 1)]
    while stack:
        value, depth = stack.pop()
        children: Iterable[Any]
        if type(value) is list:
            children = value
        elif type(value) is dict:
            children = value.values()
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if type(child) in (list, dict))
    return False


def to_json_line(obj: Any) -> str:
    """One output line.  Never NaN or Infinity: a response that would hold them becomes an error."""
    try:
        return json.dumps(obj, ensure_ascii=False, allow_nan=False) + "\n"
    except (ValueError, TypeError) as exc:
        log.error("cannot write %s as JSON: %s", str(obj)[:200], exc)
        if isinstance(obj, dict) and "id" in obj:
            return json.dumps(_error(obj["id"], INTERNAL_ERROR, f"internal error: the result is not JSON ({exc})")) + "\n"
        return ""


class LineSplitter:
    """Bytes from stdin -> complete lines, at most ``limit`` bytes each.

    A longer line is reported once, as soon as it passes the limit, and its rest is
    skipped up to the next newline, so its tail is never read as a request of its own.
    """

    def __init__(self, limit: int = MAX_LINE_BYTES) -> None:
        self.limit = limit
        self._buffer = bytearray()
        self._skipping = False

    def feed(self, data: bytes) -> list[bytes | None]:
        """The complete lines in ``data`` (None for each line that was too long)."""
        buffer = self._buffer
        buffer += data
        lines: list[bytes | None] = []
        start = 0
        while (end := buffer.find(b"\n", start)) >= 0:
            if self._skipping:
                self._skipping = False
            elif end - start > self.limit:
                lines.append(None)
            else:
                lines.append(bytes(buffer[start:end]))
            start = end + 1
        del buffer[:start]
        if len(buffer) > self.limit:
            if not self._skipping:
                lines.append(None)
                self._skipping = True
            buffer.clear()
        return lines

    def finish(self) -> list[bytes | None]:
        """At end of input: an unterminated last line."""
        rest, self._buffer = bytes(self._buffer), bytearray()
        return [rest] if rest and not self._skipping else []


def stop_on_signals(stopping: asyncio.Event) -> None:
    """SIGTERM and SIGINT end the loop gently.  Windows' loops have no add_signal_handler:
    there the handler runs in the main thread and hands the stop to the loop."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stopping.set)
        except (NotImplementedError, RuntimeError):
            signal.signal(sig, lambda _sig, _frame: loop.call_soon_threadsafe(stopping.set))


async def stdin_reader(stdin: Any) -> asyncio.StreamReader:
    """A stream over ``stdin``.  The loop watches it where it can (a pipe, a terminal or a socket
    on POSIX); Windows' loops cannot watch a pipe or a console, and no loop watches a regular file
    (``m2mc-peer < requests.jsonl``), so there, and whenever M2MC_PORTABLE=1, a thread reads it."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2 * READ_CHUNK)
    if not forced_portable():
        try:
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
            return reader
        except (NotImplementedError, ValueError):
            pass
    fd = stdin.fileno()

    def hand_over(chunk: bytes) -> None:
        if chunk:
            reader.feed_data(chunk)
        else:
            reader.feed_eof()

    def read_until_eof() -> None:
        chunk = b"-"
        while chunk:
            try:
                chunk = os.read(fd, READ_CHUNK)
            except OSError:
                chunk = b""
            try:
                loop.call_soon_threadsafe(hand_over, chunk)
            except RuntimeError:  # the loop has closed: the peer has stopped
                return

    threading.Thread(target=read_until_eof, name="m2mc-stdin", daemon=True).start()
    return reader


async def serve(args: argparse.Namespace) -> int:
    out = sys.stdout

    def write(obj: Any) -> None:
        out.write(to_json_line(obj))

    peer = JsonRpcPeer(write)
    data_dir = args.data_dir or default_data_dir()
    name = args.name
    config = Config(data_dir=data_dir, name=name, iface=args.iface, port=args.port, zeroconf=not args.no_zeroconf,
                    download_dir=args.download_dir, auto_download=args.auto_download, max_file_size=args.max_file_size)
    try:
        manager = GroupManager(config, peer)
        if not manager.name:
            manager.set_name(getpass.getuser() or "peer")
        await manager.start()
    except (TransportError, UsageError, OSError) as exc:
        print(f"m2mc-peer: {exc}", file=sys.stderr)
        return 2
    peer.manager = manager
    stop_on_signals(peer.stopping)
    reader = await stdin_reader(sys.stdin)
    splitter = LineSplitter()

    def answer_when_done(done: asyncio.Future) -> None:
        if done.cancelled():  # shutting down
            return
        response = done.result()
        if response is not None:
            try:
                manager.flush()  # answer only once the work is stored and sent
            except Exception:
                log.exception("flush failed")
            write(response)
            out.flush()

    async def read_requests() -> None:
        while not peer.stopping.is_set():
            chunk = await reader.read(READ_CHUNK)
            lines = splitter.feed(chunk) if chunk else splitter.finish()
            try:
                answer(lines)
            except Exception:  # never let one batch end the loop
                log.exception("answering requests failed")
            if not chunk:
                peer.stopping.set()
                return

    def answer(lines: list[bytes | None]) -> None:
        """Handle a burst of lines, then answer them once their work is stored and sent."""
        responses: list[dict | list] = []
        for line in lines:
            if line is None:
                responses.append(_error(None, INVALID_REQUEST,
                                        f"malformed request: line longer than {MAX_LINE_BYTES} bytes"))
                continue
            text = line.decode("utf-8", "replace").strip()
            if text:
                response = peer.handle_line(text)
                if isinstance(response, asyncio.Future):
                    response.add_done_callback(answer_when_done)
                elif response is not None:
                    responses.append(response)
        try:
            manager.flush()
        except Exception:  # a bug: the answers still go out, with what was done
            log.exception("flush failed")
        unsent = {format_mid(mid): reason for mid, reason in manager.take_unsent().items()}
        for response in responses:
            write(_unsent_as_error(response, unsent) if unsent else response)
        out.flush()

    async def flush_notifications() -> None:
        while True:
            await asyncio.sleep(0.01)
            out.flush()

    reading = asyncio.create_task(read_requests())
    flushing = asyncio.create_task(flush_notifications())
    await peer.stopping.wait()
    reading.cancel()
    flushing.cancel()
    manager.flush()
    out.flush()
    await manager.close()
    out.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="m2mc-peer", description="Headless M2MC peer: JSON-RPC 2.0 on stdin/stdout.")
    add_common_options(parser)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    add_file_options(parser, downloads="<data dir>/downloads")
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    logging.getLogger("zeroconf").setLevel(logging.WARNING)
    return asyncio.run(serve(args))


if __name__ == "__main__":
    sys.exit(main())
