"""The installed Qt binding keeps Python's reference counts intact.

PySide6-Essentials 6.12.0 on Python 3.11 drops one reference to None per void
call, which aborts the interpreter once the count reaches zero (pyproject pins
below it).  This catches such a binding before the app does.
"""

import sys

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QLabel


class Emitter(QObject):
    fired = Signal()


def test_void_calls_and_emits_do_not_drop_references(qapp):
    label = QLabel()
    emitter = Emitter()
    none_before, true_before = sys.getrefcount(None), sys.getrefcount(True)
    for _ in range(1000):
        label.setText("x")
        emitter.fired.emit()
    # Other threads touch None too; a leak of this kind moves the count by ~1000.
    assert abs(sys.getrefcount(None) - none_before) < 200
    assert abs(sys.getrefcount(True) - true_before) < 200
