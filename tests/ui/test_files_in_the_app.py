"""Files in the app (issue 30 point 5), on real windows (Xvfb), by real clicks and keys.

The in-memory backend posts real offers (hashed as send_file does) and refuses fetches with the
middleware's own checks; a test moves a download on by the bytes it chooses
(ui.memory_files.MemoryFiles.advance), so every state shows as the middleware tells it.
"""

from pathlib import Path

from PySide6.QtCore import QEvent, QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QGuiApplication, QHelpEvent, QImage
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QFileDialog, QMenu, QToolTip

from conftest import ANN, BOB, CAT, activate, lunch_conversation, save_screenshot
from m2mc.middleware.files import is_offer_text, parse_offer
from m2mc.middleware.types import Member
from m2mc.ui.delegate import root_text
from m2mc.ui.files_view import FILES_IN_GROUPS_ONLY
from m2mc.ui.message_model import MessageRole, ThreadRole

GID = ""


def open_group(qtbot, window, backend, history=()):
    me = Member(backend.pid, backend.name)
    backend.manager.inject_group("Holiday", members=(ANN, BOB, CAT, me), joined=True, history=list(history))
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and window.current.loaded)
    return window.current


def drop_file(window, on, path: Path) -> QDragEnterEvent:
    """``path`` dragged onto the widget ``on`` and dropped there; returns the drag's entry (accepted or not).
    A drag comes in first: Qt delivers the drop where the entry was accepted."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    centre = on.mapTo(window, on.rect().center())
    enter = QDragEnterEvent(centre, Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(window, enter)
    QApplication.sendEvent(window, QDropEvent(QPointF(centre), Qt.DropAction.CopyAction, mime,
                                              Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier))
    return enter


def paste_file(qtbot, compose, path: Path) -> None:
    """``path`` copied (as a file manager copies it: its URL and its path as text) and pasted into ``compose``."""
    copied = QMimeData()
    copied.setUrls([QUrl.fromLocalFile(str(path))])
    copied.setText(str(path))
    QGuiApplication.clipboard().setMimeData(copied)
    compose.setFocus()
    qtbot.keyClick(compose, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)


def picture(tmp_path, name="beach.png", size=(800, 600)):
    image = QImage(*size, QImage.Format.Format_RGB32)
    image.fill(Qt.GlobalColor.darkCyan)
    path = tmp_path / name
    assert image.save(str(path))
    return path


def row_index(window, session, mid):
    index = session.tree_model.index_for(mid)
    model = window.conversation.tree_view.model()
    return model.mapFromSource(index) if hasattr(model, "mapFromSource") else index


def strip(window, session, mid):
    index = row_index(window, session, mid)
    window.conversation.tree_view.scrollTo(index)
    return window.conversation.tree_view.itemDelegate()._geometry(window.conversation.tree_view.visualRect(index), index)["file"]


def click_button(qtbot, window, session, mid, label):
    found = strip(window, session, mid)
    rects = {text: rect for rect, _action, text in found.buttons}
    assert label in rects, f"no {label} button; the strip has {list(rects)} ({found.status})"
    qtbot.mouseClick(window.conversation.tree_view.viewport(), Qt.MouseButton.LeftButton, pos=rects[label].center())


def advance(qtbot, window, backend, session, mid, count=None):
    """The download gets ``count`` more bytes (None: the rest), and the window hears of it."""
    files = backend.manager.files
    files.advance(session.gid, mid, count)
    told = files.transfers[(session.gid, mid)]
    qtbot.waitUntil(lambda: (window.files_view.states[(session.gid, mid)].bytes, window.files_view.states[
        (session.gid, mid)].state) == (told.bytes, told.state))


def offered(qtbot, window, session, backend, path, member=ANN):
    mid = backend.manager.inject_file(session.gid, member, path)
    qtbot.waitUntil(lambda: session.tree.message(mid) is not None)
    return mid


def test_an_offer_row_downloads_by_click_with_progress_rate_cancel_open_and_a_thumbnail(qtbot, window, backend,
                                                                                        tmp_path, monkeypatch):
    backend.manager.files.auto_download = 0  # this one waits for the click
    backend.manager.files.download_dir = tmp_path / "downloads"
    session = open_group(qtbot, window, backend, lunch_conversation(GID))
    notified, opened = [], []
    monkeypatch.setattr(window.notifier, "notify", lambda title, body, **_how: notified.append((title, body)))
    window.files_view.open_url = lambda url: opened.append(url.toLocalFile())
    now = [100.0]
    window.files_view.clock = lambda: now[0]
    mid = offered(qtbot, window, session, backend, picture(tmp_path))
    size = (tmp_path / "beach.png").stat().st_size

    # the row reads as the file, not as the offer's JSON, in the conversation and in the Threads pane
    layout = window.conversation.tree_view.itemDelegate().body_layout(row_index(window, session, mid))
    assert layout.text().startswith("\U0001F4CE beach.png · ") and layout.text().endswith(" · image/png")
    assert "{" not in layout.text()
    assert row_index(window, session, mid).data(Qt.ItemDataRole.DisplayRole) == layout.text()  # screen readers
    threads = window.threads_pane.thread_list.model()
    roots = lambda: [root_text(threads.index(row, 0).data(ThreadRole).root, 200)  # noqa: E731
                     for row in range(threads.rowCount())]
    qtbot.waitUntil(lambda: any(text.startswith("\U0001F4CE beach.png · ") for text in roots()))  # from the store
    window.compose_controller.reply_to(mid)  # the reply banner names it the same way
    assert "Ann: \U0001F4CE beach.png · " in window.conversation.compose_box.reply_banner.label.text()
    window.compose_controller.start_new_thread()

    click_button(qtbot, window, session, mid, "Download")
    qtbot.waitUntil(lambda: window.files_view.states[(session.gid, mid)].state == "waiting")
    advance(qtbot, window, backend, session, mid, size // 4)
    now[0] += 1.0
    advance(qtbot, window, backend, session, mid, size // 4)
    shown = strip(window, session, mid)
    assert shown.bar is not None and 0.45 < shown.fraction < 0.55
    assert "50% of " in shown.status and "/s · " in shown.status and " s left" in shown.status, shown.status
    assert [label for _r, _a, label in shown.buttons] == ["Cancel"]
    save_screenshot(window, "files-progress.png")

    click_button(qtbot, window, session, mid, "Cancel")
    qtbot.waitUntil(lambda: window.files_view.states[(session.gid, mid)].state == "cancelled")
    assert [label for _r, _a, label in strip(window, session, mid).buttons] == ["Download"]

    click_button(qtbot, window, session, mid, "Download")
    qtbot.waitUntil(lambda: window.files_view.states[(session.gid, mid)].state == "waiting")
    advance(qtbot, window, backend, session, mid)
    qtbot.waitUntil(lambda: strip(window, session, mid).thumbnail is not None)
    done = strip(window, session, mid)
    assert [label for _r, _a, label in done.buttons] == ["Open", "Show in folder"] and done.status == "Downloaded"
    assert done.thumbnail.width() <= 240 and done.thumbnail.height() <= 160 and done.thumbnail.width() > 100
    target = tmp_path / "downloads" / "beach.png"
    assert target.read_bytes() == (tmp_path / "beach.png").read_bytes()
    # the offer's own notification read as the file; the finished download has one of its own
    assert notified == [("Ann in Holiday", "\U0001F4CE beach.png · 2.7 KB · image/png"),
                        ("Download finished", f"beach.png is saved in {target.parent}")]

    click_button(qtbot, window, session, mid, "Open")
    click_button(qtbot, window, session, mid, "Show in folder")
    assert opened == [str(target), str(target.parent)]
    save_screenshot(window, "files-done.png")


def test_the_context_menu_downloads_and_refusals_and_failures_are_said_in_plain_words(qtbot, window, backend,
                                                                                   tmp_path, monkeypatch):
    backend.manager.files.auto_download = 0
    backend.manager.files.max_file_size = 1000  # the cap a user set
    session = open_group(qtbot, window, backend)
    mid = offered(qtbot, window, session, backend, picture(tmp_path))
    # right-click the row, then click Download file in its menu
    index = row_index(window, session, mid)
    rect = window.conversation.tree_view.visualRect(index)
    window.conversation.tree_view.customContextMenuRequested.emit(rect.center())
    qtbot.waitUntil(lambda: isinstance(QApplication.activePopupWidget(), QMenu))
    menu = QApplication.activePopupWidget()
    download = next(action for action in menu.actions() if action.text() == "Download file")
    assert menu.actions()[0] is download  # a file's own action comes first
    qtbot.mouseClick(menu, Qt.MouseButton.LeftButton, pos=menu.actionGeometry(download).center())
    qtbot.waitUntil(lambda: strip(window, session, mid).error)
    shown = strip(window, session, mid)
    assert shown.status.startswith("Download failed: file too large: 'beach.png' is ")
    assert "the limit is 1,000 bytes" in shown.status
    # the whole of it shows as a tooltip, however narrow the row
    viewport = window.conversation.tree_view.viewport()
    at = shown.status_rect.center()
    QApplication.sendEvent(viewport, QHelpEvent(QEvent.Type.ToolTip, at, viewport.mapToGlobal(at)))
    qtbot.waitUntil(lambda: QToolTip.text() == shown.status)
    assert [label for _r, _a, label in shown.buttons] == ["Retry"]

    # Retry, now short of disk space: said in plain words too
    backend.manager.files.max_file_size = 2**30
    backend.manager.files.free_bytes = 10
    click_button(qtbot, window, session, mid, "Retry")
    qtbot.waitUntil(lambda: "not enough free space" in strip(window, session, mid).status)
    assert strip(window, session, mid).status.endswith("bytes, 10 are free")

    # with room, it starts; a failure on the way is said in the row and announced
    backend.manager.files.free_bytes = None
    notified = []
    monkeypatch.setattr(window.notifier, "notify", lambda title, body, **_how: notified.append((title, body)))
    click_button(qtbot, window, session, mid, "Retry")
    qtbot.waitUntil(lambda: window.files_view.states[(session.gid, mid)].state == "waiting")
    backend.manager.files.advance(session.gid, mid, error="no member that holds it can be reached")
    qtbot.waitUntil(lambda: strip(window, session, mid).status
                    == "Download failed: no member that holds it can be reached")
    assert notified == [("Download failed", "beach.png: no member that holds it can be reached")]


def test_a_small_offer_downloads_by_itself(qtbot, window, backend, tmp_path):
    backend.manager.files.download_dir = tmp_path / "downloads"
    session = open_group(qtbot, window, backend)
    mid = offered(qtbot, window, session, backend, picture(tmp_path, "small.png", (40, 30)))
    qtbot.waitUntil(lambda: window.files_view.states.get((session.gid, mid)) is not None
                    and window.files_view.states[(session.gid, mid)].state == "waiting")
    assert [label for _r, _a, label in strip(window, session, mid).buttons] == ["Cancel"]
    advance(qtbot, window, backend, session, mid)
    qtbot.waitUntil(lambda: strip(window, session, mid).status == "Downloaded")


def sent_offers(backend):
    return [(parse_offer(text).name, parent) for _gid, text, parent in backend.manager.sent if is_offer_text(text)]


def test_attach_by_button_menu_drop_and_paste_posts_offers_in_the_targeted_thread(qtbot, window, backend, tmp_path,
                                                                                  monkeypatch):
    talk = lunch_conversation(GID)
    session = open_group(qtbot, window, backend, talk)
    notes = tmp_path / "notes.txt"
    notes.write_text("bring sunscreen\n")
    chosen = [str(notes)]
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *args, **kwargs: (chosen, ""))

    # the paperclip beside Send, with no reply target: a new thread
    assert window.conversation.compose_box.attach_button.isVisible() and window.conversation.compose_box.attach_button.isEnabled()
    qtbot.mouseClick(window.conversation.compose_box.attach_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(sent_offers(backend)) == 1)
    assert sent_offers(backend) == [("notes.txt", None)]

    # Conversation → Attach file… (Ctrl+Shift+A) while replying to Bob's lunch question: the offer is a reply there
    window.compose_controller.reply_to(talk[6].mid)
    assert window.compose_controller.target.parent == talk[6].mid
    qtbot.keyClick(window.conversation.tree_view, Qt.Key.Key_A,
                   Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    qtbot.waitUntil(lambda: len(sent_offers(backend)) == 2)
    assert sent_offers(backend)[-1] == ("notes.txt", talk[6].mid)

    # a file dropped on the window
    photo = picture(tmp_path, "menu.png", (64, 48))
    assert drop_file(window, window.conversation.tree_view, photo).isAccepted()
    qtbot.waitUntil(lambda: len(sent_offers(backend)) == 3)
    assert sent_offers(backend)[-1][0] == "menu.png"

    # a copied file pasted into the compose box: attached, not typed
    paste_file(qtbot, window.conversation.compose, notes)
    qtbot.waitUntil(lambda: len(sent_offers(backend)) == 4)
    assert window.conversation.compose.toPlainText() == ""

    # a copied picture (no file behind it, as from a screenshot tool) pasted: saved as a PNG and attached
    window.files_view.paste_dir = tmp_path / "pasted"
    shot = QMimeData()
    shot.setImageData(QImage(picture(tmp_path, "shot.png", (40, 30))))
    QGuiApplication.clipboard().setMimeData(shot)
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: len(sent_offers(backend)) == 5)
    name = sent_offers(backend)[-1][0]
    assert name.startswith("Pasted image ") and name.endswith(".png")
    assert QImage(str(tmp_path / "pasted" / name)).size().width() == 40
    assert window.conversation.compose.toPlainText() == ""

    # our own offer's row: shared by us, Open and Show in folder
    def own_offers():
        return [n.message for n in session.tree.arrival if n.message.sender == backend.pid
                and is_offer_text(n.message.text)]

    qtbot.waitUntil(lambda: len(own_offers()) == 5)
    own = own_offers()
    qtbot.waitUntil(lambda: strip(window, session, own[0].mid).status == "Shared by you")
    assert [label for _r, _a, label in strip(window, session, own[0].mid).buttons] == ["Open", "Show in folder"]
    assert Path(window.files_view.states[(session.gid, own[0].mid)].path) == notes.resolve()
    # a folder is refused in plain words
    window.files_view.attach([str(tmp_path)])
    assert "is a folder: only files can be shared" in window.conversation.compose_box.compose_error.text()


def test_a_file_dropped_or_pasted_in_a_direct_conversation_says_files_go_to_groups(qtbot, window, backend, tmp_path):
    """Direct messages carry text: a file given there was taken (the drop accepted) and then nothing
    happened.  Now the conversation says why, and the draft is left as it was."""
    open_group(qtbot, window, backend)
    backend.manager.pass_time(31)  # Ann's beacon: a member the app knows
    window.direct_controller.open_with(ANN.pid, "Ann")
    pane = window.direct_pane
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is pane)
    photo = picture(tmp_path, "menu.png", (64, 48))
    drop_file(window, pane.view, photo)
    qtbot.wait(100)
    save_screenshot(window, "files-dropped-in-direct.png")
    assert pane.compose_error.isVisible(), "the drop was taken and nothing said"
    assert pane.compose_error.text() == FILES_IN_GROUPS_ONLY
    assert sent_offers(backend) == []

    pane.compose_error.hide()
    paste_file(qtbot, pane.compose, photo)
    qtbot.waitUntil(pane.compose_error.isVisible)
    assert pane.compose_error.text() == FILES_IN_GROUPS_ONLY and pane.compose.toPlainText() == ""


def test_enter_on_a_selected_offer_downloads_it_and_then_shows_it_in_its_folder(qtbot, window, backend, tmp_path):
    """The Download and Open buttons are drawn in the row: the keyboard reached them only through the
    context menu key.  Enter on the selected row downloads the file (never Cancel), and once it is here
    shows it in its folder: it never opens (runs) what a peer sent."""
    backend.manager.files.auto_download = 0
    backend.manager.files.download_dir = tmp_path / "downloads"
    session = open_group(qtbot, window, backend, lunch_conversation(GID))
    opened = []
    window.files_view.open_url = lambda url: opened.append(url.toLocalFile())
    mid = offered(qtbot, window, session, backend, picture(tmp_path, "plan.png"))
    activate(qtbot, window)
    view = window.conversation.tree_view
    QTest.keyClick(window.conversation.compose, Qt.Key.Key_Backtab)  # Shift+Tab from the compose box: the conversation
    assert QApplication.focusWidget() is view
    QTest.keyClick(view, Qt.Key.Key_End)  # the newest row: the offer
    assert view.currentIndex().data(MessageRole).mid == mid
    QTest.keyClick(view, Qt.Key.Key_Return)
    qtbot.wait(100)
    save_screenshot(window, "files-enter-downloads.png")
    qtbot.waitUntil(lambda: window.files_view.states[(session.gid, mid)].state in ("waiting", "fetching"))
    QTest.keyClick(view, Qt.Key.Key_Return)  # Enter again while it comes: it goes on (Cancel is a button)
    qtbot.wait(50)
    assert window.files_view.states[(session.gid, mid)].state in ("waiting", "fetching")
    advance(qtbot, window, backend, session, mid)
    qtbot.waitUntil(lambda: window.files_view.states[(session.gid, mid)].state == "done")
    QTest.keyClick(view, Qt.Key.Key_Return)
    assert opened == [str(tmp_path / "downloads")]  # the folder, not the file
