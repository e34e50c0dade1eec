"""The portable path on a namespace LAN: netif's two implementations see a link go and come back
alike, and m2mc-peers with every fallback forced (M2MC_PORTABLE=1, M2MC_PURE_PYTHON=1) find each
other, converse and catch up after a cut link."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.testbed.lan import Lan, PeerProcess

pytestmark = pytest.mark.netns

FORCED = {"M2MC_PORTABLE": "1", "M2MC_PURE_PYTHON": "1"}

LINK_STATE = """
import json, sys
from m2mc.middleware.netif import LinuxNetwork, PortableNetwork
print(json.dumps({calls.name: calls.link_is_up(sys.argv[1]) for calls in (LinuxNetwork(), PortableNetwork(windows=False))}))
"""

DEFAULT_INTERFACE = "from m2mc.middleware import transport; print(transport.resolve_interface(None))"


@pytest.fixture
def lan2():
    lan = Lan(2)
    yield lan
    lan.close()


def in_host(lan: Lan, index: int, script: str, *args: str, env: dict | None = None) -> str:
    return subprocess.run(["ip", "netns", "exec", lan.hosts[index], sys.executable, "-c", script, *args],
                          env={**os.environ, **(env or {})}, capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip()


def veth(lan: Lan, index: int) -> str:
    return f"v{lan.prefix}{index + 1}"


def link_seen(lan: Lan, up: bool) -> dict:
    """Both implementations' view of host 0's link, once they agree on ``up`` (or after 5 s)."""
    deadline = time.monotonic() + 5
    while True:
        seen = json.loads(in_host(lan, 0, LINK_STATE, veth(lan, 0)))
        if set(seen.values()) == {up} or time.monotonic() > deadline:
            return seen
        time.sleep(0.1)


def test_both_implementations_see_the_link_go_and_come_back(lan2):
    assert link_seen(lan2, True) == {"linux": True, "portable": True}
    lan2.set_link(0, False)  # the cable out, at the switch
    assert link_seen(lan2, False) == {"linux": False, "portable": False}
    lan2.set_link(0, True)
    assert link_seen(lan2, True) == {"linux": True, "portable": True}
    subprocess.run(["ip", "-n", lan2.hosts[0], "link", "set", veth(lan2, 0), "down"], check=True)  # switched off here
    assert link_seen(lan2, False) == {"linux": False, "portable": False}


def test_both_implementations_choose_the_lan_interface_by_default(lan2):
    assert in_host(lan2, 0, DEFAULT_INTERFACE) == lan2.addresses[0]
    assert in_host(lan2, 0, DEFAULT_INTERFACE, env={"M2MC_PORTABLE": "1"}) == lan2.addresses[0]


def loaded_libraries(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_peers_with_every_fallback_forced_converse_and_catch_up_after_a_cut(lan2, tmp_path, monkeypatch):
    for name, value in FORCED.items():
        monkeypatch.setenv(name, value)  # the peers inherit them
    # Ann names her interface (resolved by ifaddr's names), Bob gives his address.
    ann = PeerProcess(lan2.hosts[0], veth(lan2, 0), tmp_path / "ann", "Ann")
    bob = PeerProcess(lan2.hosts[1], lan2.addresses[1], tmp_path / "bob", "Bob")
    try:
        for peer in (ann, bob):  # only netif's portable path imports psutil (its link watch polls it)
            assert "_psutil_linux" in loaded_libraries(peer.proc.pid), f"{peer.name} did not take the portable path"
        gid = ann.call("create_group", {"desc": "Portable lunch"})["gid"]
        bob.wait_for(lambda: any(g["gid"] == gid and {"gjlp", "zeroconf"} <= set(g["sources"])
                                 for g in bob.call("list_groups")), timeout=20, what="the group via GJLP and zeroconf")
        bob.call("join_group", {"gid": gid})
        ann.wait_notification("member_joined", lambda p: p["gid"] == gid and p["name"] == "Bob")
        question = ann.call("send", {"gid": gid, "text": "pizza?", "parent": None})["mid"]
        bob.wait_for(lambda: bob.delivered(gid), what="Ann's message")
        bob.call("send", {"gid": gid, "text": "yes!", "parent": question})
        ann.wait_for(lambda: len(ann.delivered(gid)) == 2, what="Bob's reply")

        lan2.set_link(1, False)
        time.sleep(1)  # Bob's link watch (psutil, every 0.5 s) sees it go
        for i in range(20):
            ann.call("send", {"gid": gid, "text": f"while Bob is away {i}", "parent": question})
        lan2.set_link(1, True)
        bob.wait_for(lambda: len(bob.delivered(gid)) == 22, timeout=30, what="what Ann sent while he was away")
        assert ([m["text"] for m in bob.call("history", {"gid": gid})]
                == [m["text"] for m in ann.call("history", {"gid": gid})])
        bob.wait_for(lambda: "network back: resynchronising every group" in bob.stderr_path.read_text(), what="the network watch")
    finally:
        for peer in (ann, bob):
            peer.shutdown()


@pytest.mark.parametrize("env", [{}, FORCED], ids=["posix", "forced"])
def test_requests_from_a_file_on_stdin_are_all_answered(lan2, tmp_path, env):
    """``m2mc-peer < requests.jsonl`` stopped with "ValueError: Pipe transport is for pipes/sockets
    only." before a request was read: no loop watches a regular file, so a thread reads it, as
    it reads a pipe on Windows (and everywhere with M2MC_PORTABLE=1)."""
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps({"jsonrpc": "2.0", "id": i, "method": "whoami"}) + "\n" for i in range(50)))
    with requests.open("rb") as stdin:
        done = subprocess.run(["ip", "netns", "exec", lan2.hosts[0], sys.executable, "-m", "m2mc.app.peer",
                               "--iface", lan2.addresses[0], "--no-zeroconf", "--data-dir", str(tmp_path / "data"),
                               "--name", "Ann"], stdin=stdin, env={**os.environ, **env}, capture_output=True,
                              text=True, timeout=60)
    answers = [json.loads(line) for line in done.stdout.splitlines() if '"id"' in line]
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(answer["id"] for answer in answers) == list(range(50))
    assert all(answer["result"]["name"] == "Ann" for answer in answers), answers[0]
