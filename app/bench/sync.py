"""Benchmark of the reliability layer on a namespace LAN.

    sudo .venv/bin/python -m m2mc.app.bench.sync [--messages 100000]

1. A member away while ``--messages`` messages are sent comes back: time until
   it holds them all (MSP), and the bytes all peers sent meanwhile, against the
   payload (each message's own msgpack encoding).
2. 1,000 messages with replies from three peers with 20 % random loss (iptables)
   on every host: time until every peer has every message.
All sockets live in private namespaces made (and deleted) here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import msgpack

from ...middleware.manager import Config, GroupManager
from .handoff import publish, wait_for


async def role_main(args) -> None:
    coord = Path(args.coord)
    manager = GroupManager(Config(Path(args.data_dir), name=args.name, iface=args.iface, zeroconf=False))
    await manager.start()
    if args.role == "creator":
        gid = manager.create_group("sync benchmark")
        publish(coord / "gid", gid)
    else:
        gid = await wait_for(coord / "gid")
        while gid not in manager.gjlp.groups:
            manager.advertise()
            await asyncio.sleep(0.3)
        manager.join_group(gid)
    while len(manager.group(gid).members) < args.peers:
        await asyncio.sleep(0.05)
    (coord / f"ready-{args.name}").write_text("1")
    await wait_for(coord / "go")
    rng = random.Random(args.seed)
    if args.scenario == "rejoin":
        await rejoin_scenario(manager, gid, args, coord, rng)
    else:
        await loss_scenario(manager, gid, args, coord, rng)
    await manager.close()


async def post(manager, gid, count, rng, label) -> None:
    recent: list = []
    for i in range(count):
        parent = rng.choice(recent) if recent and rng.random() < 0.7 else None
        try:
            mid = manager.send(gid, f"{label} {i}: some words of an ordinary chat line", parent)
        except Exception:
            mid = manager.send(gid, f"{label} {i}: some words of an ordinary chat line", None)
        recent = (recent + [mid])[-30:]
        if i % 50 == 49:
            await asyncio.sleep(0)


async def rejoin_scenario(manager, gid, args, coord, rng) -> None:
    if args.name == "away":  # leave the LAN (stop), come back when the others are done
        await manager.close()
        await wait_for(coord / "posted")
        manager = GroupManager(Config(Path(args.data_dir), name=args.name, iface=args.iface, zeroconf=False))
        start = time.monotonic()
        await manager.start()
        while len(manager.channels[gid].orderer.delivered_ranges()) == 0 or \
                sum(b - a + 1 for r in manager.channels[gid].orderer.delivered_ranges().values() for a, b in r) < args.messages:
            await asyncio.sleep(0.02)
        elapsed = time.monotonic() - start
        manager.flush()  # deliveries reach the store at the next commit: count them all
        history = manager.store.history(gid)
        # The payload is each message as stored: its fields, its writer's key and signature proof.
        payload = sum(len(msgpack.packb([m.sender, m.mid[1], list(m.parent) if m.parent else None,
                                         m.sent_at, m.sender_name, m.text, m.public_key, m.signature]))
                      for m in history)
        (coord / "result.json").write_text(json.dumps({"seconds": elapsed, "messages": len(history),
                                                       "payload": payload,
                                                       "own_bytes_out": manager.network.bytes_out}))
        await manager.close()
        return
    if args.role == "creator":
        await asyncio.sleep(0.5)  # the away member is gone
        await post(manager, gid, args.messages, rng, "msg")
    while sum(b - a + 1 for r in manager.channels[gid].orderer.delivered_ranges().values() for a, b in r) < args.messages:
        await asyncio.sleep(0.05)
    (coord / f"posted-{args.name}").write_text("1")
    if args.role == "creator":
        while not (coord / "posted-stay").exists():
            await asyncio.sleep(0.05)
        (coord / "posted").write_text("1")
    before = manager.network.bytes_out
    await wait_for(coord / "result.json")
    (coord / f"bytes-{args.name}").write_text(str(manager.network.bytes_out - before))


async def loss_scenario(manager, gid, args, coord, rng) -> None:
    await wait_for(coord / "lossy")
    start = time.monotonic()
    await post(manager, gid, args.messages // args.peers, rng, args.name)
    total = (args.messages // args.peers) * args.peers
    while manager.channels[gid].orderer.highest_delivered(manager.pid) and \
            sum(b - a + 1 for r in manager.channels[gid].orderer.delivered_ranges().values() for a, b in r) < total:
        await asyncio.sleep(0.02)
    (coord / f"done-{args.name}").write_text(json.dumps({"seconds": time.monotonic() - start}))
    while len(list(coord.glob("done-*"))) < args.peers:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)


def run_scenario(scenario: str, messages: int, lossy: float = 0.0) -> Path:
    from tests.testbed.netns import Lan

    coord = Path(tempfile.mkdtemp(prefix=f"m2mc-bench-{scenario}-"))
    names = ["creator", "stay", "away"] if scenario == "rejoin" else ["p0", "p1", "p2"]
    with Lan(3) as lan:
        procs = [
            lan.run(index, [
                sys.executable, "-m", "m2mc.app.bench.sync", "--role", "creator" if index == 0 else "member",
                "--name", name, "--iface", address, "--data-dir", str(coord / name), "--coord", str(coord),
                "--messages", str(messages), "--scenario", scenario, "--seed", str(index + 1),
            ])
            for index, (address, name) in enumerate(zip(lan.addresses, names))
        ]
        deadline = time.time() + 60
        while len(list(coord.glob("ready-*"))) < 3:
            if time.time() > deadline:
                raise RuntimeError("peers did not get ready")
            time.sleep(0.05)
        if lossy:
            for i in range(3):
                lan.set_loss(i, lossy)
        (coord / "go").write_text("1")
        if scenario == "loss":
            (coord / "lossy").write_text("1")
        for proc in procs:
            proc.wait(timeout=600)
    return coord


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--role")
    parser.add_argument("--name")
    parser.add_argument("--iface")
    parser.add_argument("--data-dir")
    parser.add_argument("--coord")
    parser.add_argument("--scenario", default="rejoin")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--peers", type=int, default=3)
    args = parser.parse_args(argv)
    if args.role:
        asyncio.run(role_main(args))
        return 0

    coord = run_scenario("rejoin", args.messages)
    result = json.loads((coord / "result.json").read_text())
    others = sum(int((coord / f"bytes-{n}").read_text()) for n in ("creator", "stay"))
    wire_bytes = others + result["own_bytes_out"]
    print(f"rejoin after missing {args.messages:,} messages: synchronized {result['messages']:,} in "
          f"{result['seconds']:.1f} s ({result['messages'] / result['seconds']:,.0f} msg/s)")
    print(f"  bytes on the wire {wire_bytes:,} / payload {result['payload']:,} = {wire_bytes / result['payload']:.2f}x")

    coord = run_scenario("loss", 1000, lossy=0.2)
    times = [json.loads(p.read_text())["seconds"] for p in sorted(coord.glob("done-*"))]
    print(f"1,000 messages with replies, 3 peers, 20% loss on every host: complete everywhere in {max(times):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
