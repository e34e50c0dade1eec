"""The real window on a namespace LAN, with a GroupManager underneath: a direct message from an m2mc-peer
shows as a conversation with an unread badge, a click reads it (the peer gets its read receipt), keys
answer it, and the answer's mark goes delivered, then read once the peer reads it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from m2mc.middleware.types import key_fingerprint
from tests.testbed.lan import Lan, PeerProcess
from tests.ui.gui_check_support import read_event

pytestmark = pytest.mark.netns
CHECK = Path(__file__).with_name("gui_direct_check.py")


def test_window_gets_reads_and_answers_a_direct_message_and_sees_it_read(tmp_path):
    with Lan(2) as lan:
        ann = PeerProcess(lan.hosts[0], lan.addresses[0], tmp_path / "ann", "Ann", extra=["--no-zeroconf"])
        gui = None
        try:
            gid = ann.call("create_group", {"desc": "Build"})["gid"]
            env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
            gui = subprocess.Popen(["ip", "netns", "exec", lan.hosts[1], sys.executable, str(CHECK),
                                    str(tmp_path / "gui"), lan.addresses[1], gid],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=env)
            joined = read_event(gui)
            assert joined["joined"], joined
            gui_pid = joined["pid"]
            ann.wait_notification("member_joined", lambda p: p["gid"] == gid, timeout=30)
            sent = ann.call("send_direct", {"pid": gui_pid, "text": "the build is broken"})["mid"]

            incoming = read_event(gui)
            assert incoming["rows"] and "Ann" in incoming["rows"][0] and incoming["unread"] == 1, incoming
            answered = read_event(gui)
            assert answered["read"] and answered["delivered"], answered
            assert key_fingerprint(ann.pid) in answered["fingerprint"] and "Ann" in answered["heading"]
            ann.wait_notification("direct_status", lambda p: p["mid"] == sent and p["status"] == "read", timeout=30)
            answer = ann.wait_notification("direct_delivered", lambda p: p["text"] == "on it", timeout=30)
            assert answer["parent"] is None and not answer["outgoing"]
            ann.call("mark_direct_read", {"pid": gui_pid, "mid": answer["mid"]})
            gui.stdin.write("go\n")
            gui.stdin.flush()
            assert read_event(gui) == {"step": "read", "read": True}
            assert gui.wait(20) == 0
        finally:
            if gui is not None and gui.poll() is None:
                gui.kill()
                gui.wait()
            ann.shutdown()
