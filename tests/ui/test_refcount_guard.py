"""The ui package keeps None/True/False alive under PySide6 builds that drop references to them.

Run in a child interpreter: when the guard fails the interpreter aborts
("none_dealloc"), which would take pytest down with it.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

HAMMER = """
import os, sys
os.environ["QT_QPA_PLATFORM"] = "offscreen"
import ui  # noqa: F401  (installs the guard)
from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QApplication, QLabel

class Source(QObject):
    fired = Signal(int)

app = QApplication([])
label, source = QLabel(), Source()
for i in range(%d):
    label.setText("x")  # a void method: returns None
    source.fired.emit(i)  # returns True
del label, source, app
print("survived")
"""


def test_many_void_calls_and_emits_do_not_kill_the_interpreter():
    # 300,000 calls: well beyond the references None and True start with in a fresh interpreter.
    done = subprocess.run([sys.executable, "-c", HAMMER % 300_000], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "survived" in done.stdout
