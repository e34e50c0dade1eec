"""Command-line options that m2mc-chat and m2mc-peer share, and where their state lives by default."""

from __future__ import annotations

import argparse
from pathlib import Path

import platformdirs

from ..middleware import __version__
from ..middleware.files import DEFAULT_AUTO_DOWNLOAD, DEFAULT_MAX_FILE_SIZE
from ..middleware.manager import DEFAULT_PORT


def default_data_dir() -> Path:
    """$XDG_DATA_HOME/m2mc (~/.local/share/m2mc) on Linux, ~/Library/Application Support/m2mc on
    macOS, %LOCALAPPDATA%\\m2mc on Windows."""
    return Path(platformdirs.user_data_dir("m2mc", appauthor=False))


def add_file_options(parser: argparse.ArgumentParser, downloads: str) -> None:
    """Where fetched files go and which ones come by themselves (m2mc-peer and m2mc-chat)."""
    parser.add_argument("--download-dir", type=Path, default=None,
                        help=f"where fetched files go (default: {downloads})")
    parser.add_argument("--auto-download", type=int, default=DEFAULT_AUTO_DOWNLOAD, metavar="BYTES",
                        help=f"fetch offered files up to this size on their own (default {DEFAULT_AUTO_DOWNLOAD})")
    parser.add_argument("--max-file-size", type=int, default=DEFAULT_MAX_FILE_SIZE, metavar="BYTES",
                        help=f"refuse to fetch larger files (default {DEFAULT_MAX_FILE_SIZE})")


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by m2mc-peer and m2mc-chat."""
    parser.add_argument("--name", help="display name (kept in the data dir)")
    parser.add_argument("--data-dir", type=Path, default=None, help=f"where state lives (default {default_data_dir()})")
    parser.add_argument("--iface", help="interface name (its address is followed as it changes) or IPv4 address (kept as it is) to use "
                             "(default: the LAN holding the default route; never a VPN tunnel or virtual bridge)")
    parser.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"control channel UDP port (default {DEFAULT_PORT})")
    parser.add_argument("--no-zeroconf", action="store_true", help="do not announce or browse with zeroconf")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 1-65535, got {value}")
    return value
