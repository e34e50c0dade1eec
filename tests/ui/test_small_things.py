"""The smaller things of issue 45, each as a person meets it: the reply banner follows an edit of the
message it names, the reply target goes with its context (a closed thread, a file shared as the reply),
a new member shows online at once, and every menu's mnemonics are distinct."""

from pathlib import Path


from conftest import ANN, BOB, CAT, lunch_conversation, save_screenshot
from m2mc.middleware.types import Member


def open_lunch(qtbot, window, backend, members=(ANN, BOB, CAT)):
    me = Member(backend.pid, backend.name)
    history = lunch_conversation("") if CAT in members else lunch_conversation("")[:3]  # Ann's and Bob's
    view = backend.manager.inject_group("Travel & lunch", members=(*members, me), joined=True, history=history)
    backend.manager.pass_time(31)  # their beacons: online
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and window.current.loaded
                    and len(window.current.tree) == len(history))
    return window.current, view.gid


def test_the_reply_banner_follows_an_edit_of_the_message_it_answers(qtbot, window, backend):
    session, gid = open_lunch(qtbot, window, backend)
    first = lunch_conversation("")[0]
    window.compose_controller.reply_to(first.mid)
    assert "Did you visit Delhi?" in window.conversation.compose_box.reply_banner.label.text()
    edit = backend.manager.operation_message(gid, ANN, 10, "edit", first.mid, text="Did you visit Agra?")
    backend.manager.inject_messages(gid, [edit])
    qtbot.waitUntil(lambda: "Did you visit Agra?" in window.conversation.compose_box.reply_banner.label.text(), timeout=3000)


def test_a_reply_chosen_in_a_thread_goes_when_the_thread_closes(qtbot, window, backend):
    session, gid = open_lunch(qtbot, window, backend)
    q2 = lunch_conversation("")[1]
    window.conversation.open_thread(q2.mid)
    qtbot.waitUntil(lambda: session.thread is not None)
    answer = lunch_conversation("")[4]
    window.compose_controller.reply_to(answer.mid)
    assert window.compose_target.parent == answer.mid
    window.conversation.close_thread()
    assert window.compose_target.parent is None and not window.conversation.compose_box.reply_banner.isVisible()


def test_a_file_shared_as_a_reply_uses_the_target_up(qtbot, window, backend, tmp_path):
    session, gid = open_lunch(qtbot, window, backend)
    first = lunch_conversation("")[0]
    window.compose_controller.reply_to(first.mid)
    path = tmp_path / "menu.txt"
    path.write_text("dosa, idli")
    window.files_view.attach([str(path)])
    qtbot.waitUntil(lambda: any(m.parent == first.mid and "menu.txt" in m.text
                                for m in backend.manager.store.history(gid)), timeout=3000)
    assert window.compose_target.parent is None and not window.conversation.compose_box.reply_banner.isVisible()


def test_a_member_who_joins_shows_online_at_once(qtbot, window, backend):
    session, gid = open_lunch(qtbot, window, backend, members=(ANN, BOB))
    backend.manager.inject_member(gid, CAT)
    rows = lambda: [window.members_pane.member_list.item(i).text() for i in range(window.members_pane.member_list.count())]  # noqa: E731
    qtbot.waitUntil(lambda: "● Cat" in rows(), timeout=1500)  # the presence poll comes every 5 s


def test_every_menus_mnemonics_are_distinct(qtbot, window):
    for menu_action in window.menuBar().actions():
        letters = []
        for action in menu_action.menu().actions():
            text = action.text()
            if "&" in text.replace("&&", ""):
                letters.append(text[text.index("&") + 1].lower())
        assert len(letters) == len(set(letters)), (menu_action.text(), letters)


def test_downloads_go_to_a_folder_people_see_made_if_missing(tmp_path):
    from m2mc.app.chat import downloads_folder

    wanted = tmp_path / "home" / "Downloads"
    assert downloads_folder(None, str(wanted)) == wanted and wanted.is_dir()
    assert downloads_folder(None, "") is None
    assert not Path(str(downloads_folder(None, str(wanted)))).name.startswith(".")


def test_the_first_notice_fits_at_800_px_and_any_cut_off_message_is_one_click_away(qtbot, window, backend):
    from PySide6.QtWidgets import QMessageBox

    from m2mc.ui.panes.status import ALONE_STATUS
    from real_input import XDOTOOL, click

    window.resize(800, 600)
    qtbot.waitUntil(lambda: window.width() == 800)
    window.start()
    window.status_pane.show_alone(True)
    qtbot.wait(50)
    save_screenshot(window, "status-800.png")
    assert window.status_pane.address_label.text().startswith("Connected on ")  # the network state, as the app shows it
    assert window.statusBar().currentMessage() == ALONE_STATUS and window.status_pane.fits()
    long = "Could not export to /home/someone/a/very/long/path/that/goes/on/and/on/m2mc-Travel-and-lunch.jsonl: disk full"
    window.show_status(long, 0)
    qtbot.wait(50)
    assert not window.status_pane.fits() and window.statusBar().toolTip() == long
    if XDOTOOL:
        click(qtbot, window.statusBar(), window.statusBar().rect().center() - window.statusBar().rect().center() / 2)
    else:
        window.status_pane.show_in_full()
    qtbot.waitUntil(lambda: isinstance(window.status_pane.status_box, QMessageBox) and window.status_pane.status_box.isVisible())
    assert window.status_pane.status_box.text() == long
