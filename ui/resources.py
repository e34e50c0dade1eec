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


# How strongly secondary text (times, counts, hints) shows its text colour over the background: at 150 it
# was 4.0:1 on the dark palette's selection (185: 4.3:1), below WCAG AA's 4.5:1 (tests/ui/test_contrast.py).
MUTED_ALPHA = 200

# The dark palette the app takes when the desktop prefers dark and Qt's own palette is light (Fusion, and
# most desktops without a Qt theme); the stylesheet's colours are derived from it as from any other.
DARK_COLORS = {
    QPalette.ColorRole.Window: "#1f2124", QPalette.ColorRole.WindowText: "#e8eaed",
    QPalette.ColorRole.Base: "#17181a", QPalette.ColorRole.AlternateBase: "#25272b",
    QPalette.ColorRole.Text: "#e8eaed", QPalette.ColorRole.Button: "#2a2c30",
    QPalette.ColorRole.ButtonText: "#e8eaed", QPalette.ColorRole.BrightText: "#ffffff",
    QPalette.ColorRole.Highlight: "#2c5282", QPalette.ColorRole.HighlightedText: "#ffffff",
    QPalette.ColorRole.ToolTipBase: "#2a2c30", QPalette.ColorRole.ToolTipText: "#e8eaed",
    QPalette.ColorRole.PlaceholderText: "#9aa0a6", QPalette.ColorRole.Link: "#63b3ed",
    QPalette.ColorRole.Light: "#3a3d42", QPalette.ColorRole.Midlight: "#303338",
    QPalette.ColorRole.Mid: "#26282c", QPalette.ColorRole.Dark: "#121314", QPalette.ColorRole.Shadow: "#000000",
}


def dark_palette() -> QPalette:
    palette = QPalette()
    for role, color in DARK_COLORS.items():
        palette.setColor(role, QColor(color))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.WindowText, QPalette.ColorRole.ButtonText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, QColor("#80868b"))
    return palette


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
    muted.setAlpha(MUTED_ALPHA)
    return {
        "window": window.name(),
        "base": base.name(),
        "panel": panel.name(),
        "text": text.name(),
        "muted": _rgba(muted),
        "border": (window.lighter(150) if dark else window.darker(118)).name(),
        "accent": accent.name(),
        "accent_text": "#0b1a2b" if dark else "#ffffff",  # text on the accent (the Send button)
        "accent_soft": _rgba(accent_soft),
        "selection": (QColor("#2c5282") if dark else QColor("#bee3f8")).name(),
        "selection_text": text.name(),
        "unread": QColor("#f6ad55" if dark else "#b7471a").name(),
        "unread_text": "#1a202c" if dark else "#ffffff",  # the count on an unread badge
        "match": QColor("#7c5e10" if dark else "#fde68a").name(),  # behind the words a filter or a search found
        "error": QColor("#fc8181" if dark else "#c53030").name(),
        "warning": QColor("#f6e05e" if dark else "#8a5a00").name(),  # #b7791f was 3.0:1 on the status bar
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


PORTAL = ("org.freedesktop.portal.Desktop", "/org/freedesktop/portal/desktop", "org.freedesktop.portal.Settings")
APPEARANCE = ("org.freedesktop.appearance", "color-scheme")  # 0: no preference, 1: prefer dark, 2: prefer light


def _session_bus():
    try:  # jeepney is a Linux dependency; elsewhere Qt's own reading of the desktop is all there is
        from .session_bus import SessionBus
    except ImportError:
        return None
    return SessionBus.shared()


def _portal_value(value: object) -> object:
    """A portal answer's value: Read wraps the variant in another variant; a signal's is wrapped once."""
    while isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        value = value[1]
    return value


def desktop_prefers_dark(app: QApplication) -> bool | None:
    """The desktop's light/dark choice: xdg-desktop-portal's color-scheme where the session bus has the
    portal (GNOME, KDE and others publish their switch there), else what Qt read of the desktop
    (styleHints().colorScheme()); None where neither says."""
    bus = _session_bus()
    if bus is not None and bus.has_name(PORTAL[0]):
        from .session_bus import SessionBusError
        try:
            scheme = _portal_value(bus.call_method(*PORTAL, "Read", "ss", APPEARANCE)[0])
        except SessionBusError:
            scheme = None
        if scheme in (1, 2):
            return scheme == 1
    scheme = app.styleHints().colorScheme()
    if scheme == Qt.ColorScheme.Dark:
        return True
    if scheme == Qt.ColorScheme.Light:
        return False
    return None


def follow_desktop(app: QApplication) -> None:
    """Take the dark palette when the desktop prefers dark and the app's palette is light (Fusion, and
    desktops without a Qt theme, keep a light one); give the light one back when the desktop turns light."""
    wants_dark = desktop_prefers_dark(app)
    dark_by_us = bool(app.property("m2mcDarkByUs"))
    if wants_dark and not is_dark(app.palette()):
        app.setProperty("m2mcLightPalette", app.palette())
        app.setProperty("m2mcDarkByUs", True)
        app.setPalette(dark_palette())
    elif wants_dark is False and dark_by_us:
        light = app.property("m2mcLightPalette")
        app.setProperty("m2mcDarkByUs", False)
        app.setPalette(light if isinstance(light, QPalette) else app.style().standardPalette())


def apply_theme(app: QApplication) -> None:
    """Style the app for its palette, dark where the desktop prefers dark, now and whenever the desktop
    switches.  Called again (each test's window, a palette set by hand) it restyles: the switch is
    listened to once per app (Qt's signal, and the portal's on the app's one session-bus connection)."""
    load_bundled_fonts()
    if not app.property("m2mcThemed"):
        app.setProperty("m2mcThemed", True)
        app.styleHints().colorSchemeChanged.connect(lambda *_args: restyle(app, follow=True))
        bus = _session_bus()
        if bus is not None:
            from jeepney import MatchRule

            def changed(message) -> None:
                if tuple(message.body[:2]) == APPEARANCE:
                    restyle(app, follow=True)

            bus.listen(MatchRule(type="signal", interface=PORTAL[2], member="SettingChanged"), changed)
    restyle(app, follow=True)


def restyle(app: QApplication, follow: bool = False) -> None:
    """Icons, tooltips, selections and the stylesheet drawn anew from the app's palette (``follow``:
    first the palette the desktop's light/dark choice asks for)."""
    if follow:
        follow_desktop(app)
    _icon.cache_clear()
    readable_tooltips(app)
    readable_selection(app)
    app.setStyleSheet(stylesheet(app.palette()))


def readable_selection(app: QApplication) -> None:
    """The palette's selection takes the stylesheet's pair of colours, in the window shown and in one
    behind another: what Qt's style draws (and the delegates' text on it) matches the side lists' rule."""
    palette = app.palette()
    colors = theme_colors(palette)
    wanted = {QPalette.ColorRole.Highlight: QColor(colors["selection"]),
              QPalette.ColorRole.HighlightedText: QColor(colors["selection_text"])}
    groups = (QPalette.ColorGroup.Active, QPalette.ColorGroup.Inactive)
    if all(palette.color(group, role) == color for group in groups for role, color in wanted.items()):
        return
    for group in groups:
        for role, color in wanted.items():
            palette.setColor(group, role, color)
    app.setPalette(palette)


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
