"""The real window through an address change on the namespace LAN: its status bar says
"Connected on <interface> · <address>", then "Reconnecting on <interface> (<new address>)…", then
connected on the new address.  With its interface gone it says "Offline", a message written then
shows "queued", and once the interface is back the mark goes and the message reaches a peer."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ui.gui_check_support import read_event
from tests.testbed.lan import Lan, PeerProcess

pytestmark = pytest.mark.netns
CHECK = Path(__file__).with_name("gui_roaming_check.py")


def test_the_status_bar_says_connected_reconnecting_and_connected_through_an_address_change(tmp_path):
    with Lan(2) as lan:
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
        gui = subprocess.Popen(["ip", "netns", "exec", lan.hosts[1], sys.executable, str(CHECK), str(tmp_path / "gui")],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            device, old, new = f"v{lan.prefix}2", lan.addresses[1], f"{lan.subnet}.77"
            connected = read_event(gui)
            assert connected["visible"] and connected["text"] == f"Connected on {device} · {old}:47477", connected
            for args in (["del", f"{old}/24"], ["add", f"{new}/24"]):
                subprocess.run(["ip", "-n", lan.hosts[1], "addr", *args, "dev", device], check=True)
            gui.stdin.write("changed\n")
            gui.stdin.flush()
            moved = read_event(gui)
            assert moved["ok"], moved
            shown = moved["shown"]
            reconnecting = f"Reconnecting on {device} ({new})…"
            assert reconnecting in shown and shown[-1] == f"Connected on {device} · {new}:47477", shown
            assert shown.index(reconnecting) < len(shown) - 1

            gid = read_event(gui)["gid"]
            ann = PeerProcess(lan.hosts[0], lan.addresses[0], tmp_path / "ann", "Ann", extra=["--no-zeroconf"])
            ann.wait_notification("group_discovered", lambda p: p["gid"] == gid, timeout=30)
            ann.call("join_group", {"gid": gid}, timeout=30)
            subprocess.run(["ip", "-n", lan.hosts[1], "link", "set", device, "down"], check=True)  # Wi-Fi off
            gui.stdin.write("offline\n")
            gui.stdin.flush()
            offline = read_event(gui)
            assert offline["text"].startswith("Offline: no network") and offline["queued"] == 1, offline
            subprocess.run(["ip", "-n", lan.hosts[1], "link", "set", device, "up"], check=True)
            gui.stdin.write("back\n")
            gui.stdin.flush()
            back = read_event(gui)
            assert back["ok"] and back["queued"] == 0, back
            ann.wait_for(lambda: any(m["text"] == "written offline" for m in ann.delivered(gid)), timeout=15,
                         what="the message written offline")
            gui.stdin.write("done\n")
            gui.stdin.flush()
            ann.shutdown()
        finally:
            gui.kill()
            gui.wait()
