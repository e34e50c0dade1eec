"""The GUI's in-memory backend refuses what the real middleware refuses, in the same words.

Both take their rules from ``middleware/rules.py``; this drives a whole GroupManager (never started:
no sockets) and a MemoryManager through the same bad calls and compares the refusals."""

from __future__ import annotations

import pytest

from m2mc.middleware import kinds
from m2mc.middleware.manager import Config, GroupManager
from m2mc.middleware.events import ignore
from m2mc.middleware.types import UsageError
from m2mc.ui.memory_backend import MemoryManager

OP_MARKER = kinds.body(kinds.OPERATION, "")  # how an operation's body opens (middleware.kinds)

GOOD_PASSPHRASE = "violet kettle marching uphill"

# (call, args): {gid} is the open group, {private} the private group, {mine} our message in {gid}.
BAD_CALLS = [
    ("create_group", ("",)),
    ("create_group", ("   ",)),
    ("create_group", ("x" * 201,)),
    ("create_group", (None,)),
    ("create_group", ("lone \ud800 surrogate",)),
    ("create_group", ("ok", "short")),
    ("create_group", ("ok", "password1")),
    ("create_group", ("ok", "aaaaaaaaaaaa")),
    ("create_group", ("ok", "q" * 1025)),
    ("set_name", ("",)),
    ("set_name", ("   ",)),
    ("set_name", ("n" * 65,)),
    ("set_name", (7,)),
    ("set_name", ("\u202eecila",)),
    ("set_name", ("alice\u200b",)),
    ("send", ("{gid}", "")),
    ("send", ("{gid}", "  \n ")),
    ("send", ("{gid}", "t" * 8001)),
    ("send", ("{gid}", OP_MARKER + "forged")),
    ("send", ("{gid}", 42)),
    ("send", ("{gid}", "a reply", ("0" * 64, 99))),
    ("send", ("no-such-group", "hello")),
    ("edit", ("{gid}", "{mine}", "")),
    ("edit", ("{gid}", "{mine}", None)),
    ("edit", ("{gid}", ("0" * 64, 99), "new text")),
    ("edit", ("{gid}", "{mine}", "e" * 7801)),
    ("react", ("{gid}", "{mine}", 5)),
    ("react", ("{gid}", "{mine}", "")),
    ("react", ("{gid}", "{mine}", "👍" * 17)),
    ("pin", ("{gid}", "not a mid")),
    ("delete", ("{gid}", None)),
    ("set_topic", ("{gid}", 5)),
    ("set_topic", ("{gid}", "t" * 301)),
    ("join_group", ("{gid}", "a passphrase for an open group")),
    ("join_group", ("{private}",)),
    ("join_group", ("{private}", "not the passphrase at all")),
    ("leave_group", ("{gid}",)),
    ("group", ("no-such-group",)),
]


class Peer:
    """One backend with an open group (left, so it can be joined again), a private one (left too)
    and an open group it stays in, holding one message of ours."""

    def __init__(self, manager) -> None:
        self.manager = manager
        self.left_open = manager.create_group("left open")
        self.private = manager.create_group("left private", GOOD_PASSPHRASE)
        self.gid = manager.create_group("talk")
        self.mine = manager.send(self.gid, "hello")
        if hasattr(manager, "flush"):
            manager.flush()

    def refusal(self, method: str, args: tuple) -> str:
        fill = {"{gid}": self.gid, "{private}": self.private, "{mine}": self.mine}
        values = tuple(fill.get(a, a) if isinstance(a, str) else a for a in args)
        if method == "join_group" and values[0] == self.gid:
            values = (self.left_open, *values[1:])
        if method == "leave_group":
            values = (self.left_open,)
        with pytest.raises(UsageError) as refused:
            getattr(self.manager, method)(*values)
        text = str(refused.value)
        for gid, name in ((self.left_open, "<left open>"), (self.private, "<private>"), (self.gid, "<gid>")):
            text = text.replace(gid, name)
        return f"{type(refused.value).__name__}: {text}"


@pytest.fixture(scope="module")
def peers(tmp_path_factory):
    real = GroupManager(Config(tmp_path_factory.mktemp("real"), name="Ann", iface="127.0.0.1", zeroconf=False),
                        ignore)
    memory = MemoryManager(ignore, name="Ann")
    both = Peer(real), Peer(memory)
    for peer in both:  # leaving needs no network on either backend
        peer.manager.leave_group(peer.left_open)
        peer.manager.leave_group(peer.private)
    yield both
    real.store.close()


@pytest.mark.parametrize("method, args", BAD_CALLS, ids=[f"{m}-{i}" for i, (m, _a) in enumerate(BAD_CALLS)])
def test_both_backends_refuse_a_bad_call_in_the_same_words(peers, method, args):
    real, memory = peers
    assert memory.refusal(method, args) == real.refusal(method, args)
