"""File → Add peer by address…, with real keys (issue 45 point 3): a computer's name is resolved and the
peer's answer named, an IPv6 address is refused with its reason, and an address where nobody answers
says so, each in the dialog, which stays open until the peer has answered."""

import pytest

from conftest import BOB, activate, save_screenshot
from real_input import XDOTOOL, keys, type_text

pytestmark = pytest.mark.skipif(XDOTOOL is None, reason="xdotool missing (packaging/system-deps.sh)")


def open_dialog(qtbot, window):
    activate(qtbot, window)
    joins = window.join_controller
    joins.add_peer_dialog = None
    window.menus.add_peer_action.trigger()
    qtbot.waitUntil(lambda: joins.add_peer_dialog is not None and joins.add_peer_dialog.isVisible())
    dialog = joins.add_peer_dialog
    activate(qtbot, dialog)
    qtbot.waitUntil(dialog.address_edit.hasFocus)
    return dialog


def ask(qtbot, dialog, address):
    keys(qtbot, "ctrl+a")
    type_text(qtbot, address)
    keys(qtbot, "Return")


def test_add_peer_by_name_ipv6_and_nobody_there_each_answered_in_the_dialog(qtbot, window, backend):
    bob = backend.manager.lan.endpoints[backend.manager.peer(BOB).pid]
    backend.manager.hosts["bob-pc"] = bob.host
    dialog = open_dialog(qtbot, window)

    ask(qtbot, dialog, "fe80::1:47477")
    qtbot.waitUntil(dialog.error_label.isVisible)
    assert "IPv6" in dialog.error_label.text() and dialog.isVisible()

    ask(qtbot, dialog, "nobody-here:47477")
    qtbot.waitUntil(lambda: "nobody-here" in dialog.error_label.text() and dialog.error_label.isVisible())

    ask(qtbot, dialog, "10.0.0.9:47477")
    qtbot.waitUntil(lambda: "Nobody answered at 10.0.0.9:47477 within 10 s" in dialog.error_label.text(), timeout=5000)
    assert dialog.isVisible() and dialog.buttons.isEnabled()
    save_screenshot(dialog, "add-peer-nobody-answered.png")

    ask(qtbot, dialog, f"bob-pc:{bob.port}")
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=5000)
    assert dialog.answer == {"endpoint": str(bob), "pid": BOB.pid, "name": "Bob"}
    qtbot.waitUntil(lambda: window.statusBar().currentMessage().startswith(f"Bob answered at {bob}"))


def test_m2mc_peers_add_peer_answers_once_the_peer_answered_and_an_error_when_nobody_does():
    """The JSON-RPC method over the in-memory LAN's GroupManager (its virtual clock runs on while it
    waits): a plain success for an address where nobody listens told a script nothing."""
    import asyncio

    from m2mc.app.peer import APP_ERROR, INVALID_PARAMS, JsonRpcPeer
    from m2mc.ui.memory_backend import MemoryManager

    manager = MemoryManager(lambda _event: None, name="Bot")
    bob = manager.lan.endpoints[manager.peer(BOB).pid]
    manager.hosts["bob-pc"] = bob.host
    rpc = JsonRpcPeer(lambda _line: None)
    rpc.manager = manager.manager  # the real GroupManager, on the LAN's virtual-time loop

    async def call(params):
        response = rpc.handle_request({"jsonrpc": "2.0", "id": 1, "method": "add_peer", "params": params})
        return await response if isinstance(response, asyncio.Future) else response

    async def calls():
        return [await call({"address": "10.0.0.9:47477"}), await call({"address": f"bob-pc:{bob.port}"}),
                await call({"address": "[::1]:47477"}), await call({"address": "10.0.0.9", "wait": 99})]

    nobody, named, ipv6, bad_wait = manager.lan.loop.complete(calls())
    assert nobody["error"] == {"code": APP_ERROR, "message": "Nobody answered at 10.0.0.9:47477 within 10 s"}
    assert named["result"] == {"endpoint": str(bob), "pid": BOB.pid, "name": "Bob"}
    assert ipv6["error"]["code"] == APP_ERROR and "IPv6" in ipv6["error"]["message"]
    assert bad_wait["error"]["code"] == INVALID_PARAMS
