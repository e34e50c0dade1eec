"""Benchmark of a laptop's day: how soon messages flow both ways again after each network change.

    sudo .venv/bin/python -m m2mc.app.bench.roaming [--runs 10] [--changes address,interface,...]
        [--sleep-seconds 60] [--before REV] [--timeout 20]

For each change (tests/testbed/roaming.py: a new address on the same interface, a second
interface up then the first deleted, the interface deleted and re-created, a VPN tunnel up and
down, a sleep by SIGSTOP and SIGCONT) on a namespace LAN of three m2mc-peers started without
``--iface``, ``--runs`` times: the seconds from the new network being usable until a message Bob
wrote reached Ann and one Ann wrote reached Bob, and whether every message written meanwhile
arrived.  Prints the median and maximum per change.  With ``--before REV`` the same runs of the
code at git revision REV (a worktree made here, its m2mc-peer run from it) alternate with this
checkout's, change by change.  A run that does not flow within ``--timeout`` counts as that.
Every socket lives in namespaces made (and deleted) here.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHANGES = ("address", "interface", "recreate", "tunnel", "sleep")


def before_program(rev: str, work: Path) -> list[str]:
    """m2mc-peer as it was at ``rev``: a worktree, the compiled cores copied in, run on sys.path."""
    tree = work / f"before-{rev}"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), rev], check=True,
                   capture_output=True)
    for built in (REPO / "middleware").glob("_*.so"):
        shutil.copy(built, tree / "middleware" / built.name)
    shadow = work / "before-path" / "m2mc"
    shadow.mkdir(parents=True)
    shutil.copy(tree / "packaging" / "m2mc" / "__init__.py", shadow / "__init__.py")
    for folder in ("app", "ui", "middleware"):
        (shadow / folder).symlink_to(tree / folder)
    start = f"import sys; sys.path.insert(0, {str(shadow.parent)!r}); sys.argv[0] = 'm2mc-peer'; " \
            "from m2mc.app.peer import main; sys.exit(main())"
    return [sys.executable, "-c", start]


def run_change(RoamingLan, kind: str, runs: int, work: Path, program: list[str] | None, sleep_seconds: float,
               timeout: float) -> tuple[list[float | None], int]:
    """Seconds to flow both ways for each run (None: not within ``timeout``), and runs that lost messages."""
    lan = RoamingLan(work, program=program)
    times: list[float | None] = []
    lost = 0
    try:
        for _ in range(runs):
            usable = lan.change(kind, sleep_seconds)
            took = lan.time_to_flow(usable, timeout=timeout)
            times.append(took)
            if took is None:
                continue
            if lan.nothing_lost(timeout=10):
                lost += 1
    finally:
        lan.close()
    return times, lost


def summary(times: list[float | None], lost: int, timeout: float) -> str:
    done = [t for t in times if t is not None]
    failed = len(times) - len(done)
    if not done:
        return f"never within {timeout:.0f} s in {len(times)} runs"
    text = f"median {statistics.median(done):.2f} s, max {max(done):.2f} s over {len(done)} runs"
    if failed:
        text += f"; {failed} of {len(times)} did not flow within {timeout:.0f} s"
    return text + (f"; {lost} lost messages" if lost else "; nothing lost")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--changes", default=",".join(CHANGES), help=f"comma-separated, of {', '.join(CHANGES)}")
    parser.add_argument("--sleep-seconds", type=float, default=60.0, help="how long a sleep lasts")
    parser.add_argument("--before", metavar="REV", help="also run the code at this git revision, alternating")
    parser.add_argument("--timeout", type=float, default=20.0, help="a run not flowing by then counts as failed")
    args = parser.parse_args(argv)
    changes = [c for c in args.changes.split(",") if c]
    unknown = set(changes) - set(CHANGES)
    if unknown:
        parser.error(f"unknown change(s): {', '.join(sorted(unknown))}")
    sys.path.insert(0, str(REPO))
    RoamingLan = importlib.import_module("tests.testbed.roaming").RoamingLan  # the test bed, not type-checked with the app
    work = Path(tempfile.mkdtemp(prefix="m2mc-bench-roaming-"))
    try:
        before = before_program(args.before, work) if args.before else None
        for kind in changes:
            for label, program in (("now", None), (f"before ({args.before})", before)) if before else (("now", None),):
                times, lost = run_change(RoamingLan, kind, args.runs, work / f"{kind}-{len(label)}", program,
                                         args.sleep_seconds, args.timeout)
                shown = ", ".join("-" if t is None else f"{t:.2f}" for t in times)
                print(f"{kind:9} {label:>18}: {summary(times, lost, args.timeout)}  [{shown}]", flush=True)
    finally:
        if args.before:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(work / f"before-{args.before}")],
                           capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
