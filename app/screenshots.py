"""Makes the screenshots of m2mc-chat in README.md and resources/docs/user-guide.md from a scripted
conversation (in-memory backend, no network).

    xvfb-run -a python -m m2mc.app.screenshots [--out resources]

Writes ``screenshot-main.png`` (the main window with the threads view, 1,400 px wide),
``screenshot-800.png`` (the same at 800 x 600, its side panes folded),
``screenshot-deep-thread.png`` (a 40-deep thread opened on its own at 800 px
wide), ``screenshot-files.png`` (files shared in a thread: a photo downloaded with its
thumbnail, one coming in, one not fetched), ``screenshot-dark.png`` (the same window in a dark
palette), ``screenshot-direct.png`` (a direct conversation with its delivery marks),
``screenshot-notices.png`` (a topic change and a pin as notices among the messages) and
``screenshot-scroll-back.png`` (a group of 3,000 messages opened at its end with one page of them,
a reply to an older message shown with its banner, "Older messages" in the header).  Run it
on a display (Xvfb is fine) so fonts and window frames are the real ones.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QTimer
from PySide6.QtGui import QColor, QImage, QLinearGradient, QPainter
from PySide6.QtWidgets import QApplication, QStyleFactory

from ..middleware.presence import OFFLINE_AFTER
from ..middleware.types import ChatMessage, Member
from ..ui.main_window import MainWindow
from ..ui.memory_backend import MemoryBackend, sim_member
from ..ui.resources import apply_theme, dark_palette
from .qt_app import application

ANN, BOB, CAT, DEV, EVE = (sim_member(name) for name in ("Ann", "Bob", "Cat", "Dev", "Eve"))
T0 = 1_795_000_000_000


def conversation(gid: str) -> tuple[list[ChatMessage], list[ChatMessage]]:
    """(history, arrivals): a few threads, a long reply chain, Unicode and right-to-left text."""
    seq: dict[str, int] = {}
    out: list[ChatMessage] = []

    def say(member: Member, text: str, parent: ChatMessage | None = None) -> ChatMessage:
        seq[member.pid] = seq.get(member.pid, 0) + 1
        at = T0 + len(out) * 61_000
        msg = ChatMessage(gid, (member.pid, seq[member.pid]), parent.mid if parent else None, member.name, text, at, at)
        out.append(msg)
        return msg

    trip = say(ANN, "Did you visit Chennai? Thinking of going in spring 🌴")
    no = say(CAT, "No, not yet. Is it worth the trip in summer?", trip)
    hot = say(ANN, "It is hot in May; go in December. Marina beach at sunrise is lovely and the filter "
                   "coffee alone is worth it. Notes: https://en.wikipedia.org/wiki/Chennai", no)
    say(CAT, "Noted, December it is!", hot)
    say(BOB, "Twice — Mahabalipuram is an easy day trip too.", trip)
    lunch = say(BOB, "Lunch at the canteen at 12:30?")
    say(CAT, "Count me in", lunch)
    say(DEV, "שלום! אני אגיע ב-12:45", lunch)
    release = say(DEV, "Release 2.4 is tagged. Changelog and checksums in the usual place.")
    say(ANN, "sha256 3f9a1c0e7b5d42c8a6e1f0b9d7c3a2e4f5061728394a5b6c7d8e9f00112233 matches here", release)
    arrivals = []
    history = list(out)
    arrivals.append(say(BOB, "Same here. Shall we announce it?", out[-1]))
    arrivals.append(say(CAT, "Can someone bring the projector to room 4?"))
    arrivals.append(say(ANN, "I can, after lunch", arrivals[-1]))
    return history, arrivals


def deep_thread(gid: str, depth: int) -> list[ChatMessage]:
    chain = [ChatMessage(gid, (ANN.pid, 90), None, "Ann", "Tabs or spaces? Settle it once and for all.", T0, T0)]
    speakers = (BOB, CAT, ANN, DEV)
    for level in range(1, depth):
        member = speakers[level % 4]
        text = (f"Round {level}: " + ("spaces, obviously — alignment survives every editor." if level % 2
                                      else "tabs: one keystroke, and everyone picks their own width."))
        chain.append(ChatMessage(gid, (member.pid, 100 + level), chain[-1].mid, member.name, text,
                                 T0 + level * 30_000, T0 + level * 30_000))
    return chain


def operations(backend: MemoryBackend, gid: str, history: list[ChatMessage]) -> None:
    """Reactions, an edit, a delete, a pin and a topic, as other members' operations arrive."""
    make = backend.manager.operation_message
    trip, hot, twice, lunch, release = history[0], history[2], history[4], history[5], history[8]
    backend.manager.inject_messages(gid, [
        make(gid, ANN, 50, "topic", text="Chennai in December · lunch Fridays 12:30"),
        make(gid, ANN, 51, "edit", hot.mid, text=hot.text.replace("lovely", "unforgettable")),
        make(gid, CAT, 50, "react", lunch.mid, emoji="👍"),
        make(gid, DEV, 50, "react", lunch.mid, emoji="👍"),
        make(gid, ANN, 52, "react", lunch.mid, emoji="🎉"),
        make(gid, BOB, 50, "react", trip.mid, emoji="❤"),
        make(gid, DEV, 51, "pin", release.mid),
        make(gid, BOB, 51, "delete", twice.mid),
    ])


def settle(app: QApplication, ms: int = 300) -> None:
    timer = QTimer(singleShot=True, interval=ms)
    timer.start()
    while timer.isActive():
        app.processEvents()


def make_window(app: QApplication, size=(1180, 720)) -> tuple[MainWindow, MemoryBackend]:
    backend = MemoryBackend(name="Dana")
    manager = backend.manager
    me = Member(backend.pid, "Dana")
    history, arrivals = conversation("")  # their gid is the group's, once it is made
    gid = manager.inject_group("Travel & lunch", members=(ANN, BOB, CAT, DEV, me), joined=True, left=(EVE,),
                               history=history).gid
    manager.inject_group("Board games night", members=(BOB, CAT, me), joined=True)
    manager.inject_group("Salary talk", members=(ANN, DEV, me), joined=True, private=True)
    window = MainWindow(backend)
    window.resize(*size)
    window.show()
    window.start()
    while window.current is None or not window.current.loaded:
        app.processEvents()
    manager.inject_messages(gid, arrivals)
    operations(backend, gid, history)
    manager.set_online(DEV, False)  # Dev's app closed a while ago, Cat's a little later: offline and away
    manager.pass_time(OFFLINE_AFTER + 1)
    manager.set_online(CAT, False)
    while manager.presence_of(gid)[CAT.pid] == "online":
        manager.pass_time(1.0)
    settle(app)
    window.status_controller.poll_presence()
    settle(app)
    return window, backend


def sunset(path: Path) -> Path:
    """A photo to share: a sky from orange to deep blue over a dark sea."""
    image = QImage(1200, 800, QImage.Format.Format_RGB32)
    painter = QPainter(image)
    sky = QLinearGradient(0, 0, 0, 560)
    sky.setColorAt(0, QColor("#1e3a8a"))
    sky.setColorAt(0.7, QColor("#f97316"))
    sky.setColorAt(1, QColor("#fde68a"))
    painter.fillRect(0, 0, 1200, 560, sky)
    painter.setBrush(QColor("#fef3c7"))
    painter.drawEllipse(520, 430, 160, 160)
    painter.fillRect(0, 560, 1200, 240, QColor("#0f172a"))
    painter.end()
    image.save(str(path))
    return path


def files_shot(app: QApplication, out: Path) -> Path:
    """Files in a thread: Bob's photo downloaded (its thumbnail), Ann's slides coming in, Cat's video not fetched."""
    window, backend = make_window(app, size=(1000, 720))
    manager = backend.manager
    assert window.current is not None  # make_window() waits for the group to open
    gid = window.current.gid
    work = Path(tempfile.mkdtemp(prefix="m2mc-screenshot-files-"))
    manager.files.download_dir = work / "Downloads"
    manager.files.auto_download = 3 * 2**20
    for member in (CAT, DEV):
        manager.set_online(member, True)
    window.files_view.clock = lambda: 0.0  # the rate shown is the one of the two steps below
    photo = manager.inject_file(gid, BOB, sunset(work / "sunset at Marina beach.png"))
    slides = work / "Chennai trip plan.pdf"
    slides.write_bytes(bytes(2_400_000))
    plan = manager.inject_file(gid, ANN, slides, parent=photo)
    video = work / "beach walk.mp4"
    video.write_bytes(bytes(48 * 2**20))
    manager.inject_file(gid, CAT, video, parent=photo)
    settle(app)
    manager.files.advance(gid, photo)
    manager.files.advance(gid, plan, 600_000)
    settle(app, 100)
    window.files_view.clock = lambda: 1.0
    manager.files.advance(gid, plan, 800_000)
    settle(app)
    window.conversation.open_thread(photo)
    window.conversation.tree_view.scrollToBottom()
    settle(app)
    path = out / "screenshot-files.png"
    window.grab().save(str(path))
    window.close()
    return path


def direct_conversation(app: QApplication, window: MainWindow, backend: MemoryBackend) -> None:
    """A conversation with Ann: read, delivered and queued marks, and her replies under ours."""
    manager = backend.manager
    manager.set_online(ANN, True)
    manager.pass_time(31)  # her heartbeat: she is heard, so what is written to her goes at once
    window.direct_controller.open_with(ANN.pid, ANN.name)
    first = manager.send_direct(ANN.pid, "The build is broken on main since this morning.")
    manager.inject_direct_read(ANN, first)
    manager.inject_direct(ANN, "Looking at it now: the new test needs Xvfb.", parent=first)
    second = manager.send_direct(ANN.pid, "I told Bob too, he had the same failure.")
    manager.inject_direct(ANN, "Fixed on main, thanks!", parent=second)
    manager.set_online(ANN, False)
    manager.pass_time(OFFLINE_AFTER + 1)
    manager.send_direct(ANN.pid, "Lunch at one?")
    settle(app)
    window.direct_controller.refresh()
    settle(app)


def long_history(gid: str, count: int) -> list[ChatMessage]:
    """A team's months of talk: short threads, and now and then an answer to something said long before."""
    topics = ["the build on the ARM runners", "Friday's demo", "the flaky login test", "moving the standup",
              "the new office chairs", "release 2.5 notes", "the Chennai trip budget", "on-call next week"]
    lines = ["Anyone looked at {}?", "I can take {} after lunch.", "Pushed a fix for {}, please review.",
             "Still seeing problems with {} here.", "Agreed on {}, let's do it.", "Notes on {} are in the wiki."]
    seq: dict[str, int] = {}
    out: list[ChatMessage] = []
    speakers = (ANN, BOB, CAT, DEV)
    for n in range(count):
        member = speakers[(n * 7) % 4]
        seq[member.pid] = seq.get(member.pid, 0) + 1
        parent = None
        if n % 4:
            parent = out[n - 1].mid
        if n % 97 == 96 and n > 600:
            parent = out[n - 500].mid  # picking up an old thread
        text = lines[n % len(lines)].format(topics[(n // 4) % len(topics)])
        at = T0 + n * 47_000
        out.append(ChatMessage(gid, (member.pid, seq[member.pid]), parent, member.name, text, at, at))
    return out


def scroll_back_shot(app: QApplication, out: Path) -> Path:
    """A big group opened at its end: one page of rows, an answer to an old message with its banner."""
    backend = MemoryBackend(name="Dana")
    me = Member(backend.pid, "Dana")
    history = long_history("", 3_000)
    backend.manager.inject_group("Team room", members=(ANN, BOB, CAT, DEV, me), joined=True, history=history)
    window = MainWindow(backend)
    window.resize(1180, 720)
    window.show()
    window.start()
    while window.current is None or not window.current.opened:
        app.processEvents()
    settle(app)
    session = window.current
    orphan = next(node.message for node in reversed(session.tree.arrival)
                  if node.depth == 0 and node.message.parent is not None)
    window.conversation.select_message(orphan.mid)
    settle(app)
    path = out / "screenshot-scroll-back.png"
    window.grab().save(str(path))
    window.close()
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="resources", help="folder for the PNG files")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    QCoreApplication.setApplicationName("M2MC chat")
    app = application()
    app.setStyle(QStyleFactory.create("Fusion"))
    light = app.palette()
    apply_theme(app)

    window, _backend = make_window(app, size=(1400, 800))
    assert window.current is not None  # make_window() waits for the group to open
    arrived = [node.message.mid for node in window.current.tree.arrival if node.message is not None]
    window.conversation.select_message(arrived[3])
    window.compose_controller.reply_to(arrived[2])
    settle(app)
    saved = [out / "screenshot-main.png"]
    window.grab().save(str(saved[-1]))
    direct_conversation(app, window, _backend)
    saved.append(out / "screenshot-direct.png")
    window.grab().save(str(saved[-1]))
    window.close()

    window, _backend = make_window(app, size=(800, 600))  # a small laptop: the side panes fold
    settle(app)
    saved.append(out / "screenshot-800.png")
    window.grab().save(str(saved[-1]))
    window.close()

    window, backend = make_window(app, size=(800, 640))
    for member in (CAT, DEV):  # back, to answer in the thread
        backend.manager.set_online(member, True)
    assert window.current is not None  # make_window() waits for the group to open
    chain = deep_thread(window.current.gid, 40)
    backend.manager.inject_messages(window.current.gid, chain)
    settle(app)
    window.conversation.open_thread(chain[0].mid)
    window.conversation.tree_view.scrollToBottom()
    settle(app)
    saved.append(out / "screenshot-deep-thread.png")
    window.grab().save(str(saved[-1]))
    window.close()

    window, _backend = make_window(app, size=(1000, 620))  # the topic set and the pin, at the end
    window.conversation.tree_view.scrollToBottom()
    settle(app)
    saved.append(out / "screenshot-notices.png")
    window.grab().save(str(saved[-1]))
    window.close()

    saved.append(files_shot(app, out))
    saved.append(scroll_back_shot(app, out))

    app.setPalette(dark_palette())
    apply_theme(app)
    window, _backend = make_window(app)
    settle(app)
    saved.append(out / "screenshot-dark.png")
    window.grab().save(str(saved[-1]))
    window.close()
    app.setPalette(light)
    for path in saved:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
