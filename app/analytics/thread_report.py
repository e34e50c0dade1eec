"""report.html for m2mc-thread-stats: PNG plots of the thread statistics and the summary.

Only small aggregates (histograms) leave Spark; the plots are drawn with matplotlib's
Agg backend so no display is needed. Group names are drawn with the first installed font
that has all their characters (DejaVu Sans, then CJK-capable fallbacks such as Droid Sans
Fallback, which `make setup` installs); a name no font covers is shown as its gid.
"""

from __future__ import annotations

import functools
import html
import json
import logging
from pathlib import Path

log = logging.getLogger("m2mc.thread_report")

TIME_BINS = 120
# Round bin widths for the over-time plot (each divides the next, as the tasks' widths do).
BIN_NAMES = {
    1: "second", 10: "10 seconds", 60: "minute", 600: "10 minutes", 3600: "hour", 6 * 3600: "6 hours",
    86400: "day", 7 * 86400: "week", 28 * 86400: "4 weeks", 364 * 86400: "52 weeks",
}
# Fonts tried after DejaVu Sans for characters it lacks (CJK above all).
FALLBACK_FONTS = ("Droid Sans Fallback", "Noto Sans CJK JP", "Noto Sans CJK SC", "WenQuanYi Zen Hei", "IPAGothic", "Unifont")
PLOT_FILES = ("ccdf_threads.png", "messages_per_depth.png", "reply_latency.png", "messages_over_time.png")
OVER_TIME_GROUPS = 8  # the busiest groups get a line of their own in the plot, the rest one pooled line


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
    counts = results.histograms
    points = {name: [(v, c) for v, c in counts.get(name, []) if v is not None] for name in ("size", "depth", "width", "per_depth")}
    over: dict[tuple[str | None, int], int] = {}  # (gid, or None for the other groups; bin)
    lo, bin_s, bins, last = 0.0, 1, 0, 0.0
    if results.time_span_ms is not None and results.over_time:
        # Plot bins: the first round width (BIN_NAMES) that is at least the widest task bin
        # and gives at most TIME_BINS bins, aligned to it; every task bin falls into exactly
        # one plot bin, since the narrower widths divide the wider.
        widest = max(width for _, _, width, _ in results.over_time)
        first, last = (ms / 1000.0 for ms in results.time_span_ms)
        widths = [w for w in BIN_NAMES if w >= widest]
        bin_s = next((w for w in widths if (last - first // w * w) / w <= TIME_BINS), widths[-1] if widths else widest)
        lo = first // bin_s * bin_s
        bins = int((last - lo) // bin_s) + 1
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
        "gids": {(names.get(gid) or gid): gid for gid, _ in over if gid},
        "bin_s": bin_s,
        "bin_starts": [lo + b * bin_s for b in range(bins)],
        # The last bin ends after the last message: drawn, it would look like a drop.
        "partial_last_bin": bins > 1 and last < lo + bins * bin_s - 1,
    }


def warm_up() -> None:
    """Import the plotting libraries and read the fonts ahead of `write_report`: the job runs
    this in a driver thread while the executors work, which takes it off the run's end."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401
    import plotly.graph_objects  # noqa: F401
    import plotly.io  # noqa: F401

    label_fonts()


@functools.cache
def label_fonts():
    """The font families to draw labels with, and per family the characters it has."""
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    families = ["DejaVu Sans"] + [name for name in FALLBACK_FONTS if any(f.name == name for f in font_manager.fontManager.ttflist)]
    covered = {}
    for family in families:
        path = font_manager.findfont(font_manager.FontProperties(family=family), fallback_to_default=False)
        covered[family] = set(FT2Font(path).get_charmap())
    return families, covered


def drawable_name(name: str, gid: str | None, covered: dict) -> str:
    """`name` when the fonts have all its characters, else the gid (the name when there is none)."""
    fonts = list(covered.values())
    if all(any(ord(ch) in chars for chars in fonts) for ch in name if not ch.isspace()):
        return name
    return gid or name


def over_time_series(data: dict, covered: dict):
    """The over-time plot's bin starts (datetimes), its lines {label: count per bin} and the
    bin's name. Every line covers every bin, zeros included: a group whose messages all
    fall in one bin still shows, as a spike, not as a lone point no line passes through.
    The last bin is left out when it ends after the last message (it would look like a drop)."""
    import datetime as dt

    starts = data["bin_starts"][:-1] if data["partial_last_bin"] else data["bin_starts"]
    index = {start: i for i, start in enumerate(starts)}
    series: dict[str, list[int]] = {}
    for name, start, count in data["over_time"]:
        counts = series.setdefault(drawable_name(name, data["gids"].get(name), covered), [0] * len(starts))
        if start in index:
            counts[index[start]] += count
    times = [dt.datetime.fromtimestamp(start, dt.timezone.utc) for start in starts]
    return times, series, BIN_NAMES.get(data["bin_s"], f"{data['bin_s']} seconds")


def draw_plots(data: dict, out: Path) -> list[tuple[str, str]]:
    """Write the PNGs; return (file name, caption) pairs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families, covered = label_fonts()
    matplotlib.rcParams["font.family"] = families  # matplotlib falls back along the list per glyph
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
    if ax.get_lines():
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
    times, series, per = over_time_series(data, covered)
    for label, counts in sorted(series.items()):
        few = sum(1 for c in counts if c) <= 2
        ax.plot(times, counts, label=label, linewidth=1, marker="o" if few else None, markersize=4,
                drawstyle="steps-post" if len(times) > 1 else "default")
    ax.set_ylabel(f"messages per {per}")
    ax.set_title("Messages over time per group")
    if series:
        ax.legend(fontsize="small", ncol=2)
    fig.autofmt_xdate()
    caption = f"Messages sent per {per}, for the busiest groups (others pooled)."
    if data["partial_last_bin"]:
        caption += " The last bin, which ends after the last message, is left out."
    save(fig, "messages_over_time.png", caption)
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
<p>Tables: messages/, threads/, groups/, participants/ (Parquet) beside this file.
Sortable tables, interactive plots and the largest threads as trees: <a href="explore.html">explore.html</a>.</p>
<h2>Plots</h2>{figures}
</body></html>
"""
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    log.info("wrote %s with %d plots", path, len(plots))
    return path
