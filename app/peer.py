"""m2mc-peer: the middleware without a GUI, driven by JSON-RPC 2.0 over stdin/stdout.

Each method is one of the middleware's commands (:data:`METHODS`), its params
the command's fields, checked against their types (:func:`command_of`).
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
import functools
import getpass
import inspect
import json
import logging
import math
import os
import signal
import sqlite3
import sys
import threading
import types
import typing
from dataclasses import MISSING, fields
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Iterable

from ..middleware import commands as c
from ..middleware.manager import Config, GroupManager, default_parts
from ..middleware.netif import forced_portable
from ..middleware.transport import TransportError
from ..middleware.events import (DirectDelivered, DirectStatusChanged, Event, FileProgress, GroupsDiscovered,
                                 MemberRemoved, RemovedFromGroup, RoleChanged,
                                 MemberJoined, MemberLeft, MessagesDelivered, MessagesUpdated, NetworkChanged,
                                 SyncProgress, TopicChanged, WarningRaised)
from ..middleware.store_api import SearchQueryError
from ..middleware.types import ChatMessage, Mid, UsageError, format_mid, parse_mid

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


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class JsonRpcPeer:
    """Maps JSON-RPC methods onto commands (:data:`METHODS`) run by a GroupManager and, as its
    listener, its events onto notifications."""

    def __init__(self, write: Callable[[dict], None]) -> None:
        self.write = write
        self.manager: GroupManager | None = None
        self.stopping = asyncio.Event()

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

    # -- methods: params -> a command -> the manager -> its answer ---------------------------

    @property
    def running(self) -> GroupManager:
        """The manager the methods call: main() sets it before the first request is read."""
        if self.manager is None:
            raise RpcError(APP_ERROR, "the peer has not started")
        return self.manager

    def call(self, method: str, params: dict) -> Any:
        """The answer to ``method`` with ``params`` (an awaitable of it for a command that waits)."""
        command = command_of(method, params)
        if isinstance(command, c.Shutdown):
            self.stopping.set()
            return {}
        if isinstance(command, c.History) and not command.paged:
            count = self.running.execute(c.MessageCount(command.gid))
            if count > MAX_WHOLE_HISTORY:
                raise RpcError(APP_ERROR, f"group {command.gid} holds {count} messages, more than the "
                                          f"{MAX_WHOLE_HISTORY} 'history' returns in one answer: ask for pages with "
                                          "'before' or 'after' (a message's 'order') and 'limit' (at most "
                                          f"{c.MAX_HISTORY_PAGE})")
        result = self.running.execute(command)
        if inspect.isawaitable(result):
            return _answer_when_done(command, result)
        return answer_json(command, result)

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
        try:
            if request["method"] not in METHODS:
                raise RpcError(METHOD_NOT_FOUND, f"unknown method {request['method']!r:.60}")
            if not isinstance(params, dict):
                raise RpcError(INVALID_PARAMS, "params must be an object")
            result = self.call(request["method"], params)
            if asyncio.iscoroutine(result):
                return asyncio.ensure_future(self._finish(request, result))
        except RpcError as exc:
            return _error(rid, exc.code, exc.message) if "id" in request else None
        except SearchQueryError as exc:
            return _error(rid, INVALID_PARAMS, str(exc)) if "id" in request else None
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
            code = exc.code if isinstance(exc, RpcError) else INVALID_PARAMS if isinstance(exc, SearchQueryError) \
                else APP_ERROR
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


METHODS: dict[str, type[c.Command]] = c.METHODS
"""Each JSON-RPC method's command, marked so where the command is (middleware.commands.method): its
params are the command's fields, by name, checked against their types (:func:`command_of`);
tests/core/test_jsonrpc_methods.py holds the method table in resources/docs/jsonrpc.md to this."""


def command_of(method: str, params: dict) -> c.Command:
    """``method``'s command from ``params``: every field given or defaulted, none other, each of its
    field's type and within its bounds (else an INVALID_PARAMS error saying which and what is expected)."""
    command: type = METHODS[method]
    taken = _params_of(command)
    for key in params:
        if key not in taken:
            raise RpcError(INVALID_PARAMS, f"parameter {key!r:.60} is not supported by {method} "
                                           f"(it takes {', '.join(taken) or 'none'})")
    args = {}
    for name, (hint, required) in taken.items():
        if name in params:
            args[name] = _param(name, params[name], hint)
        elif required:
            raise RpcError(INVALID_PARAMS, f"missing parameter {name!r} (expected {_expected(hint)})")
    try:
        return command(**args)
    except ValueError as exc:  # the command's own checks (middleware.commands)
        raise RpcError(INVALID_PARAMS, str(exc)) from None


@functools.cache
def _params_of(command: type) -> dict[str, tuple[Any, bool]]:
    """A command's fields: name -> (type, whether it must be given).  Read once per command: resolving
    the annotations took most of a request's time."""
    hints = typing.get_type_hints(command, include_extras=True)
    return {f.name: (hints[f.name], f.default is MISSING and f.default_factory is MISSING) for f in fields(command)}


def _param(name: str, value: Any, hint: Any) -> Any:
    """``value`` as a field of type ``hint`` holds it, or an INVALID_PARAMS error."""
    kind, marks = _unannotated(hint)
    options = _options(kind)
    if value is None and type(None) in options:
        return None
    kind = next((option for option in options if option is not type(None)), kind)
    converted: Any = None
    if any(isinstance(mark, c.IsoTime) for mark in marks):
        converted = _iso_time(value)
    elif kind is bool or kind is str:
        converted = value if isinstance(value, kind) else None
    elif kind is int:
        converted = value if type(value) is int else None
    elif kind is float:
        converted = float(value) if type(value) in (int, float) else None
    elif kind == Mid:
        if isinstance(value, str):
            try:
                return parse_mid(value)
            except ValueError as exc:
                raise RpcError(INVALID_PARAMS, f"bad {name}: {exc}") from None
    elif typing.get_origin(kind) is tuple:
        if type(value) is list and all(isinstance(item, str) for item in value):
            converted = tuple(value)
    elif typing.get_origin(kind) is typing.Literal:
        converted = value if value in typing.get_args(kind) else None
    for mark in marks:
        if isinstance(mark, c.Between) and converted is not None and not mark.low <= converted <= mark.high:
            converted = None
    if converted is None:
        raise RpcError(INVALID_PARAMS, f"invalid parameter {name!r} (expected {_expected(hint)})")
    return converted


def _unannotated(hint: Any) -> tuple[Any, tuple]:
    if typing.get_origin(hint) is typing.Annotated:
        kind, *marks = typing.get_args(hint)
        return kind, tuple(marks)
    return hint, ()


def _options(kind: Any) -> tuple:
    return typing.get_args(kind) if typing.get_origin(kind) in (typing.Union, types.UnionType) else (kind,)


def _expected(hint: Any) -> str:
    """What a field of type ``hint`` takes, in words."""
    kind, marks = _unannotated(hint)
    options = _options(kind)
    words = []
    for option in options:
        if option is type(None):
            continue
        if any(isinstance(mark, c.IsoTime) for mark in marks):
            words.append("an ISO-8601 time such as 2026-01-31T09:00:00Z")
        elif option == Mid:
            words.append("a mid string '<pid>:<seqno>'")
        elif typing.get_origin(option) is tuple:
            words.append("a list of strings")
        elif typing.get_origin(option) is typing.Literal:
            words.append(" or ".join(json.dumps(choice) for choice in typing.get_args(option)))
        else:
            words.append({str: "a string", bool: "true or false", int: "an integer", float: "a number"}[option])
    for mark in marks:
        if isinstance(mark, c.Between):
            words[-1] += f" from {mark.low:g} to {mark.high:g}"
    return " or ".join(words + (["null"] if type(None) in options else []))


def _iso_time(value: Any) -> int | None:
    """An ISO-8601 time (as 'sent_at' is written) as ms since the epoch (None: not one)."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def answer_json(command: c.Command, result: Any) -> Any:
    """A command's result as its method answers it: named by the command's ``answers``, ``{}`` for
    none; a page of ``history`` gives each message's ``order``."""
    if isinstance(command, c.History) and command.paged:
        return [{**message_json(message), "order": message.order} for message in result]
    if isinstance(command, c.Thread) and not result:
        raise RpcError(APP_ERROR, f"no message {format_mid(command.root)} in group {command.gid}")
    names = type(command).answers
    if names:
        values = result if len(names) > 1 else (result,)
        return {name: _json(value) for name, value in zip(names, values)}
    return {} if result is None else _json(result)


async def _answer_when_done(command: c.Command, pending: Awaitable) -> Any:
    return answer_json(command, await pending)


def _json(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    if type(value) is tuple and len(value) == 2 and type(value[0]) is str and type(value[1]) is int:
        return format_mid(value)  # a Mid
    if isinstance(value, (list, tuple)):
        return [_json(item) for item in value]
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
        manager = GroupManager(config, peer, default_parts(config))
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
