"""A member's out-of-range values, on a namespace LAN with two real peers and the member's host as
the attacker (issue 26, item 1): messages stamped in year 10000, at the end of int64 and at the
epoch leave every member's history and export readable, are announced with a clamped date, and are
counted.  Mal's key is a real member's (its peer joined, posted, then stopped)."""

import json
import re
import time
from datetime import datetime, timezone

import pytest

from lan import Lan, PeerProcess, send_from
from m2mc.middleware import wire
from m2mc.middleware.store import Store

pytestmark = pytest.mark.netns

ANNOUNCED_WITHIN = 10.0
YEAR_10000 = 253_402_300_800_000  # 10000-01-01T00:00:00Z in ms
STAMPS = {"year 10000": YEAR_10000, "the end of int64": 2**63 - 1, "the epoch": 0}
ISO = re.compile(r"(\d{4})-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def test_far_future_and_far_past_stamps_leave_the_group_readable_and_are_shown_clamped(tmp_path):
    lan = Lan(3)
    peers = []
    try:
        peers = [PeerProcess(host, addr, tmp_path / name, name, extra=["--no-zeroconf"])
                 for host, addr, name in zip(lan.hosts, lan.addresses, ("Ann", "Bob", "Mal"))]
        ann, bob, mal_peer = peers
        gid = ann.call("create_group", {"desc": "Clocks"})["gid"]
        for peer in (bob, mal_peer):
            peer.wait_notification("group_discovered", lambda p: p["gid"] == gid)
            peer.call("join_group", {"gid": gid})
        mal_peer.call("send", {"gid": gid, "text": "hello from Mal", "parent": None})
        for peer in (ann, bob):
            peer.wait_for(lambda p=peer: p.delivered(gid), what="Mal's first message")
        group = next(g for g in ann.call("list_groups") if g["gid"] == gid)
        mal_peer.shutdown()
        peers.remove(mal_peer)
        store = Store(tmp_path / "Mal" / "m2mc.sqlite3")
        mal = store.identity()
        store.close()

        attack = [wire.encode(mal, wire.signed_data(mal, gid, seqno, None, sent_at, "Mal", text))
                  for seqno, (text, sent_at) in enumerate(STAMPS.items(), start=2)]
        started = time.monotonic()
        send_from(lan.hosts[2], lan.addresses[2], group["addr"], group["port"], attack)
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
        for peer in peers:
            peer.shutdown()
        lan.close()
