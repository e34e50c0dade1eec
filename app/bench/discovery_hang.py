"""Reproducer of the discovery hang in bench.lan: its three peers started the same way, many times.

    sudo .venv/bin/python -m m2mc.app.bench.discovery_hang [--runs 40] [--messages 500]

Each run starts bench.lan's sender and two receivers on a fresh namespace LAN, as bench.lan
does, with a trace of the control channel in every peer (what GJLP received and sent, with the
path, and the gid each peer read from the hand-off file).  A run in which a receiver has not
heard of the group within --wait seconds is a hang: every peer's trace is printed.
``--slow-write 0.3`` makes the sender's writes slow (see ``install_trace``): before the
hand-off files were written whole (app/bench/handoff.py), every such run hung, the receivers
having read the gid file empty.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path


def _describe(message) -> str:
    from ...middleware import wire

    if isinstance(message, wire.Adv):
        return f"ADV gids={list(message.gids)}"
    if isinstance(message, wire.GroupsInfo):
        return "GROUPS_INFO " + ", ".join(f"{info.gid[:8]}:[{','.join(m.pid[:6] for m in info.members)}]"
                                          for info in message.groups)
    return f"{type(message).__name__.upper()} {message.record.gid[:8]} {message.record.pid[:6]}"


def install_trace(path: Path, slow_write: float = 0.0) -> None:
    """Log every control datagram GJLP takes in and every one it hands out, with the time, and
    what the gid file read gave; with ``slow_write``, each file is written that many seconds
    after it is created, as a busy machine may do to a writer between its two steps."""
    from ...middleware import gjlp, peer_core, transport
    from ...middleware.addresses import Via

    out = path.open("a", buffering=1)
    start = time.time()

    def line(text: str) -> None:
        out.write(f"{time.time() - start:8.3f} {text}\n")

    receive, drain, core_receive = gjlp.Gjlp.receive, gjlp.Gjlp.datagrams_to_send, peer_core.PeerCore.receive
    send = transport.MulticastNetwork.send

    def traced_core_receive(self, data, arrival, now, wall):
        if arrival.via is not Via.MULTICAST:
            line(f"in  {arrival.via:9} from {arrival.source} {len(data)} B")
        return core_receive(self, data, arrival, now, wall)

    def traced_receive(self, sender, message, now, wall=None):
        line(f"gjlp<- {sender[:6]} {_describe(message)}")
        return receive(self, sender, message, now, wall)

    def traced_drain(self):
        messages = drain(self)
        for message in messages:
            line(f"gjlp-> {_describe(message)}")
        return messages

    def traced_send(self, data, destination):
        if getattr(destination, "host", "") == peer_core.CONTROL_ADDR or type(destination).__name__ != "GroupAddress":
            line(f"send {len(data)} B to {destination}")
        return send(self, data, destination)

    read_text = Path.read_text

    def traced_read_text(self, *args, **kwargs):
        text = read_text(self, *args, **kwargs)
        if self.name == "gid":
            line(f"read the gid file: {text!r}")
        return text

    setattr(Path, "read_text", traced_read_text)
    if slow_write:
        def slow_write_text(self, data, *args, **kwargs):
            with self.open("w") as created:
                time.sleep(slow_write)
                return created.write(data)

        setattr(Path, "write_text", slow_write_text)
    setattr(peer_core.PeerCore, "receive", traced_core_receive)
    setattr(gjlp.Gjlp, "receive", traced_receive)
    setattr(gjlp.Gjlp, "datagrams_to_send", traced_drain)
    setattr(transport.MulticastNetwork, "send", traced_send)
    line("trace on")


def run_peer(argv: list[str], trace: Path, slow_write: float) -> int:
    from . import lan

    install_trace(trace, slow_write)
    return lan.main(argv)


def orchestrate(args) -> int:
    from tests.testbed.netns import Lan

    hangs = runs = 0
    for run in range(args.runs):
        runs += 1
        work = Path(tempfile.mkdtemp(prefix="m2mc-hang-"))
        began = time.time()
        with Lan(3) as lan:
            procs = [
                lan.run(index, [
                    sys.executable, "-m", "m2mc.app.bench.discovery_hang", "--trace", str(work / f"trace-{index}.txt"),
                    "--slow-write", str(args.slow_write if index == 0 else 0), "--", "--role", "sender" if index == 0 else "receiver", "--iface", address,
                    "--data-dir", str(work / f"peer{index}"), "--coord", str(work), "--index", str(index),
                    "--messages", str(args.messages), "--steady-seconds", str(args.steady_seconds), "--peers", "3",
                    "--fast-rate", "6000", *(["--no-index"] if run % 2 == 0 else []),
                ])
                for index, address in enumerate(lan.addresses)
            ]
            hung = False
            while any(proc.poll() is None for proc in procs):
                if time.time() - began > args.wait and not (work / "sender.json").exists():
                    hung = True
                    break
                time.sleep(0.2)
        seconds = time.time() - began
        if hung:
            hangs += 1
            print(f"run {run}: HANG after {seconds:.1f} s; traces in {work}", flush=True)
            for index in range(3):
                print(f"--- peer {index} ({'sender' if index == 0 else 'receiver'})")
                print((work / f"trace-{index}.txt").read_text())
            if args.stop:
                break
        else:
            print(f"run {run}: ok in {seconds:.1f} s", flush=True)
    print(f"{hangs} hang(s) in {runs} runs")
    return 1 if hangs else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--trace" in argv:
        trace = Path(argv[argv.index("--trace") + 1])
        slow_write = float(argv[argv.index("--slow-write") + 1])
        return run_peer(argv[argv.index("--") + 1:], trace, slow_write)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--steady-seconds", type=float, default=0.2)
    parser.add_argument("--slow-write", type=float, default=0.0, metavar="SECONDS",
                        help="the sender writes each file this long after creating it (widens the race)")
    parser.add_argument("--stop", action="store_true", help="stop at the first hang")
    parser.add_argument("--wait", type=float, default=20.0, help="seconds before a run without the sender's end is a hang")
    return orchestrate(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
