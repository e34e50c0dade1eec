"""The real window on a namespace LAN that carries neither multicast nor broadcast: it says why it finds
nobody, refuses a bad address, joins from an invite and marks the inviter as reached directly."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.testbed.lan import Lan, PeerProcess

pytestmark = pytest.mark.netns
CHECK = Path(__file__).with_name("gui_reach_check.py")


def read_event(proc):
    line = proc.stdout.readline()
    assert line, f"the GUI check ended early: {proc.stderr.read()[-3000:]}"
    return json.loads(line)


def test_window_without_multicast_says_why_joins_from_an_invite_and_marks_the_member_reached_directly(tmp_path):
    with Lan(2) as lan:
        for i in range(2):
            for chain in ("INPUT", "OUTPUT"):
                for rule in (["-d", "224.0.0.0/4"], ["-m", "addrtype", "--dst-type", "BROADCAST"]):
                    subprocess.run(["ip", "netns", "exec", lan.hosts[i], "iptables", "-A", chain, *rule, "-j",
                                    "DROP"], check=True, capture_output=True)
        ann = PeerProcess(lan.hosts[0], lan.addresses[0], tmp_path / "ann", "Ann", extra=["--no-zeroconf"])
        gui = None
        try:
            gid = ann.call("create_group", {"desc": "Lunch"})["gid"]
            invite = ann.call("invite", {"gid": gid})["invite"]
            env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
            gui = subprocess.Popen(["ip", "netns", "exec", lan.hosts[1], sys.executable, str(CHECK),
                                    str(tmp_path / "gui"), lan.addresses[1], invite],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            alone = read_event(gui)
            assert alone["shown"] and "multicast may be blocked" in alone["status"], alone
            assert "invite" in alone["notice"] and "address" in alone["notice"]
            bad = read_event(gui)
            assert bad["status"].startswith("Bad address:") and "IPv4" in bad["status"], bad
            joined = read_event(gui)
            assert joined == {"step": "joined", "joined": True, "found": "“Lunch”"}, joined
            members = read_event(gui)
            assert members["direct"] and members["alone_gone"], members
            ann.wait_for(lambda: any(len(g["members"]) == 2 for g in ann.call("list_groups")), what="Gui joined")
        finally:
            if gui is not None:
                gui.kill()
                gui.wait()
            ann.shutdown()
