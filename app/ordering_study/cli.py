"""``m2mc-ordering-study``: run the ordering study, print the table, write CSVs and plots."""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

from .direct import DIRECT_ABOUT, run_direct
from .example import all_outcomes
from .metrics import COLUMNS, Row
from .network import WIRELESS
from .study import FULL, QUICK, run_scenario, run_sweep, scenarios

PLOT_CDF = "delay_cdf.png"
PLOT_SWEEP = "delay_vs_group_size.png"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="m2mc-ordering-study",
        description=(
            "Simulate a group chat and compare S_b (and OBG for operations) with causal, total, linear-clock "
            "and physical-clock ordering: delivery delay, held messages, replies shown before "
            "their parent, header bytes; and, for direct messages, SES against per-pair FIFO and arrival order."
        ),
    )
    parser.add_argument("--out", required=True, type=Path, help="directory for results.csv, sweep.csv, example.csv and plots")
    parser.add_argument("--seed", type=_seed, default=1, help="random seed (default 1); same seed, same numbers")
    parser.add_argument("--quick", action="store_true", help="smaller runs (well under a minute)")
    return parser


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"seed must be a whole number, not {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("seed must not be negative")
    return value


def _write_rows(path: Path, rows: list[Row]) -> None:
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.as_dict().items()})


def format_table(rows: list[Row]) -> str:
    header = (
        f"{'scenario':<14} {'policy':<16} {'N':>3} {'msgs':>5} {'mean ms':>9} {'p50 ms':>8} "
        f"{'p99 ms':>9} {'held':>6} {'viol':>7} {'hdr B':>5} {'ctl B/msg':>9} {'e2e ms':>8}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r.scenario:<14} {r.policy:<16} {r.processes:>3} {r.messages:>5} {r.mean_delay_ms:>9.2f} "
            f"{r.p50_delay_ms:>8.2f} {r.p99_delay_ms:>9.2f} {r.held_fraction:>6.3f} "
            f"{r.parent_violations:>7.4f} {r.header_bytes:>5} {r.control_bytes_per_msg:>9.1f} "
            f"{r.mean_end_to_end_ms:>8.1f}"
        )
    return "\n".join(lines)


def format_sweep(rows: list[Row]) -> str:
    sizes = sorted({r.processes for r in rows})
    policies = list(dict.fromkeys(r.policy for r in rows))
    mean = {(r.policy, r.processes): r.mean_delay_ms for r in rows}
    lines = [f"{'policy':<16}" + "".join(f"{'N=' + str(n):>10}" for n in sizes)]
    for policy in policies:
        lines.append(f"{policy:<16}" + "".join(f"{mean[policy, n]:>10.2f}" for n in sizes))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    out: Path = args.out
    if out.exists() and not out.is_dir():
        parser.error(f"--out {out} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"cannot create --out {out}: {exc.strerror or exc}")

    size = QUICK if args.quick else FULL
    started = time.perf_counter()
    runs = [run_scenario(scenario, args.seed) for scenario in scenarios(size)]
    rows = [row for run in runs for row in run.rows]
    rows += run_direct(size.messages, args.seed)
    sweep = run_sweep(WIRELESS, size.sweep_messages, args.seed)
    examples = all_outcomes(args.seed)

    _write_rows(out / "results.csv", rows)
    _write_rows(out / "sweep.csv", sweep)
    with (out / "example.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["policy", "display_at_d", "no_answers", "yes_answers", "can_tell"])
        for ex in examples:
            writer.writerow([
                ex.policy, " | ".join(ex.display_at_d), " / ".join(ex.candidates["No"]),
                " / ".join(ex.candidates["Yes"]), "yes" if ex.can_tell else "no",
            ])

    from . import plots  # matplotlib is slow to import; only pay for it when plotting

    plots.delay_cdf(runs, out / PLOT_CDF)
    plots.delay_vs_group_size(sweep, out / PLOT_SWEEP)

    print(f"Ordering study, seed {args.seed}, {'quick' if args.quick else 'full'} run")
    for run in runs:
        print(f"  {run.scenario.name}: {run.scenario.about}")
    for name, about in DIRECT_ABOUT.items():
        print(f"  {name}: {about}")
    print()
    print(format_table(rows))
    print()
    print(f"Mean delivery delay (ms) vs group size, wireless profile, {size.sweep_messages} messages per size:")
    print(format_sweep(sweep))
    print()
    print("Paper example (Delhi/Chennai) at D:")
    for ex in examples:
        print(f"  {ex.policy:<16} can tell: {'yes' if ex.can_tell else 'no ':<4} shows: {' | '.join(ex.display_at_d)}")
    print()
    print(f"Wrote {out / 'results.csv'}, sweep.csv, example.csv, {PLOT_CDF}, {PLOT_SWEEP} "
          f"in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
