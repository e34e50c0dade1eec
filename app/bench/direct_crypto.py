"""Benchmark of direct-message sealing: what a message costs its two ends, and a stranger's junk its recipient.

    python -m m2mc.app.bench.direct_crypto          # 2 CPU seconds per figure

- seal+open per second: ``crypto.seal_direct`` then ``crypto.open_direct`` of one body
  (a chat line, and a paragraph), the CPU time of both ends on one core.
- Junk: ``open_direct`` of random bytes of the largest bucket's sealed size, what a
  stranger who knows the recipient's key can make it spend per datagram.
"""

from __future__ import annotations

import argparse
import os
import time

from ...middleware import crypto


def rate(work, seconds: float) -> float:
    count, start = 0, time.process_time()
    while time.process_time() - start < seconds:
        work()
        count += 1
    return count / (time.process_time() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="CPU seconds per figure")
    args = parser.parse_args()
    sender, recipient = crypto.Identity.generate(), crypto.Identity.generate()
    keys = {sender.pid: (sender.public_key, sender.direct_public)}.get
    for size in (100, 3_000):
        body = os.urandom(size)

        def round_trip(body=body) -> None:
            sealed = crypto.seal_direct(sender, recipient.pid, recipient.direct_public, body)
            assert crypto.open_direct(recipient, sealed, keys) == (sender.pid, body)

        per_second = rate(round_trip, args.seconds)
        print(f"{size:>5} B body: {per_second:,.0f} seal+open/s ({1e6 / per_second:.0f} µs CPU each)")
    junk = os.urandom(crypto.DIRECT_BUCKETS[-1] + crypto.DIRECT_SEAL_OVERHEAD)
    per_second = rate(lambda: crypto.open_direct(recipient, junk, keys), args.seconds)
    print(f"junk of the largest bucket: {per_second:,.0f} refused/s ({1e6 / per_second:.0f} µs CPU each)")


if __name__ == "__main__":
    main()
