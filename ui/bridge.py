"""The GUI's one door to the middleware: calls go out as futures, events come back as Qt signals.

Why a thread and a bridge (and not QtAsyncio or qasync): PySide6's QtAsyncio
is a technical preview without datagram endpoints, so it cannot carry UDP
multicast; qasync would put the protocol timers on the GUI thread, where a
long paint or a modal dialog would stall them.  So the middleware runs its own
asyncio loop in a daemon thread (:class:`middleware.runner.ManagerThread`),
stays Qt-free and runnable headless, and keeps its timers running while the
GUI is busy.  :class:`Backend` is the listener the middleware calls on its
loop thread; each callback is put on a thread-safe queue and a payload-free
signal, queued to the GUI thread, wakes the drain, so every public signal is
emitted on the GUI thread.  The queue (rather than signal arguments) coalesces
bursts: consecutive message batches of a group reach the window as one, and
only plain Python objects cross the thread boundary (PySide6 6.12 on Python
3.11 mis-counted references to ``object`` arguments of cross-thread signals
under load, crashing at exit).  Calls (:meth:`Backend.request`)
run on the loop thread and their results come back the same way, to a
callback on the GUI thread; the GUI never waits on the network.

:class:`Backend` is the small interface the window talks to; the real one is
:class:`ManagerBackend`, and :class:`ui.memory_backend.MemoryBackend` is an
in-memory stand-in (no sockets) for tests, screenshots and the benchmark.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
from collections import deque
from typing import Any, Callable

from PySide6.QtCore import QObject, Qt, Signal, Slot

from ..middleware.manager import Config
from ..middleware.runner import ManagerThread
from ..middleware.types import ChatMessage, GroupView, Member, UsageError

log = logging.getLogger(__name__)

ResultCallback = Callable[[Any], None]
ErrorCallback = Callable[[Exception], None]


class Backend(QObject):
    """Middleware events as GUI-thread signals, and middleware calls with GUI-thread callbacks."""

    messages_arrived = Signal(str, object)  # gid, list[ChatMessage]
    groups_discovered = Signal(object)  # list[GroupView]
    group_created = Signal(str)
    member_joined = Signal(str, object)  # gid, Member
    member_left = Signal(str, object)
    sync_progress = Signal(str, int, int)  # gid, received, expected
    warning = Signal(str, str)  # gid, text: something the user should know (e.g. equivocation)
    messages_updated = Signal(str, object)  # gid, list[ChatMessage]: edited, deleted, reacted to, pinned
    topic_changed = Signal(str, str, str)  # gid, topic, pid of who set it
    failed = Signal(str)  # a call failed and nobody asked to hear about it

    _wake = Signal()  # from any thread; connected queued to _drain

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.pid = ""
        self.name = ""
        self.interface = ""
        self.port = 0
        self._tokens = itertools.count(1)
        self._callbacks: dict[int, tuple[ResultCallback | None, ErrorCallback | None, str]] = {}
        self._queue: deque[tuple[str, Any]] = deque()
        self._wake.connect(self._drain, Qt.ConnectionType.QueuedConnection)

    def _post(self, kind: str, payload: Any) -> None:
        """Called from any thread."""
        self._queue.append((kind, payload))
        self._wake.emit()

    # -- GroupListener: called on the middleware thread --------------------------------

    def on_messages(self, gid: str, messages: list[ChatMessage]) -> None:
        self._post("messages", (gid, list(messages)))

    def on_groups_discovered(self, groups: list[GroupView]) -> None:
        self._post("groups", list(groups))

    def on_group_created(self, gid: str) -> None:
        self._post("created", gid)

    def on_member_joined(self, gid: str, member: Member) -> None:
        self._post("joined", (gid, member))

    def on_member_left(self, gid: str, member: Member) -> None:
        self._post("left", (gid, member))

    def on_sync_progress(self, gid: str, received: int, expected: int) -> None:
        self._post("sync", (gid, received, expected))

    def on_warning(self, gid: str, text: str) -> None:
        self._post("warning", (gid, text))

    def on_updated(self, gid: str, messages: list[ChatMessage]) -> None:
        self._post("updated", (gid, list(messages)))

    def on_topic_changed(self, gid: str, topic: str, by: str) -> None:
        self._post("topic", (gid, topic, by))

    # -- calls ------------------------------------------------------------------------------

    def request(self, method: str, *args: Any, on_result: ResultCallback | None = None,
                on_error: ErrorCallback | None = None) -> None:
        """Run ``manager.<method>(*args)`` on the middleware thread; callbacks run on the GUI thread.

        Without ``on_error`` a failure is reported through :attr:`failed`.
        """
        token = next(self._tokens)
        self._callbacks[token] = (on_result, on_error, method)
        try:
            future = self._submit(method, args)
        except Exception as exc:  # e.g. the backend is closed
            self._post("result", (token, None, exc))
            return
        future.add_done_callback(lambda done, token=token: self._post_result(token, done))

    def _post_result(self, token: int, done: concurrent.futures.Future) -> None:
        try:
            result, error = done.result(), None
        except Exception as exc:
            result, error = None, exc
        self._post("result", (token, result, error))

    def _submit(self, method: str, args: tuple) -> concurrent.futures.Future:
        raise NotImplementedError

    def close(self) -> None:
        pass

    # -- GUI thread ----------------------------------------------------------------------------

    @Slot()
    def _drain(self) -> None:
        while self._queue:
            kind, payload = self._queue.popleft()
            if kind == "messages":
                gid, messages = payload
                while self._queue and self._queue[0][0] == "messages" and self._queue[0][1][0] == gid:
                    messages.extend(self._queue.popleft()[1][1])
            self._dispatch(kind, payload)

    def _dispatch(self, kind: str, payload: Any) -> None:
        if kind == "messages":
            self.messages_arrived.emit(*payload)
        elif kind == "groups":
            self.groups_discovered.emit(payload)
        elif kind == "created":
            self.group_created.emit(payload)
        elif kind == "joined":
            self.member_joined.emit(*payload)
        elif kind == "left":
            self.member_left.emit(*payload)
        elif kind == "sync":
            self.sync_progress.emit(*payload)
        elif kind == "warning":
            self.warning.emit(*payload)
        elif kind == "updated":
            self.messages_updated.emit(*payload)
        elif kind == "topic":
            self.topic_changed.emit(*payload)
        elif kind == "result":
            token, result, error = payload
            on_result, on_error, method = self._callbacks.pop(token, (None, None, "?"))
            if error is None:
                if on_result is not None:
                    on_result(result)
            elif on_error is not None:
                on_error(error)
            else:
                if not isinstance(error, UsageError):
                    log.error("%s failed", method, exc_info=error)
                self.failed.emit(describe_error(error))


def describe_error(error: BaseException) -> str:
    """A one-line message for the user (no tracebacks for what they did wrong)."""
    if isinstance(error, UsageError):
        return str(error)
    if isinstance(error, OSError):
        return error.strerror or str(error)
    return f"{type(error).__name__}: {error}"


class ManagerBackend(Backend):
    """The real middleware, on its own asyncio loop thread."""

    def __init__(self, config: Config, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.thread = ManagerThread(config, self)
        self.config = config

    def start(self) -> None:
        """Open the sockets (raises TransportError/OSError/UsageError if that fails)."""
        manager = self.thread.start()
        self.pid, self.name, self.interface = manager.pid, manager.name, manager.interface
        self.port = self.config.port

    def _submit(self, method: str, args: tuple) -> concurrent.futures.Future:
        manager = self.thread.manager
        if manager is None:
            raise RuntimeError("the middleware is not running")
        return self.thread.call(getattr(manager, method), *args)

    def close(self) -> None:
        self.thread.stop()
