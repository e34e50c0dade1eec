"""The reaction picker's emoji, and the paperclip before a file offer, draw as emoji on a desktop
without a colour emoji font (this test machine has none): the app ships them and registers them as
its emoji fallback."""

from PySide6.QtGui import QColor, QFont, QFontDatabase, QImage, QPainter
from PySide6.QtWidgets import QApplication

from conftest import save_screenshot
from m2mc.ui.panes.message_menu import REACTION_CHOICES
from m2mc.ui.resources import apply_theme, load_bundled_fonts


def colours_drawn(text: str) -> int:
    """How many colours drawing ``text`` in the app's font leaves: a colour emoji many, an
    empty box (a missing glyph) or a black outline two or three."""
    image = QImage(48, 48, QImage.Format.Format_ARGB32)
    image.fill(QColor("white"))
    painter = QPainter(image)
    font = QFont(QApplication.font())
    font.setPixelSize(28)
    painter.setFont(font)
    painter.drawText(6, 38, text)
    painter.end()
    return len({image.pixelColor(x, y).name() for x in range(48) for y in range(48)})


def test_every_reaction_in_the_picker_draws_in_colour(qtbot):
    apply_theme(QApplication.instance())
    family = load_bundled_fonts()
    assert family in QFontDatabase.applicationFontFamilies(0) or family in QFontDatabase.families()
    for emoji in REACTION_CHOICES:
        assert colours_drawn(emoji) > 12, f"{emoji} (U+{ord(emoji[0]):04X}) draws as a box or in one colour"


def test_the_paperclip_before_a_file_offer_draws_in_colour(qtbot):
    # It drew as blank space where no colour emoji font is installed.
    from m2mc.middleware.files import FILE_MARK

    apply_theme(QApplication.instance())
    load_bundled_fonts()
    assert colours_drawn(FILE_MARK) > 12


def test_the_picker_menu_shows_them(qtbot, window, backend):
    from conftest import ANN, BOB, CAT, lunch_conversation
    from m2mc.middleware.types import Member

    me = Member(backend.pid, backend.name)
    backend.manager.inject_group("Lunch", members=(ANN, BOB, CAT, me), joined=True, history=lunch_conversation(""))
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and window.current.loaded)
    message = window.current.tree.arrival[0].message
    menu = window.message_menu(message)
    react = next(a for a in menu.actions() if a.text() == "React").menu()
    react.popup(window.mapToGlobal(window.rect().center()))
    qtbot.waitExposed(react)
    image = react.grab().toImage()
    save_screenshot(react, "reaction-picker.png")
    react.close()
    assert len({image.pixelColor(x, y).name() for x in range(0, image.width(), 2)
                for y in range(0, image.height(), 2)}) > 40
