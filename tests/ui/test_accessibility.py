"""The window as a screen reader sees it (issue 45): the app runs on a private session bus with the
accessibility bus of at-spi2-core, Qt's AT-SPI bridge on (QT_LINUX_ACCESSIBILITY_ALWAYS_ON), and a
walk through AT-SPI (tests/ui/atspi_walk.py, with the system's python3-pyatspi) reads its accessible
tree: no control that takes the keyboard focus may be without a name, with a group on show and with a
direct conversation on show, and each message's row is named as a sentence ("Reply from Cat, …:
text, 2 replies, pinned")."""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's python3-pyatspi is for the system's interpreter
BUS_LAUNCHER = "/usr/libexec/at-spi-bus-launcher"


def has_pyatspi() -> bool:
    return os.path.exists(SYSTEM_PYTHON) and subprocess.run(
        [SYSTEM_PYTHON, "-c", "import pyatspi"], capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(not (shutil.which("dbus-daemon") and os.path.exists(BUS_LAUNCHER) and has_pyatspi()),
                                reason="dbus-daemon, at-spi2-core or python3-pyatspi missing (packaging/system-deps.sh)")


def stop(process):
    """Stop ``process`` and what it started (its own session: the launcher's bus and registry)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def buses():
    daemon = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--print-address=1"],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    address = daemon.stdout.readline().strip()
    env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=address, QT_LINUX_ACCESSIBILITY_ALWAYS_ON="1",
               QT_QPA_PLATFORM="xcb", NO_AT_BRIDGE="0")
    launcher = subprocess.Popen([BUS_LAUNCHER, "--launch-immediately"], env=env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield env
    stop(launcher)
    stop(daemon)


def walk(env):
    done = subprocess.run([SYSTEM_PYTHON, str(HERE / "atspi_walk.py"), "m2mc-a11y"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_focusable_control_and_message_row_has_a_name_through_at_spi(buses):
    app = subprocess.Popen([sys.executable, str(HERE / "a11y_app.py")], env=buses, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert app.stdout.readline().strip() == "ready"
        group = walk(buses)
        app.stdin.write("direct\n")
        app.stdin.flush()
        assert app.stdout.readline().strip() == "direct"
        direct = walk(buses)
    finally:
        if app.poll() is None:
            app.stdin.close()
            try:
                app.wait(10)
            except subprocess.TimeoutExpired:
                stop(app)
    for found in (group, direct):
        assert not found["errors"], found["errors"]
        unnamed = [f"{f['role']} at {f['path']}" for f in found["focusable"] if not f["name"]]
        assert not unnamed, "focusable controls without a name:\n" + "\n".join(unnamed)
    roles = {f["role"] for f in group["focusable"]}
    assert {"push button", "list", "list item", "tree", "table cell", "text"} <= roles, roles
    names = {f["name"] for f in group["focusable"]}
    assert {"Groups", "Threads", "Members", "Message to Travel & lunch", "Send", "Reply tree"} <= names, names
    rows = [row["name"] for row in group["rows"]]
    assert len(rows) >= 5 and all(name.startswith(("Message from ", "Reply from ")) for name in rows), rows
    assert any(", 2 replies" in name for name in rows), rows
    direct_names = {f["name"] for f in direct["focusable"]}
    assert {"Direct conversation", "Direct message to Ann"} <= direct_names, direct_names
