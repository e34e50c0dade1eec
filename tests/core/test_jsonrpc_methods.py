"""The JSON-RPC method table in the docs says what m2mc-peer answers: every documented method is a
command (middleware/commands.py, through app/peer.py's METHODS) and every method is documented, with
its params the command's fields, by name, and one marked optional ("x"?) only where the field has a
default.  And the params are checked as the fields' types say, with an INVALID_PARAMS error naming
what is wrong.  In-process, no network."""

from __future__ import annotations

import re
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

from m2mc.app.peer import INVALID_PARAMS, METHODS, JsonRpcPeer, command_of, RpcError
from m2mc.middleware import commands as c
from m2mc.middleware.manager import Config, GroupManager
from m2mc.middleware.events import ignore

REPO = Path(__file__).resolve().parents[2]
TABLE_HEADER = re.compile(r"^\| method \| params \|")


def documented() -> dict[str, dict[str, bool]]:
    """The docs' method table (resources/docs/): method -> {param: marked optional}."""
    for path in sorted((REPO / "resources" / "docs").glob("**/*.md")):
        lines = path.read_text(encoding="utf-8").splitlines()
        start = next((i for i, line in enumerate(lines) if TABLE_HEADER.match(line)), None)
        if start is None:
            continue
        rows: dict[str, dict[str, bool]] = {}
        for line in lines[start + 2:]:
            if not line.startswith("|"):
                break
            method, params = (cell.strip() for cell in line.strip("|").split("|")[:2])
            found: dict[str, bool] = {}
            for name, optional in re.findall(r'"(\w+)"(\??)', params):
                found[name] = found.get(name, False) or bool(optional)
            rows[method.strip("`")] = found
        return rows
    raise AssertionError("no table starting '| method | params |' in resources/docs/")


def test_the_method_table_is_the_commands():
    docs = documented()
    assert sorted(docs) == sorted(METHODS)
    for method, command in METHODS.items():
        fields_of = {f.name: f.default is not MISSING for f in fields(command)}
        assert set(docs[method]) == set(fields_of), method
        for name, optional in docs[method].items():
            assert fields_of[name] or not optional, f"{method}: {name!r} is documented optional and has no default"


def test_every_method_command_is_one_the_manager_executes():
    assert set(METHODS.values()) <= set(c.CoreCommand.__args__) | set(c.AdapterCommand.__args__)


@pytest.mark.parametrize("method, params, words", [
    ("send", {"gid": "g"}, "missing parameter 'text'"),
    ("send", {"gid": "g", "text": 5}, "invalid parameter 'text' (expected a string)"),
    ("send", {"gid": "g", "text": "x", "colour": "red"}, "'colour' is not supported by send"),
    ("send", {"gid": "g", "text": "x", "parent": "garbage"}, "bad parent"),
    ("send", {"gid": "g", "text": "x", "mentions": [1]}, "'mentions' (expected a list of strings)"),
    ("react", {"gid": "g", "mid": "ab:1", "emoji": "x", "on": 1}, "'on' (expected true or false)"),
    ("history", {"gid": "g", "limit": 1001}, "'limit' (expected an integer from 1 to 1000 or null)"),
    ("add_peer", {"address": "h", "wait": 61}, "'wait' (expected a number from 0 to 60)"),
    ("search", {"query": "x", "order": "random"}, '\'order\' (expected "relevance" or "time")'),
    ("search", {"query": "x", "since": "today"}, "'since' (expected an ISO-8601 time"),
    ("search", {"query": " "}, "empty search query"),
    ("join_group", {}, "'gid' or 'invite'"),
])
def test_params_are_checked_by_the_fields_types(method, params, words):
    with pytest.raises(RpcError) as refused:
        command_of(method, params)
    assert refused.value.code == INVALID_PARAMS and words in refused.value.message, refused.value.message


def test_params_become_the_command_and_its_answer_is_named(tmp_path):
    assert command_of("send", {"gid": "g", "text": "hi", "parent": "ab:3", "mentions": ["p"]}) == \
        c.Send("g", "hi", ("ab", 3), ("p",))
    assert command_of("search", {"query": "x", "since": "2026-01-31T09:00:00Z"}).since == 1_769_850_000_000
    manager = GroupManager(Config(tmp_path, name="Ann", iface="127.0.0.1", zeroconf=False), ignore)
    rpc = JsonRpcPeer(lambda _note: None)
    rpc.manager = manager
    try:
        gid = manager.create_group("Lunch")
        mid = rpc.call("send", {"gid": gid, "text": "hi"})["mid"]
        assert mid == f"{manager.pid}:1"
        assert rpc.call("read_receipts", {"on": False}) == {"on": False}
        assert rpc.call("leave_group", {"gid": gid}) == {}
        assert [m["mid"] for m in rpc.call("history", {"gid": gid})] == [mid]
        assert rpc.call("history", {"gid": gid, "limit": 1})[0]["order"] >= 1
    finally:
        manager.store.close()


def test_the_adapters_own_commands_run_the_same_way_in_memory(tmp_path):
    """The JSON-RPC peer over the GUI's in-memory manager: its adapter commands go through
    commands.run_on_adapter as GroupManager's do."""
    from m2mc.middleware.types import UsageError
    from m2mc.ui.memory_backend import MemoryManager

    manager = MemoryManager(ignore, name="Bot")
    rpc = JsonRpcPeer(lambda _note: None)
    rpc.manager = manager
    gid = manager.create_group("Lunch")
    rpc.call("send", {"gid": gid, "text": "soup?"})
    assert rpc.call("network", {})["state"] == "connected"
    out = tmp_path / "log.jsonl"
    assert rpc.call("export_log", {"path": str(out), "gid": gid}) == {"path": str(out), "messages": 1}
    assert '"soup?"' in out.read_text(encoding="utf-8")
    with pytest.raises(UsageError, match="cannot write"):
        rpc.call("export_log", {"path": str(tmp_path / "no" / "such" / "dir.jsonl")})
    assert rpc.call("stats", {})["datagrams_in"] >= 0
