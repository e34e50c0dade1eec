"""The middleware's own tests, run again with every fallback forced: the portable network calls
(M2MC_PORTABLE=1, the path Windows and macOS take) and the pure-Python twins of the C cores
(M2MC_PURE_PYTHON=1, the path of an install without a compiler).

Two modules, chosen to be quick and wide: a whole GroupManager (interface resolution, crypto,
store, ordering) and the sans-I/O core killed between persist, transmit and notify.
tests/lan/test_lan_portable.py runs m2mc-peers the same way on a namespace LAN.
"""

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from m2mc.middleware.manager import Config
from m2mc.middleware.runner import ManagerThread

ROOT = Path(__file__).resolve().parents[2]
MODULES = ["tests/core/test_operations_manager.py", "tests/core/test_peer_sim.py"]
FORCED = {"M2MC_PORTABLE": "1", "M2MC_PURE_PYTHON": "1"}


def test_middleware_tests_pass_with_every_fallback_forced():
    env = {**os.environ, **FORCED}
    env.pop("PYTEST_XDIST_WORKER", None)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *MODULES],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout.splitlines()[-1]


class ProactorLike(asyncio.AbstractEventLoop):
    """What asyncio.new_event_loop() gives on Windows: a loop that cannot watch a socket with add_reader."""


def test_the_middleware_thread_runs_a_loop_that_can_watch_sockets(monkeypatch, tmp_path):
    monkeypatch.setattr(asyncio, "new_event_loop", ProactorLike)
    runner = ManagerThread(Config(tmp_path, name="Ann", iface="127.0.0.1", zeroconf=False))
    try:
        assert isinstance(runner._loop, asyncio.SelectorEventLoop)
    finally:
        runner._loop.close()
