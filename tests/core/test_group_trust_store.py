"""Group trust in a GroupManager without sockets: stored descriptors and member records,
one row per member change, old data dirs, private groups, names and passphrases."""

import asyncio
import time

import msgpack
import pytest

from m2mc.app.bench.kdf import while_ticking
from m2mc.middleware import crypto, passphrase, wire
from m2mc.middleware.manager import Config, GroupManager
from m2mc.middleware.names import lookalikes
from m2mc.middleware.store import Store
from m2mc.middleware.types import ChatMessage, Member, PassphraseRefused, UsageError, short_fingerprint
from tests.testbed.arrivals import arriving

ANN, BOB = crypto.Identity.generate(), crypto.Identity.generate()


def manager(path, name="Me"):
    # Never started: its sockets stay closed, so everything is in-process.
    return GroupManager(Config(path, name=name, iface="127.0.0.1", zeroconf=False))


def feed(m, *messages, sender=ANN):
    m._on_control_datagrams(arriving([wire.encode(sender, message) for message in messages]))
    m.flush()


def open_group(creator=ANN):
    return wire.sign_descriptor(creator, "Lunch", False, "", 0, 0, crypto.new_salt(), b"", "239.255.3.4", 47477,
                                int(time.time() * 1000))


def test_a_member_change_writes_one_row_and_the_store_keeps_only_verified_records(tmp_path):
    m = manager(tmp_path / "a")
    d = open_group()
    records = [wire.sign_member(crypto.Identity.generate(), d.gid, f"m{i}", 1, True) for i in range(300)]
    feed(m, wire.GroupsInfo((wire.GroupInfo(d.gid, d, tuple(records[:150])),)),
         wire.GroupsInfo((wire.GroupInfo(d.gid, d, tuple(records[150:])),)))
    m.join_group(d.gid)
    m.flush()
    assert m.store.member_rows(d.gid) == 301
    writes = []
    m.store._db.set_trace_callback(lambda sql: writes.append(sql) if "member_records" in sql else None)
    feed(m, wire.Join(wire.sign_member(BOB, d.gid, "Bob", 1, True)), sender=BOB)
    feed(m, wire.Leave(wire.sign_member(BOB, d.gid, "Bob", 2, False)), sender=BOB)
    assert len(writes) == 2 and m.store.member_rows(d.gid) == 302
    m.store._db.set_trace_callback(None)
    # A damaged row is left out when the store is read again.
    m.store._db.execute("UPDATE member_records SET record = ? WHERE pid = ?",
                        (msgpack.packb(wire._to_wire(wire.sign_member(ANN, d.gid, "Bob", 9, True)))[:-3] + b"abc",
                         BOB.pid))
    m.store.commit()
    loaded = {record.gid: record for record, _ in Store(tmp_path / "a" / "m2mc.sqlite3").load_groups()}
    assert BOB.pid not in loaded[d.gid].members and len(loaded[d.gid].members) == 301
    assert loaded[d.gid].descriptor == d and loaded[d.gid].is_current(m.pid)


def test_set_name_reaches_the_members_as_a_new_signed_record(tmp_path):
    m = manager(tmp_path / "b")
    gid = m.create_group("Lunch")
    m.flush()
    m._outgoing.clear()  # never started: what it would send waits here
    m.set_name("Renamed")
    (sent,) = [wire.decode(data).message for data, _ in m._outgoing]
    assert isinstance(sent, wire.Join) and sent.record.name == "Renamed" and sent.record.counter == 2
    assert wire.verify_member(sent.record) and m.group(gid).members[0].name == "Renamed"


def test_an_old_data_dir_keeps_its_messages_readable_and_its_groups_legacy(tmp_path):
    path = tmp_path / "old"
    path.mkdir()
    store = Store(path / "m2mc.sqlite3")
    legacy = f"{ANN.pid}-1"
    store._db.execute("INSERT INTO groups (gid, desc, addr, port, private, next_seqno) VALUES (?, 'Old lunch', "
                      "'239.255.9.9', 47477, 0, 3)", (legacy,))
    store._db.execute("INSERT INTO members VALUES (?, ?, 'Ann', 1, 'current')", (legacy, ANN.pid))
    old = [ChatMessage(legacy, (ANN.pid, i), None, "Ann", f"old {i}", 1_700_000_000_000 + i, 1_700_000_000_500 + i,
                       0, bytes(66), ANN.public_key) for i in (1, 2)]
    store.add_messages(old)
    # Back to the layout of the first versions: no key columns, no descriptor, no member_records.
    for column in ("descriptor", "salt", "key_check", "group_key"):
        store._db.execute(f"ALTER TABLE groups DROP COLUMN {column}")
    store._db.execute("DROP TABLE member_records")
    store.close()

    m = manager(path)
    view = m.group(legacy)
    assert view.legacy and not view.verified and not view.joined and [x.name for x in view.members] == ["Ann"]
    assert [x.text for x in m.history(legacy)] == ["old 1", "old 2"]
    for call in (lambda: m.send(legacy, "new"), lambda: m.join_group(legacy)):
        with pytest.raises(UsageError, match="older version"):
            call()
    # New groups work beside it, and the legacy one is never announced.  A passphrase
    # offered for an open group is refused: its sender believed it private.
    gid = m.create_group("New lunch")
    assert m.group(gid).verified and m.group(gid).joined and legacy not in m.channels
    other = manager(tmp_path / "other")
    feed(other, wire.GroupsInfo(tuple(m.gjlp.groups[gid].to_wire())), sender=m.identity)
    with pytest.raises(UsageError, match="open, not private"):
        other.join_group(gid, "correct horse battery staple")
    assert other.join_group(gid) == gid
    m.store.close()


def test_private_join_derives_the_key_off_the_loop_and_refuses_a_wrong_passphrase(tmp_path):
    creator = manager(tmp_path / "c")
    secret = "correct horse battery staple"
    gid = creator.create_group("Board", secret)
    d = creator.gjlp.groups[gid].descriptor
    assert d.private and d.kdf == crypto.ARGON2ID and (d.kdf_ops, d.kdf_mem) == (4, 256 * 2**20)
    joiner = manager(tmp_path / "d")
    feed(joiner, wire.GroupsInfo(tuple(creator.gjlp.groups[gid].to_wire())), sender=creator.identity)

    def join_while_ticking(passphrase):
        return asyncio.run(while_ticking(joiner.join_group_async(gid, passphrase)))

    with pytest.raises(PassphraseRefused) as refused:
        join_while_ticking("not the passphrase")
    assert refused.value.wrong and not joiner.gjlp.is_member(gid)
    result, took, gap = join_while_ticking(secret)
    print(f"join of a private group: {took:.2f} s; longest loop gap meanwhile {gap * 1000:.0f} ms")
    assert gap < 0.2  # the loop kept turning while Argon2id ran
    assert result == gid and joiner.gjlp.is_member(gid)
    assert joiner.store.group_key(gid) == creator.store.group_key(gid)


def test_weak_passphrases_are_refused_and_strength_is_estimated(tmp_path):
    m = manager(tmp_path / "e")
    for weak in ("password", "password123", "12345678", "qwertyuiop", "abcdefgh", "aaaaaaaaaa", "Sunshine2024!",
                 "P@ssw0rd", "dragondragon"):
        with pytest.raises(PassphraseRefused, match="too easy to guess"):
            m.create_group("Board", weak)
        assert passphrase.assess(weak).score == 0
    assert len(passphrase.blocklist()) >= 5_000
    good = passphrase.assess("correct horse battery staple")
    assert not good.weakness and good.score >= 3
    assert passphrase.assess("lamp orbit zebra").score < good.score


def test_names_show_a_fingerprint_and_duplicates_are_found():
    members = [Member(ANN.pid, "Ann"), Member(BOB.pid, "ann "), Member("c" * 32, "Cat")]
    assert lookalikes(members) == {ANN.pid, BOB.pid}
    assert short_fingerprint(ANN.pid) == " ".join(ANN.pid[i:i + 4] for i in range(0, 16, 4))


def test_dns_sd_instance_names_are_readable_and_unique_and_txt_stays_small():
    from m2mc.middleware import discovery
    long_desc = "Ünïcødé lunch " * 20
    a = discovery.instance_name(long_desc, "Ann", ANN.pid)
    b = discovery.instance_name(long_desc, "Ann", BOB.pid)
    assert a != b and a.startswith("Ünïcødé lunch") and a.endswith(f"— Ann ({ANN.pid[:4]})")
    assert len(a.encode()) <= discovery.INSTANCE_BYTES and len(b.encode()) <= discovery.INSTANCE_BYTES
    d = open_group()
    txt = discovery.txt_properties(d.gid, "✓" * 200, True, 1_000, ANN.pid)
    # Each TXT string is one length byte and "key=value".
    assert sum(1 + len(k.encode()) + 1 + len(v.encode()) for k, v in txt.items()) < discovery.MAX_TXT_BYTES
    parsed = discovery.parse_service({k.encode(): v.encode() for k, v in txt.items()})
    assert parsed == (d.gid, "✓" * 40, True, 1_000)
    assert discovery.parse_service({b"v": b"2", b"gid": b"ann-1"}) is None  # not a gid a descriptor can have


def test_the_manager_thread_hands_back_what_a_coroutine_method_returns_raises_or_is_cancelled():
    import concurrent.futures
    import threading

    from m2mc.middleware.runner import ManagerThread

    thread = ManagerThread.__new__(ManagerThread)  # its loop only: no manager, no sockets
    thread._loop = asyncio.new_event_loop()
    runner = threading.Thread(target=thread._loop.run_forever, daemon=True)
    runner.start()

    async def answer():
        await asyncio.sleep(0.01)
        return "gid"

    async def refuse():
        raise UsageError("no")

    async def cancelled():
        asyncio.current_task().cancel()
        await asyncio.sleep(1)

    try:
        assert thread.call(answer).result(5) == "gid"
        with pytest.raises(UsageError):
            thread.call(refuse).result(5)
        with pytest.raises(concurrent.futures.CancelledError):
            thread.call(cancelled).result(5)
    finally:
        thread._loop.call_soon_threadsafe(thread._loop.stop)
        runner.join(5)
        thread._loop.close()
