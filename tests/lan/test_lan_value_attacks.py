"""A member's out-of-range values, on a namespace LAN with two real peers and the member's host as
the attacker (issue 26, item 1): messages stamped in year 10000, at the end of int64 and at the
epoch leave every member's history and export readable, are announced with a clamped date, and are
counted.  Mal's key is a real member's (its peer joined, posted, then stopped)."""

import json
import re
import time
from datetime import datetime, timezone

import pytest

from tests.testbed.lan import MemberAttack
from m2mc.middleware import wire

pytestmark = pytest.mark.netns

ANNOUNCED_WITHIN = 10.0
YEAR_10000 = 253_402_300_800_000  # 10000-01-01T00:00:00Z in ms
STAMPS = {"year 10000": YEAR_10000, "the end of int64": 2**63 - 1, "the epoch": 0}
ISO = re.compile(r"(\d{4})-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def test_far_future_and_far_past_stamps_leave_the_group_readable_and_are_shown_clamped(tmp_path):
    attack = MemberAttack(tmp_path, ("Ann", "Bob"), "Clocks")
    try:
        ann, bob = attack.peers
        gid, mal = attack.gid, attack.mal
        datagrams = [wire.encode(mal, wire.signed_data(mal, gid, seqno, None, sent_at, "Mal", text))
                     for seqno, (text, sent_at) in enumerate(STAMPS.items(), start=2)]
        started = time.monotonic()
        attack.send(datagrams)
        this_year = datetime.now(timezone.utc).year
        for peer in (ann, bob):
            def announced(p=peer):
                got = {m["text"]: m for m in p.delivered(gid) if m["text"] in STAMPS}
                return got if len(got) == len(STAMPS) else None

            got = peer.wait_for(announced, timeout=ANNOUNCED_WITHIN, what="the three stamped messages")
            print(f"{peer.name}: announced within {time.monotonic() - started:.2f} s, shown as "
                  + ", ".join(f"{text} -> {m['sent_at']}" for text, m in got.items()))
            for m in got.values():
                year = int(ISO.fullmatch(m["sent_at"]).group(1))
                assert m["sent_at_clamped"] and 2020 <= year <= this_year + 1, m
            history = {m["text"]: m for m in peer.call("history", {"gid": gid})}
            assert all(history[text]["sent_at"] == got[text]["sent_at"] for text in STAMPS)
            out = tmp_path / f"{peer.name}.jsonl"
            assert peer.call("export_log", {"path": str(out), "gid": gid})["messages"] == len(history)
            rows = [json.loads(line) for line in out.read_text().splitlines()]
            assert all(ISO.fullmatch(row["sent_at"]) and ISO.fullmatch(row["received_at"]) for row in rows)
            assert peer.call("stats")["sent_at_clamped"] == len(STAMPS)
        # Still a working group: a real message gets through, with its own time.
        mid = bob.call("send", {"gid": gid, "text": "still talking", "parent": None})["mid"]
        note = ann.wait_for(lambda: next((m for m in ann.delivered(gid) if m["mid"] == mid), None), timeout=10,
                            what="a real message")
        assert not note["sent_at_clamped"]
    finally:
        attack.close()
