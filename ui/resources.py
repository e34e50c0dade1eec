"""Icons and the stylesheet from the top-level ``resources/`` folder, coloured for the palette.

``resources/`` lives next to the packages (not inside one); where it is
found in a checkout, the bundle and an installed wheel is
``m2mc.middleware.data_files``'s business.  When neither is there the app still runs, with plain
Qt icons and no stylesheet.  Icons are monochrome SVGs drawn in
black and recoloured here to the palette's text colour, and the stylesheet's
``@name@`` placeholders are filled from the palette, so one set of files serves
light and dark desktops and follows a switch between them.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path

from PySide6.QtCore import QByteArray, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontDatabase, QGuiApplication, QIcon, QPainter, QPalette, QPixmap
from PySide6.QtSvg import QSvgRenderer
from PySide6.QtWidgets import QApplication

from ..middleware.data_files import resource_dir

log = logging.getLogger(__name__)

RESOURCE_DIR = resource_dir()
ICON_SIZES = (16, 24, 32, 48)


def resource_path(*parts: str) -> Path:
    return RESOURCE_DIR.joinpath(*parts)


def is_dark(palette: QPalette | None = None) -> bool:
    palette = palette or QGuiApplication.palette()
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def theme_colors(palette: QPalette | None = None) -> dict[str, str]:
    """The named colours the stylesheet and the delegates use."""
    palette = palette or QGuiApplication.palette()
    dark = is_dark(palette)
    window = palette.color(QPalette.ColorRole.Window)
    base = palette.color(QPalette.ColorRole.Base)
    text = palette.color(QPalette.ColorRole.Text)
    accent = QColor("#63b3ed") if dark else QColor("#2b6cb0")
    panel = window.lighter(112) if dark else window.darker(103)
    accent_soft = QColor(accent)
    accent_soft.setAlpha(50)
    muted = QColor(text)
    muted.setAlpha(150)
    return {
        "window": window.name(),
        "base": base.name(),
        "panel": panel.name(),
        "text": text.name(),
        "muted": _rgba(muted),
        "border": (window.lighter(150) if dark else window.darker(118)).name(),
        "accent": accent.name(),
        "accent_soft": _rgba(accent_soft),
        "selection": (QColor("#2c5282") if dark else QColor("#bee3f8")).name(),
        "selection_text": text.name(),
        "unread": QColor("#f6ad55" if dark else "#dd6b20").name(),
        "match": QColor("#7c5e10" if dark else "#fde68a").name(),  # behind the words a filter or a search found
        "error": QColor("#fc8181" if dark else "#c53030").name(),
        "warning": QColor("#f6e05e" if dark else "#b7791f").name(),
    }


def _rgba(color: QColor) -> str:
    return f"rgba({color.red()}, {color.green()}, {color.blue()}, {color.alpha()})"


def stylesheet(palette: QPalette | None = None) -> str:
    path = resource_path("m2mc.qss")
    try:
        template = path.read_text(encoding="utf-8")
    except OSError:
        log.warning("stylesheet %s not found; using the plain Qt style", path)
        return ""
    for key, value in theme_colors(palette).items():
        template = template.replace(f"@{key}@", value)
    return template


REACTION_FONT = "NotoColorEmoji-reactions.ttf"


@lru_cache(maxsize=1)
def load_bundled_fonts() -> str | None:
    """Register the shipped emoji (the reaction picker's, ``resources/fonts``) as the app's emoji
    fallback, so they draw where the system has no colour emoji font; the system's own emoji
    font, where there is one, still draws every other emoji.  Returns the family, or None."""
    font_id = QFontDatabase.addApplicationFont(str(resource_path("fonts", REACTION_FONT)))
    families = QFontDatabase.applicationFontFamilies(font_id) if font_id >= 0 else []
    if not families:
        log.warning("the bundled emoji font %s could not be loaded", REACTION_FONT)
        return None
    if hasattr(QFontDatabase, "addApplicationEmojiFontFamily"):  # Qt 6.9 and later
        QFontDatabase.addApplicationEmojiFontFamily(families[0])
    else:  # older Qt: a substitute for the default family, tried for glyphs it lacks
        QFont.insertSubstitution(QFont().family(), families[0])
    return families[0]


def apply_theme(app: QApplication) -> None:
    """Style the app for its palette now and whenever the system switches light/dark."""
    load_bundled_fonts()

    def restyle(*_args) -> None:
        _icon.cache_clear()
        readable_tooltips(app)
        app.setStyleSheet(stylesheet(app.palette()))

    restyle()
    app.styleHints().colorSchemeChanged.connect(restyle)


def readable_tooltips(app: QApplication) -> None:
    """Tooltips and the tray's fallback balloon take the window's colours.

    A desktop's dark palette can keep Qt's pale-yellow tooltip base with its own
    light text: white on yellow.  The window colours are a pair that is readable
    in either theme.
    """
    palette = app.palette()
    base = palette.color(QPalette.ColorRole.Window)
    text = palette.color(QPalette.ColorRole.WindowText)
    if palette.color(QPalette.ColorRole.ToolTipBase) == base and palette.color(QPalette.ColorRole.ToolTipText) == text:
        return
    palette.setColor(QPalette.ColorRole.ToolTipBase, base)
    palette.setColor(QPalette.ColorRole.ToolTipText, text)
    app.setPalette(palette)


def icon(name: str) -> QIcon:
    """The SVG icon ``resources/icons/<name>.svg`` drawn in the palette's text colour."""
    return _icon(name, QGuiApplication.palette().color(QPalette.ColorRole.Text).name())


def app_icon() -> QIcon:
    path = resource_path("icons", "m2mc.svg")
    return QIcon(str(path)) if path.exists() else QIcon()


@lru_cache(maxsize=128)
def _icon(name: str, color: str) -> QIcon:
    path = resource_path("icons", f"{name}.svg")
    try:
        svg = path.read_text(encoding="utf-8")
    except OSError:
        log.debug("icon %s missing", path)
        return QIcon()
    if name != "m2mc":
        svg = svg.replace("#000000", color)
    renderer = QSvgRenderer(QByteArray(svg.encode()))
    result = QIcon()
    for size in ICON_SIZES:
        pixmap = QPixmap(size, size)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        renderer.render(painter, QRectF(0, 0, size, size))
        painter.end()
        result.addPixmap(pixmap)
    return result
