"""Ordering study: S_b against causal, total, linear- and physical-clock ordering, and SES for direct messages, in simulation.

Run it as ``m2mc-ordering-study --out DIR [--seed N] [--quick]``.
"""

from __future__ import annotations

from ..extras import require_extra

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """The m2mc-ordering-study command; says which extra to install when numpy or matplotlib is missing."""
    require_extra("m2mc-ordering-study", "study")
    from .cli import main as run_study

    return run_study(argv)
