"""The contracts in pyproject.toml, run as tests so that `make test` fails when one breaks:
import-linter (app -> ui -> middleware; a Qt-free middleware, view state and reply tree; analytics apart from
both; no cycles),
ruff (pyflakes and pycodestyle's E7/E9) and mypy over the packages [tool.mypy] names (middleware/, ui/, app/)."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the tools come with the dev extra, next to this interpreter
PACKAGES = ("app", "ui", "middleware")


def run_tool(name: str, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    tool = BIN / name
    if not tool.exists():
        pytest.fail(f"{name} is missing from {BIN}: install the dev extra (make setup)")
    return subprocess.run([str(tool), *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def stage_package(root: Path) -> Path:
    """The sources laid out as the wheel installs them (m2mc/ holding app/, ui/, middleware/), with
    the contracts beside them: import-linter reads packages from the file system."""
    shutil.copy(REPO / "pyproject.toml", root)
    (root / "m2mc").mkdir()
    shutil.copy(REPO / "packaging" / "m2mc" / "__init__.py", root / "m2mc")
    for package in PACKAGES:
        shutil.copytree(REPO / package, root / "m2mc" / package, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return root


def test_import_contracts_hold(tmp_path):
    result = run_tool("lint-imports", cwd=stage_package(tmp_path))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "5 kept, 0 broken" in result.stdout, result.stdout[-2000:]


@pytest.mark.parametrize("module, line, contract", [
    ("middleware/wire.py", "import PySide6.QtCore", "The middleware runs without Qt"),
    ("ui/model/sessions.py", "from PySide6.QtCore import QObject", "The view state and the reply tree run without Qt"),
    ("ui/message_tree.py", "from .message_model import MessageRole", "The view state and the reply tree run without Qt"),
    ("middleware/store.py", "from ..ui import resources", "Imports point one way"),
    ("app/analytics/gen_logs.py", "from ...middleware import wire", "The analytics import neither"),
    ("app/analytics/thread_report.py", "from . import thread_stats", "No import cycles"),
])
def test_import_contracts_catch_a_wrong_import(tmp_path, module, line, contract):
    """The same contracts over a copy of the sources with one import added that breaks one."""
    target = stage_package(tmp_path) / "m2mc" / module
    target.write_text(target.read_text(encoding="utf-8") + f"\n{line}  # noqa\n", encoding="utf-8")
    result = run_tool("lint-imports", cwd=tmp_path)
    assert result.returncode != 0, result.stdout[-2000:]
    broken = [row for row in result.stdout.splitlines() if " BROKEN" in row]
    assert any(row.startswith(contract) for row in broken), result.stdout[-3000:]


def absolute_imports_of_our_code(source: str) -> list[str]:
    own = {*PACKAGES, "m2mc"}
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] in own]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] in own:
            found.append(node.module)
    return found


def test_the_package_imports_its_own_modules_relatively():
    """Installed, app/ is m2mc.app: a bare `import middleware` would work from a checkout only, and a
    `m2mc.` import would bind a checkout's code to whatever m2mc is installed."""
    offenders = {
        str(path.relative_to(REPO)): names
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
        if (names := absolute_imports_of_our_code(path.read_text(encoding="utf-8")))
    }
    assert not offenders, offenders
    assert absolute_imports_of_our_code("import os\nfrom middleware import wire\nfrom .x import y\n") == ["middleware"]


def test_ruff_passes():
    result = run_tool("ruff", "check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_mypy_passes_over_the_middleware():
    # Incremental, with its cache outside the checkout: a module is checked again when its text or a
    # dependency's changed (mypy compares hashes, not only times), so a fresh clone reuses the stubs'
    # and unchanged modules' results (12 s to 0.3 s here) and a change is still checked in full.
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "m2mc" / "mypy"
    result = run_tool("mypy", "--cache-dir", str(cache))  # files and settings: [tool.mypy] in pyproject.toml
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "Success: no issues found" in result.stdout, result.stdout[-2000:]



# Issue 43 point 2: a message's kind is written in one place.  The registry's tags, written as the
# opening of a body (U+0000 in any escape, or the tag alone as a string), anywhere but there.
KINDS_REGISTRY = "middleware/kinds.py"
CAPTURED_BEFORE_KINDS = ("tests/core/test_kinds_compat.py", "tests/core/fixtures/capture_before_kinds.py")


def marker_uses(source: str) -> list[str]:
    from m2mc.middleware import kinds

    tags = "|".join(re.escape(kind.tag) for kind in kinds.KINDS.values() if kind.tag)
    pattern = re.compile(rf"""(?:\\x00|\\u0000|\\0|\\000|\x00)(?:{tags})|["'](?:{tags})["']""")
    return [match.group() for match in pattern.finditer(source)]


def test_no_code_outside_the_kinds_registry_knows_a_marker():
    offenders = {
        str(path.relative_to(REPO)): found
        for folder in (*PACKAGES, "tests")
        for path in sorted((REPO / folder).rglob("*.py"))
        if str(path.relative_to(REPO)) not in (KINDS_REGISTRY, *CAPTURED_BEFORE_KINDS)
        and (found := marker_uses(path.read_text(encoding="utf-8")))
    }
    assert not offenders, offenders
    assert marker_uses((REPO / KINDS_REGISTRY).read_text(encoding="utf-8"))  # it does look for them
    from m2mc.middleware import kinds

    op, offer = kinds.KINDS[kinds.OPERATION].tag, kinds.KINDS[kinds.FILE_OFFER].tag  # not written here either
    sample = f'x = "\\x00{op}[]"\ny = "\\u0000{offer}{{}}"\nz = "{offer}"\nw = "\x00{op}"\n'
    assert marker_uses(sample) == [f"\\x00{op}", f"\\u0000{offer}", f'"{offer}"', f"\x00{op}"]
    assert marker_uses(f'VERSION = "m2mc-{offer}"  # the TCP handshake, no marker\n') == []
