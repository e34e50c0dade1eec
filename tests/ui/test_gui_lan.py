"""The real window on a private namespace LAN: discover a group an m2mc-peer announced, confirm what is
verified of it (signed description, creator's name and fingerprint, member count), join, see the talk.

Once for an open group, once for a private one (a wrong passphrase refused in the dialog, then the right one).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ui.gui_check_support import read_event
from tests.testbed.lan import LoopbackHost, PeerProcess
from m2mc.middleware.types import short_fingerprint

pytestmark = pytest.mark.netns
CHECK = Path(__file__).with_name("gui_netns_check.py")



@pytest.mark.parametrize("passphrase", [None, "lunch is at noon"], ids=["open", "private"])
def test_window_discovers_joins_and_shows_the_tree(tmp_path, passphrase):
    host = LoopbackHost()
    ann = PeerProcess(host.name, "127.0.0.1", tmp_path / "ann", "Ann", extra=["--no-zeroconf"])
    gui = None
    try:
        create = {"desc": "GUI lunch"} if passphrase is None else {"desc": "GUI lunch", "passphrase": passphrase}
        gid = ann.call("create_group", create)["gid"]
        q = ann.call("send", {"gid": gid, "text": "Where is lunch?", "parent": None})["mid"]
        ann.call("send", {"gid": gid, "text": "Canteen?", "parent": q})
        env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
        args = [str(CHECK), str(tmp_path / "gui"), "GUI lunch"] + ([passphrase] if passphrase else [])
        gui = subprocess.Popen(["ip", "netns", "exec", host.name, sys.executable, *args], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        discovered = read_event(gui)
        assert discovered == {"step": "discovered", "gid": gid}
        confirm = read_event(gui)  # what the join dialog shows before its Join is pressed
        fingerprint = short_fingerprint(ann.call("whoami")["pid"])
        assert confirm == {"step": "confirm", "desc": "“GUI lunch”", "creator": f"Ann (key {fingerprint})",
                           "members": "1", "joined": False,
                           "kind": confirm["kind"]}, confirm
        assert confirm["kind"].startswith("private" if passphrase else "open")
        if passphrase is not None:
            refused = read_event(gui)
            assert refused == {"step": "refused", "error": "That passphrase does not open this group.", "still_open": True}
        joined = read_event(gui)
        assert joined["step"] == "joined"
        ann.wait_notification("member_joined", lambda p: p["gid"] == gid and p["name"] == "Gui")
        ann.call("send", {"gid": gid, "text": "live reply", "parent": q})
        gui.stdin.write("go\n")
        gui.stdin.flush()
        live = read_event(gui)
        assert ["live reply", "Where is lunch?"] in live["rows"]
        assert live["ann_online"]  # heard over the namespace LAN: the members pane says online
        if ["Where is lunch?", None] not in live["rows"]:
            pytest.xfail("member sync (issue 4) not in yet: a joiner does not get the history")
        assert ["Canteen?", "Where is lunch?"] in live["rows"]
        assert gui.wait(20) == 0
    finally:
        if gui is not None and gui.poll() is None:
            gui.kill()
        ann.shutdown()
        host.close()
