"""A member floods one message with distinct reactions, on a namespace LAN: Ann's real peer and
Mal's host as the attacker.  Mal's key is a real member's (its peer joined, posted, then
stopped), so its operations are validly signed and delivered; the bound is the reaction rule
itself (a single emoji from Unicode's emoji data, at most ``MAX_REACTION_EMOJI`` per message)."""

import json
import time

import emoji as emoji_data
import pytest

from tests.testbed.lan import MemberAttack, cpu_seconds, rss_bytes
from m2mc.middleware import chatops, wire
from m2mc.middleware.obg import MAX_REACTION_EMOJI

pytestmark = pytest.mark.netns

EMOJI_FLOOD = 2_000
TEXT_FLOOD = 1_000
MAX_HISTORY_ENTRY = 8 * 1024
"""Bytes of the attacked message's history entry: 50 emoji with one reactor each is about 4 KB."""
MAX_WHOAMI_SECONDS = 2.0
"""The loop is never held for seconds by the flood (1 ms measured alone; a CI host with four test
processes on two cores stalled one call past 0.5 s), the bound the hostile JSON-RPC lines have."""
MAX_RSS_GROWTH = 20 * 1024 * 1024


def test_a_member_flooding_a_message_with_distinct_reactions_leaves_at_most_50(tmp_path):
    attack = MemberAttack(tmp_path, ("Ann",), "Reactions")
    try:
        (ann,) = attack.peers
        gid, mal = attack.gid, attack.mal
        target = ann.call("send", {"gid": gid, "text": "react to me", "parent": None})["mid"]
        owner, seqno = target.split(":")
        parent = (owner, int(seqno))
        emojis = sorted(e for e, data in emoji_data.EMOJI_DATA.items() if data["status"] == 2)[:EMOJI_FLOOD]
        texts = emojis + [f"not{n}" for n in range(TEXT_FLOOD)]
        now = int(time.time() * 1000)
        flood = [wire.encode(mal, wire.signed_data(mal, gid, 2 + n, parent, now, "Mal",
                                                   chatops.encode("react", None, 1 + n, emoji=text)))
                 for n, text in enumerate(texts)]
        last = 2 + len(texts)
        flood.append(wire.encode(mal, wire.signed_data(mal, gid, last, None, now, "Mal", "after the flood")))
        cpu_before, rss_before = cpu_seconds(ann.proc.pid), rss_bytes(ann.proc.pid)

        attack.send(flood, pause=0.0003)
        whoami = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(m["text"] == "after the flood" for m in ann.delivered(gid)):
            started = time.monotonic()
            ann.call("whoami")
            whoami.append(time.monotonic() - started)
            time.sleep(0.05)
        assert any(m["text"] == "after the flood" for m in ann.delivered(gid)), "the flood never fully arrived"
        started = time.monotonic()
        ann.call("whoami")
        whoami.append(time.monotonic() - started)

        entry = next(m for m in ann.call("history", {"gid": gid}, timeout=30) if m["mid"] == target)
        size = len(json.dumps(entry, ensure_ascii=False).encode())
        stats = ann.call("stats")
        cpu, growth = cpu_seconds(ann.proc.pid) - cpu_before, rss_bytes(ann.proc.pid) - rss_before
        print(f"{len(texts)} distinct reactions ({EMOJI_FLOOD} emoji, {TEXT_FLOOD} other texts): "
              f"{len(entry['reactions'])} kept, history entry {size} bytes, slowest whoami "
              f"{max(whoami) * 1000:.0f} ms, CPU {cpu:.2f} s, RSS +{growth / 2**20:.1f} MB, "
              f"rejected {stats.get('operations_rejected')}, of them {stats.get('reactions_refused')} past the cap")
        assert len(entry["reactions"]) == MAX_REACTION_EMOJI
        assert set(entry["reactions"]) == set(emojis[:MAX_REACTION_EMOJI])  # first come, first kept
        assert size <= MAX_HISTORY_ENTRY
        assert max(whoami) <= MAX_WHOAMI_SECONDS
        assert growth <= MAX_RSS_GROWTH
        assert stats["reactions_refused"] == EMOJI_FLOOD - MAX_REACTION_EMOJI
        assert stats["operations_rejected"] == len(texts) - MAX_REACTION_EMOJI

        # Ann may still add herself to an emoji that is there, but not bring a 51st, nor text.
        ann.call("react", {"gid": gid, "mid": target, "emoji": emojis[0]})
        refused = ann.request("react", {"gid": gid, "mid": target, "emoji": emojis[-1]})
        assert "error" in refused and "50 different" in refused["error"]["message"], refused
        not_emoji = ann.request("react", {"gid": gid, "mid": target, "emoji": "lol"})
        assert "error" in not_emoji and "single emoji" in not_emoji["error"]["message"], not_emoji
        ann_pid = ann.call("whoami")["pid"]
        ann.wait_for(lambda: ann_pid in next(m for m in ann.call("history", {"gid": gid})
                                             if m["mid"] == target)["reactions"][emojis[0]], what="Ann's reaction")
    finally:
        attack.close()
