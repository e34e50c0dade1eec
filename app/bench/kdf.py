"""Benchmark of private-group key derivation: what a passphrase guess costs, and what a join takes.

    python -m m2mc.app.bench.kdf            # 5 rounds of each

- Guess cost: CPU seconds of one Argon2id derivation with the parameters new groups
  use (crypto.ARGON2_OPSLIMIT / ARGON2_MEMLIMIT), and of one scrypt (2^15, 8, 1),
  the KDF of groups made before signed descriptors, for comparison.  An offline
  guesser pays that per guess and core (libsodium's Argon2id is one thread).
- Join: wall time of ``GroupManager.join_group_async`` on a private group (no
  sockets), from the call until it is stored, and the longest gap of a 10 ms ticker
  on the same event loop meanwhile (the derivation runs on a worker thread).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from ...middleware.addresses import Endpoint
from ...middleware import crypto, wire
from ...middleware.manager import Config, GroupManager

PASSPHRASE = "correct horse battery staple"


def guess_cost(kdf: str, rounds: int) -> tuple[list[float], list[float]]:
    cpu, wall = [], []
    for _ in range(rounds):
        salt = os.urandom(16)
        c0, t0 = time.process_time(), time.perf_counter()
        crypto.derive_group_key(PASSPHRASE, salt, kdf)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
    return cpu, wall


async def while_ticking(awaitable):
    """``awaitable``'s result, how long it took, and the longest gap of a 10 ms ticker on
    the same event loop meanwhile (a blocked loop shows as a long gap)."""
    ticks, stop = [time.perf_counter()], asyncio.Event()

    async def tick():
        while not stop.is_set():
            await asyncio.sleep(0.01)
            ticks.append(time.perf_counter())

    ticker = asyncio.create_task(tick())
    try:
        result = await awaitable
    finally:
        stop.set()
        await ticker
    return result, ticks[-1] - ticks[0], max(b - a for a, b in zip(ticks, ticks[1:]) or [0])


async def timed_join(joiner: GroupManager, gid: str) -> tuple[float, float]:
    async def join():
        await joiner.join_group_async(gid, PASSPHRASE)
        joiner.flush()

    _, took, gap = await while_ticking(join())
    return took, gap


def joins(rounds: int) -> list[tuple[float, float]]:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        creator = GroupManager(Config(Path(tmp) / "creator", name="creator", iface="127.0.0.1", zeroconf=False))
        for i in range(rounds):
            gid = creator.create_group(f"bench {i}", PASSPHRASE)
            joiner = GroupManager(Config(Path(tmp) / f"joiner{i}", name="joiner", iface="127.0.0.1", zeroconf=False))
            infos = wire.GroupsInfo(tuple(creator.gjlp.groups[gid].to_wire()))
            joiner._on_control_datagrams([(wire.encode(creator.identity, infos), Endpoint("127.0.0.1", 47477))])
            results.append(asyncio.run(timed_join(joiner, gid)))
            joiner.store.close()
        creator.store.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for kdf, label in ((crypto.ARGON2ID, f"argon2id ops={crypto.ARGON2_OPSLIMIT} mem={crypto.ARGON2_MEMLIMIT >> 20} MiB"),
                       ("scrypt", f"scrypt N=2^15 r={crypto.SCRYPT_R} p={crypto.SCRYPT_P}")):
        cpu, wall = guess_cost(kdf, args.rounds)
        print(f"{label}: CPU per guess {min(cpu):.3f}-{max(cpu):.3f} s (median {sorted(cpu)[len(cpu) // 2]:.3f}), "
              f"wall {min(wall):.3f}-{max(wall):.3f} s; {1 / min(cpu):.1f} guesses/s per core at best")
    results = joins(args.rounds)
    took = sorted(t for t, _ in results)
    gaps = [g for _, g in results]
    print(f"join_group_async of a private group: {took[0]:.3f}-{took[-1]:.3f} s (median {took[len(took) // 2]:.3f}); "
          f"longest event-loop gap meanwhile {max(gaps) * 1000:.0f} ms")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
