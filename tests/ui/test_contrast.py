"""Text is readable in the light and the dark palette (issue 45): every pair of text and background
colours the app draws, selected rows of every side list above all, has a contrast ratio of 4.5:1 or
more (WCAG 2 AA), computed from the palette the app runs with and the stylesheet it applies; and in
the real window, a selected direct-messages row is drawn in those colours."""

import re

import pytest
from PySide6.QtCore import QPoint
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

from conftest import ANN, BOB, save_screenshot
from m2mc.ui.resources import apply_theme, dark_palette, stylesheet, theme_colors

AA = 4.5
SIDE_LISTS = ("groupList", "directList", "threadList", "memberList")


def luminance(color: QColor) -> float:
    def channel(value: float) -> float:
        return value / 12.92 if value <= 0.04045 else ((value + 0.055) / 1.055) ** 2.4
    return 0.2126 * channel(color.redF()) + 0.7152 * channel(color.greenF()) + 0.0722 * channel(color.blueF())


def over(color: QColor, background: QColor) -> QColor:
    """``color`` (maybe translucent) as it shows over the opaque ``background``."""
    a = color.alphaF()
    return QColor.fromRgbF(*(a * getattr(color, c)() + (1 - a) * getattr(background, c)()
                             for c in ("redF", "greenF", "blueF")))


def ratio(text: QColor, background: QColor) -> float:
    lighter, darker = sorted((luminance(over(text, background)), luminance(background)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def qss_color(text: str) -> QColor:
    match = re.fullmatch(r"rgba\((\d+), (\d+), (\d+), (\d+)\)", text.strip())
    return QColor(*map(int, match.groups())) if match else QColor(text.strip())


def selected_rule(sheet: str, name: str) -> dict[str, str]:
    """The declarations of the stylesheet's rule for ``#name::item:selected``."""
    for selectors, body in re.findall(r"([^{}]+)\{([^}]*)\}", re.sub(r"/\*.*?\*/", "", sheet, flags=re.S)):
        if any(s.strip().endswith(f"#{name}::item:selected") for s in selectors.split(",")):
            return dict((k.strip(), v.strip()) for k, v in (d.split(":", 1) for d in body.split(";") if ":" in d))
    raise AssertionError(f"no ::item:selected rule for #{name}")


@pytest.fixture(params=["light", "dark"])
def palette(request, qapp):
    before = qapp.palette()
    qapp.setPalette(qapp.style().standardPalette() if request.param == "light" else dark_palette())
    apply_theme(qapp)
    yield request.param
    qapp.setPalette(before)
    apply_theme(qapp)


def test_every_text_and_background_pair_is_aa_in_the_light_and_the_dark_palette(palette):
    app = QApplication.instance()
    colors = {name: qss_color(value) for name, value in theme_colors(app.palette()).items()}
    pal = app.palette()
    pairs = {
        "text on base": (colors["text"], colors["base"]),
        "text on window": (colors["text"], colors["window"]),
        "text on panel": (colors["text"], colors["panel"]),
        "selected text on selection": (colors["selection_text"], colors["selection"]),
        "muted on base": (colors["muted"], colors["base"]),
        "muted on panel": (colors["muted"], colors["panel"]),
        "muted on selection": (colors["muted"], colors["selection"]),
        "error on base": (colors["error"], colors["base"]),
        "warning on panel (status bar)": (colors["warning"], colors["panel"]),
        "Send on accent": (colors["accent_text"], colors["accent"]),
        "unread count on its badge": (colors["unread_text"], colors["unread"]),
        "tooltip": (pal.color(QPalette.ColorRole.ToolTipText), pal.color(QPalette.ColorRole.ToolTipBase)),
    }
    for group in (QPalette.ColorGroup.Active, QPalette.ColorGroup.Inactive):
        pairs[f"palette selection ({group.name})"] = (pal.color(group, QPalette.ColorRole.HighlightedText),
                                                      pal.color(group, QPalette.ColorRole.Highlight))
    sheet = stylesheet(pal)
    for name in SIDE_LISTS:
        rule = selected_rule(sheet, name)
        pairs[f"{name} selected row (stylesheet)"] = (qss_color(rule["color"]), qss_color(rule["background"]))
    low = {what: round(ratio(*pair), 2) for what, pair in pairs.items() if ratio(*pair) < AA}
    assert not low, f"below {AA}:1 in the {palette} palette: {low}"


def test_the_selected_direct_messages_row_is_drawn_in_the_selection_colours(qtbot, palette, window, backend):
    from m2mc.middleware.types import Member
    backend.manager.inject_group("Lunch", members=(ANN, BOB, Member(backend.pid, backend.name)), joined=True)
    backend.manager.inject_direct(ANN, "are you coming?")
    backend.manager.inject_direct(BOB, "lunch?")
    window.start()
    qtbot.waitUntil(lambda: window.groups_pane.direct_list.count() == 2)
    window.direct_controller.open_with(ANN.pid)
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is window.direct_pane)
    direct = window.groups_pane.direct_list
    row = direct.visualItemRect(direct.currentItem())
    colors = theme_colors(QApplication.instance().palette())
    selection, text = QColor(colors["selection"]), QColor(colors["selection_text"])
    image = direct.viewport().grab().toImage()
    drawn = image.pixelColor(QPoint(row.left() + 3, row.center().y()))
    assert max(abs(a - b) for a, b in zip(drawn.getRgb()[:3], selection.getRgb()[:3])) <= 10, (drawn.name(), selection.name())
    # The glyphs' strongest pixel against the row as drawn: the text colour, or near it.
    pixels = [image.pixelColor(QPoint(x, y)) for x in range(row.left(), row.right(), 1)
              for y in range(row.top(), row.bottom())]
    best = max(pixels, key=lambda pixel: ratio(pixel, drawn))
    assert ratio(best, drawn) >= AA and ratio(text, selection) >= AA, (best.name(), drawn.name())
    save_screenshot(window, f"contrast-direct-selected-{palette}.png")


def test_applying_the_theme_again_listens_to_the_desktop_once(qapp):
    hints = qapp.styleHints()
    apply_theme(qapp)
    listeners = hints.receivers("2colorSchemeChanged(Qt::ColorScheme)")
    for _ in range(3):
        apply_theme(qapp)
    assert hints.receivers("2colorSchemeChanged(Qt::ColorScheme)") == listeners >= 1
