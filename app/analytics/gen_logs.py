"""m2mc-gen-logs: write a synthetic chat export (JSON Lines) for tests and benchmarks.

The log mimics what peers export: several groups of uneven activity, thread sizes
drawn from a log-normal law, replies biased towards the thread root, a few long
back-and-forth chains between two people, heavy-tailed (log-normal) reply times,
per-sender sequence numbers in `mid`, and a small share of messages the exporting
peer never saw, so their replies arrive as orphans.

Everything is generated with vectorised numpy; only the final formatting of lines
is a Python loop, done in chunks so memory stays flat.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

try:
    import numpy as np
except ModuleNotFoundError:  # installed without the analytics extra: say which one brings it
    from ..extras import require_extra

    require_extra("m2mc-gen-logs", "analytics")
    raise

log = logging.getLogger("m2mc.gen_logs")

# The log starts here; offsets are added in milliseconds.
EPOCH_MS = int(np.datetime64("2026-01-05T08:00:00", "ms").astype(np.int64))
SPAN_MS = 30 * 24 * 3600 * 1000

FIRST_NAMES = (
    "ada alan barbara claude donald edsger frances grace hedy ivan john karen leslie "
    "linus margaret niklaus ole radia shafi tim tony vint whitfield yukihiro zhores"
).split()
WORDS = (
    "ok sure why not the build fails again on my laptop can you check the patch "
    "tomorrow lunch meeting at noon I think ordering is causal here but total order "
    "would be nicer let us vote thanks great idea no wait what about the late peer "
    "resend please link works now merged ship it"
).split()
TOPICS = "lab course project family climbing reading-club band football chess hiking".split()


@dataclass(frozen=True, slots=True)
class GeneratedLog:
    """Column arrays of a generated log, one entry per exported message."""

    group: np.ndarray  # group index per message
    sender: np.ndarray  # person index per message
    seqno: np.ndarray
    parent_sender: np.ndarray  # person index of the parent's sender, -1 for a root
    parent_seqno: np.ndarray
    sent_ms: np.ndarray
    received_ms: np.ndarray
    text: np.ndarray  # index into the sentence bank
    group_ids: list[str]
    group_descs: list[str]
    person_ids: list[str]
    person_names: list[str]
    sentences: list[str]
    file_size: np.ndarray | None = None  # per message, the size of the file it offers; -1 for none


# A file offer's kind in an export line (middleware.kinds.FILE_OFFER, not imported: the generator runs
# where only the analytics extra is installed).  A line without `kind` is chat text.
FILE_KIND = "file"
FILE_MIMES = ("image/png", "application/pdf", "text/plain", "application/zip")


def _hex_ids(rng: np.random.Generator, count: int) -> list[str]:
    return [bytes(row).hex() for row in rng.integers(0, 256, size=(count, 16), dtype=np.uint8)]


def generate(n_messages: int, seed: int = 0, lost_rate: float = 0.001, file_rate: float = 0.0) -> GeneratedLog:
    """Draw a log of exactly `n_messages` exported messages, a share `file_rate` of them file offers.

    The offers are drawn from a stream of their own, so a seed gives the same messages with
    and without them."""
    if n_messages < 0:
        raise ValueError("n_messages must be >= 0")
    rng = np.random.default_rng(seed)
    n_lost = int(n_messages * lost_rate)
    total = n_messages + n_lost

    n_groups = int(min(40, max(3, round(math.sqrt(max(total, 1)) / 20))))
    n_people = int(max(12, math.sqrt(max(total, 1)) * 1.5))
    group_weight = 1.0 / np.arange(1, n_groups + 1) ** 0.8
    group_weight /= group_weight.sum()
    group_ids = _hex_ids(rng, n_groups)
    group_descs = [f"{TOPICS[g % len(TOPICS)]} {g}" for g in range(n_groups)]
    person_ids = _hex_ids(rng, n_people)
    person_names = [f"{FIRST_NAMES[p % len(FIRST_NAMES)]}{p}" for p in range(n_people)]
    # Members of each group, most active first: the sender draw below favours the front.
    member_counts = rng.integers(4, max(5, min(n_people, 4 + n_people // 8)), size=n_groups)
    member_counts = np.minimum(member_counts, n_people)
    member_offsets = np.concatenate(([0], np.cumsum(member_counts)[:-1]))
    members = np.concatenate([rng.choice(n_people, size=c, replace=False) for c in member_counts])

    # Thread sizes: 1 + floor(log-normal), drawn until they cover `total`.
    sizes_parts: list[np.ndarray] = []
    covered = 0
    while covered < total:
        batch = 1 + np.floor(rng.lognormal(mean=0.6, sigma=1.25, size=max(16, total // 3))).astype(np.int64)
        np.minimum(batch, 20_000, out=batch)
        sizes_parts.append(batch)
        covered += int(batch.sum())
    sizes = np.concatenate(sizes_parts) if sizes_parts else np.zeros(0, np.int64)
    ends = np.cumsum(sizes)
    n_threads = int(np.searchsorted(ends, total, side="left")) + 1 if total else 0
    sizes = sizes[:n_threads].copy()
    if n_threads:
        sizes[-1] -= int(ends[n_threads - 1]) - total
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)

    thread_group = rng.choice(n_groups, size=n_threads, p=group_weight)
    # About 1 % of the threads with 12+ messages are a back-and-forth between two people.
    chain_thread = (sizes >= 12) & (rng.random(n_threads) < 0.01)
    thread_start_ms = EPOCH_MS + rng.integers(0, SPAN_MS, size=n_threads)

    thread_of = np.repeat(np.arange(n_threads), sizes)
    local = np.arange(total, dtype=np.int64) - starts[thread_of]
    is_chain = chain_thread[thread_of]

    # Parent choice: the root 45 %, the previous message 25 %, any earlier one otherwise.
    draw = rng.random(total)
    pick = np.floor(rng.random(total) * local).astype(np.int64)
    parent_local = np.where(draw < 0.45, 0, np.where(draw < 0.70, local - 1, pick))
    parent_local = np.where(is_chain, local - 1, parent_local)
    parent = np.where(local == 0, -1, starts[thread_of] + parent_local)

    group = thread_group[thread_of]
    count = member_counts[group]
    rank = np.minimum((rng.random(total) ** 2 * count).astype(np.int64), count - 1)
    sender = members[member_offsets[group] + rank]
    # Chains alternate the two most active members of the group.
    pair = members[member_offsets[group] + (local % 2)]
    sender = np.where(is_chain, pair, sender)

    # Times: each message follows the previous one in its thread by a heavy-tailed gap,
    # so a reply's latency to its parent is a sum of such gaps.
    gaps = np.rint(rng.lognormal(mean=math.log(45_000), sigma=1.7, size=total)).astype(np.int64)
    gaps = np.where(is_chain, gaps // 4, gaps)
    gaps[starts] = 0
    running = np.cumsum(gaps)
    sent_ms = thread_start_ms[thread_of] + running - running[starts][thread_of]
    received_ms = sent_ms + 1 + rng.exponential(40.0, size=total).astype(np.int64)

    # Sequence numbers per sender in send order.
    order = np.lexsort((sent_ms, sender))
    sorted_sender = sender[order]
    run_start = np.concatenate(([True], sorted_sender[1:] != sorted_sender[:-1]))
    run_first = np.maximum.accumulate(np.where(run_start, np.arange(total), 0))
    seqno = np.empty(total, dtype=np.int64)
    seqno[order] = np.arange(total) - run_first + 1

    # Messages this peer never received; replies to them become orphans.
    keep = np.ones(total, dtype=bool)
    if n_lost:
        keep[rng.choice(total, size=n_lost, replace=False)] = False
    has_parent = parent >= 0
    safe_parent = np.where(has_parent, parent, 0)
    parent_sender = np.where(has_parent, sender[safe_parent], -1)
    parent_seqno = np.where(has_parent, seqno[safe_parent], -1)

    export_order = np.argsort(received_ms[keep], kind="stable")
    kept_index = np.flatnonzero(keep)[export_order]
    sentences = _sentence_bank(rng)
    file_size = None
    if file_rate > 0:
        files = np.random.default_rng([seed, 30])
        # Sizes log-normal around 200 kB, a few of them many MB.
        sizes = np.rint(files.lognormal(mean=math.log(200_000), sigma=2.0, size=kept_index.size)).astype(np.int64)
        file_size = np.where(files.random(kept_index.size) < file_rate, sizes, -1)
    return GeneratedLog(
        group=group[kept_index],
        sender=sender[kept_index],
        seqno=seqno[kept_index],
        parent_sender=parent_sender[kept_index],
        parent_seqno=parent_seqno[kept_index],
        sent_ms=sent_ms[kept_index],
        received_ms=received_ms[kept_index],
        text=rng.integers(0, len(sentences), size=kept_index.size),
        group_ids=group_ids,
        group_descs=group_descs,
        person_ids=person_ids,
        person_names=person_names,
        sentences=sentences,
        file_size=file_size,
    )


def _sentence_bank(rng: np.random.Generator, size: int = 2000) -> list[str]:
    lengths = rng.integers(1, 12, size=size)
    return [" ".join(rng.choice(WORDS, size=n)) for n in lengths]


def _iso(ms: np.ndarray) -> list[str]:
    return np.datetime_as_string(ms.astype("datetime64[ms]"), unit="ms").tolist()


def write_jsonl(generated: GeneratedLog, out, chunk: int = 200_000) -> int:
    """Write the log as export lines to the text stream `out`; return the line count."""
    quoted_group_desc = [json.dumps(d) for d in generated.group_descs]
    quoted_names = [json.dumps(n) for n in generated.person_names]
    quoted_text = [json.dumps(t) for t in generated.sentences]
    gids, pids = generated.group_ids, generated.person_ids
    template = (
        '{"gid":"%s","group_desc":%s,"mid":"%s:%d","parent":%s,"sender":"%s",'
        '"sender_name":%s,"text":%s,"sent_at":"%sZ","received_at":"%sZ"}\n'
    )
    total = generated.group.size
    for begin in range(0, total, chunk):
        window = slice(begin, min(total, begin + chunk))
        lines = []
        for g, s, q, ps, pq, t, sent, recv in zip(
            generated.group[window].tolist(),
            generated.sender[window].tolist(),
            generated.seqno[window].tolist(),
            generated.parent_sender[window].tolist(),
            generated.parent_seqno[window].tolist(),
            generated.text[window].tolist(),
            _iso(generated.sent_ms[window]),
            _iso(generated.received_ms[window]),
        ):
            parent = "null" if ps < 0 else f'"{pids[ps]}:{pq}"'
            lines.append(
                template
                % (gids[g], quoted_group_desc[g], pids[s], q, parent, pids[s], quoted_names[s], quoted_text[t], sent, recv)
            )
        if generated.file_size is not None:
            for offset in np.flatnonzero(generated.file_size[window] >= 0).tolist():
                lines[offset] = _with_offer(lines[offset], begin + offset, int(generated.file_size[begin + offset]))
        out.write("".join(lines))
    return total


def _with_offer(line: str, index: int, size: int) -> str:
    """An export line as the app writes a file offer (middleware.kinds.exported): its kind, the offer's JSON
    as its text, and its fields as `file`."""
    row = json.loads(line)
    digest = f"{index:064x}"
    offer = {"name": f"file{index}.bin", "size": size, "mime": FILE_MIMES[index % len(FILE_MIMES)], "sha256": digest,
             "chunk_size": 262144, "root": digest}
    text = {"name": offer["name"], "size": size, "mime": offer["mime"], "sha256": digest, "chunk": 262144, "root": digest}
    row["kind"] = FILE_KIND
    row["text"] = json.dumps(text, separators=(",", ":"))
    row["file"] = offer
    return json.dumps(row, separators=(",", ":")) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="m2mc-gen-logs", description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, required=True, help="number of lines to write")
    parser.add_argument("--out", type=Path, required=True, help="output file (.jsonl or .jsonl.gz)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lost-rate", type=float, default=0.001, help="share of messages missing from the export")
    parser.add_argument("--file-rate", type=float, default=0.0, help="share of messages that offer a file (default 0)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.messages < 0:
        parser.error("--messages must be >= 0")
    if not 0.0 <= args.lost_rate < 1.0:
        parser.error("--lost-rate must be in [0, 1)")
    if not 0.0 <= args.file_rate <= 1.0:
        parser.error("--file-rate must be in [0, 1]")
    started = time.perf_counter()
    generated = generate(args.messages, seed=args.seed, lost_rate=args.lost_rate, file_rate=args.file_rate)
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        opener = gzip.open if args.out.name.endswith(".gz") else open
        with opener(args.out, "wt", encoding="utf-8") as out:
            written = write_jsonl(generated, out)
    except OSError as exc:
        print(f"m2mc-gen-logs: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    log.info("wrote %d messages to %s in %.1f s", written, args.out, time.perf_counter() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
