"""explore.html for m2mc-thread-stats: one self-contained page to explore a run.

Sortable tables of the busiest groups and the largest threads, the distributions as
interactive plots (plotly, its JavaScript inlined, so the file opens without a network),
and the largest threads drawn as trees (icicle charts: the root on top, each message
under its parent, as wide as its subtree). It is built from the run's summaries only
(histograms, the TOP rows of the tasks, the groups table), so its size does not grow
with the number of messages.
"""

from __future__ import annotations

import html
import json
import logging
import math
from pathlib import Path

log = logging.getLogger("m2mc.thread_explorer")

GROUP_COLUMNS = (
    "gid", "group_desc", "messages", "threads", "participants", "mean_thread_size", "median_thread_size",
    "max_thread_size", "max_depth", "reciprocity", "participation_gini", "orphan_messages", "invalid_messages",
    "edited_messages", "deleted_messages", "reactions", "files", "file_bytes",
)
THREAD_COLUMNS = (
    "gid", "root_mid", "size", "depth", "max_width", "leaves", "participants", "duration_s", "median_reply_latency_s",
    "p90_reply_latency_s", "participation_gini", "wiener_index", "h_index", "orphan", "files", "file_bytes",
)

# The page is usable (summary, tables, sorting) before any plot: plotly's 4.6 MB of
# JavaScript sit in the page as text, compiled only when the first plot comes into view
# (about 2 s of the main thread on this machine at load 10), and each plot is drawn when
# it scrolls into view.
PLOT_SCRIPT = """
let plotly = null;
const withPlotly = () => plotly ??= new Promise(resolve => setTimeout(() => {
  const script = document.createElement("script");
  script.textContent = document.getElementById("plotly-source").textContent;
  document.head.appendChild(script);
  resolve(window.Plotly);
}, 0));
const drawn = new IntersectionObserver(entries => entries.forEach(entry => {
  if (!entry.isIntersecting) return;
  drawn.unobserve(entry.target);
  const figure = JSON.parse(entry.target.dataset.figure);
  withPlotly().then(Plotly => Plotly.newPlot(entry.target, figure.data, figure.layout, {displaylogo: false, responsive: true}));
}), {rootMargin: "200px"});
document.querySelectorAll(".plot").forEach(element => drawn.observe(element));
"""

SORT_SCRIPT = """
document.querySelectorAll("table.sortable").forEach(table => {
  table.querySelectorAll("th").forEach((th, column) => th.addEventListener("click", () => {
    const ascending = th.getAttribute("aria-sort") !== "ascending";
    table.querySelectorAll("th").forEach(other => other.removeAttribute("aria-sort"));
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    const key = row => {
      const text = row.cells[column].dataset.v ?? row.cells[column].textContent;
      const number = Number(text);
      return text === "" ? -Infinity : (isNaN(number) ? text : number);
    };
    const rows = Array.from(table.tBodies[0].rows);
    rows.sort((a, b) => {
      const x = key(a), y = key(b);
      const order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return ascending ? order : -order;
    });
    table.tBodies[0].append(...rows);
  }));
});
"""

STYLE = """
body{font-family:sans-serif;margin:1.5em auto;max-width:80em;padding:0 1em}
table{border-collapse:collapse;font-size:.85em;margin:1em 0}
th,td{padding:.2em .6em;border-bottom:1px solid #ddd;text-align:right;white-space:nowrap}
td:nth-child(-n+2),th:nth-child(-n+2){text-align:left}
table.sortable th{cursor:pointer;background:#f3f3f3;position:sticky;top:0}
th[aria-sort=ascending]::after{content:" \\25B2"} th[aria-sort=descending]::after{content:" \\25BC"}
.scroll{max-height:32em;overflow:auto}
.plots{display:flex;flex-wrap:wrap;gap:1em}
.plots>div{flex:1 1 36em;min-width:24em}
"""


def _shown(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def table_html(rows: list[dict], columns, table_id: str, names: dict | None = None, headings=None) -> str:
    """A sortable HTML table; each cell keeps its exact value in data-v for sorting. With
    `names`, gids are shown as their groups' names."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in headings or columns)
    body = []
    for row in rows:
        cells = []
        for column in columns:
            value = row.get(column)
            if column == "gid" and names is not None:
                value = names.get(value) or value
            raw = "" if value is None else (json.dumps(value) if isinstance(value, bool) else str(value))
            cells.append(f'<td data-v="{html.escape(raw)}">{html.escape(_shown(value))}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="scroll"><table class="sortable" id="{table_id}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


def distribution_figures(results) -> list:
    """The plotly figures of the run's distributions."""
    import plotly.graph_objects as go

    from .thread_report import _ccdf, collect_plot_data

    data = collect_plot_data(results)
    figures = []
    ccdf = go.Figure()
    for key, label in (("size", "thread size"), ("depth", "thread depth"), ("width", "thread width")):
        points = _ccdf(data[key])
        if points:
            ccdf.add_scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="lines+markers", name=label)
    ccdf.update_layout(title="CCDF of thread size, depth and width", xaxis_type="log", yaxis_type="log",
                       xaxis_title="value", yaxis_title="P[X >= value]")
    figures.append(ccdf)
    per_depth = go.Figure(go.Bar(x=[v for v, _ in data["per_depth"]], y=[c for _, c in data["per_depth"]]))
    per_depth.update_layout(title="Messages per depth", xaxis_title="depth (0 = root)", yaxis_title="messages", yaxis_type="log")
    figures.append(per_depth)
    bins = sorted((b, c) for b, c in data["latency"] if b is not None)
    latency = go.Figure(go.Bar(x=[10 ** ((b + 0.5) / 10) for b, _ in bins], y=[c for _, c in bins],
                               width=[10 ** ((b + 1) / 10) - 10 ** (b / 10) for b, _ in bins]))
    latency.update_layout(title="Reply latency (10 bins per decade)", xaxis_type="log", xaxis_title="seconds", yaxis_title="replies")
    figures.append(latency)
    over_time = go.Figure()
    series: dict[str, dict[float, int]] = {}
    for name, start, count in data["over_time"]:
        series.setdefault(name, {})
        series[name][start] = series[name].get(start, 0) + count
    import datetime as dt

    starts = data["bin_starts"][:-1] if data["partial_last_bin"] else data["bin_starts"]
    times = [dt.datetime.fromtimestamp(s, dt.timezone.utc).isoformat() for s in starts]
    for name in sorted(series):
        over_time.add_scatter(x=times, y=[series[name].get(s, 0) for s in starts], mode="lines", name=name, line_shape="hv")
    over_time.update_layout(title=f"Messages per {data['bin_s']} s, busiest groups", yaxis_title="messages")
    figures.append(over_time)
    return figures


def tree_figure(thread: dict, name: str):
    """One thread's drawn messages as an icicle chart (root on top)."""
    import plotly.graph_objects as go

    parents = thread["tree_parent"]
    ids = [str(i) for i in range(len(parents))]
    figure = go.Figure(go.Icicle(ids=ids, parents=["" if p < 0 else str(p) for p in parents], labels=[""] * len(parents),
                                 tiling_orientation="v", hoverinfo="none", root_color="lightgrey"))
    drawn = "" if len(parents) == thread["size"] else f", first {len(parents)} drawn"
    figure.update_layout(title=f"{name}: {thread['size']} messages, depth {thread['depth']}{drawn}",
                         margin={"t": 40, "l": 5, "r": 5, "b": 5}, height=260)
    return figure


def write_explorer(results, out: Path) -> Path:
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    names = results.group_names

    def div(figure) -> str:
        height = figure.layout.height or 450
        return f'<div class="plot" style="min-height:{height}px" data-figure="{html.escape(pio.to_json(figure, validate=False))}"></div>'

    summary = table_html([{"figure": k, "value": v} for k, v in results.summary.items()], ("figure", "value"), "summary")
    trees = [t for t in results.top_threads if t.get("tree_parent") is not None]
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>M2MC thread statistics: explorer</title>
<style>{STYLE}</style><script id="plotly-source" type="text/plain">{get_plotlyjs()}</script></head>
<body><h1>M2MC thread statistics</h1>
<p>Click a column's heading to sort by it. Measures are defined in resources/docs/thread-measures.md;
the full tables are messages/, threads/, groups/ and participants/ beside this file.</p>
<h2>Summary</h2>{summary}
<h2>Groups ({len(results.group_rows)} busiest)</h2>{table_html(results.group_rows, GROUP_COLUMNS, "groups")}
<h2>Threads ({len(results.top_threads)} largest)</h2>{table_html(results.top_threads, THREAD_COLUMNS, "threads", names)}
<h2>Distributions</h2><div class="plots">{''.join(f'<div>{div(f)}</div>' for f in distribution_figures(results))}</div>
<h2>The {len(trees)} largest threads as trees</h2>
<div class="plots">{''.join(f'<div>{div(tree_figure(t, names.get(t["gid"]) or t["gid"]))}</div>' for t in trees)}</div>
<script>{PLOT_SCRIPT}{SORT_SCRIPT}</script>
</body></html>
"""
    path = out / "explore.html"
    path.write_text(page, encoding="utf-8")
    log.info("wrote %s (%.1f MB)", path, path.stat().st_size / 1e6)
    return path
