"""The GroupManager's parts are injected (middleware.manager.Parts): a real manager, started, over an
in-memory store, a transport that records what it is handed and a file service that records its life.
No socket is opened: nothing here reaches a network."""

import asyncio

from m2mc.middleware import wire
from m2mc.middleware.addresses import Endpoint, GroupAddress
from m2mc.middleware.events import MessagesDelivered
from m2mc.middleware.manager import Config, GroupManager, Parts
from m2mc.middleware.memory_store import MemoryStore


class RecordingTransport:
    """A Transport that keeps every datagram handed to it, and the addresses listened on."""

    def __init__(self) -> None:
        self.endpoint: Endpoint | None = None
        self.sent: list[tuple[bytes, object]] = []
        self.listening: dict[GroupAddress, object] = {}
        self.closed = False
        self.datagrams_out = self.bytes_out = 0

    async def open(self) -> None:
        self.endpoint = Endpoint("127.0.0.1", 47999)

    async def listen(self, group, on_datagrams) -> None:
        self.listening[group] = on_datagrams

    def listen_unicast(self, on_datagrams) -> None:
        pass

    def listen_broadcast(self, port, on_datagrams) -> None:
        pass

    def stop_listening(self, group) -> None:
        self.listening.pop(group, None)

    def send(self, data: bytes, destination) -> None:
        self.sent.append((data, destination))
        self.datagrams_out += 1
        self.bytes_out += len(data)

    def close(self) -> None:
        self.closed = True


class RecordingFiles:
    """The file service's life as the manager drives it: where it serves, what it was told."""

    def __init__(self, core, listener) -> None:
        self.core = core
        self.serving: tuple[str, int] | None = None
        self.delivered_to: list[tuple[str, list]] = []
        self.closed = False

    async def start(self, host: str, port: int) -> None:
        self.serving = (host, port)

    def delivered(self, gid, messages) -> None:
        self.delivered_to.append((gid, [m.mid for m in messages]))

    def stats(self) -> dict:
        return {}

    async def close(self) -> None:
        self.closed = True


def test_a_message_sent_is_a_datagram_to_the_injected_transport_and_a_row_in_the_injected_store(tmp_path):
    store, network = MemoryStore(), RecordingTransport()
    made: list[RecordingFiles] = []
    events = []

    def files(core, listener):
        made.append(RecordingFiles(core, listener))
        return made[-1]

    async def run():
        manager = GroupManager(Config(tmp_path, name="Ann", iface="127.0.0.1"), events.append,
                               Parts(store=store, network=network, files=files))
        assert manager.store is store and manager.network is network and manager.files is made[0]
        assert manager.discovery is None  # none injected: Config.zeroconf (on by default) is default_parts' to read
        await manager.start()
        gid = manager.create_group("injected")
        await asyncio.sleep(0)  # the group's listener is set up on the loop
        network.sent.clear()
        mid = manager.send(gid, "through the seam")
        await asyncio.sleep(0.05)  # the flush runs on a later loop turn
        record = manager.gjlp.groups[gid]
        address = GroupAddress(record.addr, record.port)
        to_group = [wire.decode(data).message for data, destination in network.sent if destination == address]
        listening = set(network.listening)
        await manager.close()
        return gid, mid, address, listening, to_group

    gid, mid, address, listening, to_group = asyncio.run(run())
    assert address in listening  # the group's datagrams come in through the injected transport too
    texts = [item[4] for message in to_group if isinstance(message, wire.DataBatch) for item in message.items] + \
            [message.text for message in to_group if isinstance(message, wire.Data)]
    assert texts == ["through the seam"]
    assert [m.text for m in store.history(gid) if m.mid == mid] == ["through the seam"]
    assert not (tmp_path / "m2mc.sqlite3").exists()  # the default SQLite store was never made
    delivered = [m.mid for e in events if isinstance(e, MessagesDelivered) for m in e.messages]
    assert mid in delivered
    assert made[0].serving == ("127.0.0.1", 47999) and made[0].closed and network.closed
    assert (gid, [mid]) in made[0].delivered_to
