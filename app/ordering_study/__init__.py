"""Ordering study: S_b against causal, total, linear- and physical-clock ordering, in simulation.

Run it as ``m2mc-ordering-study --out DIR [--seed N] [--quick]``.
"""

from .cli import main

__all__ = ["main"]
