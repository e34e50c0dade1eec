"""Files by which a benchmark's peer processes hand each other values (a gid, "go").

A reader polls for the file and reads it as soon as it exists, so a file must appear whole or
not at all: it is written under another name and renamed into place (a rename within one
directory is atomic).  ``Path.write_text`` creates the file empty and then writes it, and a
receiver that read the gid in between took "" for the gid and advertised for it for ever:
the discovery hang that bench.lan and bench.sync saw about once in 20 to 50 runs.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path


def publish(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that no reader ever sees it partly written."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    os.replace(partial, path)


async def wait_for(path: Path, poll: float = 0.05) -> str:
    """The text of ``path`` once another process has published it."""
    while not path.exists():
        await asyncio.sleep(poll)
    return path.read_text()
