"""A full disk under the data dir: the caller gets a clear error and the message is not
sent, no seqno is spent, and once space returns everything works without a restart and
nothing is lost.  The data dir lives on a small tmpfs mounted in a temp dir here (and
unmounted afterwards); the peers run on a private loopback namespace."""

import errno
import os
import sqlite3
import subprocess

import pytest

from tests.testbed.lan import LoopbackHost, PeerProcess
from m2mc.middleware import crypto, wire
from m2mc.middleware.manager import Config, GroupManager
from m2mc.middleware.events import Event, MessagesDelivered, WarningRaised
from tests.testbed.arrivals import arriving

TMPFS_SIZE = "1m"  # issue 16's case: a 1 MB tmpfs


@pytest.fixture
def small_disk(tmp_path):
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0700", "tmpfs", str(mount_point)],
                   check=True)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(directory):
    """Write a file until the disk is full; return its path."""
    path = directory / "filler"
    with open(path, "wb", buffering=0) as out:
        block = os.urandom(64 * 1024)
        while True:
            try:
                out.write(block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
        while True:  # the last partial block
            try:
                out.write(b"x" * 512)
            except OSError:
                break
    return path


@pytest.mark.netns
def test_a_full_disk_refuses_sends_cleanly_and_recovers_without_a_restart(small_disk, tmp_path):
    host = LoopbackHost()
    peers = []
    try:
        a = PeerProcess(host.name, "127.0.0.1", small_disk / "a", "Ann", extra=["--no-zeroconf"])
        peers.append(a)
        b = PeerProcess(host.name, "127.0.0.1", tmp_path / "b", "Bob", extra=["--no-zeroconf"])
        peers.append(b)
        gid = a.call("create_group", {"desc": "Disk"})["gid"]
        b.wait_notification("group_discovered", lambda p: p["gid"] == gid)
        b.call("join_group", {"gid": gid})
        a.wait_notification("member_joined", lambda p: p["gid"] == gid and p["name"] == "Bob")
        first = a.call("send", {"gid": gid, "text": "before the disk filled", "parent": None})["mid"]
        b.wait_for(lambda: b.delivered(gid), what="the first message")

        filler = fill(small_disk)
        sent, refused = [first], []
        for i in range(400):  # the WAL has room for a few more commits; then they fail
            response = a.request("send", {"gid": gid, "text": f"while full {i} " + "z" * 2000, "parent": None})
            if "error" in response:
                refused.append(response["error"])
                if len(refused) == 5:
                    break
            else:
                sent.append(response["result"]["mid"])
        assert len(refused) == 5, "the disk never filled"
        assert all(e["code"] == -32000 and "not sent" in e["message"] and "disk is full" in e["message"]
                   for e in refused), refused
        assert a.call("whoami")["name"] == "Ann"
        assert a.call("stats")["storage_error"]
        # Bob talks while Ann cannot store: she keeps his messages in memory.
        bobs = [b.call("send", {"gid": gid, "text": f"Bob while Ann is full {i}", "parent": None})["mid"]
                for i in range(3)]

        filler.unlink()  # space returns; no restart
        a.wait_for(lambda: not a.call("stats")["storage_error"], timeout=10, what="storing again")
        after = a.call("send", {"gid": gid, "text": "after the disk emptied", "parent": first})["mid"]
        pid = first.split(":")[0]
        # No seqno was spent on the refused messages: the next one follows the last sent.
        assert [int(mid.split(":")[1]) for mid in sent + [after]] == list(range(1, len(sent) + 2))
        b.wait_for(lambda: any(m["mid"] == after for m in b.delivered(gid)), what="the message after")

        history_a = {m["mid"]: m["text"] for m in a.call("history", {"gid": gid})}
        history_b = {m["mid"]: m["text"] for m in b.call("history", {"gid": gid})}
        assert set(history_a) == set(history_b) == set(sent) | set(bobs) | {after}
        assert not any("while full" in text and mid.startswith(pid) and mid not in sent
                       for mid, text in history_b.items())
        assert {m["mid"] for m in a.delivered(gid)} >= set(bobs)  # shown once stored
        print(f"sent {len(sent) - 1} while filling, refused {len(refused)}: {refused[0]['message']}")
    finally:
        for peer in peers:
            peer.shutdown()
        host.close()


class Recorder:
    def __init__(self):
        self.messages, self.warnings = [], []

    def __call__(self, event: Event) -> None:
        if isinstance(event, MessagesDelivered):
            self.messages += event.messages
        elif isinstance(event, WarningRaised):
            self.warnings.append(event.text)


def test_a_failed_commit_takes_own_messages_back_and_keeps_the_others(tmp_path, monkeypatch):
    """In-process: the commit fails as on a full disk, then works again."""
    listener = Recorder()
    manager = GroupManager(Config(tmp_path, name="Ann", iface="127.0.0.1", zeroconf=False), listener)
    try:
        gid = manager.create_group("disk")
        first = manager.send(gid, "stored")
        manager.flush()
        real_commit = manager.store.commit

        def full():
            raise sqlite3.OperationalError("database or disk is full")

        monkeypatch.setattr(manager.store, "commit", full)
        lost = manager.send(gid, "not sent")
        bob = crypto.Identity.generate()
        manager._on_control_datagrams(arriving([wire.encode(bob, wire.Join(wire.sign_member(bob, gid, "Bob", 1, True)))]))
        manager._on_data_datagrams(arriving([wire.encode(bob, wire.signed_data(bob, gid, 1, None, 0, "Bob", "from Bob"))]))
        manager.flush()
        assert manager.take_unsent() == {lost: "not sent: cannot store messages (database or disk is full)"}
        assert manager.storage_error == "database or disk is full" and manager.stats_dict()["unstored"] == 1
        assert any("not sent" in w for w in listener.warnings)
        assert not manager.channels[gid].orderer.is_delivered(lost)
        assert not any(m.text == "from Bob" for m in listener.messages)  # shown only once stored

        monkeypatch.setattr(manager.store, "commit", real_commit)
        again = manager.send(gid, "sent after")
        manager.flush()
        assert again == lost  # the seqno taken back is the next one used: none skipped, none reused
        assert manager.storage_error is None
        assert [m.text for m in manager.history(gid)] == ["stored", "from Bob", "sent after"]
        assert any(m.text == "from Bob" for m in listener.messages)
        assert first[1] + 1 == again[1]
    finally:
        manager.store.close()
