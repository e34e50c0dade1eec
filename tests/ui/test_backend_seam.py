"""The typed seam between the GUI and the middleware (ui/backend.py): both peers satisfy the Peer
Protocol (mypy says so, and says so when one does not), calls are typed, events arrive as values."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

from m2mc.middleware.manager import Config, GroupManager
from m2mc.middleware.commands import CreateGroup, Send
from m2mc.middleware.events import MemberJoined, MessagesDelivered, TopicChanged, ignore
from m2mc.middleware.types import ChatMessage, Member
from m2mc.ui.backend import Peer
from m2mc.ui.memory_backend import MemoryBackend, MemoryManager

REPO = Path(__file__).resolve().parents[2]
MYPY = Path(sys.executable).parent / "mypy"
SEAM = ("ui/backend.py", "ui/bridge.py", "ui/memory_backend.py")

CHECK = '''
from m2mc.middleware.manager import GroupManager
from m2mc.ui.backend import Peer
from m2mc.ui.bridge import Backend
from m2mc.ui.memory_backend import MemoryManager


class NoSend(MemoryManager):
    send = None  # type: ignore[assignment]  # a backend that lost a call


def real(manager: GroupManager) -> Peer:
    return manager


def memory(manager: MemoryManager) -> Peer:
    return manager


def broken(manager: NoSend) -> Peer:
    return manager  # WRONG: NoSend


def calls(backend: Backend) -> None:
    backend.call(lambda peer: peer.send("gid", "text", None), on_result=lambda mid: print(mid[1] + 1))
    backend.call_async(lambda peer: peer.join_group_async("gid"), on_result=lambda gid: print(gid.upper()))
    backend.call(lambda peer: peer.sned("gid", "text"))  # WRONG: misspelt
    backend.call(lambda peer: peer.mark_read("gid", 5))  # WRONG: ranges
    backend.call(lambda peer: peer.history("gid"), on_result=lambda n: print(n + 1))  # WRONG: list + int
'''


def test_mypy_holds_both_peers_and_the_calls_to_the_protocol(tmp_path):
    """The seam's modules are clean under mypy, GroupManager and MemoryManager are Peers, and mypy
    catches a peer without a call, a misspelt call, a wrong argument and a misread result."""
    package = tmp_path / "m2mc"
    package.mkdir()
    shutil.copy(REPO / "packaging" / "m2mc" / "__init__.py", package)
    for folder in ("app", "ui", "middleware"):
        shutil.copytree(REPO / folder, package / folder, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    (tmp_path / "check_seam.py").write_text(CHECK, encoding="utf-8")
    (tmp_path / "none.ini").write_text("[mypy]\n", encoding="utf-8")  # not the project's: it checks middleware/
    result = subprocess.run(
        [str(MYPY), "--no-incremental", "--follow-imports=silent", "--ignore-missing-imports",
         "--python-version", "3.11", "--config-file", str(tmp_path / "none.ini"), "check_seam.py",
         *(f"m2mc/{path}" for path in SEAM)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode in (0, 1), result.stdout[-2000:] + result.stderr[-2000:]  # 2: mypy could not run
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    wrong = [n for n, line in enumerate(CHECK.splitlines(), 1) if "# WRONG" in line]
    assert sorted({int(line.split(":")[1]) for line in errors}) == wrong, result.stdout[-4000:]
    assert all(line.startswith("check_seam.py:") for line in errors), result.stdout[-4000:]


def test_both_peers_are_peers_at_run_time(tmp_path):
    real = GroupManager(Config(tmp_path, name="Ann", iface="127.0.0.1", zeroconf=False), ignore)
    try:
        assert isinstance(real, Peer)
        assert isinstance(MemoryManager(ignore), Peer)
        assert not isinstance(object(), Peer)
    finally:
        real.store.close()


def test_events_cross_as_values_and_a_burst_reaches_the_window_as_one_batch(qtbot):
    backend = MemoryBackend()
    ann = Member("a" * 64, "Ann")
    batches, joined, topics = [], [], []

    def heard(event) -> None:
        match event:
            case MessagesDelivered(gid, messages):
                batches.append((gid, [m.text for m in messages]))
            case MemberJoined():
                joined.append(event)
            case TopicChanged():
                topics.append(event)

    backend.peer_event.connect(heard)

    def message(gid: str, seqno: int) -> ChatMessage:
        return ChatMessage(gid, (ann.pid, seqno), None, "Ann", f"{gid}#{seqno}", 0, 0)

    def middleware_thread() -> None:  # as the middleware's loop thread calls its listener
        backend.post(MessagesDelivered("g1", [message("g1", 1)]))
        backend.post(MessagesDelivered("g1", [message("g1", 2), message("g1", 3)]))
        backend.post(MemberJoined("g1", ann))
        backend.post(MessagesDelivered("g1", [message("g1", 4)]))
        backend.post(MessagesDelivered("g2", [message("g2", 1)]))
        backend.post(TopicChanged("g2", "Lunch", ann.pid))

    thread = threading.Thread(target=middleware_thread)
    thread.start()
    thread.join()
    qtbot.waitUntil(lambda: len(topics) == 1)
    assert batches == [("g1", ["g1#1", "g1#2", "g1#3"]), ("g1", ["g1#4"]), ("g2", ["g2#1"])]
    assert joined == [MemberJoined("g1", ann)] and topics == [TopicChanged("g2", "Lunch", ann.pid)]


def test_a_typed_call_and_a_coroutine_call_come_back_to_their_callbacks(qtbot):
    backend = MemoryBackend()
    created, refused = [], []
    backend.call_async(lambda peer: peer.create_group_async("Lunch"), on_result=created.append)
    backend.call(lambda peer: peer.send("no-such-group", "hi"), on_error=lambda exc: refused.append(str(exc)))
    qtbot.waitUntil(lambda: bool(created and refused))
    assert backend.manager.group(created[0]).desc == "Lunch"
    assert refused == ["unknown group 'no-such-group'"]


def test_a_command_runs_as_a_value_on_the_same_path(qtbot):
    backend = MemoryBackend()
    created, sent, refused = [], [], []
    backend.execute(CreateGroup("Lunch"), on_result=created.append)
    qtbot.waitUntil(lambda: bool(created))
    backend.execute(Send(created[0], "soup?"), on_result=sent.append)
    backend.execute(Send("no-such-group", "hi"), on_error=lambda exc: refused.append(str(exc)))
    qtbot.waitUntil(lambda: bool(sent and refused))
    assert sent == [(backend.pid, 1)] and backend.manager.sent == [(created[0], "soup?", None)]
    assert [m.text for m in backend.manager.history(created[0])] == ["soup?"]
    assert refused == ["unknown group 'no-such-group'"]


def test_an_answer_for_a_qt_object_deleted_meanwhile_is_dropped_not_raised_in_the_event_loop(qtbot):
    """A model or pane closed while its call ran (under load a window's teardown raced its first
    page): its callback would emit from a deleted object, "Signal source has been deleted"."""
    from PySide6.QtCore import QObject, Signal

    class Asker(QObject):
        answered = Signal()

        def take(self, result):
            self.answered.emit()

    backend = MemoryBackend()
    asker, heard = Asker(), []
    backend.call_async(lambda peer: peer.create_group_async("Lunch"), on_result=asker.take)
    backend.call_async(lambda peer: peer.create_group_async("Tea"), on_result=heard.append)
    import shiboken6

    shiboken6.delete(asker)  # closed before the answer comes back
    qtbot.waitUntil(lambda: bool(heard))  # pytest-qt fails the test on an exception in the event loop
    assert backend.manager.group(heard[0]).desc == "Tea"


def test_closing_the_memory_backend_says_goodbye_on_the_lan_and_refuses_later_calls(qtbot):
    """The real manager's close: its goodbye reaches the other peers, and a call after it fails
    through the callbacks (as ManagerBackend's do once the middleware is stopped)."""
    from m2mc.ui.memory_backend import sim_member

    backend = MemoryBackend()
    ann = sim_member("Ann")
    backend.manager.inject_group("Lunch", members=(ann,), joined=True)
    lan, ann_core = backend.manager.lan, backend.manager.peer(ann)
    assert ann_core.presence.status(backend.pid, lan.now) == "online"
    backend.close()
    assert lan.loop.is_closed()
    assert ann_core.presence.status(backend.pid, lan.now) != "online"  # its goodbye was heard
    refused = []
    backend.call(lambda peer: peer.groups(), on_error=lambda exc: refused.append(exc))
    qtbot.waitUntil(lambda: bool(refused))
    backend.close()  # a second close does nothing
