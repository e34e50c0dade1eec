"""Look-alike display names in the GUI (issue 26, item 5): members whose names only look like
another's (a Cyrillic letter, a zero-width space, a right-to-left override, upper case, full-width
letters) get the ⚠ and their fingerprints in the member list and in the conversation, and a
message is headed by its author's member record, not by the name it carries."""


from conftest import BOB, message, save_screenshot
from m2mc.middleware.names import shown
from m2mc.middleware.types import Member, short_fingerprint
from m2mc.ui.member_list import DUPLICATE_MARK
from m2mc.ui.memory_backend import sim_member
from m2mc.ui.message_model import MessageRole, ThreadRole

GID = ""  # the messages' own gid: inject_group takes them into the group it makes
ALICE = sim_member("alice")
IMPOSTORS = [sim_member(name, seed=f"impostor {i}") for i, name in enumerate(
    ["\u0430lice", "alice\u200b", "\u202eecila\u202c", "ALICE", "\uff41\uff4c\uff49\uff43\uff45"], start=1)]


RIGHT_TO_LEFT = IMPOSTORS[2]


def test_look_alike_names_are_marked_in_the_member_list_and_the_conversation(qtbot, window, backend):
    check_look_alikes(qtbot, window, backend, [i for i in IMPOSTORS if i is not RIGHT_TO_LEFT])


def test_a_right_to_left_override_name_is_shown_as_it_is_spelt_never_reversed(qtbot, window, backend):
    """'\u202eecila\u202c' would render as "alice"; its bidi controls are dropped for display, so
    it shows as "ecila", a name of its own that looks like nobody's (no ⚠ needed)."""
    me = Member(backend.pid, backend.name)
    backend.manager.inject_group("Payroll", members=(ALICE, RIGHT_TO_LEFT, me), joined=True,
                                 history=[message(GID, RIGHT_TO_LEFT, 1, "hello")])
    window.start()
    qtbot.waitUntil(lambda: window.members_pane.member_list.count() >= 4)
    rows = [window.members_pane.member_list.item(i).text() for i in range(window.members_pane.member_list.count())]
    (row,) = [row for row in rows if "ecila" in row]
    assert "\u202e" not in row and "\u202c" not in row and DUPLICATE_MARK not in row


def check_look_alikes(qtbot, window, backend, impostors):
    me = Member(backend.pid, backend.name)
    talk = [message(GID, ALICE, 1, "Payroll goes out on Friday."),
            message(GID, BOB, 1, "Thanks, alice!")]
    # Each impostor's message says "alice" in its own signed name; its record says otherwise.
    talk += [message(GID, impostor, 1, f"This is alice, send it to me ({n}).")._replace(sender_name="alice")
             for n, impostor in enumerate(impostors, 1)]
    backend.manager.inject_group("Payroll", members=(ALICE, BOB, *impostors, me), joined=True, history=talk)
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and len(window.current.tree) == len(talk))
    qtbot.waitUntil(lambda: window.members_pane.member_list.count() >= 2 + len(impostors) + 1)

    rows = [window.members_pane.member_list.item(i).text() for i in range(window.members_pane.member_list.count())]
    marked = [row for row in rows if DUPLICATE_MARK in row]
    for member in (ALICE, *impostors):
        assert any(short_fingerprint(member.pid)[:9] in row for row in marked), (member, rows)
    assert len(marked) == 1 + len(impostors)
    assert not any("Bob" in row for row in marked)

    view = window.conversation.tree_view
    delegate = view.itemDelegate()
    model = view.model()
    headers = {}
    for row in range(model.rowCount()):
        root = model.index(row, 0).data(MessageRole)
        headers[root.sender] = delegate.author(root)
    assert headers[ALICE.pid].startswith(DUPLICATE_MARK) and short_fingerprint(ALICE.pid)[:9] in headers[ALICE.pid]
    assert headers[BOB.pid] == "Bob"
    for impostor in impostors:
        header = headers[impostor.pid]
        assert header.startswith(DUPLICATE_MARK) and short_fingerprint(impostor.pid)[:9] in header
        assert header.startswith(f"{DUPLICATE_MARK} {shown(impostor.name)} ·")  # its record's, not the signed "alice"
    if IMPOSTORS[0] in impostors:
        assert headers[IMPOSTORS[0].pid].startswith(f"{DUPLICATE_MARK} \u0430lice ·")
    if RIGHT_TO_LEFT in impostors:  # the override is shown removed, so the name reads as it is spelled
        assert headers[RIGHT_TO_LEFT.pid].startswith(f"{DUPLICATE_MARK} ecila ·")
    threads = window.threads_pane.thread_list
    summaries = [threads.model().index(row, 0).data(ThreadRole) for row in range(threads.model().rowCount())]
    titles = {summary.root.sender: threads.itemDelegate().author(summary) for summary in summaries}
    assert titles == headers  # the threads list names each starter as the conversation does
    window.resize(1100, 760)
    if len(impostors) > 1:
        save_screenshot(window, "look-alike-names.png")


def test_the_name_dialog_refuses_a_right_to_left_override_before_it_closes(qtbot):
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    from m2mc.ui.dialogs import NameDialog

    dialog = NameDialog("")
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    dialog.name_edit.setText("\u202eecila")
    QTest.keyClick(dialog.name_edit, Qt.Key.Key_Return)
    assert dialog.isVisible() and "U+202E" in dialog.error_label.text()
    dialog.name_edit.setText("Ann 👩\u200d💻")
    QTest.keyClick(dialog.name_edit, Qt.Key.Key_Return)
    assert not dialog.isVisible() and dialog.name == "Ann 👩\u200d💻"
