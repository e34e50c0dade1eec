"""Benchmarks: scripts that print figures (run by hand, never timed unit tests)."""
