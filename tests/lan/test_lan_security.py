"""Private groups and authenticated senders on a namespace LAN, with an eavesdropper on a fourth host."""

import subprocess
import sys
import time
from pathlib import Path

import msgpack
import pytest

from tests.testbed.lan import Lan, PeerProcess
from m2mc.middleware import crypto, wire

pytestmark = pytest.mark.netns
TAP = str(Path(__file__).parents[1] / "testbed" / "udp_tap.py")
PASSPHRASE = "correct horse battery staple"


@pytest.fixture
def lan4():
    lan = Lan(4)
    yield lan
    lan.close()


def tap(lan, index, *args):
    return subprocess.Popen(["ip", "netns", "exec", lan.hosts[index], sys.executable, TAP, *args],
                            stdout=subprocess.PIPE, text=True)


def test_private_group_keeps_outsiders_out(lan4, tmp_path):
    ann, bob, cat, eve = (PeerProcess(h, a, tmp_path / n, n)
                          for h, a, n in zip(lan4.hosts, lan4.addresses, ["Ann", "Bob", "Cat", "Eve"]))
    try:
        gid = ann.call("create_group", {"desc": "Board room", "passphrase": PASSPHRASE}, timeout=30)["gid"]
        for peer in (bob, cat, eve):
            peer.wait_notification("group_discovered", lambda p: p["gid"] == gid)
        seen_by_eve = next(g for g in eve.call("list_groups") if g["gid"] == gid)
        assert seen_by_eve["private"] and seen_by_eve["desc"] == "Board room"

        # Without the passphrase, or with a wrong one, Eve cannot join.
        assert "passphrase is needed" in eve.request("join_group", {"gid": gid})["error"]["message"]
        # A join with a passphrase derives the key first (Argon2id): slower than the default 10 s under load.
        wrong = eve.request("join_group", {"gid": gid, "passphrase": "guess guess"}, timeout=30)
        assert "wrong passphrase" in wrong["error"]["message"]
        for peer in (bob, cat):
            peer.call("join_group", {"gid": gid, "passphrase": PASSPHRASE}, timeout=30)
        ann.wait_for(lambda: len(next(g for g in ann.call("list_groups") if g["gid"] == gid)["members"]) == 3,
                     what="three members")
        assert next(g for g in eve.call("list_groups") if g["gid"] == gid)["member_count"] == 3

        # Eve listens to the group's multicast address while the members talk.
        capture = tmp_path / "capture.bin"
        listener = tap(lan4, 3, "listen", lan4.addresses[3], seen_by_eve["addr"], str(seen_by_eve["port"]), "4",
                       str(capture))
        assert listener.stdout.readline().strip() == "listening"
        secrets = ["the merger is on", "budget is 4.2 million", "do not tell Eve"]
        root = ann.call("send", {"gid": gid, "text": secrets[0], "parent": None})["mid"]
        bob.wait_for(lambda: bob.delivered(gid), what="the root")
        bob.call("send", {"gid": gid, "text": secrets[1], "parent": root})
        cat.call("send", {"gid": gid, "text": secrets[2], "parent": root})
        for peer in (ann, bob, cat):
            peer.wait_for(lambda p=peer: len(p.delivered(gid)) == 3, what="three messages")
        listener.wait(20)
        captured = msgpack.unpackb(capture.read_bytes())
        assert len(captured) >= 3, "the eavesdropper heard the group's traffic"
        blob = b"".join(captured)
        for secret in secrets + ["Board room"]:
            assert secret.encode() not in blob
        assert not eve.delivered(gid)

        # Replays of real datagrams deliver nothing new; tampered copies and forgeries are dropped and counted.
        mallory = crypto.Identity.generate()
        forged = msgpack.packb([wire.VERSION, int(wire.MsgType.HEARTBEAT), ann.pid, mallory.public_key,
                                [gid, 99], None])
        forged_with_anns_key = msgpack.packb([wire.VERSION, int(wire.MsgType.HEARTBEAT), ann.pid,
                                              bytes.fromhex(_public_key_of(captured, ann.pid)), [gid, 99], None])
        others = [d for d in captured if not wire.sent_by(d, bob.pid.encode())][:3]  # Bob ignores his own echoes
        assert len(others) == 3
        tampered = [bytes(d[:-70]) + bytes([d[-70] ^ 1]) + bytes(d[-69:]) for d in others]
        attack = captured + tampered + [forged + mallory.sign(forged), forged_with_anns_key + mallory.sign(forged)]
        before = bob.call("stats")
        payload = tmp_path / "attack.bin"
        payload.write_bytes(msgpack.packb(attack))
        tap(lan4, 3, "send", lan4.addresses[3], seen_by_eve["addr"], str(seen_by_eve["port"]), str(payload)).wait(20)
        bob.wait_for(lambda: bob.call("stats")["bad_signature_dropped"] + bob.call("stats")["sealed_dropped"]
                     >= before["bad_signature_dropped"] + before["sealed_dropped"] + 5, what="attacks counted")
        time.sleep(0.5)
        history = bob.call("history", {"gid": gid})
        assert sorted(m["text"] for m in history) == sorted(secrets)
        assert len(bob.delivered(gid)) == 3
    finally:
        for peer in (ann, bob, cat, eve):
            peer.shutdown()


def _public_key_of(captured, pid):
    for datagram in captured:
        envelope = msgpack.Unpacker()
        envelope.feed(datagram)
        value = envelope.unpack()
        if value[2] == pid:
            return value[3].hex()
    raise AssertionError(f"no datagram from {pid} captured")
