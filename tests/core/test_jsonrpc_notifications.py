"""The JSON-RPC notification table in the docs says what m2mc-peer's one ``match`` over the
middleware's events (app/peer.py, ``JsonRpcPeer.__call__``) writes: every notification it writes
is a row, with its params, and every row is written for some event.  In-process, no network."""

from __future__ import annotations

import re
import typing
from dataclasses import fields
from pathlib import Path

from m2mc.app.peer import JsonRpcPeer
from m2mc.middleware import events
from m2mc.middleware.types import ChatMessage, DirectMessage, GroupView, Member, Notice

REPO = Path(__file__).resolve().parents[2]
TABLE_HEADER = re.compile(r"^\| notification \| params \|")
MESSAGE_OBJECT = "a message object as in `history`"

ANN = Member("a" * 32, "Ann")
MESSAGE = ChatMessage("g" * 26, (ANN.pid, 1), None, "Ann", "hi", 1_700_000_000_000, 1_700_000_000_000)
VIEW = GroupView("g" * 26, "Lunch", "239.1.1.1", 47477, False, True, (ANN,), (), 1, 0.0, frozenset({"gjlp"}))
DIRECT = DirectMessage(ANN.pid, (ANN.pid, 1), None, "Ann", "hi", 1_700_000_000_000, 1_700_000_000_000, False,
                       "received", 1)
# A value of each field type an event carries; a new event with a new field type adds one here.
SAMPLES: dict[object, object] = {
    str: "g" * 26, int: 3, Member: ANN, list[ChatMessage]: [MESSAGE], list[GroupView]: [VIEW],
    list[DirectMessage]: [DIRECT], tuple[str, int]: (ANN.pid, 1), list[Notice]: [Notice(MESSAGE, "pin", MESSAGE.mid)],
}


def sample(event_type: type) -> events.Event:
    hints = typing.get_type_hints(event_type)
    missing = [f.name for f in fields(event_type) if hints[f.name] not in SAMPLES]
    assert not missing, f"{event_type.__name__}: add a sample of {[hints[n] for n in missing]} to SAMPLES"
    return event_type(**{f.name: SAMPLES[hints[f.name]] for f in fields(event_type)})


def written() -> dict[str, set[str]]:
    """Notification method -> its params' keys, for one sample of every event."""
    out: list[dict] = []
    peer = JsonRpcPeer(out.append)
    for event_type in typing.get_args(events.Event):
        peer(sample(event_type))
    notes: dict[str, set[str]] = {}
    for note in out:
        assert note.keys() == {"jsonrpc", "method", "params"} and note["jsonrpc"] == "2.0", note
        notes.setdefault(note["method"], set()).update(note["params"])
    return notes


def documented() -> dict[str, set[str]]:
    """The docs' notification table (README.md or resources/docs/): method -> its params' keys."""
    for path in [REPO / "README.md", *sorted((REPO / "resources" / "docs").glob("**/*.md"))]:
        lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
        start = next((i for i, line in enumerate(lines) if TABLE_HEADER.match(line)), None)
        if start is None:
            continue
        rows: dict[str, set[str]] = {}
        for line in lines[start + 2:]:
            if not line.startswith("|"):
                break
            method, params = (cell.strip() for cell in line.strip("|").split("|")[:2])
            name = method.strip("`")
            rows[name] = set(MESSAGE.to_json()) if params.startswith(MESSAGE_OBJECT) else \
                set(re.findall(r'"(\w+)"', params))
        return rows
    raise AssertionError("no table starting '| notification | params |' in README.md or resources/docs/")


def test_every_event_is_an_immutable_slotted_dataclass():
    for event_type in typing.get_args(events.Event):
        assert event_type.__dataclass_params__.frozen and "__slots__" in vars(event_type), event_type


def test_the_notification_table_is_what_the_peer_writes():
    assert documented() == written()
