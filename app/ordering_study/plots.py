"""PNG plots of the study: delay CDFs per policy and mean delay against group size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from .metrics import Row  # noqa: E402
from .study import ScenarioRun  # noqa: E402

STYLE: dict[str, dict[str, Any]] = {
    "sb": dict(color="tab:green", linewidth=2.5),
    "causal": dict(color="tab:blue"),
    "total_sequencer": dict(color="tab:orange"),
    "total_lamport": dict(color="tab:red"),
    "linear_clock": dict(color="tab:purple"),
    "physical_linear": dict(color="tab:brown"),
    "obg": dict(color="tab:olive", linewidth=2.5),
    "none": dict(color="grey", linestyle=":"),
}


def delay_cdf(runs: list[ScenarioRun], path: Path) -> None:
    fig, axes = plt.subplots(1, len(runs), figsize=(4.2 * len(runs), 3.8), sharey=True, squeeze=False)
    for ax, run in zip(axes[0], runs):
        for policy, delays in run.delays.items():
            values = sorted(delays)
            fractions = [(i + 1) / len(values) for i in range(len(values))]
            ax.step(values, fractions, where="post", label=policy, **STYLE.get(policy, {}))
        ax.set_xscale("symlog", linthresh=0.1)
        ax.set_xlim(left=0)
        ax.set_ylim(-0.02, 1.02)  # policies that never hold sit on the top edge
        ax.set_title(f"{run.scenario.name} (N={run.scenario.chat.processes})")
        ax.set_xlabel("delivery delay, receipt to delivery (ms)")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("fraction of received copies")
    axes[0][-1].legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def delay_vs_group_size(rows: list[Row], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for policy in dict.fromkeys(row.policy for row in rows):
        mine = sorted((r for r in rows if r.policy == policy), key=lambda r: r.processes)
        ax.plot(
            [r.processes for r in mine], [r.mean_delay_ms for r in mine],
            marker="o", label=policy, **STYLE.get(policy, {}),
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("symlog", linthresh=0.1)
    ax.set_ylim(bottom=-0.02)
    ax.set_xticks(sorted({r.processes for r in rows}), [str(n) for n in sorted({r.processes for r in rows})])
    ax.set_xlabel("group size N (processes)")
    ax.set_ylabel("mean delivery delay (ms)")
    scenario = rows[0].scenario if rows else ""
    ax.set_title(f"Mean delivery delay vs group size ({scenario})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
