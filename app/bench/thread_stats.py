"""Benchmark of m2mc-thread-stats: wall time and peak memory at 1M and 10M messages.

Generates the logs once under build/bench/ (kept between runs), runs the whole command
end to end (JVM start, report included) as a subprocess on `local[2]`, polls the peak
resident memory of its process tree (the Python driver, the JVM and the Python
workers), and runs the plain-Python reference (roots, depths, thread sizes) as the
single-process baseline, or (the default) the DuckDB query the issue measures against
(`DUCKDB_QUERY`). The driver JVM's class archive (`app.analytics.jvm_archive`) is recorded
first if missing, so every timed run starts the way all runs after an install's first do.
Run: python -m m2mc.app.bench.thread_stats [--sizes N ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
BASELINE_CODE = (
    "import json, sys; from m2mc.app.analytics.thread_stats_reference import summarise; "
    "print(json.dumps(summarise(sys.argv[1:])))"
)

# The yardstick: one DuckDB process doing only deduplication (earliest received
# copy per (gid, mid)), roots (no parent, or a parent not in the log) and depths by a
# recursive CTE, and per-thread size, depth, participants, duration and offered files and
# their bytes, written as Parquet.
# Lines DuckDB cannot read are skipped; cycles are never reached from a root.
DUCKDB_QUERY = """
COPY (
WITH RECURSIVE
raw AS (SELECT * FROM read_json({logs}, format = 'newline_delimited', ignore_errors = true,
        columns = {{gid: 'VARCHAR', mid: 'VARCHAR', parent: 'VARCHAR', sender: 'VARCHAR', sent_at: 'VARCHAR',
                   received_at: 'VARCHAR', file: 'STRUCT(size BIGINT)'}})),
m AS (SELECT gid, mid, NULLIF(parent, '') AS parent, sender, CAST(sent_at AS TIMESTAMPTZ) AS sent,
             file.size AS file_size
      FROM (SELECT *, row_number() OVER (PARTITION BY gid, mid ORDER BY received_at) AS copy FROM raw
            WHERE gid <> '' AND mid <> '' AND sender <> '') WHERE copy = 1),
roots AS (SELECT c.gid, c.mid FROM m c LEFT JOIN m p ON p.gid = c.gid AND p.mid = c.parent
          WHERE c.parent IS NULL OR p.mid IS NULL),
walk(gid, mid, root, depth) AS (
  SELECT gid, mid, mid, 0 FROM roots
  UNION ALL
  SELECT c.gid, c.mid, w.root, w.depth + 1 FROM m c JOIN walk w ON c.gid = w.gid AND c.parent = w.mid)
SELECT w.gid, w.root, count(*) AS size, max(w.depth) AS depth, count(DISTINCT m.sender) AS participants,
       epoch(max(m.sent)) - epoch(min(m.sent)) AS duration_s, count(m.file_size) AS files,
       coalesce(sum(m.file_size), 0) AS file_bytes
FROM walk w JOIN m USING (gid, mid) GROUP BY w.gid, w.root
) TO '{out}' (FORMAT parquet)
"""


def duckdb_baseline(logs: list[str], out: Path, threads: int = 2) -> dict:
    """Run DUCKDB_QUERY on `threads` threads (local[2]'s two cores); its summary figures."""
    import duckdb

    connection = duckdb.connect()
    connection.execute(f"SET threads TO {threads}")
    connection.execute(DUCKDB_QUERY.format(logs=repr([str(p) for p in logs]), out=str(out)))
    row = connection.execute(f"SELECT count(*), max(depth), max(size), sum(files), sum(file_bytes) FROM '{out}'").fetchone()
    assert row is not None, "an aggregate query always answers one row"
    threads_count, max_depth, max_size, files, file_bytes = row
    return {"threads": threads_count, "max_depth": max_depth, "max_thread_size": max_size,
            "files": int(files or 0), "file_bytes": int(file_bytes or 0)}


def ensure_log(size: int, workdir: Path, seed: int, file_rate: float = 0.0) -> Path:
    path = workdir / (f"messages_{size}_seed{seed}.jsonl" if not file_rate else f"messages_{size}_seed{seed}_files{file_rate:g}.jsonl")
    if not path.exists():
        started = time.perf_counter()
        partial = path.with_suffix(".partial")
        subprocess.run([sys.executable, "-m", "m2mc.app.analytics.gen_logs", "--messages", str(size), "--out", str(partial), "--seed", str(seed),
                        "--file-rate", str(file_rate)], check=True, cwd=ROOT)
        partial.rename(path)
        print(f"generated {path.name} ({path.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - started:.1f} s", flush=True)
    return path


def ensure_class_archive(workdir: Path, master: str, seed: int) -> None:
    """Record the driver JVM's class archive before timing, as any run after the first has it."""
    from ..analytics.jvm_archive import ClassArchive

    archive = ClassArchive()
    if archive.path is None or archive.path.exists():
        return
    started = time.perf_counter()
    log_path = ensure_log(20_000, workdir, seed)
    subprocess.run([sys.executable, "-m", "m2mc.app.analytics.thread_stats", str(log_path), "--out", str(workdir / "out_warmup"), "--master", master],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"recorded the JVM class archive {archive.path} in {time.perf_counter() - started:.1f} s (once per install)", flush=True)


def run_measured(command: list[str]) -> tuple[float, int, float, str]:
    """Run `command`; return (wall seconds, peak RSS of its process tree in bytes, CPU seconds
    of that tree, stdout).

    CPU seconds are each process's last polled user + system time, summed: on a shared
    machine the wall time depends on the other load, the CPU time much less.
    """
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    watched = psutil.Process(process.pid)
    peak = 0
    cpu_by_process: dict[tuple[int, float], float] = {}
    while process.poll() is None:
        total = 0
        try:
            for proc in [watched, *watched.children(recursive=True)]:
                try:
                    with proc.oneshot():
                        total += proc.memory_info().rss
                        times = proc.cpu_times()
                        cpu_by_process[(proc.pid, proc.create_time())] = times.user + times.system
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        peak = max(peak, total)
        time.sleep(0.2)
    output = process.stdout.read() if process.stdout is not None else ""
    elapsed = time.perf_counter() - started
    if process.returncode:
        raise SystemExit(f"{command[:4]} failed with exit code {process.returncode}")
    return elapsed, peak, sum(cpu_by_process.values()), output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m m2mc.app.bench.thread_stats", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--workdir", type=Path, default=ROOT / "build" / "bench")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--baseline", choices=("duckdb", "python"), default="duckdb",
                        help="the single-process yardstick: the DuckDB query (default) or the plain-Python reference")
    parser.add_argument("--file-rate", type=float, default=0.0,
                        help="share of generated messages that offer a file (default 0: the logs of earlier figures)")
    parser.add_argument("--duckdb-only", nargs="+", metavar="LOG",
                        help="run only the DuckDB query on these logs (for timing it as a whole process) and exit")
    args = parser.parse_args(argv)
    if args.duckdb_only:
        args.workdir.mkdir(parents=True, exist_ok=True)
        print(json.dumps(duckdb_baseline(args.duckdb_only, args.workdir / "duckdb_threads.parquet")))
        return 0
    args.workdir.mkdir(parents=True, exist_ok=True)

    ensure_class_archive(args.workdir, args.master, args.seed)
    rows = []
    for size in args.sizes:
        log_path = ensure_log(size, args.workdir, args.seed, args.file_rate)
        out = args.workdir / f"out_{size}"
        load_before = os.getloadavg()[0]
        wall, peak, cpu, _ = run_measured([sys.executable, "-m", "m2mc.app.analytics.thread_stats", str(log_path), "--out", str(out), "--master", args.master])
        summary = json.loads((out / "summary.json").read_text())
        row = {"size": size, "spark_s": wall, "spark_cpu": cpu, "spark_rss": peak, "summary": summary}
        print(f"spark  {size:>10,} messages: {wall:7.1f} s ({cpu:.0f} CPU s), peak RSS {peak / 2**30:5.2f} GiB, "
              f"{summary['threads']:,} threads, max depth {summary['max_depth']}, {summary['pointer_jumping_rounds']} jumping rounds; "
              f"1-min load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after", flush=True)
        if not args.no_baseline:
            if args.baseline == "duckdb":
                command = [sys.executable, "-m", "m2mc.app.bench.thread_stats", "--workdir", str(args.workdir), "--duckdb-only", str(log_path)]
                keys: tuple[str, ...] = ("threads", "max_depth", "max_thread_size", "files", "file_bytes")
            else:
                command = [sys.executable, "-c", BASELINE_CODE, str(log_path)]
                keys = ("threads", "max_depth", "max_thread_size", "invalid_messages", "files", "file_bytes")
            base_wall, base_peak, base_cpu, output = run_measured(command)
            baseline = json.loads(output)
            agree = all(summary[k] == baseline[k] for k in keys)
            row.update(base_s=base_wall, base_rss=base_peak, agree=agree)
            # The CPU ratio too: on a shared machine the other load moves the wall times more.
            print(f"{args.baseline} {size:>10,} messages: {base_wall:7.1f} s ({base_cpu:.0f} CPU s), peak RSS {base_peak / 2**30:5.2f} GiB "
                  f"(single-process baseline; results {'agree' if agree else 'DISAGREE'}); "
                  f"Spark / {args.baseline} {wall / base_wall:.2f} (CPU {cpu / base_cpu:.2f})", flush=True)
        rows.append(row)

    print()
    print("| messages | Spark wall s | Spark CPU s | Spark peak RSS GiB | baseline s | baseline peak RSS GiB | Spark / baseline |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        base = f"{row['base_s']:.1f} | {row['base_rss'] / 2**30:.2f} | {row['spark_s'] / row['base_s']:.2f}" if "base_s" in row else "- | - | -"
        print(f"| {row['size']:,} | {row['spark_s']:.1f} | {row['spark_cpu']:.0f} | {row['spark_rss'] / 2**30:.2f} | {base} |")
    if len(rows) >= 2:
        small, large = rows[0], rows[-1]
        data_ratio = large["size"] / small["size"]
        time_ratio = large["spark_s"] / small["spark_s"]
        print(f"\n{data_ratio:.0f}x data -> {time_ratio:.2f}x Spark time (target <= {1.2 * data_ratio:.0f}x): "
              f"{'met' if time_ratio <= 1.2 * data_ratio else 'MISSED'}")
        if large["size"] >= 10_000_000:
            print(f"{large['size']:,} messages in {large['spark_s']:.1f} s (target <= 90 s): {'met' if large['spark_s'] <= 90 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
