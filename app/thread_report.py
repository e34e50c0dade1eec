"""report.html for m2mc-thread-stats: PNG plots of the thread statistics and the summary.

Only small aggregates (histograms) leave Spark; the plots are drawn with matplotlib's
Agg backend so no display is needed.
"""

from __future__ import annotations

import html
import json
import logging
import math
from pathlib import Path

log = logging.getLogger("m2mc.thread_report")

TIME_BINS = 120


def _ccdf(hist: list[tuple[float, int]]):
    """Points (x, P[X >= x]) of a histogram, for a log-log plot (x > 0 only)."""
    total = sum(c for _, c in hist)
    points, seen = [], 0
    for value, count in hist:
        if value > 0:
            points.append((value, (total - seen) / total))
        seen += count
    return points


def collect_plot_data(results) -> dict:
    """The plots' points from the run's histograms: no Spark job, the counts are small."""
    from app.thread_stats import OVER_TIME_GROUPS

    counts = results.histograms
    points = {name: [(v, c) for v, c in counts.get(name, []) if v is not None] for name in ("size", "depth", "width", "per_depth")}
    over: dict[tuple[str, int], int] = {}
    lo, bin_s = 0.0, 1.0
    if results.time_span_ms is not None and results.over_time:
        # Plot bins: a whole multiple of the widest task bin, aligned to it, so that every
        # task bin falls into exactly one plot bin (the narrower widths divide the widest).
        widest = max(width for _, _, width, _ in results.over_time)
        first, last = (ms / 1000.0 for ms in results.time_span_ms)
        lo = first // widest * widest
        bin_s = widest * max(1, math.ceil((last - lo) / TIME_BINS / widest))
        messages: dict[str, int] = {}
        for gid, _, _, count in results.over_time:
            if gid is not None:
                messages[gid] = messages.get(gid, 0) + count
        top = set(sorted(messages, key=lambda gid: (-messages[gid], gid))[:OVER_TIME_GROUPS])
        for gid, start, _, count in results.over_time:
            key = (gid if gid in top else None, int((start - lo) // bin_s))
            over[key] = over.get(key, 0) + count
    names = results.group_names
    return {
        **points,
        "latency": [(None if v is None else int(v), c) for v, c in counts.get("latency", [])],
        "over_time": [((names.get(gid) or gid) if gid else "other groups", lo + b * bin_s, c) for (gid, b), c in over.items()],
        "bin_s": bin_s,
    }


def draw_plots(data: dict, out: Path) -> list[tuple[str, str]]:
    """Write the PNGs; return (file name, caption) pairs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []

    def save(fig, name, caption):
        fig.tight_layout()
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
        written.append((name, caption))

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for key, label in (("size", "thread size"), ("depth", "thread depth"), ("width", "thread width (widest level)")):
        points = _ccdf(data[key])
        if points:
            ax.loglog([p[0] for p in points], [p[1] for p in points], marker=".", linestyle="-", label=label)
    ax.set_xlabel("value")
    ax.set_ylabel("P[X >= value]")
    ax.set_title("CCDF of thread size, depth and width")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    save(fig, "ccdf_threads.png", "Complementary CDFs (log-log) of thread size, depth and width.")

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    per_depth = data["per_depth"]
    ax.bar([d for d, _ in per_depth], [c for _, c in per_depth], width=0.9)
    if per_depth and max(c for _, c in per_depth) > 0:
        ax.set_yscale("log")
    ax.set_xlabel("depth (0 = thread root)")
    ax.set_ylabel("messages")
    ax.set_title("Messages per depth level")
    save(fig, "messages_per_depth.png", "Number of messages at each depth of their thread.")

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    bins = sorted((b, c) for b, c in data["latency"] if b is not None)
    non_positive = sum(c for b, c in data["latency"] if b is None)
    if bins:
        ax.bar([10 ** (b / 10) for b, _ in bins], [c for _, c in bins], width=[10 ** ((b + 1) / 10) - 10 ** (b / 10) for b, _ in bins], align="edge")
        ax.set_xscale("log")
    ax.set_xlabel("reply latency (s, reply sent_at - parent sent_at)")
    ax.set_ylabel("replies")
    ax.set_title("Reply-latency distribution" + (f" ({non_positive} replies <= 0 s not shown)" if non_positive else ""))
    save(fig, "reply_latency.png", "Histogram of reply latencies on a log axis (10 bins per decade).")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    import datetime as dt

    series: dict[str, list[tuple[float, int]]] = {}
    for name, start, count in data["over_time"]:
        series.setdefault(name, []).append((start, count))
    for name, points in sorted(series.items()):
        points.sort()
        ax.plot([dt.datetime.fromtimestamp(p[0], dt.timezone.utc) for p in points], [p[1] for p in points], label=name, linewidth=1)
    ax.set_ylabel(f"messages per {data['bin_s'] / 3600:.2g} h")
    ax.set_title("Messages over time per group")
    if series:
        ax.legend(fontsize="small", ncol=2)
    fig.autofmt_xdate()
    save(fig, "messages_over_time.png", "Messages sent per time bin, for the busiest groups (others pooled).")
    return written


def write_report(results, out: Path) -> Path:
    data = collect_plot_data(results)
    plots = draw_plots(data, out)
    summary_rows = "\n".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(json.dumps(v))}</td></tr>" for k, v in results.summary.items()
    )
    figures = "\n".join(
        f'<figure><img src="{name}" alt="{html.escape(caption)}"><figcaption>{html.escape(caption)}</figcaption></figure>'
        for name, caption in plots
    )
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>M2MC thread statistics</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}th{{text-align:left;padding-right:2em}}
figure{{margin:2em 0}}img{{max-width:100%}}</style></head>
<body><h1>M2MC thread statistics</h1>
<h2>Summary</h2><table>{summary_rows}</table>
<p>Tables: messages/, threads/, groups/, participants/ (Parquet) beside this file.</p>
<h2>Plots</h2>{figures}
</body></html>
"""
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    log.info("wrote %s with %d plots", path, len(plots))
    return path
