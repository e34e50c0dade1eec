"""Attacks on file serving and downloads (issue 41, rows 2 to 6) on a namespace LAN: Ann offers,
Bob fetches, and the third host is the attacker.

- A stranger holds 128 idle TCP connections to Ann's file port from 8 addresses: Bob's fetch
  still gets a handshake slot (per-address slots, the flood's own connections give way first).
- Mal, a member whose peer holds the file, claims every chunk and never sends one: Bob's
  download goes back to Ann once Mal has been silent for CHUNK_DEADLINE (3 s), with 256 KiB
  chunks and with the 4 MiB chunks of a file over 512 MiB, whose deadline is 19 s.
- Four sybil keys (fresh keys with their own signed JOIN, no peer behind them) hold 4 proven,
  idle connections each to Ann's file port: Bob still gets an upload slot.
- Files whose names are 251 to 255 bytes long download (the ``.part`` name fits too).
- A sybil's offers that nobody serves: Ann's later file still auto-downloads at once, and
  3,000 of them cost Bob no CPU while they wait, also after a restart.

The attacker signs with the product's codec (``middleware.wire``, ``middleware.crypto``) and
speaks the file protocol with ``middleware.file_transfer``'s own frame kinds and signed texts.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.testbed.lan import BIN, Lan, PeerProcess, cpu_seconds, send_from
from m2mc.middleware import crypto, wire
from m2mc.middleware.files import FileOffer, chunk_deadline, chunk_size_for
from m2mc.middleware.peer_core import CONTROL_ADDR, DEFAULT_PORT

pytestmark = pytest.mark.netns

PORT = 47477  # every peer's UDP endpoint and TCP file port
FETCH_UNDER_FLOOD_WITHIN = 5.0  # seconds from fetch_file to a 1 MiB file done, 128 idle connections at Ann
SILENT_HOLDER_WITHIN = 8.0  # a silent holder's silence (3 s), then a 4 MiB file all from Ann
SILENT_HOLDER_BIG_WITHIN = 14.0  # the same, then 513 MiB from Ann: under a 4 MiB chunk's deadline of 19 s
SYBIL_SLOTS_WITHIN = 5.0  # 4 sybils x 4 idle proven connections at Ann
LONG_NAMES_WITHIN = 10.0  # five small files with names of 251 to 255 bytes, all done
AFTER_UNSERVED_WITHIN = 5.0  # Ann's file, offered after 4 offers nobody serves
UNSERVED_OFFERS = 3_000
IDLE_CPU = 0.05  # CPU seconds per second Bob spends with 3,000 unserved offers, before and after a restart


def start(lan: Lan, index: int, tmp_path: Path, name: str, auto: int = 0) -> PeerProcess:
    return PeerProcess(lan.hosts[index], lan.addresses[index], tmp_path / name, name,
                       extra=["--no-zeroconf", "--auto-download", str(auto)])


def group_of(peer: PeerProcess, gid: str) -> dict:
    return next(g for g in peer.call("list_groups") if g["gid"] == gid)


def form_group(creator: PeerProcess, joiners: list[PeerProcess]) -> str:
    gid = creator.call("create_group", {"desc": "Files under attack"})["gid"]
    for peer in joiners:
        peer.wait_notification("group_discovered", lambda p: p["gid"] == gid, timeout=30)
        peer.call("join_group", {"gid": gid}, timeout=30)
    everyone = [creator, *joiners]
    for peer in everyone:
        peer.wait_for(lambda p=peer: len(group_of(p, gid)["members"]) == len(everyone), timeout=30,
                      what=f"{len(everyone)} members")
    return gid


def file_row(peer: PeerProcess, gid: str, mid: str) -> dict:
    return next(row for row in peer.call("files", {"gid": gid}) if row["mid"] == mid)


def offer_file(peer: PeerProcess, gid: str, path: Path, size: int) -> str:
    path.write_bytes(os.urandom(size))
    return peer.call("send_file", {"gid": gid, "path": str(path)}, timeout=30)["mid"]


def fetched_in(bob: PeerProcess, gid: str, mid: str, within: float) -> float:
    """Seconds from Bob's fetch_file to the file done (it waits ``within`` plus 5 s at most)."""
    bob.wait_for(lambda: any(m["mid"] == mid for m in bob.delivered(gid)), timeout=10, what="the offer")
    started = time.monotonic()
    bob.call("fetch_file", {"gid": gid, "mid": mid})
    try:
        bob.wait_for(lambda: file_row(bob, gid, mid)["state"] == "done", timeout=within + 5, what="the file")
    except AssertionError:
        return float("inf")
    return time.monotonic() - started


def sybil_joins(gid: str, count: int) -> tuple[list[crypto.Identity], list[bytes]]:
    keys = [crypto.Identity.generate() for _ in range(count)]
    return keys, [wire.encode(key, wire.Join(wire.sign_member(key, gid, f"sybil{i}", 1, True)))
                  for i, key in enumerate(keys)]


IDLE_FLOOD = """
import asyncio, sys
target, port, sources, per = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), int(sys.argv[4])
opened = 0

async def hold(source):
    global opened
    while True:
        try:
            reader, writer = await asyncio.open_connection(target, port, local_addr=(source, 0))
            opened += 1
            await reader.read()  # never says a word: waits until the server closes it
            writer.close()
        except OSError:
            pass
        await asyncio.sleep(0.05)

async def main():
    tasks = [asyncio.create_task(hold(source)) for source in sources for _ in range(per)]
    try:
        await asyncio.sleep(3600)
    finally:
        print(opened, flush=True)

try:
    asyncio.run(main())
except KeyboardInterrupt:
    pass
"""


@contextlib.contextmanager
def attacker(lan: Lan, script: str, *args: str):
    """``script`` running on the attacker's host (the LAN's last); killed if the test ends first."""
    proc = subprocess.Popen(["ip", "netns", "exec", lan.hosts[-1], sys.executable, "-c", script, *args],
                            stdout=subprocess.PIPE, text=True, preexec_fn=os.setsid)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()


def counts_of(proc: subprocess.Popen) -> str:
    """What an attacker's script prints of its work when interrupted."""
    os.killpg(proc.pid, 2)
    return proc.communicate(timeout=10)[0].strip()


def test_a_stranger_s_128_idle_connections_from_8_addresses_do_not_refuse_a_member_s_fetch(tmp_path):
    with Lan(3) as lan:
        sources = [f"{lan.subnet}.{100 + i}" for i in range(8)]
        for source in sources:  # the attacker's host takes 8 addresses
            subprocess.run(["ip", "-n", lan.hosts[2], "addr", "add", f"{source}/24", "dev", f"v{lan.prefix}3"],
                           check=True)
        ann, bob = start(lan, 0, tmp_path, "Ann"), start(lan, 1, tmp_path, "Bob")
        try:
            gid = form_group(ann, [bob])
            mid = offer_file(ann, gid, tmp_path / "agenda.pdf", 2**20)
            with attacker(lan, IDLE_FLOOD, lan.addresses[0], str(PORT), ",".join(sources), "16") as flood:
                time.sleep(1.5)  # every connection opened and waiting
                took = fetched_in(bob, gid, mid, FETCH_UNDER_FLOOD_WITHIN)
                stats = ann.call("stats")
                opened = counts_of(flood)
            print(f"128 idle connections from 8 addresses ({opened} opened in all): Bob's 1 MiB fetch done in "
                  f"{took:.2f} s; Ann refused {stats['file_handshakes_refused']}, "
                  f"gave way {stats.get('file_handshakes_evicted')}")
            assert took <= FETCH_UNDER_FLOOD_WITHIN, f"Bob's fetch took {took:.2f} s under the flood"
        finally:
            for peer in (ann, bob):
                peer.shutdown()


SILENT = """
import asyncio, sys
from m2mc.middleware import file_transfer

async def _never(self, stream, transfer, index):  # claims every chunk (its HAVE is true), sends none
    return 0  # and reads the next request, so the connection stays open and looks alive

file_transfer.FileService._send_chunk = _never
from m2mc.app.peer import main
sys.exit(main())
"""


class SilentHolder(PeerProcess):
    """An m2mc-peer whose file server answers HAVE truly, then never sends a chunk asked of it."""

    def start(self) -> None:
        Path(self.data_dir).mkdir(parents=True, exist_ok=True)
        self._stderr = open(self.stderr_path, "ab")
        command = ["ip", "netns", "exec", self.netns, str(BIN / "python"), "-c", SILENT, "--name", self.name,
                   "--data-dir", str(self.data_dir), "--iface", self.iface, "--port", str(self.port), *self.extra]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.pid = self.call("whoami", timeout=30)["pid"]


@pytest.mark.parametrize("size, within", [(4 * 2**20, SILENT_HOLDER_WITHIN), (513 * 2**20, SILENT_HOLDER_BIG_WITHIN)],
                         ids=["256-KiB-chunks", "4-MiB-chunks"])
def test_a_member_that_claims_every_chunk_and_stays_silent_does_not_stall_a_download(tmp_path, size, within):
    chunk = chunk_size_for(size)
    if chunk == 4 * 2**20:  # the bound is below a chunk's deadline: only the silence bound meets it
        assert within < chunk_deadline(chunk)
    with Lan(3) as lan:
        ann, bob = start(lan, 0, tmp_path, "Ann"), start(lan, 1, tmp_path, "Bob")
        mal = SilentHolder(lan.hosts[2], lan.addresses[2], tmp_path / "Mal", "Mal",
                           extra=["--no-zeroconf", "--auto-download", str(64 * 2**20)])
        try:
            gid = form_group(ann, [bob, mal])
            mid = offer_file(ann, gid, tmp_path / "slides.odp", size)
            mal.wait_for(lambda: any(m["mid"] == mid for m in mal.delivered(gid)), timeout=10, what="the offer")
            mal.call("fetch_file", {"gid": gid, "mid": mid})  # past its auto-download size: asked
            mal.wait_for(lambda: file_row(mal, gid, mid)["state"] == "done", timeout=60, what="Mal's copy")
            took = fetched_in(bob, gid, mid, within)
            row = file_row(bob, gid, mid)
            print(f"Mal holds all {-(-size // chunk)} chunks of {chunk // 1024} KiB of a {size // 2**20} MiB file and "
                  f"sends none: Bob's download done in {took:.2f} s (bound {within:.2f} s; a chunk's deadline "
                  f"{chunk_deadline(chunk):.0f} s), {row['bytes']} of {size} bytes, "
                  f"stalled sources {bob.call('stats').get('file_sources_stalled')}")
            assert took <= within, f"{row['bytes']} of {size} bytes after {within} s"
        finally:
            for peer in (ann, bob, mal):
                peer.shutdown()


SYBIL_SLOTS = """
import asyncio, os, struct, sys
import msgpack
from m2mc.middleware.crypto import Identity
from m2mc.middleware.file_core import BUSY, HAVE, HELLO, PROOF, VERSION, client_signed

target, port, gid, mid = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
keys = [Identity.from_bytes(bytes.fromhex(seed)) for seed in sys.argv[5].split(",")]
counts = {"held": 0, "busy": 0}

def send(writer, kind, payload=b""):
    writer.write(struct.pack(">I", 1 + len(payload)) + bytes([kind]) + payload)

async def frame(reader):
    length = struct.unpack(">I", await reader.readexactly(4))[0]
    body = await reader.readexactly(length)
    return body[0], body[1:]

async def hold(key):
    while True:
        try:
            reader, writer = await asyncio.open_connection(target, port)
            nonce = os.urandom(32)
            send(writer, HELLO, msgpack.packb([VERSION, gid, mid, key.public_key, nonce]))
            _, challenge = await frame(reader)
            server_key, nonce_s, _ = msgpack.unpackb(challenge)
            send(writer, PROOF, key.sign(client_signed(gid, mid, nonce, nonce_s, server_key)))
            kind, _ = await frame(reader)
            counts["held" if kind == HAVE else "busy"] += 1
            await reader.read()  # proven, holding an upload slot, asking nothing
            writer.close()
        except (OSError, asyncio.IncompleteReadError, ValueError):
            pass
        await asyncio.sleep(0.05)

async def main():
    tasks = [asyncio.create_task(hold(key)) for key in keys for _ in range(4)]
    try:
        await asyncio.sleep(3600)
    finally:
        print(counts["held"], counts["busy"], flush=True)

try:
    asyncio.run(main())
except KeyboardInterrupt:
    pass
"""


def test_four_sybils_with_four_idle_proven_connections_each_do_not_hold_every_upload_slot(tmp_path):
    with Lan(3) as lan:
        ann, bob = start(lan, 0, tmp_path, "Ann"), start(lan, 1, tmp_path, "Bob")
        try:
            gid = form_group(ann, [bob])
            keys, joins = sybil_joins(gid, 4)
            send_from(lan.hosts[2], lan.addresses[2], CONTROL_ADDR, DEFAULT_PORT, joins)
            ann.wait_for(lambda: len(group_of(ann, gid)["members"]) == 6, what="the sybils' records")
            mid = offer_file(ann, gid, tmp_path / "budget.ods", 2**20)
            with attacker(lan, SYBIL_SLOTS, lan.addresses[0], str(PORT), gid, mid,
                          ",".join(k.private_bytes().hex() for k in keys)) as holders:
                time.sleep(3)  # all 16 connections proven, holding their slots, idle
                took = fetched_in(bob, gid, mid, SYBIL_SLOTS_WITHIN)
                stats = ann.call("stats")
                held, busy = counts_of(holders).split()
            print(f"4 sybils x 4 idle proven connections ({held} slots taken, {busy} BUSY): Bob's 1 MiB fetch done "
                  f"in {took:.2f} s; Ann refused {stats['file_uploads_refused']} uploads, "
                  f"gave way {stats.get('file_uploads_evicted')}")
            assert took <= SYBIL_SLOTS_WITHIN, f"Bob's fetch took {took:.2f} s"
        finally:
            for peer in (ann, bob):
                peer.shutdown()


def test_files_named_251_to_255_bytes_download(tmp_path):
    with Lan(3) as lan:
        ann, bob = start(lan, 0, tmp_path, "Ann"), start(lan, 1, tmp_path, "Bob", auto=2**20)
        try:
            gid = form_group(ann, [bob])
            names = ["a" * (length - 4) + ".txt" for length in (251, 252, 253)]
            names += ["é" * 125 + "x.pdf", "\U0001F4C4" * 61 + "abcdefgh.md"]  # 255 and 255 bytes
            (tmp_path / "out").mkdir()
            started = time.monotonic()
            mids = {offer_file(ann, gid, tmp_path / "out" / name, 70_000): name for name in names}
            try:
                bob.wait_for(lambda: all(file_row(bob, gid, m)["state"] == "done" for m in mids),
                             timeout=LONG_NAMES_WITHIN, what="every file done")
            except AssertionError:
                pass
            took = time.monotonic() - started
            rows = [file_row(bob, gid, mid) for mid in mids]
            saved = [len(Path(row["path"]).name.encode()) for row in rows]
            print(f"names of {[len(n.encode()) for n in names]} bytes: states {[r['state'] for r in rows]}, "
                  f"saved as names of {saved} bytes, in {took:.2f} s; errors {[r['error'] for r in rows if r['error']]}")
            assert all(row["state"] == "done" for row in rows), rows
            for row, name in zip(rows, names):
                assert Path(row["path"]).suffix == Path(name).suffix
                assert Path(row["path"]).read_bytes() == (tmp_path / "out" / name).read_bytes()
        finally:
            for peer in (ann, bob):
                peer.shutdown()


def unserved_offers(key: crypto.Identity, gid: str, first_seqno: int, count: int) -> list[bytes]:
    """``count`` offers of 100 KB files signed by ``key``, whose bytes nobody has."""
    now = int(time.time() * 1000)
    datagrams = []
    for seqno in range(first_seqno, first_seqno + count):
        digest = hashlib.sha256(str(seqno).encode()).hexdigest()
        offer = FileOffer(f"bait {seqno}.bin", 100_000, "application/octet-stream", digest, 65536, digest)
        datagrams.append(wire.encode(key, wire.signed_data(key, gid, seqno, None, now, "sybil0", offer.to_text())))
    return datagrams


def cpu_per_second(peer: PeerProcess, seconds: float = 3.0) -> float:
    before = cpu_seconds(peer.proc.pid)
    time.sleep(seconds)
    return (cpu_seconds(peer.proc.pid) - before) / seconds


def test_offers_a_member_never_serves_block_no_later_download_and_cost_nothing_while_they_wait(tmp_path):
    with Lan(3) as lan:
        ann, bob = start(lan, 0, tmp_path, "Ann"), start(lan, 1, tmp_path, "Bob", auto=2**20)
        try:
            gid = form_group(ann, [bob])
            (key,), joins = sybil_joins(gid, 1)
            view = group_of(ann, gid)
            send_from(lan.hosts[2], lan.addresses[2], CONTROL_ADDR, DEFAULT_PORT, joins)
            bob.wait_for(lambda: len(group_of(bob, gid)["members"]) == 3, what="the sybil's record")
            send_from(lan.hosts[2], lan.addresses[2], view["addr"], view["port"], unserved_offers(key, gid, 1, 4))
            bob.wait_for(lambda: len(bob.delivered(gid)) >= 4, what="the four offers")
            time.sleep(1)
            mid = offer_file(ann, gid, tmp_path / "minutes.txt", 200_000)
            started = time.monotonic()
            try:
                bob.wait_for(lambda: file_row(bob, gid, mid)["state"] == "done",
                             timeout=AFTER_UNSERVED_WITHIN + 5, what="Ann's file")
                took = time.monotonic() - started
            except AssertionError:
                took = float("inf")
            print(f"after 4 offers nobody serves, Ann's file auto-downloaded in {took:.2f} s")
            assert took <= AFTER_UNSERVED_WITHIN, f"Ann's file took {took:.2f} s behind 4 unserved offers"

            datagrams = unserved_offers(key, gid, 5, UNSERVED_OFFERS)
            send_from(lan.hosts[2], lan.addresses[2], view["addr"], view["port"], datagrams, pause=0.0005)
            bob.wait_for(lambda: len(bob.delivered(gid)) >= UNSERVED_OFFERS + 5, timeout=60, what="3,000 offers")
            time.sleep(1)
            busy = cpu_per_second(bob)
            bob.shutdown()
            bob = start(lan, 1, tmp_path, "Bob", auto=2**20)
            time.sleep(1)
            restarted = cpu_per_second(bob)
            print(f"{UNSERVED_OFFERS} unserved offers: Bob spends {busy:.3f} CPU s a second while they wait, "
                  f"{restarted:.3f} after a restart")
            assert busy <= IDLE_CPU and restarted <= IDLE_CPU
        finally:
            for peer in (ann, bob):
                peer.shutdown()
