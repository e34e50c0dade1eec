"""The app after a member's operation at the counter limit (issue 26, item 2), on a real window (Xvfb).

The in-memory backend applies the middleware's own operation rules, so this is
what a member sees when the network delivers the same hostile operation.
"""

from PySide6.QtCore import Qt

from conftest import ANN, BOB, CAT, lunch_conversation
from m2mc.middleware.chatops import encode
from m2mc.middleware.obg import MAX_COUNTER
from m2mc.middleware.types import ChatMessage, Member



def set_topic_in_header(qtbot, window, text):
    window.conversation.topic_edit.setFocus(Qt.FocusReason.MouseFocusReason)  # the user clicks it: the focus model lets it take keys
    window.conversation.topic_edit.selectAll()
    qtbot.keyClicks(window.conversation.topic_edit, text)
    qtbot.keyClick(window.conversation.topic_edit, Qt.Key.Key_Return)


def test_the_topic_is_set_after_a_hostile_counter_and_a_refused_operation_is_shown(qtbot, window, backend, monkeypatch):
    me = Member(backend.pid, backend.name)
    manager = backend.manager
    gid = manager.inject_group("Travel & lunch", members=(ANN, BOB, CAT, me), joined=True,
                               history=lunch_conversation("")).gid
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and window.current.loaded)
    hostile = encode("topic", None, MAX_COUNTER - 1, "Bob owns the topic")
    manager.inject_messages(gid, [ChatMessage(gid, (BOB.pid, 60), None, BOB.name, hostile, 0, 0)])
    qtbot.waitUntil(lambda: window.conversation.topic_edit.text() == "Bob owns the topic")

    set_topic_in_header(qtbot, window, "Friday lunch plans")
    qtbot.waitUntil(lambda: manager.topic(gid) == ("Friday lunch plans", backend.pid))
    qtbot.waitUntil(lambda: window.current.topic == "Friday lunch plans")

    # Should the core ever refuse our own operation, the user reads why; nothing is sent.
    sent_before = len(manager.history(gid))
    monkeypatch.setattr(manager.core.ops(gid).core, "stamp", lambda *args: (None, MAX_COUNTER))
    set_topic_in_header(qtbot, window, "never sent")
    qtbot.waitUntil(lambda: "counter out of range" in window.statusBar().currentMessage())
    assert window.statusBar().currentMessage().startswith("Topic not set: topic refused")
    assert manager.topic(gid)[0] == "Friday lunch plans" and len(manager.history(gid)) == sent_before
