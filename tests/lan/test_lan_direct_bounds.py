"""What many keys, and members who left, can do with direct messages (issue 41, rows 7, 8 and 14), on
the namespace LAN: Ann and Bob are real peers in group G; Ann also made group H, which Bob is not
in; the attacker's host holds fresh keys that joined with their own signed JOINs (sybils, with no
peer process behind them), built with the product's codec.

- 20 sybils in G flood Bob with direct messages: what they make Bob store and show is bounded in
  all (MAX_UNREAD_TOTAL), the data dir and the WAL stay bounded (store.WAL_LIMIT), and Ann's message
  during it still arrives and is shown;
- Mal, a sybil in H only, sends Ann a message whose SES stamp says Bob must first have the 5th
  message of a made-up pid: Ann's next message to Bob is not held for it;
- a sybil that left G, the only group it shared with Bob, can neither write to Bob nor be written to.

The sans-I/O parts are tested in tests/core/test_direct_bounds.py.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.lan.test_lan_direct import (PORT, direct_stats, identity_of, incoming, msg_frame, sealed, stored_rows,
                                       wait_incoming)
from tests.testbed.lan import Lan, PeerProcess, send_from

pytestmark = pytest.mark.netns

SYBILS = 21  # the first leaves in test 14; the other 20 flood in test 7
FLOOD_PER_SYBIL = 300  # each within the per-sender burst (SENDER_BURST): 6,000 in all
FLOOD_TEXT = 3_800  # characters: with its frame, the 4,096-byte seal bucket
UNREAD_TOTAL = 2_000  # middleware/direct.py's MAX_UNREAD_TOTAL: what all of them together can leave unread
DATA_DIR_GROWTH = 56 * 2**20  # bytes: 2,000 kept messages of 3.8 KB with their index (about 12 MB), a WAL within its limit
WAL_BOUND = 34 * 2**20  # store.WAL_LIMIT (32 MB) and one commit
MEMBER_SHOWN_WITHIN = 10.0  # s: Ann's message during the flood
NOT_HELD_WITHIN = 10.0  # s: Ann's message to Bob after Mal's forged stamp (SES holds for 120 s)


class Setting:
    def __init__(self, tmp: Path) -> None:
        from m2mc.middleware import crypto

        self.bob_key = identity_of(tmp / "Bob")
        self.ann_key = identity_of(tmp / "Ann")
        self.lan = Lan(3)  # host 2 is the attacker's
        self.peers: list[PeerProcess] = []
        try:
            self.peers = [PeerProcess(self.lan.hosts[i], self.lan.addresses[i], tmp / name, name,
                                      extra=["--no-zeroconf"]) for i, name in enumerate(("Ann", "Bob"))]
            ann, bob = self.peers
            self.g = ann.call("create_group", {"desc": "Both of us"})["gid"]
            self.h = ann.call("create_group", {"desc": "Ann and strangers"})["gid"]
            bob.wait_notification("group_discovered", lambda p: p["gid"] == self.g, timeout=30)
            bob.call("join_group", {"gid": self.g})
            for peer in self.peers:
                peer.wait_for(lambda p=peer: len(self.members(p, self.g)) == 2, timeout=30, what="Ann and Bob")
            self.sybils = [crypto.Identity.generate() for _ in range(SYBILS)]
            self.mal = crypto.Identity.generate()
            self.join(self.g, self.sybils)
            self.join(self.h, [self.mal])
            for peer in self.peers:
                peer.wait_for(lambda p=peer: len(self.members(p, self.g)) == 2 + SYBILS, timeout=30,
                              what="the sybils' records")
            ann.wait_for(lambda: self.mal.pid in self.members(ann, self.h), timeout=30, what="Mal's record")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def members(peer: PeerProcess, gid: str) -> set[str]:
        return {m["pid"] for g in peer.call("list_groups") if g["gid"] == gid for m in g["members"]}

    def join(self, gid: str, keys, joined: bool = True, counter: int = 1) -> None:
        """Each key's own signed JOIN (or LEAVE) of ``gid``, multicast on the control group from the attacker's host."""
        from m2mc.middleware import wire
        from m2mc.middleware.peer_core import CONTROL_ADDR, DEFAULT_PORT

        kind = wire.Join if joined else wire.Leave
        send_from(self.lan.hosts[2], self.lan.addresses[2], CONTROL_ADDR, DEFAULT_PORT,
                  [wire.encode(k, kind(wire.sign_member(k, gid, f"sybil{i}", counter, joined)))
                   for i, k in enumerate(keys)], pause=0.001)

    def dm(self, to: PeerProcess, datagrams: list[bytes], pause: float = 0.0) -> None:
        """Direct datagrams to ``to``'s unicast port from the attacker's host."""
        send_from(self.lan.hosts[2], self.lan.addresses[2], to.iface, PORT, datagrams, pause)

    def close(self) -> None:
        for peer in self.peers:
            if peer.proc.poll() is None:
                peer.shutdown()
        self.lan.close()


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    setting = Setting(tmp_path_factory.mktemp("direct-bounds"))
    try:
        yield setting
    finally:
        setting.close()


def absorbed(peer: PeerProcess) -> bool:
    """Whether ``peer`` has taken in all that was sent: its direct counters stood still for a second."""
    counts = direct_stats(peer)
    time.sleep(1.0)
    return counts == direct_stats(peer)


def test_14_a_key_that_left_the_only_shared_group_can_neither_write_nor_be_written_to(setting):
    ann, bob = setting.peers
    leaver = setting.sybils[0]
    dh = setting.bob_key.direct_public
    setting.dm(bob, [sealed(leaver, bob.pid, dh, msg_frame(1, "while a member", {leaver.pid: 1}))])
    wait_incoming(bob, "while a member")
    setting.join(setting.g, [leaver], joined=False, counter=2)
    bob.wait_for(lambda: leaver.pid not in setting.members(bob, setting.g), what="the LEAVE")
    before = direct_stats(bob)
    setting.dm(bob, [sealed(leaver, bob.pid, dh, msg_frame(2, "after leaving", {leaver.pid: 2}))])
    bob.wait_for(lambda: direct_stats(bob)["direct_unopened"] > before["direct_unopened"]
                 or any(m["text"] == "after leaving" for m in incoming(bob)), what="the message after leaving")
    answer = bob.request("send_direct", {"pid": leaver.pid, "text": "are you still there?"})
    shown = [m["text"] for m in incoming(bob) if m["peer"] == leaver.pid]
    print(f"a key that left Bob's only shared group: shown at Bob {shown}; "
          f"opened {direct_stats(bob)['direct_unopened'] - before['direct_unopened']} unopened; "
          f"Bob's send_direct to it: {answer.get('error') or answer.get('result')}")
    assert shown == ["while a member"]
    assert stored_rows(bob, [leaver.pid]) == {"received": 1}
    assert answer.get("error", {}).get("code") == -32000 and "share a group" in answer["error"]["message"]


def test_8_a_forged_stamp_naming_a_made_up_pid_does_not_hold_anns_next_message_to_bob(setting):
    from m2mc.middleware import crypto

    ann, bob = setting.peers
    mal, made_up = setting.mal, crypto.Identity.generate().pid
    for round in (1, 2):
        # Mal (in H with Ann; Bob shares no group with Mal) says Bob must first have made_up's message.
        count = 5 * round
        setting.dm(ann, [sealed(mal, ann.pid, setting.ann_key.direct_public,
                                msg_frame(round, f"hello Ann ({round})", {mal.pid: round, made_up: count},
                                          ((bob.pid, {made_up: count}),), "Mal"))])
        wait_incoming(ann, f"hello Ann ({round})")
        sent = time.monotonic()
        text = f"Ann's next message to Bob ({round})"
        ann.call("send_direct", {"pid": bob.pid, "text": text})
        try:
            got = wait_incoming(bob, text, timeout=NOT_HELD_WITHIN)
        finally:
            print(f"round {round}: Ann's message after Mal's forged stamp was shown at Bob after "
                  f"{time.monotonic() - sent:.2f} s; Bob holds {direct_stats(bob)['direct_held']}")
        assert not got["late"]
        assert direct_stats(bob)["direct_held"] == 0


def test_7_twenty_sybils_flooding_direct_messages_are_bounded_together_and_a_member_still_gets_through(setting):
    ann, bob = setting.peers
    sybils = setting.sybils[1:]  # (the first leaves in test 14, when it runs in this process)
    dh = setting.bob_key.direct_public
    data_dir = Path(bob.data_dir)
    wal = data_dir / "m2mc.sqlite3-wal"

    def dir_bytes() -> int:
        return sum(f.stat().st_size for f in data_dir.iterdir() if f.is_file())

    before, shown_before, size_before = direct_stats(bob), len(incoming(bob)), dir_bytes()
    flood = [sealed(s, bob.pid, dh, msg_frame(seqno, f"sybil {i} spam {seqno} " + "x" * FLOOD_TEXT,
                                              {s.pid: seqno}, name=f"sybil{i}"))
             for seqno in range(1, FLOOD_PER_SYBIL + 1) for i, s in enumerate(sybils, 1)]
    began = time.monotonic()
    peak_wal, peak_dir = 0, 0
    sender = threading.Thread(target=setting.dm, args=(bob, flood, 0.0005))
    sender.start()
    try:
        time.sleep(2.0)
        sent = time.monotonic()
        text = "Ann's message during the flood"
        ann.call("send_direct", {"pid": bob.pid, "text": text})
        while sender.is_alive() or time.monotonic() - began < 4.0:
            peak_wal = max(peak_wal, wal.stat().st_size if wal.exists() else 0)
            peak_dir = max(peak_dir, dir_bytes() - size_before)
            time.sleep(0.1)
        deadline = sent + MEMBER_SHOWN_WITHIN
        while (got := next((m for m in incoming(bob) if m["text"] == text), None)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        heard = time.monotonic() - sent
    finally:
        sender.join()
    flooded = time.monotonic() - began
    bob.wait_for(lambda: absorbed(bob), timeout=30, what="the flood absorbed")
    for _ in range(10):
        peak_wal = max(peak_wal, wal.stat().st_size if wal.exists() else 0)
        peak_dir = max(peak_dir, dir_bytes() - size_before)
        time.sleep(0.1)
    after = direct_stats(bob)
    kept = sum(stored_rows(bob, [s.pid for s in sybils]).values())
    shown = [m for m in incoming(bob)[shown_before:] if m["text"].startswith("sybil")]
    unread = sum(c["unread"] for c in bob.call("list_conversations"))
    print(f"{len(flood)} direct messages of {FLOOD_TEXT} characters from {len(sybils)} sybils in {flooded:.1f} s: "
          f"Bob keeps {kept} of them ({unread} unread in all), showed {len(shown)}; "
          f"the data dir grew by at most {peak_dir / 2**20:.1f} MB, the WAL peaked at {peak_wal / 2**20:.1f} MB; "
          f"Ann's message during it was {'shown after' if got else 'not shown in'} {heard:.2f} s; "
          f"{ {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)} }")
    assert got is not None and got["peer"] == ann.pid and not got["late"]
    assert kept <= UNREAD_TOTAL and unread <= UNREAD_TOTAL
    assert len(shown) <= UNREAD_TOTAL + after.get("direct_dropped", 0)
    assert peak_wal <= WAL_BOUND
    assert peak_dir <= DATA_DIR_GROWTH
    assert bob.call("whoami")["pid"] == bob.pid
