"""The real window with the real middleware on a private namespace LAN: a file offered by an m2mc-peer
downloads by itself and shows done in its row; a file the window shares reaches the peer, its hash checked."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.testbed.lan import Lan, PeerProcess
from tests.ui.gui_check_support import read_event

pytestmark = pytest.mark.netns
CHECK = Path(__file__).with_name("gui_files_check.py")


def sha256_of(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_window_downloads_an_offer_by_itself_and_shares_one(tmp_path):
    offered = tmp_path / "agenda.pdf"
    offered.write_bytes(os.urandom(700_000))  # three chunks, well under the auto-download size
    shared = tmp_path / "minutes.txt"
    shared.write_bytes(b"decided: lunch at noon\n" * 5000)
    with Lan(2) as lan:
        ann = PeerProcess(lan.hosts[0], lan.addresses[0], tmp_path / "ann", "Ann", extra=["--no-zeroconf"])
        gui = None
        try:
            gid = ann.call("create_group", {"desc": "GUI files"})["gid"]
            env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
            gui = subprocess.Popen(["ip", "netns", "exec", lan.hosts[1], sys.executable, str(CHECK),
                                    str(tmp_path / "gui"), lan.addresses[1], "GUI files", str(shared)],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=env)
            joined = read_event(gui)
            assert joined == {"step": "joined", "gid": gid, "ok": True}, joined
            ann.wait_notification("member_joined", lambda p: p["gid"] == gid and p["name"] == "Gui", timeout=30)
            mid = ann.call("send_file", {"gid": gid, "path": str(offered)}, timeout=30)["mid"]
            gui.stdin.write(mid + "\n")
            gui.stdin.flush()
            downloaded = read_event(gui)
            assert downloaded["shown"] and downloaded["path"], downloaded
            assert sha256_of(downloaded["path"]) == sha256_of(offered)
            assert downloaded["status"] == "Downloaded" and downloaded["buttons"] == ["Open", "Show in folder"]

            own = read_event(gui)["mid"]
            assert own
            ann.wait_for(lambda: any(m["mid"] == own for m in ann.delivered(gid)), timeout=30, what="the offer")
            ann.call("fetch_file", {"gid": gid, "mid": own})
            ann.wait_for(lambda: next(r for r in ann.call("files", {"gid": gid}) if r["mid"] == own)["state"] == "done",
                         timeout=30, what="the shared file fetched")
            row = next(r for r in ann.call("files", {"gid": gid}) if r["mid"] == own)
            assert sha256_of(row["path"]) == sha256_of(shared) and row["name"] == "minutes.txt"
            gui.stdin.write("done\n")
            gui.stdin.flush()
            assert gui.wait(20) == 0, gui.stderr.read()[-3000:]
        finally:
            if gui is not None and gui.poll() is None:
                gui.kill()
            ann.shutdown()
