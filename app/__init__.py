"""Composition roots and command-line entry points of M2MC."""
