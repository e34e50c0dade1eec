"""m2mc-chat's command line: without a display it says so and names the headless peer, before Qt
can abort; --help and --version need no display."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from m2mc.app.chat import NO_DISPLAY, display_missing
from m2mc.middleware import __version__

REPO = Path(__file__).resolve().parents[2]
DISPLAY_VARIABLES = ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")


def headless_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DISPLAY_VARIABLES}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")  # nothing of the user's is touched, whatever happens
    return env


def run_chat(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "m2mc.app.chat", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=60)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X11/Wayland sessions only")
def test_chat_without_a_display_explains_itself_and_exits_nonzero(tmp_path):
    result = run_chat(["--name", "Ann"], headless_env(tmp_path))
    assert result.returncode == 2, result.stderr  # not a Qt abort (-6)
    assert result.stderr.strip() == NO_DISPLAY
    assert "no display found" in NO_DISPLAY and "m2mc-peer" in NO_DISPLAY
    assert not (tmp_path / "data").exists(), "it must stop before it creates any state"


def test_chat_version_and_help_need_no_display(tmp_path):
    env = headless_env(tmp_path)
    version = run_chat(["--version"], env)
    assert version.returncode == 0 and version.stdout.strip() == f"m2mc-chat {__version__}", version.stderr
    usage = run_chat(["--help"], env)
    assert usage.returncode == 0 and "--no-zeroconf" in usage.stdout, usage.stderr


@pytest.mark.parametrize("environ, platform, missing", [
    ({}, "linux", True),
    ({"DISPLAY": ""}, "linux", True),
    ({"DISPLAY": ":0"}, "linux", False),
    ({"WAYLAND_DISPLAY": "wayland-0"}, "linux", False),
    ({"QT_QPA_PLATFORM": "offscreen"}, "linux", False),
    ({}, "darwin", False),
    ({}, "win32", False),
])
def test_display_missing_reads_the_session(environ, platform, missing):
    assert display_missing(environ, platform) is missing


def test_chat_takes_the_file_options_and_downloads_to_the_desktops_folder(tmp_path):
    from m2mc.app.chat import downloads_folder, parse_args

    args = parse_args(["--download-dir", str(tmp_path), "--auto-download", "0", "--max-file-size", "1000"])
    assert (args.download_dir, args.auto_download, args.max_file_size) == (tmp_path, 0, 1000)
    assert downloads_folder(tmp_path) == tmp_path
    default = downloads_folder(None)
    assert default is None or default.is_dir()
