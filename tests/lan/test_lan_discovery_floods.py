"""Discovery under floods on a namespace LAN (issue 26, item 4): two real m2mc-peers (Ann, who
makes a group, and Bob, who has seen it but not joined) and an attacker host.

The attacker floods Bob with strangers' groups in two ways: validly signed descriptors from
fresh keys on the control channel, and raw mDNS announcements (no key needed) naming gids
nobody made.  Either way Ann's group, seen before the flood, must stay joinable, and what
Bob sends to fetch descriptors must stay within FETCH_BYTES_PER_SECOND.
"""

import shutil
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import pytest

from tests.testbed.lan import Lan, PeerProcess, send_from
from m2mc.middleware import crypto, gjlp, wire

pytestmark = pytest.mark.netns
TAP = str(Path(__file__).parents[1] / "testbed" / "udp_tap.py")
CONTROL = ("239.255.77.77", 47477)
STRANGER_GROUPS = 1_500  # descriptors of fresh keys' groups: more than gjlp.MAX_GROUPS
MDNS_ANNOUNCEMENTS = 3_000  # the flood
MDNS_PER_SECOND = 1_000
JOINED_WITHIN = 10.0  # seconds for Ann to list Bob once he joins
# One fetch ADV (at most MAX_FETCH gids) per FETCH_INTERVAL, whatever arrives.
MAX_FETCH_ADV_BYTES = 2_400  # an ADV of 64 gids and a short name, envelope and signature included
FETCH_BYTES_PER_SECOND = MAX_FETCH_ADV_BYTES / gjlp.FETCH_INTERVAL
# mDNS Bob sends while 3,000 bare PTR records arrive and for 10 s after: its resolutions are
# limited (middleware.discovery.RESOLVES_PER_SECOND); what is left is zeroconf's own browser
# queries, whose known-answer lists grow with the records cached (about 100-150 KB here).
MDNS_BYTES_WITHIN = 300_000


@pytest.fixture
def lan(tmp_path):
    lan = Lan(3)
    peers = []
    try:
        peers = [PeerProcess(h, a, tmp_path / n, n) for h, a, n in zip(lan.hosts, lan.addresses, ["Ann", "Bob"])]
        yield lan, peers
    finally:
        for peer in peers:
            peer.shutdown()
        lan.close()


def group_of(peer, gid):
    return next((g for g in peer.call("list_groups") if g["gid"] == gid), None)


def seen_verified(peer, gid):
    peer.wait_for(lambda: (group_of(peer, gid) or {}).get("verified"), what="the group, verified")


def joins_and_is_heard(ann, bob, gid):
    """Bob joins Ann's group; Ann lists him as a member."""
    response = bob.request("join_group", {"gid": gid})
    assert "error" not in response, f"join_group after the flood: {response['error']}"
    ann.wait_for(lambda: bob.pid in {m["pid"] for m in group_of(ann, gid)["members"]}, timeout=JOINED_WITHIN,
                 what="Bob in Ann's member list")


def absorbed(peer, before, count):
    """Wait until ``peer`` has taken in nearly all of ``count`` datagrams sent after ``before``."""
    peer.wait_for(lambda: peer.call("stats")["datagrams_in"] - before >= 0.95 * count, timeout=30,
                  what="the flood taken in")


def test_1500_strangers_descriptors_leave_a_group_seen_before_joinable(lan):
    net, (ann, bob) = lan
    gid = ann.call("create_group", {"desc": "Payroll"})["gid"]
    seen_verified(bob, gid)
    flood = []
    for i in range(STRANGER_GROUPS):
        stranger = crypto.Identity.generate()
        descriptor = wire.sign_descriptor(stranger, f"Payroll {i}", False, "", 0, 0, bytes(16), b"",
                                          f"239.255.{1 + i // 250}.{1 + i % 250}", 47477, 1_000 + i)
        own = wire.sign_member(stranger, descriptor.gid, "Mallory", 1, True)
        flood.append(wire.encode(stranger, wire.GroupsInfo((wire.GroupInfo(descriptor.gid, descriptor, (own,)),))))
    before = bob.call("stats")["datagrams_in"]
    started = time.monotonic()
    send_from(net.hosts[2], net.addresses[2], *CONTROL, flood)
    sent_in = time.monotonic() - started
    absorbed(bob, before, len(flood))
    stats = bob.call("stats")
    print(f"\n{len(flood)} descriptors sent in {sent_in:.2f} s; Bob knows {stats['groups_known']} groups, "
          f"evicted {stats.get('stranger_groups_evicted')} strangers' groups")
    assert stats["groups_known"] <= gjlp.MAX_GROUPS + gjlp.MAX_STRANGER_GROUPS
    joins_and_is_heard(ann, bob, gid)


MDNS_ATTACKER = r"""
import random, socket, sys, time
from zeroconf import DNSOutgoing, ServiceInfo, const
from m2mc.middleware import discovery

iface, count, per_second, bare = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "bare"
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
sock.bind((iface, 5353))
sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(iface))
sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 255)
rng = random.Random(26)
alphabet = "abcdefghijklmnopqrstuvwxyz234567"
start = time.monotonic()
for n in range(count):
    gid = "".join(rng.choice(alphabet) for _ in range(26))
    # Each announcement claims another address, so no per-address limit holds it back.
    address = f"10.{rng.randrange(1, 255)}.{rng.randrange(1, 255)}.{rng.randrange(1, 255)}"
    info = ServiceInfo(discovery.SERVICE_TYPE, f"Payroll {n}.{discovery.SERVICE_TYPE}",
                       addresses=[socket.inet_aton(address)], port=47477,
                       properties=discovery.txt_properties(gid, f"Payroll {n}", False, 3, "ffff"),
                       server=f"h{n}.local.")
    out = DNSOutgoing(const._FLAGS_QR_RESPONSE | const._FLAGS_AA)
    records = (info.dns_pointer(),) if bare else (info.dns_pointer(), info.dns_service(), info.dns_text(),
                                                   *info.dns_addresses())
    for record in records:
        out.add_answer_at_time(record, 0)
    for packet in out.packets():
        sock.sendto(packet, ("224.0.0.251", 5353))
    time.sleep(max(0.0, start + (n + 1) / per_second - time.monotonic()))
print("sent", flush=True)
"""


def test_3000_raw_mdns_announcements_leave_a_group_joinable_and_bound_the_fetches(lan, tmp_path):
    net, (ann, bob) = lan
    gid = ann.call("create_group", {"desc": "Payroll"})["gid"]
    seen_verified(bob, gid)
    seconds = MDNS_ANNOUNCEMENTS / MDNS_PER_SECOND
    window = seconds + 3 * gjlp.FETCH_INTERVAL
    capture = tmp_path / "control.bin"
    listener = subprocess.Popen(["ip", "netns", "exec", net.hosts[2], sys.executable, TAP, "listen",
                                 net.addresses[2], CONTROL[0], str(CONTROL[1]), str(window), str(capture)],
                                stdout=subprocess.PIPE, text=True)
    assert listener.stdout.readline().strip() == "listening"
    mdns_flood(net, "full")
    assert listener.wait(window + 30) == 0
    zeroconf_only = sum(1 for g in bob.call("list_groups") if g["sources"] == ["zeroconf"])
    fetch_bytes = 0
    for data in msgpack.unpackb(capture.read_bytes()):
        try:
            envelope = wire.decode(data)
        except wire.WireError:
            continue
        if envelope.sender == bob.pid and isinstance(envelope.message, wire.Adv) and envelope.message.gids:
            fetch_bytes += len(data)
    bound = FETCH_BYTES_PER_SECOND * window + MAX_FETCH_ADV_BYTES
    print(f"\nBob lists {zeroconf_only} zeroconf-only groups; sent {fetch_bytes} B of fetches in {window:.0f} s "
          f"(bound {bound:.0f} B)")
    assert zeroconf_only > 0, "the flood never reached Bob's zeroconf browser"
    joins_and_is_heard(ann, bob, gid)
    assert fetch_bytes <= bound


def mdns_flood(net, kind):
    """MDNS_ANNOUNCEMENTS announcements from the attacker: ``full`` (PTR, SRV, TXT, A) or ``bare`` (PTR only)."""
    attacker = subprocess.run(["ip", "netns", "exec", net.hosts[2], sys.executable, "-c", MDNS_ATTACKER,
                               net.addresses[2], str(MDNS_ANNOUNCEMENTS), str(MDNS_PER_SECOND), kind],
                              capture_output=True, text=True, timeout=120, cwd=str(Path(__file__).parents[2]))
    assert attacker.returncode == 0, attacker.stderr


def mdns_bytes_sent(host):
    """Bytes counted by the iptables rule on ``host``'s mDNS output (see the test)."""
    rules = subprocess.run(["ip", "netns", "exec", host, "iptables", "-nvxL", "OUTPUT"], capture_output=True,
                           text=True, check=True).stdout
    return next(int(line.split()[1]) for line in rules.splitlines() if "dpt:5353" in line)


def test_3000_bare_ptr_records_cost_few_mdns_queries(lan):
    if shutil.which("iptables") is None:
        pytest.fail("iptables is missing: run packaging/system-deps.sh (apt-get install iptables)")
    net, (ann, bob) = lan
    subprocess.run(["ip", "netns", "exec", net.hosts[1], "iptables", "-A", "OUTPUT", "-p", "udp", "--dport", "5353"],
                   check=True)
    gid = ann.call("create_group", {"desc": "Payroll"})["gid"]
    seen_verified(bob, gid)
    before = mdns_bytes_sent(net.hosts[1])
    mdns_flood(net, "bare")
    time.sleep(10)  # resolutions started by the flood run for up to 3 s each
    sent = mdns_bytes_sent(net.hosts[1]) - before
    print(f"\nBob sent {sent} B of mDNS (bound {MDNS_BYTES_WITHIN}); resolutions skipped: "
          f"{bob.call('stats').get('resolves_skipped')}")
    assert sent <= MDNS_BYTES_WITHIN
    joins_and_is_heard(ann, bob, gid)
