"""Notification levels without Qt: per group, whether arrivals are told (all, mentions only, nothing),
kept in the settings across runs, and which of a batch of arrivals a level tells of."""

from __future__ import annotations

from typing import Any, Sequence

from ...middleware.types import ChatMessage

NOTIFY_LEVELS = {"all": "all messages", "mentions": "mentions only", "nothing": "nothing"}
NOTIFY_MIGRATED = {"true": "all", "false": "mentions"}  # the old per-group on/off switch


class NotifyLevels:
    """The groups' levels, kept in ``settings`` (a QSettings in the app, a dict in tests) under
    ``notify/<gid>``, where the old on/off switch was: its values read as on -> all, off -> mentions."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings

    def level(self, gid: str) -> str:
        key = f"notify/{gid}"
        stored = str(self.settings.value(key, "all") if hasattr(self.settings, "value")
                     else self.settings.get(key, "all"))
        level = NOTIFY_MIGRATED.get(stored, stored)
        if level != stored:
            self._put(key, level)
        return level if level in NOTIFY_LEVELS else "all"

    def set_level(self, gid: str, level: str) -> None:
        if level not in NOTIFY_LEVELS:
            raise ValueError(f"not a notification level: {level!r}")
        self._put(f"notify/{gid}", level)

    def _put(self, key: str, value: str) -> None:
        if hasattr(self.settings, "setValue"):
            self.settings.setValue(key, value)
        else:
            self.settings[key] = value


def to_tell(level: str, own: str, arrivals: Sequence[ChatMessage]) -> tuple[list[ChatMessage], bool]:
    """The arrivals (others' messages, not notices) that ``level`` tells of, and whether they are
    mentions of ``own``: mentions are told unless the level is "nothing"."""
    if level == "nothing":
        return [], False
    mentioning = [m for m in arrivals if own in m.mentions]
    if mentioning:
        return mentioning, True
    return (list(arrivals) if level == "all" else []), False
