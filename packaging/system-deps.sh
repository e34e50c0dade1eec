#!/usr/bin/env bash
# Installs the Debian packages M2MC needs beyond Python itself, when any is missing.
#   runtime: the X11/xcb libraries Qt's xcb platform plugin loads (a desktop session)
#   tests:   iproute2 and iptables, for the private network-namespace LAN tests; libnetfilter-queue's
#            headers, which the dev extra's NetfilterQueue builds against (the packet delayer);
#            Xvfb, the virtual display the GUI tests open real windows on; xdotool, which types and
#            clicks there through the X server as a person does (the focus tests); dbus and dunst, a
#            private session bus and a real notification daemon for the notification tests; at-spi2-core
#            and python3-pyatspi, the accessibility bus and a screen reader's view of the window
#   report:  a font with CJK glyphs (Droid Sans Fallback, 2 MB), for group names in the plots;
#            chromium, the headless browser the explorer page's test opens it in (Playwright's own
#            browser download is not reachable everywhere)
#   analytics: a Java runtime (17 or newer) for PySpark, when no `java` is on the PATH
#   build:   a C compiler, OpenSSL's headers, and Python's headers when the interpreter given
#            as $1 lacks them, for the compiled cores (the S_b orderer, the Merkle trees;
#            without them the middleware falls back to Python)
# As root it installs what is missing with apt-get; otherwise it prints the command.
set -euo pipefail
python=${1:-python3}

packages=(
  libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-shape0 libxcb-xkb1 libxcb-randr0
  libxcb-render-util0 libxcb-image0 libxkbcommon-x11-0 libegl1 libgl1 libfontconfig1 libdbus-1-3
  iproute2 iptables libnetfilter-queue-dev xvfb xauth xdotool dbus dunst at-spi2-core python3-pyatspi
  fonts-droid-fallback chromium
  desktop-file-utils appstream  # validators for the desktop entry and metainfo tests
  gcc libc6-dev libssl-dev
)
if ! "$python" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null; then
  packages+=(python3-dev)
fi

if ! command -v java >/dev/null 2>&1; then
  packages+=(openjdk-17-jre-headless)
fi

command -v dpkg-query >/dev/null || { echo "system-deps: not a Debian/Ubuntu system; install the equivalents of: ${packages[*]}" >&2; exit 0; }

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "system-deps: missing Debian packages: ${missing[*]}" >&2
  echo "system-deps: install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 0
fi
echo "system-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
