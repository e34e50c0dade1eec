"""The optional extras (pyproject.toml) that some commands need, and the one line a command
prints when its extra is not installed, instead of a ModuleNotFoundError from deep inside."""

from __future__ import annotations

import importlib.util
import sys

# The modules each extra brings that our code imports; kept in step with pyproject.toml.
EXTRA_MODULES = {
    "analytics": ("pyspark", "pyarrow", "numpy", "matplotlib"),
    "study": ("numpy", "matplotlib"),
}


def missing_modules(extra: str) -> list[str]:
    return [name for name in EXTRA_MODULES[extra] if importlib.util.find_spec(name) is None]


def missing_extra_message(program: str, extra: str, missing: list[str]) -> str:
    return (f"{program} needs the {extra!r} extra, and {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not installed: pip install 'm2mc[{extra}]'")


def require_extra(program: str, extra: str) -> None:
    """Exit with status 2 and one line naming the extra when any of its modules is missing."""
    missing = missing_modules(extra)
    if missing:
        print(missing_extra_message(program, extra, missing), file=sys.stderr)
        raise SystemExit(2)
