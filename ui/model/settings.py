"""What the app keeps across runs, read and written through one small seam: a QSettings in the app, a
plain dict in tests (both hold strings by key)."""

from __future__ import annotations

from typing import Any


def read_setting(settings: Any, key: str) -> str | None:
    value = settings.value(key, None) if hasattr(settings, "value") else settings.get(key)
    return None if value is None else str(value)


def write_setting(settings: Any, key: str, value: str) -> None:
    if hasattr(settings, "setValue"):
        settings.setValue(key, value)
    else:
        settings[key] = value
