"""Render the app icon ``resources/icons/m2mc.svg`` to the PNG sizes desktops look for.

Run once after changing the SVG, and commit the PNGs:

    .venv/bin/python packaging/render_icons.py

They land in ``resources/icons/hicolor/<N>x<N>/apps/m2mc-chat.png``, the same
layout as the XDG icon theme, so ``packaging/install-desktop.sh`` copies the tree
as it is.  PNGs are written at the highest zlib compression to keep the repo small.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "resources" / "icons" / "m2mc.svg"
THEME_DIR = REPO / "resources" / "icons" / "hicolor"
ICON_NAME = "m2mc-chat"
SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)
# QImage.save's quality for PNG maps to zlib effort: 0 = smallest file.
PNG_SMALLEST = 0


def render(source: Path = SOURCE, theme_dir: Path = THEME_DIR, sizes: tuple[int, ...] = SIZES) -> list[Path]:
    from PySide6.QtCore import QRectF, Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    # QPainter on a QImage needs a QGuiApplication for font and paint engine set-up.
    app = QGuiApplication.instance() or QGuiApplication(["render_icons", "-platform", "offscreen"])
    renderer = QSvgRenderer(str(source))
    if not renderer.isValid():
        raise SystemExit(f"render_icons: {source} is not a valid SVG")
    written = []
    for size in sizes:
        image = QImage(size, size, QImage.Format.Format_ARGB32)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter, QRectF(0, 0, size, size))
        painter.end()
        target = theme_dir / f"{size}x{size}" / "apps" / f"{ICON_NAME}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        if not image.save(str(target), "PNG", PNG_SMALLEST):
            raise SystemExit(f"render_icons: could not write {target}")
        written.append(target)
    del app
    return written


def main() -> int:
    for path in render():
        print(f"{path.relative_to(REPO)}  {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
