"""The contracts in pyproject.toml, run as tests so that `make test` fails when one breaks:
import-linter (app -> ui -> middleware; a Qt-free middleware; analytics apart from both),
ruff (pyflakes and pycodestyle's E7/E9) and mypy over middleware/."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the tools come with the dev extra, next to this interpreter
PACKAGES = ("app", "ui", "middleware")


def run_tool(name: str, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    tool = BIN / name
    if not tool.exists():
        pytest.fail(f"{name} is missing from {BIN}: install the dev extra (make setup)")
    return subprocess.run([str(tool), *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_import_contracts_hold():
    result = run_tool("lint-imports")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "3 kept, 0 broken" in result.stdout, result.stdout[-2000:]


@pytest.mark.parametrize("module, line, contract", [
    ("middleware/wire.py", "import PySide6.QtCore", "The middleware runs without Qt"),
    ("middleware/store.py", "import ui.resources", "Imports point one way"),
    ("app/analytics/gen_logs.py", "import middleware.wire", "The analytics import neither"),
])
def test_import_contracts_catch_a_wrong_import(tmp_path, module, line, contract):
    """The same contracts over a copy of the sources with one import added that breaks one."""
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    for package in PACKAGES:
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path / module
    target.write_text(target.read_text(encoding="utf-8") + f"\n{line}  # noqa\n", encoding="utf-8")
    result = run_tool("lint-imports", cwd=tmp_path)
    assert result.returncode != 0, result.stdout[-2000:]
    broken = [row for row in result.stdout.splitlines() if row.endswith("BROKEN")]
    assert any(row.startswith(contract) for row in broken), result.stdout[-3000:]


def test_ruff_passes():
    result = run_tool("ruff", "check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_mypy_passes_over_the_middleware():
    result = run_tool("mypy", "--no-incremental")  # files and settings: [tool.mypy] in pyproject.toml
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "Success: no issues found" in result.stdout, result.stdout[-2000:]
