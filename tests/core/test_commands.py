"""The public calls as values (middleware/commands.py): each is a frozen, slotted, documented
dataclass, and PeerCore.execute runs every core command through the core's own methods.
In-process, no network: one core over a MemoryStore, a hand-set clock."""

from __future__ import annotations

import typing
from dataclasses import fields

import pytest

from m2mc.middleware import commands as c
from m2mc.middleware import crypto
from m2mc.middleware.memory_store import MemoryStore
from m2mc.middleware.peer_core import PeerCore
from m2mc.middleware.types import UsageError

WALL = 1_800_000_000.0


def test_every_command_is_a_documented_immutable_slotted_dataclass_of_one_kind():
    core, adapter = typing.get_args(c.CoreCommand), typing.get_args(c.AdapterCommand)
    assert not set(core) & set(adapter)
    assert set(typing.get_args(c.Command)) == set(core) | set(adapter)
    assert set(c.ADAPTER_COMMANDS) == set(adapter)
    for command in typing.get_args(c.Command):
        assert command.__dataclass_params__.frozen and "__slots__" in vars(command), command
        assert command.__doc__ and not command.__doc__.startswith(command.__name__ + "("), command
        assert issubclass(command, c.Query) != issubclass(command, c.Action), command
        typing.get_type_hints(command, include_extras=True)  # every field's type resolves


@pytest.fixture
def core() -> PeerCore:
    return PeerCore(MemoryStore(), 10.0, "Ann", wall=WALL)


def test_execute_runs_the_calls_through_the_core(core):
    gid = core.create_group("Lunch", crypto.new_salt(), None, WALL)
    assert core.execute(c.Whoami(), 11.0) == {"pid": core.pid, "name": "Ann"}
    first = core.execute(c.Send(gid, "soup?"), 11.0)
    reply = core.execute(c.Send(gid, "yes", parent=first), 11.0)
    core.flush(11.0, WALL + 1)
    assert [m.text for m in core.execute(c.History(gid), 12.0)] == ["soup?", "yes"]
    assert core.execute(c.Edit(gid, first, "soup at noon?"), 12.0)[0] == core.pid
    assert core.execute(c.React(gid, reply, "👍"), 12.0)[0] == core.pid
    core.flush(12.0, WALL + 2)
    page = core.execute(c.History(gid, limit=1), 13.0)
    assert [m.mid for m in page] == [reply] and page[0].reactions == {"👍": [core.pid]}
    assert core.execute(c.History(gid), 13.0)[0].text == "soup at noon?"
    assert [m.mid for m in core.execute(c.Thread(gid, first), 13.0)] == [first, reply]
    found = core.execute(c.Search("noon", limit=1), 13.0)
    assert [hit.mid for hit, _root in found.hits] == [first] and found.cursor is None
    assert found.to_json()["results"][0]["thread_root"] == f"{core.pid}:{first[1]}"
    assert core.execute(c.ReadReceipts(False), 13.0) is False
    assert core.execute(c.Group(gid), 13.0).desc == "Lunch"
    core.execute(c.SetTopic(gid, "Soup"), 13.0)
    core.flush(13.0, WALL + 3)
    assert core.execute(c.Topic(gid), 14.0) == ("Soup", core.pid)


def test_execute_checks_what_the_core_checks(core):
    gid = core.create_group("Lunch", crypto.new_salt(), None, WALL)
    with pytest.raises(UsageError):
        core.execute(c.SetName(""), 11.0)
    with pytest.raises(UsageError):
        core.execute(c.React(gid, (core.pid, 1), "x" * 100), 11.0)
    with pytest.raises(UsageError):
        core.execute(c.History("no such group"), 11.0)


def test_every_core_command_has_an_arm_and_no_adapter_command_does(core):
    """A command of each core kind reaches a method (it may refuse its sample), never the fall-through."""
    gid = core.create_group("Lunch", crypto.new_salt(), None, WALL)
    samples = {str: gid, int: 1, bool: True, float: 1.0, c.Mid: (core.pid, 1)}

    def sample(command: type) -> object:
        hints = typing.get_type_hints(command)
        args = {}
        for f in fields(command):
            hint = hints[f.name]
            options = [option for option in typing.get_args(hint) if option is not type(None)] or [hint]
            if hint in samples or options[0] in samples:
                args[f.name] = samples.get(hint, samples.get(options[0]))
        if command is c.Search:
            args["query"] = "soup"
        if command is c.JoinGroup:
            args.pop("invite")
        if command is c.Messages:
            args["mids"] = ((core.pid, 1),)
        if command is c.MarkRead:
            args["ranges"] = ((1, 1),)
        if command is c.Send:
            args["mentions"] = ()
        return command(**args)

    for command in typing.get_args(c.CoreCommand):
        try:
            core.execute(sample(command), 11.0)
        except TypeError as exc:
            assert "not a core command" not in str(exc), command
        except (UsageError, KeyError, ValueError):
            pass  # refused on its merits: it was dispatched
    for command in typing.get_args(c.AdapterCommand):
        with pytest.raises(TypeError, match="not a core command"):
            core.execute(sample(command), 11.0)
