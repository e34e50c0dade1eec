"""Packaging: desktop entry and metainfo validate, icons, the XDG install script, the wheel's
entry points, version, contents and long description (the README, whose links the sdist carries),
(slow) the wheel in a clean venv with and without its extras, and (slow) the PyInstaller bundle
built and started without the repo."""

from __future__ import annotations

import configparser
import email
import os
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

from m2mc.middleware import __version__
from tests.testbed.markdown_links import relative_paths

REPO = Path(__file__).resolve().parents[2]
RESOURCES = REPO / "resources"
DESKTOP_FILE = RESOURCES / "desktop" / "m2mc-chat.desktop"
METAINFO = RESOURCES / "desktop" / "io.github.m2mc.chat.metainfo.xml"
INSTALL_SCRIPT = REPO / "packaging" / "install-desktop.sh"
ICON_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)
ENTRY_POINTS = {
    "m2mc-chat": "m2mc.app.chat:main",
    "m2mc-peer": "m2mc.app.peer:main",
    "m2mc-thread-stats": "m2mc.app.analytics.thread_stats:main",
    "m2mc-gen-logs": "m2mc.app.analytics.gen_logs:main",
    "m2mc-ordering-study": "m2mc.app.ordering_study:main",
}
# The extra each command needs beyond the base install (the chat).
COMMAND_EXTRA = {"m2mc-thread-stats": "analytics", "m2mc-gen-logs": "analytics", "m2mc-ordering-study": "study"}


def tool(name: str) -> str:
    """Path of a Debian tool; packaging/system-deps.sh installs it (make setup), so CI never skips."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed and packaging/system-deps.sh could not install it (not root?)")
    return path


def desktop_entry(path: Path) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # keys are case-sensitive in desktop entries
    parser.read(path, encoding="utf-8")
    return parser["Desktop Entry"]


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", header[16:24])


def run_install(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(INSTALL_SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


# --- desktop entry, metainfo, icons -------------------------------------------------------------

def test_desktop_file_validates():
    result = subprocess.run([tool("desktop-file-validate"), str(DESKTOP_FILE)], capture_output=True, text=True)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_metainfo_validates():
    result = subprocess.run([tool("appstreamcli"), "validate", "--no-net", "--pedantic", str(METAINFO)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_desktop_entry_matches_the_app_and_the_metainfo():
    entry = desktop_entry(DESKTOP_FILE)
    assert entry["Exec"] == "m2mc-chat"
    # app/chat.py calls setDesktopFileName("m2mc-chat"); the file name must match for docks.
    assert DESKTOP_FILE.stem == "m2mc-chat"
    assert "m2mc-chat" in (REPO / "app" / "chat.py").read_text(encoding="utf-8")
    root = ET.parse(METAINFO).getroot()
    assert root.findtext("launchable") == DESKTOP_FILE.name
    assert METAINFO.name == f"{root.findtext('id')}.metainfo.xml"
    assert {b.text for b in root.iter("binary")} == {"m2mc-chat", "m2mc-peer"}
    assert entry["Icon"] == "m2mc-chat"


def test_metainfo_newest_release_is_the_package_version():
    releases = ET.parse(METAINFO).getroot().find("releases")
    assert releases is not None and releases[0].get("version") == __version__, (
        f"add <release version=\"{__version__}\"> at the top of {METAINFO.name}")


def test_app_icon_pngs_cover_16_to_512():
    for size in ICON_SIZES:
        path = RESOURCES / "icons" / "hicolor" / f"{size}x{size}" / "apps" / "m2mc-chat.png"
        assert png_size(path) == (size, size)
        assert path.stat().st_size < 64 * 1024, f"{path} is bigger than it needs to be"
    found = sorted(p.parent.parent.name for p in (RESOURCES / "icons" / "hicolor").glob("*/apps/m2mc-chat.png"))
    assert sorted(f"{s}x{s}" for s in ICON_SIZES) == found


# --- install-desktop.sh -------------------------------------------------------------------------

def installed_files(share: Path) -> set[str]:
    return {str(p.relative_to(share)) for p in share.rglob("*") if p.is_file() and p.name != "mimeinfo.cache"}


def expected_files() -> set[str]:
    icons = {f"icons/hicolor/{s}x{s}/apps/m2mc-chat.png" for s in ICON_SIZES}
    return icons | {"icons/hicolor/scalable/apps/m2mc-chat.svg", "applications/m2mc-chat.desktop",
                    f"metainfo/{METAINFO.name}"}


def test_install_puts_files_in_the_xdg_places_and_uninstall_removes_them(tmp_path):
    prefix = tmp_path / "a prefix"
    result = run_install("--prefix", str(prefix))
    assert result.returncode == 0, result.stderr
    share = prefix / "share"
    assert installed_files(share) == expected_files()
    assert (share / "icons/hicolor/512x512/apps/m2mc-chat.png").read_bytes() == \
        (RESOURCES / "icons/hicolor/512x512/apps/m2mc-chat.png").read_bytes()
    assert desktop_entry(share / "applications/m2mc-chat.desktop")["Exec"] == "m2mc-chat"

    result = run_install("--prefix", str(prefix), "--uninstall")
    assert result.returncode == 0, result.stderr
    assert installed_files(share) == set()


def test_install_without_prefix_follows_xdg_data_home(tmp_path):
    data_home = tmp_path / "data"
    result = run_install(env={"HOME": str(tmp_path / "home"), "XDG_DATA_HOME": str(data_home)})
    assert result.returncode == 0, result.stderr
    assert installed_files(data_home) == expected_files()
    assert not (tmp_path / "home").exists()


def fake_bundle(path: Path) -> Path:
    path.mkdir(parents=True)
    for program in ("m2mc-chat", "m2mc-peer"):
        (path / program).write_text(f"#!/bin/sh\necho {program} fake\n")
        (path / program).chmod(0o755)
    return path


def test_install_with_bundle_copies_it_links_bin_and_points_the_menu_at_it(tmp_path):
    bundle = fake_bundle(tmp_path / "dist" / "m2mc")
    prefix = tmp_path / "my home"
    result = run_install("--prefix", str(prefix), "--bundle", str(bundle))
    assert result.returncode == 0, result.stderr
    chat = prefix / "lib" / "m2mc" / "m2mc-chat"
    assert (prefix / "bin" / "m2mc-peer").resolve() == prefix / "lib" / "m2mc" / "m2mc-peer"
    assert subprocess.run([prefix / "bin" / "m2mc-chat"], capture_output=True, text=True).stdout == "m2mc-chat fake\n"
    desktop = prefix / "share" / "applications" / "m2mc-chat.desktop"
    entry = desktop_entry(desktop)
    assert entry["Exec"] == f'"{chat}"'  # the space in the path needs quotes
    assert entry["TryExec"] == str(chat)
    validate = shutil.which("desktop-file-validate")
    if validate:
        assert subprocess.run([validate, str(desktop)], capture_output=True).returncode == 0

    assert run_install("--prefix", str(prefix), "--uninstall").returncode == 0
    assert not (prefix / "lib" / "m2mc").exists() and not (prefix / "bin" / "m2mc-chat").exists()
    assert bundle.exists()


@pytest.mark.parametrize("args, message", [
    (["--bundle", "/nonexistent/m2mc"], "not a built bundle"),
    (["--exec", "/opt/bad$name/m2mc-chat"], "may not contain"),
    (["--frobnicate"], "unknown option --frobnicate"),
])
def test_install_refuses_bad_input_with_a_clear_message(tmp_path, args, message):
    result = run_install("--prefix", str(tmp_path), *args)
    assert result.returncode != 0
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "share" / "applications").exists()


# --- wheel and sdist ----------------------------------------------------------------------------

def build_distributions(tmp_path: Path) -> tuple[Path, Path]:
    """Wheel and sdist from a copy of the sources, so the build leaves nothing in the repo."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "MANIFEST.in"):
        shutil.copy(REPO / name, source / name)
    for folder in ("app", "middleware", "ui", "resources", "packaging/m2mc"):
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    out = tmp_path / "out"
    out.mkdir()
    built = []
    for hook in ("build_wheel", "build_sdist"):
        # One process per hook (setuptools keeps state between them); it chatters on stdout,
        # so the file name is marked.
        code = f"import sys; from setuptools import build_meta; print('BUILT', build_meta.{hook}(sys.argv[1]))"
        result = subprocess.run([sys.executable, "-c", code, str(out)], cwd=source, capture_output=True, text=True,
                                timeout=300)
        if result.returncode != 0 and "No module named 'wheel'" in result.stderr:
            pytest.skip("this setuptools needs the 'wheel' package to build wheels (pip install wheel)")
        assert result.returncode == 0, result.stderr[-3000:]
        built.append(next(line for line in result.stdout.splitlines() if line.startswith("BUILT ")).split()[1])
    wheel_name, sdist_name = built
    return out / wheel_name, out / sdist_name


@pytest.fixture(scope="module")
def distributions(tmp_path_factory) -> tuple[Path, Path]:
    return build_distributions(tmp_path_factory.mktemp("dist"))


def test_wheel_ships_one_import_package_and_no_test_support(distributions):
    wheel, _sdist = distributions
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top_level == {"m2mc"}
    assert {n.split("/")[1] for n in names if n.startswith("m2mc/")} == {"__init__.py", "app", "middleware", "ui"}
    assert "m2mc/app/analytics/thread_stats.py" in names and "m2mc/middleware/wire.py" in names
    # Namespaces and fault injection live in tests/testbed/, which is not installed.
    assert not [n for n in names if n.endswith(("/netns.py", "/faults.py")) or n.startswith("tests/")]


def test_wheel_and_sdist_carry_the_entry_points_and_the_single_version(distributions, tmp_path):
    wheel, sdist = distributions
    assert wheel.name.startswith(f"m2mc-{__version__}-") and sdist.name == f"m2mc-{__version__}.tar.gz"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(f"{dist_info}/METADATA").decode()
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
    assert f"\nVersion: {__version__}\n" in metadata
    parser = configparser.ConfigParser()
    parser.optionxform = str
    parser.read_string(entry_points)
    scripts = dict(parser["console_scripts"])
    for script, target in ENTRY_POINTS.items():
        assert scripts.get(script) == target
        module = target.split(":")[0]
        assert f"{module.replace('.', '/')}.py" in names or f"{module.replace('.', '/')}/__init__.py" in names
    with tarfile.open(sdist) as archive:
        pkg_info = archive.extractfile(f"m2mc-{__version__}/PKG-INFO").read().decode()
        assert f"m2mc-{__version__}/resources/m2mc.qss" in archive.getnames()  # a wheel built from it needs them
    assert f"\nVersion: {__version__}\n" in pkg_info

    # Installed without the repo on the path, the scripts report that same version.
    prefix = tmp_path / "prefix"
    # --ignore-installed: without it pip would first uninstall the project's own editable install.
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--ignore-installed",
                    "--prefix", str(prefix), str(wheel)], check=True, capture_output=True, timeout=120)
    still_there = subprocess.run([sys.executable, "-c", "import importlib.metadata as m; print(m.version('m2mc'))"],
                                 capture_output=True, text=True, cwd=tmp_path)
    assert still_there.stdout.strip() == __version__, "the test disturbed the virtualenv's own m2mc install"
    site = next(prefix.glob("lib/python*/site-packages"))
    found = subprocess.run([sys.executable, "-c", "from m2mc.ui.resources import RESOURCE_DIR; print(RESOURCE_DIR)"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(site), "QT_QPA_PLATFORM": "offscreen"})
    resource_dir = Path(found.stdout.strip())
    assert resource_dir.is_relative_to(prefix), found.stderr  # the wheel's copy, not the checkout
    assert (resource_dir / "m2mc.qss").is_file() and (resource_dir / "icons" / "m2mc.svg").is_file()
    assert (resource_dir / "fonts" / "NotoColorEmoji-reactions.ttf").is_file()
    for script in ("m2mc-peer", "m2mc-chat"):
        result = subprocess.run([prefix / "bin" / script, "--version"], capture_output=True, text=True, timeout=60,
                                cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site), "QT_QPA_PLATFORM": "offscreen"})
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"{script} {__version__}"



def test_long_description_is_the_readme_and_what_it_links_to_ships_in_the_sdist(distributions):
    """PyPI-like renderers show the README as the long description. There is no public URL to point
    images at, so its links stay relative: they resolve in the repository and in the unpacked sdist,
    which carries every file they name (MANIFEST.in)."""
    wheel, sdist = distributions
    with zipfile.ZipFile(wheel) as archive:
        metadata_name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_string(archive.read(metadata_name).decode())
    readme = (REPO / "README.md").read_text()
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert metadata.get_payload().strip() == readme.strip()
    linked = relative_paths(readme)
    assert "resources/screenshot-main.png" in linked
    with tarfile.open(sdist) as archive:
        shipped = set(archive.getnames())
    assert [path for path in linked if f"m2mc-{__version__}/{path}" not in shipped] == []


# --- the wheel in a clean venv (slow) -----------------------------------------------------------

def pip_cache_dir() -> str | None:
    """Where this machine's pip keeps the wheels it downloaded and built (None when it keeps none)."""
    found = subprocess.run([sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True, timeout=60)
    if found.returncode != 0:  # PIP_NO_CACHE_DIR, for one
        return None
    return found.stdout.strip() or None


def clean_env(venv: Path, home: Path) -> dict[str, str]:
    """No PYTHONPATH and no checkout on the path: only what the venv holds is importable.

    HOME is a fresh folder, so no user site-packages leak in; pip still uses this machine's wheel
    cache, which only spares it downloading and building the extras again (pyspark alone is 400 MB).
    """
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PATH=f"{venv / 'bin'}:/usr/bin:/bin", HOME=str(home), QT_QPA_PLATFORM="offscreen")
    cache = pip_cache_dir()
    if cache:
        env.setdefault("PIP_CACHE_DIR", cache)
    return env


def run_command(venv: Path, command: str, arg: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([venv / "bin" / command, arg], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env=env)


def pip_install(venv: Path, requirement: str, env: dict, cwd: Path) -> None:
    # pip's own configuration (index, find-links, cache) supplies the dependencies. --no-compile: byte-
    # compiling the 1 GB that the extras bring would take most of the install's CPU, for modules that
    # the commands run here mostly never import (and Python compiles those that they do).
    result = subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-compile", requirement],
                            capture_output=True, text=True, timeout=900, cwd=cwd, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


@pytest.mark.slow
def test_wheel_in_a_clean_venv_runs_the_chat_without_extras_and_the_rest_with_theirs(distributions, tmp_path):
    wheel, _sdist = distributions
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    env = clean_env(venv, tmp_path)
    pip_install(venv, str(wheel), env, tmp_path)
    absent = subprocess.run([venv / "bin" / "python", "-c",
                             "import importlib.util as u; print([m for m in ('pyspark', 'pyarrow', 'numpy', "
                             "'matplotlib') if u.find_spec(m)])"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert absent.stdout.strip() == "[]", "the base install must not bring the analytics stack"

    for command in ("m2mc-chat", "m2mc-peer"):
        version = run_command(venv, command, "--version", env, tmp_path)
        assert version.returncode == 0 and version.stdout.strip() == f"{command} {__version__}", version.stderr
        usage = run_command(venv, command, "--help", env, tmp_path)
        assert usage.returncode == 0 and "--no-zeroconf" in usage.stdout, usage.stderr
    for command, extra in COMMAND_EXTRA.items():
        result = run_command(venv, command, "--help", env, tmp_path)
        assert result.returncode == 2, result.stdout + result.stderr
        assert f"m2mc[{extra}]" in result.stderr and "Traceback" not in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr

    pip_install(venv, f"{wheel}[analytics,study]", env, tmp_path)
    for command in COMMAND_EXTRA:
        result = run_command(venv, command, "--help", env, tmp_path)
        assert result.returncode == 0 and result.stdout.startswith(f"usage: {command}"), result.stderr


# --- the PyInstaller bundle (slow) --------------------------------------------------------------

PRIVATE_LAN = "ip link set lo up && ip link set lo multicast on && ip route add 224.0.0.0/4 dev lo"


def in_private_lan_without_repo(command: list[str], home: Path) -> list[str]:
    """``command`` in a fresh network namespace (loopback only, multicast routed to lo) and a
    mount namespace where the repo, and so its virtualenv, is hidden under an empty tmpfs."""
    script = f'{PRIVATE_LAN} && mount -t tmpfs none "$1" && shift && exec "$@"'
    environment = ["env", "-i", "PATH=/usr/bin:/bin", f"HOME={home}", "LANG=C.UTF-8", "QT_QPA_PLATFORM=offscreen"]
    return ["unshare", "--mount", "--net", "sh", "-c", script, "sh", str(REPO), *environment, *command]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    if os.geteuid() != 0:
        pytest.skip("starting the bundle in a private network namespace needs root")
    try:
        import PyInstaller  # noqa: F401
    except ImportError:
        pytest.skip("PyInstaller is not installed (pip install 'pyinstaller>=6.3')")
    base = tmp_path_factory.mktemp("bundle")
    started = time.monotonic()
    # PyInstaller's cache of stripped binaries is its own here: build-bundle.sh passes --clean, which
    # empties the cache, and another build on this machine (a parallel run) may be reading it.
    result = subprocess.run(["bash", str(REPO / "packaging" / "build-bundle.sh"), "--dist", str(base / "dist"),
                             "--work", str(base / "work")], capture_output=True, text=True, timeout=1200,
                            env={**os.environ, "PYINSTALLER_CONFIG_DIR": str(base / "pyinstaller-cache")})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    print(f"bundle built in {time.monotonic() - started:.0f} s")
    # Move it away from where it was built, as a user copying the folder would.
    moved = base / "elsewhere" / "m2mc"
    shutil.move(base / "dist" / "m2mc", moved)
    shutil.rmtree(base / "work")
    return moved


@pytest.mark.slow
@pytest.mark.netns
def test_bundle_reports_the_version_without_the_repo(bundle, tmp_path):
    for program in ("m2mc-chat", "m2mc-peer"):
        result = subprocess.run(in_private_lan_without_repo([str(bundle / program), "--version"], tmp_path),
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"{program} {__version__}"
    assert (bundle / "install-desktop.sh").exists()
    assert (bundle / "_internal" / "resources" / "m2mc.qss").exists()
    assert (bundle / "_internal" / "resources" / "fonts" / "NotoColorEmoji-reactions.ttf").exists()
    assert (bundle / "_internal" / "psutil").is_dir(), "middleware.netif's portable path (M2MC_PORTABLE=1) needs psutil"
    assert not list(bundle.rglob("pyspark")), "the analytics stack does not belong in the chat bundle"


CHAT_HANDLES_SIGTERM = "SIGTERM" in (REPO / "app" / "chat.py").read_text(encoding="utf-8")


@pytest.mark.slow
@pytest.mark.netns
def test_bundle_chat_starts_offscreen_and_exits_cleanly_on_sigterm(bundle, tmp_path):
    data_dir = tmp_path / "data"
    command = [str(bundle / "m2mc-chat"), "--name", "Ann", "--data-dir", str(data_dir), "--iface", "127.0.0.1"]
    process = subprocess.Popen(in_private_lan_without_repo(command, tmp_path), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        # The middleware logs its peer line once the network is up; the window follows at once.
        deadline = time.monotonic() + 60
        lines = []
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "middleware.manager INFO peer" in line:
                break
        assert any("middleware.manager INFO peer" in line for line in lines), "".join(lines)
        time.sleep(2)  # let the main window open and the event loop run
        assert process.poll() is None, "".join(lines)
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    output = "".join(lines) + rest
    assert "not found" not in output, f"the bundle lacks a resource:\n{output}"  # ui/resources.py warns so
    assert (data_dir / "m2mc.sqlite3").exists()
    if not CHAT_HANDLES_SIGTERM and process.returncode == -signal.SIGTERM:
        pytest.xfail("app/chat.py quits the Qt loop on SIGINT only, so SIGTERM kills it uncleanly")
    assert process.returncode == 0, f"m2mc-chat ended with {process.returncode} after SIGTERM:\n{output}"
    assert "Traceback" not in output
