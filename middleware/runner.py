"""Run a GroupManager on an asyncio loop of its own, in a daemon thread.

The GUI (or any other threaded caller) talks to it through :meth:`call`, which
runs a function on the loop thread and returns a ``concurrent.futures.Future``;
the listener hears each event on the loop thread, so a GUI bridge must re-post them
to its own thread.  The middleware's timers keep running while the caller is busy.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Callable

from .manager import Config, GroupManager, Parts, default_parts
from .events import Listener


class ManagerThread:
    def __init__(self, config: Config, listener: Listener | None = None,
                 parts: Callable[[Config], Parts] = default_parts) -> None:
        """``parts`` makes the manager's store, network and services (:class:`~middleware.manager.Parts`):
        called on the loop's thread, where they are used (a SQLite connection stays on its thread)."""
        self.config = config
        self.listener = listener
        self.parts = parts
        self.manager: GroupManager | None = None
        # A selector loop on every system: the transport watches its sockets with add_reader, which
        # Windows' default (proactor) loop lacks. Elsewhere this is the default loop anyway.
        self._loop: asyncio.AbstractEventLoop = asyncio.SelectorEventLoop()
        self._thread = threading.Thread(target=self._run, name="m2mc-middleware", daemon=True)
        self._started = concurrent.futures.Future()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        if self._started.exception() is None:
            self._loop.run_forever()
        self._loop.close()

    async def _start(self) -> None:
        try:
            self.manager = GroupManager(self.config, self.listener, self.parts(self.config))
            await self.manager.start()
        except BaseException as exc:  # handed to the caller of start()
            self._started.set_exception(exc)
            return
        self._started.set_result(self.manager)

    def start(self, timeout: float = 30) -> GroupManager:
        """Start the thread; returns the manager once its sockets are open (or raises)."""
        self._thread.start()
        return self._started.result(timeout)

    def call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        """Run ``function(*args, **kwargs)`` on the loop thread (a coroutine it returns is run to its end)."""
        future: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    result = function(*args, **kwargs)
                except BaseException as exc:
                    future.set_exception(exc)
                    return
                if asyncio.iscoroutine(result):  # e.g. join_group_async: its result once it is done
                    self._loop.create_task(result).add_done_callback(lambda done: _settle(future, done))
                else:
                    future.set_result(result)

        self._loop.call_soon_threadsafe(run)
        return future

    def stop(self, timeout: float = 10) -> None:
        if not self._thread.is_alive():
            return
        if self.manager is not None:
            done = asyncio.run_coroutine_threadsafe(self.manager.close(), self._loop)
            try:
                done.result(timeout)
            except Exception:
                pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)


def _settle(future: concurrent.futures.Future, done: asyncio.Task) -> None:
    """Hand a finished task's outcome to the caller's future (a cancelled task cancels it)."""
    if done.cancelled():
        future.set_exception(concurrent.futures.CancelledError())  # it is running: cancel() would not settle it
    elif done.exception() is not None:
        future.set_exception(done.exception())
    else:
        future.set_result(done.result())
