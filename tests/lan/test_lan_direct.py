"""Direct messages on the namespace LAN (issue 29), and the testbed tools those tests stand on.

- the NFQUEUE delayer holds the packets it is given for its delay and loses none;
- the bridge capture sees every datagram, unicast and fragmented ones included;
- at 20 % loss A, B and C exchange direct messages, and the three-party chain (A->B "the build is
  broken", A->C "I told B", C->B "did you see A's note?") is delivered at B in causal order, round
  after round, with A->B delayed by 2 s; a capture of it all shows no plaintext in any DIRECT datagram
  (texts, names, pids, keys) and no direct text anywhere;
- a message to an absent B is delivered when B returns, after both A and B restarted
  (queued -> sent -> delivered -> read seen at A);
- attacks from an attacker host (see the bounds below): a stranger's direct datagrams are not shown
  and cost bounded CPU; a forged message claiming a member's pid is not shown; a member's flood of
  messages that SES must hold cannot grow what the victim holds past its cap; a replay of captured
  datagrams shows nothing new, and does not move where the victim sends.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.testbed.capture import Capture
from tests.testbed.delayer import Delayer
from tests.testbed.lan import Lan, MemberAttack, PeerProcess, cpu_seconds, rss_bytes, send_spoofed

pytestmark = pytest.mark.netns

PROBE_PORT = 40404

RECEIVE_SCRIPT = """
import json, socket, sys, time
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("0.0.0.0", int(sys.argv[1])))
sock.settimeout(float(sys.argv[3]))
print("listening", flush=True)
arrivals = {}
try:
    while len(arrivals) < int(sys.argv[2]):
        data = sock.recv(2048)
        arrivals[data.split(b" ")[0].decode()] = time.monotonic()
except socket.timeout:
    pass
print(json.dumps(arrivals))
"""

SEND_SCRIPT = """
import json, socket, sys, time
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sent = {}
for i in range(int(sys.argv[3])):
    for target in sys.argv[4:]:
        key = f"{target}/{i}"
        sent[key] = time.monotonic()
        sock.sendto(key.encode() + b" " + sys.argv[2].encode(), (target, int(sys.argv[1])))
    time.sleep(0.02)
print(json.dumps(sent))
"""


def probe(lan: Lan, sender: int, receivers: list[int], count: int, text: str = "probe") -> dict[str, float]:
    """Send ``count`` datagrams from host ``sender`` to each of ``receivers``; the delay of each one
    that arrived, by key ("address/i"). CLOCK_MONOTONIC is one clock for all namespaces."""
    listeners = [subprocess.Popen(["ip", "netns", "exec", lan.hosts[r], sys.executable, "-c", RECEIVE_SCRIPT,
                                   str(PROBE_PORT), str(count), "6"], stdout=subprocess.PIPE, text=True)
                 for r in receivers]
    for listener in listeners:
        assert listener.stdout.readline().strip() == "listening"
    sent = json.loads(subprocess.run(
        ["ip", "netns", "exec", lan.hosts[sender], sys.executable, "-c", SEND_SCRIPT, str(PROBE_PORT), text,
         str(count), *(lan.addresses[r] for r in receivers)], check=True, capture_output=True, text=True).stdout)
    arrived: dict[str, float] = {}
    for listener in listeners:
        arrived.update(json.loads(listener.communicate(timeout=20)[0]))
    return {key: arrived[key] - sent[key] for key in arrived}


DELAY = 2.0


def test_the_delayer_holds_each_chosen_packet_for_its_delay_and_loses_none(tmp_path):
    count = 20
    with Lan(3) as lan:
        with Delayer(lan.hosts[0], lan.addresses[1], DELAY) as delayer:
            delays = probe(lan, 0, [1, 2], count)
        to_delayed = sorted(v for k, v in delays.items() if k.startswith(lan.addresses[1] + "/"))
        to_other = sorted(v for k, v in delays.items() if k.startswith(lan.addresses[2] + "/"))
        print(f"to the delayed host: {len(to_delayed)}/{count} arrived, {to_delayed[0]:.3f}..{to_delayed[-1]:.3f} s; "
              f"to the other: {len(to_other)}/{count}, at most {to_other[-1] * 1000:.1f} ms; "
              f"the delayer held {delayer.held}, released {delayer.released}")
        assert len(to_delayed) == count and len(to_other) == count  # none lost
        assert to_delayed[0] >= DELAY
        assert to_other[-1] < DELAY / 2  # only what the rule chose is held
        assert delayer.held == delayer.released == count


def test_the_capture_sees_each_datagram_once_unicast_and_fragmented_ones_included(tmp_path):
    needle = b"needle-in-the-haystack"
    # 1450 bytes in, the needle straddles the end of the first fragment (1480 bytes of IP payload).
    straddling = "x" * 1450 + needle.decode() + "y" * 1500
    with Lan(3) as lan:
        with Capture(lan, tmp_path / "lan.pcap") as capture:
            assert len(probe(lan, 0, [1, 2], 5, needle.decode())) == 10
            assert len(probe(lan, 1, [2], 1, straddling)) == 1
        seen = capture.find([needle], unicast_only=True)
        assert len(seen) == 11, [d for _, d in seen]
        assert sorted(d.source[0] for _, d in seen) == [lan.addresses[0]] * 10 + [lan.addresses[1]]
        assert len(capture.find_in_frames([needle])) == 10  # the straddling one only whole
        assert not capture.find([b"not-sent-at-all"])


# -- direct messages among real peers ------------------------------------------------------------

LOSS = 0.20
NAMES = ("Annabelle", "Bartholomew", "Cassiopeia")  # long: a 3-letter name could occur in ciphertext by chance
CHAIN_ROUNDS = 3
CHAIN_ROUND_WITHIN = 20.0  # s, for one round of the chain at 20 % loss with A->B 2 s late
PORT = 47477  # PeerProcess's


def start(lan: Lan, index: int, tmp_path: Path, name: str) -> PeerProcess:
    return PeerProcess(lan.hosts[index], lan.addresses[index], tmp_path / name, name, extra=["--no-zeroconf"])


def identity_of(data_dir: Path):
    """The identity a peer started on ``data_dir`` will have: made here, first, so a test knows its keys."""
    from m2mc.middleware.store import Store

    data_dir.mkdir(parents=True, exist_ok=True)
    store = Store(data_dir / "m2mc.sqlite3")
    try:
        return store.identity()
    finally:
        store.close()


def join_one_group(peers: list[PeerProcess], desc: str = "Direct messages") -> str:
    """An open group of ``peers``: each learns the others' direct-message keys from its member records."""
    creator, *joiners = peers
    gid = creator.call("create_group", {"desc": desc})["gid"]
    for peer in joiners:
        peer.wait_notification("group_discovered", lambda p: p["gid"] == gid, timeout=30)
        peer.call("join_group", {"gid": gid})
    for peer in peers:
        peer.wait_for(lambda p=peer: len(next(g for g in p.call("list_groups") if g["gid"] == gid)["members"])
                      == len(peers), timeout=30, what=f"{len(peers)} members")
    return gid


def direct_notes(peer: PeerProcess, method: str = "direct_delivered") -> list[dict]:
    with peer._cond:
        return [note["params"] for note in peer.notifications if note["method"] == method]


def incoming(peer: PeerProcess) -> list[dict]:
    """The direct messages ``peer`` was given so far, in the order it was given them."""
    return [m for m in direct_notes(peer) if not m["outgoing"]]


def wait_incoming(peer: PeerProcess, text: str, timeout: float = 20) -> dict:
    return peer.wait_for(lambda: next((m for m in incoming(peer) if m["text"] == text), None), timeout=timeout,
                         what=f"the direct message {text!r}")


def statuses(peer: PeerProcess, mid: str) -> list[str]:
    return [s["status"] for s in direct_notes(peer, "direct_status") if s["mid"] == mid]


def stop_all(peers: list[PeerProcess]) -> None:
    for peer in peers:
        if peer.proc.poll() is None:
            peer.shutdown()


def direct_datagrams(capture: Capture):
    from m2mc.middleware import wire

    return [d for d in capture.datagrams() if wire.direct_payload(d.payload) is not None]


def test_at_20_percent_loss_the_chain_is_delivered_in_causal_order_with_a_to_b_2_s_late_and_shows_no_plaintext(
        tmp_path):
    from m2mc.middleware import crypto, wire

    identities = [identity_of(tmp_path / name) for name in NAMES]
    texts: list[str] = []
    with Lan(3) as lan:
        peers: list[PeerProcess] = []
        capture = Capture(lan, tmp_path / "lan.pcap")
        try:
            peers = [start(lan, i, tmp_path, name) for i, name in enumerate(NAMES)]
            a, b, c = peers
            assert [p.pid for p in peers] == [i.pid for i in identities]
            join_one_group(peers)  # (on a clean LAN: group discovery at 20 % loss is not what is tested)
            for i in range(3):
                lan.set_loss(i, LOSS)
            began = time.monotonic()
            # Everyone writes to everyone: each of the six arrives.
            for sender in peers:
                for recipient in peers:
                    if recipient is not sender:
                        text = f"hello {recipient.name} from {sender.name}"
                        sender.call("send_direct", {"pid": recipient.pid, "text": text})
                        texts.append(text)
            for recipient in peers:
                for sender in peers:
                    if sender is not recipient:
                        wait_incoming(recipient, f"hello {recipient.name} from {sender.name}", timeout=30)
            print(f"three peers exchanged six direct messages at {LOSS:.0%} loss in "
                  f"{time.monotonic() - began:.1f} s")

            held_seen = 0
            with Delayer(lan.hosts[0], lan.addresses[1], DELAY) as delayer:
                for round in range(1, CHAIN_ROUNDS + 1):
                    note, told, question = (f"the build is broken ({round})", f"I told B ({round})",
                                            f"did you see A's note? ({round})")
                    texts += [note, told, question]
                    started = time.monotonic()
                    a.call("send_direct", {"pid": b.pid, "text": note})
                    a.call("send_direct", {"pid": c.pid, "text": told})
                    wait_incoming(c, told, timeout=CHAIN_ROUND_WITHIN)
                    c.call("send_direct", {"pid": b.pid, "text": question})
                    # While A's note is still on its way, B holds C's question (it arrived first).
                    while not any(m["text"] == note for m in incoming(b)) and time.monotonic() - started < DELAY:
                        held_seen += b.call("stats")["direct_held"] > 0 and not any(
                            m["text"] == question for m in incoming(b))
                        time.sleep(0.05)
                    wait_incoming(b, question, timeout=CHAIN_ROUND_WITHIN)
                    took = time.monotonic() - started
                    order = [m["text"] for m in incoming(b)]
                    print(f"round {round}: B had the chain after {took:.1f} s; B's order: {order[-2:]}")
                    assert order.index(note) < order.index(question), order
                    assert took >= DELAY  # A->B was late indeed
                    assert not any(m["late"] for m in incoming(b) if m["text"] in (note, question))
                    history = [m["text"] for m in b.call("direct_history", {"pid": c.pid})]
                    assert question in history
                    assert note in [m["text"] for m in b.call("direct_history", {"pid": a.pid})]
            print(f"the delayer held {delayer.held} datagrams A->B; B was seen holding C's question in "
                  f"{held_seen} polls; B's stats: "
                  f"{ {k: v for k, v in b.call('stats').items() if k.startswith('direct_')} }")
            assert delayer.held >= CHAIN_ROUNDS and delayer.released == delayer.held
            assert held_seen > 0, "C's question never overtook A's note: the test did not exercise SES"
        finally:
            stop_all(peers)
            capture.stop()

    # What an onlooker saw.
    sent = direct_datagrams(capture)
    pids = [i.pid for i in identities]
    secrets = ([t.encode() for t in texts] + [n.encode() for n in NAMES] + [p.encode() for p in pids]
               + [p.upper().encode() for p in pids] + [bytes.fromhex(p) for p in pids]
               + [i.public_key for i in identities] + [i.direct_public for i in identities])
    sources = {d.source[0] for d in sent}
    sizes = {len(wire.direct_payload(d.payload)) for d in sent}
    print(f"captured {len(capture.frames)} frames, {len(sent)} DIRECT datagrams from {len(sources)} hosts; "
          f"sealed sizes {sorted(sizes)}")
    assert sources == set(lan.addresses)
    assert all(d.unicast for d in sent)
    assert sizes <= crypto.DIRECT_SEALED_SIZES  # padded to buckets: lengths tell nothing finer
    leaks = [(needle, d.source, d.destination) for d in sent for needle in secrets if needle in d.payload]
    assert not leaks, leaks[:5]
    assert not capture.find_in_frames(t.encode() for t in texts)
    assert not capture.find(t.encode() for t in texts)
    # The capture could see plaintext: the open group's member records carry the names.
    assert capture.find([NAMES[0].encode()])


ABSENT_DELIVERED_WITHIN = 40.0  # s after B is back (presence must show B to A again)


def test_a_message_to_an_absent_peer_is_delivered_when_it_returns_after_both_restarted(tmp_path):
    with Lan(2) as lan:
        peers = [start(lan, i, tmp_path, name) for i, name in enumerate(NAMES[:2])]
        try:
            a, b = peers
            join_one_group(peers)
            for i in range(2):
                lan.set_loss(i, 0.10)
            b.shutdown()
            text = "for when you are back"
            mid = a.call("send_direct", {"pid": b.pid, "text": text})["mid"]
            mine = a.wait_for(lambda: next((m for m in direct_notes(a) if m["mid"] == mid), None), what="own send")
            assert mine["outgoing"] and mine["status"] == "queued"
            time.sleep(1.0)
            # (A may have sent it already, before it could tell that B is gone: then it is "sent".)
            assert [m["status"] for m in a.call("direct_history", {"pid": b.pid}) if m["mid"] == mid] in (
                ["queued"], ["sent"])
            seen = ["queued", *statuses(a, mid)]

            a.shutdown()
            peers[0] = a = PeerProcess(a.netns, a.iface, a.data_dir, a.name, extra=a.extra)
            assert [m["status"] for m in a.call("direct_history", {"pid": b.pid}) if m["mid"] == mid] == seen[-1:]
            peers[1] = b = PeerProcess(b.netns, b.iface, b.data_dir, b.name, extra=b.extra)
            back = time.monotonic()
            got = wait_incoming(b, text, timeout=ABSENT_DELIVERED_WITHIN)
            a.wait_for(lambda: "delivered" in statuses(a, mid), timeout=ABSENT_DELIVERED_WITHIN,
                       what="the 'delivered' status")
            seen += statuses(a, mid)
            print(f"delivered {time.monotonic() - back:.1f} s after B was back; statuses seen at A: {seen}")
            assert got["mid"] == mid and got["status"] == "received" and not got["outgoing"]
            assert seen[:3] == ["queued", "sent", "delivered"]

            b.call("mark_direct_read", {"pid": a.pid, "mid": mid})
            a.wait_for(lambda: "read" in statuses(a, mid), timeout=20, what="the read receipt")
            [conversation] = [c for c in a.call("list_conversations") if c["peer"] == b.pid]
            assert conversation["last"]["status"] == "read" and conversation["name"] == b.name
            [conversation] = [c for c in b.call("list_conversations") if c["peer"] == a.pid]
            assert conversation["unread"] == 0 and conversation["last"]["text"] == text
        finally:
            stop_all(peers)


# -- attacks from a host on the LAN -------------------------------------------------------------

STRANGERS = 50
STRANGER_DATAGRAMS = 3_000
STRANGER_CPU = 1.5  # s of the victim's CPU for all of a stranger flood (opening is capped per second)
FLOOD = 1_500  # a member's messages that SES must hold (their stamp names a cause that never comes)
HELD_PER_SENDER = 200  # middleware.ses: Ses(max_held_per_sender=200), what one sender can make a peer hold
FLOOD_RSS = 50 * 1024 * 1024
MEMBER_HEARD_WITHIN = 10.0  # s: a member's real message during the flood


@pytest.fixture(scope="module")
def attack(tmp_path_factory):
    """Ann and Bob in an open group, and Mal, a member who stopped: Mal's host is the attacker's.
    Ann's and Bob's identities are made first, so the attacker's datagrams can be sealed for them."""
    tmp = tmp_path_factory.mktemp("direct-attacks")
    keys = {name: identity_of(tmp / name) for name in ("Ann", "Bob")}
    setup = MemberAttack(tmp, ("Ann", "Bob"), desc="Direct attacks")
    setup.keys = keys
    try:
        yield setup
    finally:
        setup.close()


def msg_frame(seqno: int, text: str, clock: dict[str, int], waits_for: tuple = (), name: str = "x") -> bytes:
    """A MSG frame as middleware/direct.py documents it: [1, seqno, parent, sent_at, name, text, stamp]."""
    import msgpack
    from m2mc.middleware.ses import SesStamp

    stamp = SesStamp(clock, tuple(waits_for)).to_wire()
    return msgpack.packb([1, seqno, None, int(time.time() * 1000), name, text, stamp], use_bin_type=True)


def sealed(sender, recipient_pid: str, recipient_dh: bytes, body: bytes) -> bytes:
    from m2mc.middleware import crypto, wire

    return wire.encode_direct(crypto.seal_direct(sender, recipient_pid, recipient_dh, body))


def send_from_attacker(attack: MemberAttack, target: PeerProcess, datagrams: list[bytes], pause: float = 0.0,
                       source: tuple[str, int] | None = None) -> None:
    send_spoofed(attack.lan.hosts[-1], source or (attack.lan.addresses[-1], PORT), (target.iface, PORT), datagrams,
                 pause)


def direct_stats(peer: PeerProcess) -> dict[str, int]:
    return {k: v for k, v in peer.call("stats").items() if k.startswith("direct_")}


def stored_rows(peer: PeerProcess, senders: list[str]) -> dict[str, int]:
    """The direct messages from ``senders`` in ``peer``'s store, by status, read beside the running peer."""
    import sqlite3

    db = sqlite3.connect(f"file:{Path(peer.data_dir) / 'm2mc.sqlite3'}?mode=ro", uri=True)
    try:
        marks = ",".join("?" * len(senders))
        return dict(db.execute(f"SELECT status, count(*) FROM direct_messages WHERE sender IN ({marks}) "
                               "GROUP BY status", senders).fetchall())
    finally:
        db.close()


def test_a_strangers_direct_datagrams_are_not_shown_and_cost_bounded_cpu(attack):
    from m2mc.middleware import crypto

    ann, bob = attack.peers
    dh = attack.keys["Bob"].direct_public
    strangers = [crypto.Identity.generate() for _ in range(STRANGERS)]
    datagrams = [sealed(s, bob.pid, dh, msg_frame(1 + i // STRANGERS, f"stranger spam {i}", {s.pid: 1 + i // STRANGERS}))
                 for i, s in zip(range(STRANGER_DATAGRAMS), strangers * (STRANGER_DATAGRAMS // STRANGERS))]
    before, cpu = direct_stats(bob), cpu_seconds(bob.proc.pid)
    send_from_attacker(attack, bob, datagrams, pause=0.0002)
    time.sleep(1.0)
    spent = cpu_seconds(bob.proc.pid) - cpu
    after = direct_stats(bob)
    turned_away = sum(after[k] - before[k] for k in ("direct_unopened", "direct_over_budget", "direct_malformed"))
    print(f"{STRANGER_DATAGRAMS} stranger datagrams: Bob spent {spent:.2f} s of CPU and turned away {turned_away}; "
          f"{ {k: after[k] - before[k] for k in after if after[k] != before[k]} }")
    assert turned_away >= STRANGER_DATAGRAMS * 0.9  # (a few may be lost on the way)
    assert spent <= STRANGER_CPU
    assert not [m for m in incoming(bob) if m["text"].startswith("stranger spam")]
    assert not {c["peer"] for c in bob.call("list_conversations")} & {s.pid for s in strangers}
    assert stored_rows(bob, [s.pid for s in strangers]) == {}
    assert after["direct_delivered"] == before["direct_delivered"] and after["direct_held"] == before["direct_held"]
    assert bob.call("whoami")["pid"] == bob.pid


def test_a_forged_message_claiming_a_members_pid_is_not_shown(attack):
    from m2mc.middleware import crypto

    ann, bob = attack.peers
    mal, keys = attack.mal, attack.keys
    bob_raw, mal_raw = bytes.fromhex(bob.pid), bytes.fromhex(mal.pid)
    stranger = crypto.Identity.generate()
    body = msg_frame(1, "forged: Ann says the build is fine", {ann.pid: 1}, name="Ann")
    # A stranger signs with its own key and names Ann as the sender.
    claimed = SimpleNamespace(pid=ann.pid, sign=stranger.sign)
    # Mal, a member, passes on what Ann really signed for Mal, sealed for Bob instead.
    forwarded = SimpleNamespace(pid=ann.pid, sign=lambda data: keys["Ann"].sign(data.replace(bob_raw, mal_raw)))
    genuine_for_mal = crypto.seal_direct(keys["Ann"], mal.pid, mal.direct_public, body)
    assert crypto.open_direct(mal, genuine_for_mal, lambda pid: (keys["Ann"].public_key, keys["Ann"].direct_public)
                              if pid == ann.pid else None) == (ann.pid, body)  # what Mal holds is Ann's indeed
    datagrams = [sealed(claimed, bob.pid, keys["Bob"].direct_public, body),
                 sealed(forwarded, bob.pid, keys["Bob"].direct_public, body)] * 5
    before = direct_stats(bob)
    send_from_attacker(attack, bob, datagrams, pause=0.01, source=(ann.iface, PORT))  # from Ann's address too
    time.sleep(1.0)
    after = direct_stats(bob)
    assert after["direct_unopened"] - before["direct_unopened"] >= len(datagrams) - 2
    assert not [m for m in incoming(bob) if m["text"].startswith("forged")]
    assert not [m for m in bob.call("direct_history", {"pid": ann.pid}) if m["text"].startswith("forged")]


def test_a_members_flood_of_messages_to_hold_cannot_grow_what_the_victim_holds_past_its_cap(attack):
    ann, bob = attack.peers
    mal = attack.mal
    dh = attack.keys["Bob"].direct_public
    # Each claims that Bob must first have a message from Ann that Ann never sent (Mal's vector time
    # claims it too, as SES cuts S_m down to it): SES holds it.
    cause = ((bob.pid, {ann.pid: 1_000}),)
    datagrams = [sealed(mal, bob.pid, dh, msg_frame(seqno, f"held spam {seqno}", {mal.pid: seqno, ann.pid: 1_000},
                                                    cause, "Mal"))
                 for seqno in range(1, FLOOD + 1)]
    before, rss = direct_stats(bob), rss_bytes(bob.proc.pid)
    sent = time.monotonic()
    flood = threading.Thread(target=send_from_attacker, args=(attack, bob, datagrams, 0.002))
    flood.start()
    try:
        time.sleep(1.0)
        text = "a real message during the flood"
        ann.call("send_direct", {"pid": bob.pid, "text": text})
        wait_incoming(bob, text, timeout=MEMBER_HEARD_WITHIN)
        heard = time.monotonic() - sent - 1.0
    finally:
        flood.join()
    flooded = time.monotonic() - sent
    time.sleep(1.0)
    after = direct_stats(bob)
    grew = rss_bytes(bob.proc.pid) - rss
    print(f"{FLOOD} messages from Mal that SES must hold, in {flooded:.1f} s: Bob holds {after['direct_held']} "
          f"(stored: {stored_rows(bob, [mal.pid])}), "
          f"RSS grew {grew / 1e6:.1f} MB; Ann's message during it was shown after {heard:.2f} s; "
          f"{ {k: after[k] - before[k] for k in after if after[k] != before[k]} }")
    assert after["direct_held"] <= HELD_PER_SENDER
    assert stored_rows(bob, [mal.pid]) == {"held": after["direct_held"]}
    assert after["direct_rate_dropped"] + after["direct_refused_held"] > before["direct_rate_dropped"] + \
        before["direct_refused_held"]
    assert not [m for m in incoming(bob) if m["text"].startswith("held spam")]
    assert grew <= FLOOD_RSS
    assert bob.call("whoami")["pid"] == bob.pid


def test_a_replayed_direct_datagram_shows_nothing_new_and_does_not_move_the_sender(attack, tmp_path):
    ann, bob = attack.peers
    with Capture(attack.lan, tmp_path / "replay.pcap") as capture:
        mids = [ann.call("send_direct", {"pid": bob.pid, "text": f"to be replayed {i}"})["mid"] for i in range(3)]
        for i, mid in enumerate(mids):
            wait_incoming(bob, f"to be replayed {i}")
            ann.wait_for(lambda m=mid: "delivered" in statuses(ann, m), what="delivered")
    captured = [d.payload for d in direct_datagrams(capture) if d.source[0] == ann.iface
                and d.destination[0] == bob.iface]
    assert captured
    shown, before = len(incoming(bob)), direct_stats(bob)
    endpoints = {row["pid"]: row["endpoints"] for row in bob.call("peers")}[ann.pid]
    send_from_attacker(attack, bob, captured * 3, pause=0.01, source=(ann.iface, PORT))  # as if from Ann
    send_from_attacker(attack, bob, captured * 3, pause=0.01)  # from the attacker's own address
    time.sleep(1.0)
    after = direct_stats(bob)
    print(f"replayed {len(captured)} captured datagrams 6 times: {after['direct_duplicates'] - before['direct_duplicates']} "
          f"duplicates at Bob; Ann's endpoints at Bob {endpoints}")
    assert len(incoming(bob)) == shown
    assert after["direct_delivered"] == before["direct_delivered"]
    assert after["direct_duplicates"] > before["direct_duplicates"]
    assert len(bob.call("direct_history", {"pid": ann.pid})) == len(mids) + sum(
        1 for m in incoming(bob) if m["peer"] == ann.pid and not m["text"].startswith("to be replayed"))
    assert {row["pid"]: row["endpoints"] for row in bob.call("peers")}[ann.pid] == endpoints
    # Bob still writes to where Ann is.
    mid = bob.call("send_direct", {"pid": ann.pid, "text": "after the replay"})["mid"]
    wait_incoming(ann, "after the replay")
    bob.wait_for(lambda: "delivered" in statuses(bob, mid), what="delivered")

    # What Bob received is remembered across a restart: the same replay shows nothing then either.
    history = bob.call("direct_history", {"pid": ann.pid})
    bob = attack.restart(bob)
    send_from_attacker(attack, bob, captured, pause=0.01, source=(ann.iface, PORT))
    bob.wait_for(lambda: bob.call("stats")["direct_duplicates"] >= len(captured) // 2, timeout=5,
                 what="the replay, counted as duplicates")
    assert not incoming(bob)
    assert bob.call("direct_history", {"pid": ann.pid}) == history
