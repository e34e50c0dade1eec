"""Real GroupManagers on the in-memory LAN (middleware.memory_lan): the SQLite store on :memory:, a
transport with no socket, and a virtual-time loop on which a minute of protocol passes at once."""

import time

import pytest

from m2mc.middleware import memory_lan
from m2mc.middleware.crypto import Identity
from m2mc.middleware.events import MessagesDelivered
from m2mc.middleware.manager import Config, GroupManager
from m2mc.middleware.memory_lan import MemoryLan, VirtualTimeLoop, memory_parts, memory_store
from m2mc.middleware.peer_core import PeerCore
from m2mc.middleware.memory_store import MemoryStore
from m2mc.middleware.store import Store


class NoFiles:
    """A file service that serves nothing (this test moves no file)."""

    def __init__(self, core, listener) -> None:
        pass

    async def start(self, host, port) -> None:
        pass

    def delivered(self, gid, messages) -> None:
        pass

    def stats(self) -> dict:
        return {}

    async def close(self) -> None:
        pass


def started(lan: MemoryLan, name: str, tmp_path, events: list) -> GroupManager:
    identity = Identity.generate()
    manager = GroupManager(Config(tmp_path / name, name=name, iface="127.0.0.1"), events.append,
                           memory_parts(lan, memory_store(identity), NoFiles))
    lan.loop.complete(manager.start())
    return manager


def test_two_managers_make_a_private_group_and_talk_within_virtual_seconds(tmp_path):
    lan = MemoryLan(wall=1_700_000_000.0)
    ann_events, bob_events = [], []
    ann = started(lan, "Ann", tmp_path, ann_events)
    bob = started(lan, "Bob", tmp_path, bob_events)
    assert isinstance(ann.store, Store) and ann.store.path.name == ":memory:"
    assert not list(tmp_path.iterdir())  # no database file, no data dir
    began = time.perf_counter()
    gid = lan.loop.complete(ann.create_group_async("garden", "a long enough passphrase"))
    lan.settle(3.0)
    assert gid in bob.gjlp.groups  # heard over the LAN
    assert lan.loop.complete(bob.join_group_async(gid, "a long enough passphrase")) == gid
    lan.settle(3.0)
    mid = bob.send(gid, "hello over memory")
    lan.loop.settle()
    lan.settle(60.0)  # a virtual minute: beacons, acknowledgements, presence
    elapsed = time.perf_counter() - began
    delivered = [m.text for e in ann_events if isinstance(e, MessagesDelivered) and e.gid == gid for m in e.messages]
    assert delivered == ["hello over memory"]
    assert [m.mid for m in ann.store.history(gid)] == [mid]
    assert lan.now == pytest.approx(MemoryLan.START + 66.0, abs=0.01)  # time moved only as asked
    assert lan.wall() == pytest.approx(1_700_000_066.0, abs=0.01)
    assert ann.presence is not None and bob.pid in {m.pid for m in ann.group(gid).members}
    assert elapsed < 5.0  # no Argon2id, no real waiting
    for manager in (ann, bob):
        lan.loop.complete(manager.close())


def test_a_bare_core_and_a_manager_hear_each_other(tmp_path):
    lan = MemoryLan(wall=1_700_000_000.0)
    events: list = []
    ann = started(lan, "Ann", tmp_path, events)
    identity = Identity.generate()
    other = PeerCore(MemoryStore(identity), lan.now, "Cy", wall=lan.wall())
    lan.add_core(other)
    gid = lan.run(other, lambda core: core.create_group("cafe", b"\0" * 16, None, lan.wall()))
    ann.advertise()
    lan.settle(3.0)
    assert gid in ann.gjlp.groups and ann.gjlp.groups[gid].verified
    lan.loop.complete(ann.join_group_async(gid))
    lan.settle(3.0)
    lan.run(other, lambda core: core.send(gid, "from a bare core", None, lan.now, lan.wall()))
    lan.settle(1.0)
    assert [m.text for m in ann.store.history(gid)] == ["from a bare core"]
    lan.loop.complete(ann.close())


def test_the_virtual_loop_jumps_to_the_next_timer_and_runs_executor_work_at_once():
    loop = VirtualTimeLoop(start=50.0)
    fired = []
    loop.call_later(3600.0, lambda: fired.append(loop.time()))
    began = time.perf_counter()
    loop.run_until(loop.time() + 7200.0)
    assert fired == [3650.0] and loop.time() == 7250.0
    assert time.perf_counter() - began < 1.0

    async def derive():
        return await loop.run_in_executor(None, memory_lan.cheap_group_key, "pass", b"s" * 16)

    assert loop.complete(derive()) == memory_lan.cheap_group_key("pass", b"s" * 16)
    assert loop.time() == 7250.0  # the "thread" took no virtual time
    loop.close()
