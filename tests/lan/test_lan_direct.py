"""Direct messages on the namespace LAN (issue 29), and the testbed tools those tests stand on.

- the NFQUEUE delayer holds the packets it is given for its delay and loses none;
- the bridge capture sees every datagram, unicast included;
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.testbed.capture import Capture
from tests.testbed.delayer import Delayer
from tests.testbed.lan import Lan

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
