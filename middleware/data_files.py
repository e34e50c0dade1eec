"""Where the data files live (stylesheet, icons, passphrase block-list), wherever M2MC runs from.

A checkout keeps them in the top-level ``resources/`` folder, beside the packages; the PyInstaller
bundle in ``resources/`` of its own folder; an installed wheel in ``<prefix>/share/m2mc``.
"""

from __future__ import annotations

import sys
import sysconfig
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def resource_dir() -> Path:
    here = Path(__file__).resolve()
    checkout = here.parents[1] / "resources"
    candidates = [checkout]
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        candidates.append(Path(bundle) / "resources")
    if len(here.parents) > 5:
        # <prefix>/lib/pythonX.Y/site-packages/m2mc/middleware/data_files.py: the prefix the wheel went
        # into, which is not this interpreter's own after `pip install --prefix`.
        candidates.append(here.parents[5] / "share" / "m2mc")
    candidates.append(Path(sysconfig.get_path("data")) / "share" / "m2mc")
    return next((path for path in candidates if path.is_dir()), checkout)
