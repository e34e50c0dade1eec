"""Benchmark of a private group's re-key on removal (issue 44): what the remover and a member pay.

    python -m m2mc.app.bench.rekey [--members 1000] [--rounds 5]

- Remover: CPU seconds of ``GroupTeam.remove`` in a group of ``--members`` (a fresh key sealed to
  each remaining member's X25519 key, the REKEY parts signed), and the parts: how many datagrams,
  their total and largest size as encoded.
- Member: CPU seconds to take every part (each part's two signatures checked, its own entry found
  and opened in one of them), as a member receiving the whole re-key does.
"""

from __future__ import annotations

import argparse
import statistics
import time

from ...middleware import crypto, wire
from ...middleware.teams import GroupTeam

GID = "b" * 26


def run(members: int) -> tuple[float, list[bytes], float]:
    owner = crypto.Identity.generate()
    others = [crypto.Identity.generate() for _ in range(members - 1)]
    remover = GroupTeam(GID, owner.pid, owner, bytes(32), confirmed=True)
    recipients = {identity.pid: identity.direct_public for identity in others}
    removed = others[-1].pid
    c0 = time.process_time()
    remover.remove(removed, 0, recipients)
    remover_cpu = time.process_time() - c0
    parts = [wire.encode(owner, message) for message in remover.take_outbox()]
    member = GroupTeam(GID, owner.pid, others[0], bytes(32), confirmed=True)
    c0 = time.process_time()
    for data in parts:
        envelope = wire.decode(data)
        member.receive(owner.pid, envelope.message, 0.0, lambda pid: True)
    member_cpu = time.process_time() - c0
    assert member.keys is not None and member.keys.epoch == remover.keys.epoch  # type: ignore[union-attr]
    return remover_cpu, parts, member_cpu


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    remover, member = [], []
    for _ in range(args.rounds):
        cpu, parts, member_cpu = run(args.members)
        remover.append(cpu)
        member.append(member_cpu)
    sizes = [len(p) for p in parts]
    print(f"re-key of a group of {args.members} members ({args.members - 2} sealed keys), {args.rounds} rounds:")
    print(f"  remover CPU: median {statistics.median(remover) * 1000:.1f} ms (min {min(remover) * 1000:.1f}, "
          f"max {max(remover) * 1000:.1f})")
    print(f"  REKEY datagrams: {len(parts)}, {sum(sizes) / 1000:.1f} KB in all, the largest {max(sizes)} bytes")
    print(f"  member taking every part: median {statistics.median(member) * 1000:.1f} ms CPU")


if __name__ == "__main__":
    main()
