"""The GUI's one door to the middleware: calls go out as futures, events come back as Qt signals.

Why a thread and a bridge (and not QtAsyncio or qasync): PySide6's QtAsyncio
is a technical preview without datagram endpoints, so it cannot carry UDP
multicast; qasync would put the protocol timers on the GUI thread, where a
long paint or a modal dialog would stall them.  So the middleware runs its own
asyncio loop in a daemon thread (:class:`middleware.runner.ManagerThread`),
stays Qt-free and runnable headless, and keeps its timers running while the
GUI is busy.  :meth:`Backend.post` is the listener the middleware calls on its
loop thread; it puts each event (:mod:`middleware.events`) as it is on a
thread-safe queue, and a payload-free signal, queued to the GUI thread, wakes
the drain, which emits each as the one :attr:`Backend.peer_event` signal on the
GUI thread.  There is no method or signal per kind: each controller connects
to ``peer_event`` and ``match``-es the kinds it cares about.  The queue
(rather than signal arguments) coalesces bursts: consecutive message batches
of a group reach the window as one, and
only plain Python objects cross the thread boundary (PySide6 6.12 on Python
3.11 mis-counted references to ``object`` arguments of cross-thread signals
under load, crashing at exit).  Calls (:meth:`Backend.call`, typed against
:class:`ui.backend.Peer`) run on the loop thread and their results come back
the same way, to a callback on the GUI thread; the GUI never waits on the network.

:class:`Backend` is the small interface the window talks to; the real one is
:class:`ManagerBackend`, and :class:`ui.memory_backend.MemoryBackend` runs the same
``GroupManager`` on a LAN in memory (no sockets, virtual time) for tests, screenshots and the benchmark.
"""

from __future__ import annotations

import concurrent.futures
import functools
import itertools
import logging
from collections import deque
from typing import Any, Awaitable, Callable, TypeVar

import shiboken6
from PySide6.QtCore import QObject, Qt, Signal, Slot

from ..middleware.manager import Config, Parts, default_parts
from ..middleware.runner import ManagerThread
from ..middleware.commands import Command
from ..middleware.events import Event, MessagesDelivered
from ..middleware.types import UsageError

from .backend import CallFinished, Peer

log = logging.getLogger(__name__)

R = TypeVar("R")
ResultCallback = Callable[[Any], None]
ErrorCallback = Callable[[Exception], None]


class Backend(QObject):
    """Middleware events as a GUI-thread signal, and middleware calls with GUI-thread callbacks."""

    peer_event = Signal(object)  # an Event (middleware.events), as the middleware told it
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
        self._queue: deque[Event | CallFinished] = deque()
        self._wake.connect(self._drain, Qt.ConnectionType.QueuedConnection)

    def post(self, event: Event | CallFinished) -> None:
        """The middleware's listener (:data:`middleware.events.Listener`); called from any thread."""
        self._queue.append(event)
        self._wake.emit()

    # -- calls ------------------------------------------------------------------------------

    def call(self, work: Callable[[Peer], R], on_result: Callable[[R], None] | None = None,
             on_error: ErrorCallback | None = None) -> None:
        """Run ``work(peer)`` on the middleware thread, e.g. ``lambda peer: peer.history(gid)``;
        the callbacks run on the GUI thread.  Without ``on_error`` a failure is reported through
        :attr:`failed`.  ``work`` runs later: it must not read state the GUI may change meanwhile."""
        self._request(work, on_result, on_error)

    def call_async(self, work: Callable[[Peer], Awaitable[R]], on_result: Callable[[R], None] | None = None,
                   on_error: ErrorCallback | None = None) -> None:
        """:meth:`call` for a coroutine method (``create_group_async``, ``join_group_async``): the
        callbacks hear its outcome once it has run to its end."""
        self._request(work, on_result, on_error)

    def execute(self, command: Command, on_result: ResultCallback | None = None,
                on_error: ErrorCallback | None = None) -> None:
        """:meth:`call` for a command (:mod:`middleware.commands`) as it is: the peer runs it by its
        ``execute``, the one path every call takes (one that waits is run to its end)."""
        self._request(lambda peer: peer.execute(command), on_result, on_error)

    def _request(self, work: Callable[[Peer], Any], on_result: ResultCallback | None,
                 on_error: ErrorCallback | None) -> None:
        token = next(self._tokens)
        self._callbacks[token] = (on_result, on_error, _call_name(work))
        try:
            future = self._submit(work)
        except Exception as exc:  # e.g. the backend is closed
            self.post(CallFinished(token, None, exc))
            return
        future.add_done_callback(functools.partial(self._post_result, token))

    def _post_result(self, token: int, done: concurrent.futures.Future) -> None:
        try:
            result, error = done.result(), None
        except Exception as exc:
            result, error = None, exc
        self.post(CallFinished(token, result, error))

    def _submit(self, work: Callable[[Peer], Any]) -> concurrent.futures.Future:
        raise NotImplementedError

    def close(self) -> None:
        pass

    # -- GUI thread ----------------------------------------------------------------------------

    @Slot()
    def _drain(self) -> None:
        while self._queue:
            event = self._queue.popleft()
            if isinstance(event, MessagesDelivered):
                # A burst for one group reaches the window as one batch.
                batch = event.messages
                while self._queue:
                    following = self._queue[0]
                    if not isinstance(following, MessagesDelivered) or following.gid != event.gid:
                        break
                    if batch is event.messages:
                        batch = list(batch)
                    batch += following.messages
                    self._queue.popleft()
                if batch is not event.messages:
                    event = MessagesDelivered(event.gid, batch)
            self._dispatch(event)

    def _dispatch(self, event: Event | CallFinished) -> None:
        if isinstance(event, CallFinished):
            self._finish(event.token, event.result, event.error)
        else:
            self.peer_event.emit(event)

    def _finish(self, token: int, result: Any, error: Exception | None) -> None:
        on_result, on_error, name = self._callbacks.pop(token, (None, None, "?"))
        if _owner_deleted(on_result) or _owner_deleted(on_error):
            return  # what asked (a model, a pane) was closed while the middleware worked: nobody to tell
        if error is None:
            if on_result is not None:
                on_result(result)
        elif on_error is not None:
            on_error(error)
        else:
            if not isinstance(error, UsageError):
                log.error("%s failed", name, exc_info=error)
            self.failed.emit(describe_error(error))


def _owner_deleted(callback: Callable | None) -> bool:
    """Whether ``callback`` is a method of a Qt object that has been deleted (calling it would
    raise "Signal source has been deleted" from inside the event loop)."""
    owner = getattr(callback, "__self__", None)
    return isinstance(owner, QObject) and not shiboken6.isValid(owner)


def _call_name(work: Callable) -> str:
    """Where a call was written, for the log when it fails."""
    code = getattr(work, "__code__", None)
    return f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}" if code is not None else repr(work)


def describe_error(error: BaseException) -> str:
    """A one-line message for the user (no tracebacks for what they did wrong)."""
    if isinstance(error, UsageError):
        return str(error)
    if isinstance(error, OSError):
        return error.strerror or str(error)
    return f"{type(error).__name__}: {error}"


class ManagerBackend(Backend):
    """The real middleware, on its own asyncio loop thread."""

    def __init__(self, config: Config, parent: QObject | None = None, *,
                 parts: Callable[[Config], Parts] = default_parts) -> None:
        """``parts``: makes the manager's store, network and services (the application's choice),
        on the middleware's thread."""
        super().__init__(parent)
        self.middleware = ManagerThread(config, self.post, parts)  # not "thread": QObject.thread() is Qt's
        self.config = config

    def start(self) -> None:
        """Open the sockets (raises TransportError/OSError/UsageError if that fails)."""
        manager = self.middleware.start()
        self.pid, self.name, self.interface = manager.pid, manager.name, manager.interface
        self.port = self.config.port

    def _submit(self, work: Callable[[Peer], Any]) -> concurrent.futures.Future:
        manager = self.middleware.manager
        if manager is None:
            raise RuntimeError("the middleware is not running")
        peer: Peer = manager
        return self.middleware.call(work, peer)  # a coroutine it returns is run to its end there

    def close(self) -> None:
        self.middleware.stop()
