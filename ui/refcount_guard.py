"""Keeps None, True and False alive under PySide6 builds that drop references to them.

PySide6 6.12 (abi3 wheels) on Python 3.11 returns ``None`` from every void
method (``beginInsertRows``, ``setText``, ``QTimer.start`` …) and ``True`` from
every ``Signal.emit`` without taking a reference: each call lowers the
singleton's count by one.  Python 3.12 made these objects immortal, so the
wheel is fine there; on 3.11 a busy GUI drives the count to zero and the
interpreter aborts ("none_dealloc" / "bool_dealloc"), usually at exit.  The
counts are topped up once by an amount no process can use up, which is what
3.12 does for them anyway; the singletons are never freed in any case.
"""

from __future__ import annotations

import ctypes
import sys

RESERVE = 1 << 48  # 2.8e14 dropped references: decades at a million Qt calls a second

_guarded = False


def protect_singletons() -> None:
    global _guarded
    # Immortal since Python 3.12 (PEP 683); debug builds put other fields before the count.
    if _guarded or sys.version_info >= (3, 12) or hasattr(sys, "gettotalrefcount"):
        return
    for singleton in (None, True, False):
        before = sys.getrefcount(singleton)
        count = ctypes.c_ssize_t.from_address(id(singleton))  # ob_refcnt opens PyObject in release builds
        count.value += RESERVE
        # Other threads keep using None meanwhile, so the check allows slack; a field other than
        # the count would not have moved by almost exactly RESERVE, and is put back.
        if abs(sys.getrefcount(singleton) - before - RESERVE) > RESERVE // 1000:
            count.value -= RESERVE
    _guarded = True
