"""How the whole suite runs: what a missing extra means, and how tests share out over xdist workers.

- A test module that cannot import a module of an optional extra (pyproject.toml's
  [analytics] or [study]) is skipped with the extra to install, when run alone.
- Strict runs skip nothing: under CI (env CI) or ``make test`` (env M2MC_NO_SKIP), every skip,
  of a test or of a whole module, is reported as a failure with its reason.
- Under pytest-xdist (``make test`` runs ``-n``), each test module is one unit of work, so
  module-scoped fixtures are built once; the Spark tests are two units (the cluster test, and the
  rest on one SparkSession) and the packaging module is cut where its fixtures are. The units
  that take longest are handed out first, so that the short ones fill in around them.
"""

from __future__ import annotations

import os
import re

import pytest

from m2mc.app.extras import EXTRA_MODULES

STRICT = bool(os.environ.get("CI") or os.environ.get("M2MC_NO_SKIP"))

# Units of work that take a minute or more, longest first (`pytest --durations`).
SLOW_UNITS = (
    "spark-cluster",
    "bundle",
    "spark",
    "wheel",
)

_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")


def _extras_providing(module: str) -> list[str]:
    top = module.split(".")[0]
    return [extra for extra, modules in EXTRA_MODULES.items() if top in modules]


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield
    if report.failed and isinstance(collector, pytest.Module):
        found = _MISSING_MODULE.search(str(report.longrepr))
        extras = _extras_providing(found.group(1)) if found else []
        if extras:
            reason = (f"needs {found.group(1)}, which the {' or the '.join(f'[{e}]' for e in extras)} extra "
                      f"installs: pip install -e '.[{','.join(extras)}]' (make setup installs every extra)")
            if STRICT:
                report.longrepr = f"{reason}\n{report.longrepr}"
            else:
                report.outcome = "skipped"
                report.longrepr = (str(collector.path), 0, f"Skipped: {reason}")
    elif report.skipped and STRICT:
        report.outcome = "failed"
        report.longrepr = f"skipped in a strict run (CI or make test), where nothing may be skipped: {report.longrepr}"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if STRICT and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2].removeprefix("Skipped: ") if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped in a strict run (CI or make test), where nothing may be skipped: {reason}"
    return report


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: tests that share an expensive fixture, or state, share one.

    Decided from the node id alone, since xdist's controller sees nothing else: by test module, but
    the Spark tests other than the cluster's together (one SparkSession, one JVM), and test_packaging.py
    cut by name where its module fixtures are: test_bundle_* share the PyInstaller bundle, test_wheel_*
    the wheel.
    """
    path, _, name = nodeid.partition("::")
    if path == "tests/spark/test_cluster.py":
        return "spark-cluster"  # the critical path: worth a SparkSession of its own to run beside the rest
    if path.startswith("tests/spark/"):
        return "spark"
    if path == "tests/packaging/test_packaging.py":
        for prefix in ("bundle", "wheel"):
            if name.startswith(f"test_{prefix}_"):
                return prefix
    return path


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, which a bare pytest may lack
def pytest_xdist_make_scheduler(config, log):
    # xdist's own --dist loadgroup marks groups by rewriting node ids, which pytest 9.2 no longer
    # lets it do (pytest-xdist issue 1386): so the units are told to the scheduler directly.
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        """xdist's load-by-scope scheduling, with our units as the scopes, in collection order."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def schedule(self) -> None:
            self.config.option.loadscopereorder = False  # the workers collect the slow units first
            super().schedule()

    return UnitScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput"):  # only where xdist hands the units out
        return
    rank = {unit: i for i, unit in enumerate(SLOW_UNITS)}
    items.sort(key=lambda item: rank.get(work_unit(item.nodeid), len(rank)))


def pytest_make_parametrize_id(config, val, argname):
    # A long bytes parameter is usually a datagram built with a fresh key at import, so its
    # default id differs from one process to the next, and xdist needs every worker to collect
    # the same ids. Its length is stable, and reads better than 80 escaped bytes.
    if isinstance(val, bytes) and len(val) > 32:
        return f"{len(val)}bytes"
    return None
