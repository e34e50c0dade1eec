#!/usr/bin/env bash
# Builds the one-folder bundle dist/m2mc/ (m2mc-chat and m2mc-peer with their own Python
# and Qt) from packaging/m2mc.spec with PyInstaller, then adds install-desktop.sh to it.
#   usage: packaging/build-bundle.sh [--dist DIR] [--work DIR]
#   PYTHON picks the interpreter that has the project and PyInstaller (default .venv/bin/python).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
dist="$repo/dist"
work="$repo/build/pyinstaller"
python="${PYTHON:-$repo/.venv/bin/python}"

usage() { echo "usage: $0 [--dist DIR] [--work DIR]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dist) [ $# -ge 2 ] || usage; dist="$2"; shift 2 ;;
    --work) [ $# -ge 2 ] || usage; work="$2"; shift 2 ;;
    -h|--help) echo "usage: $0 [--dist DIR] [--work DIR]"; exit 0 ;;
    *) echo "build-bundle: unknown option $1" >&2; usage ;;
  esac
done

[ -x "$python" ] || { echo "build-bundle: no Python at $python; run 'make setup' or set PYTHON=" >&2; exit 1; }
"$python" -c 'import PyInstaller' 2>/dev/null || {
  echo "build-bundle: PyInstaller is not installed for $python; install it with: $python -m pip install 'pyinstaller>=6.3'" >&2
  exit 1; }

# PyInstaller analyses the package as the wheel lays it out: m2mc/ holding app/, ui/ and middleware/.
source="$work/source"
rm -rf "$source" && mkdir -p "$source/m2mc"
cp "$repo/packaging/m2mc/__init__.py" "$source/m2mc/"
for folder in app ui middleware; do
  cp -r "$repo/$folder" "$source/m2mc/$folder"
done
find "$source" -name __pycache__ -prune -exec rm -rf {} +

M2MC_SOURCE="$source" "$python" -m PyInstaller --noconfirm --clean --log-level WARN \
  --distpath "$dist" --workpath "$work" "$repo/packaging/m2mc.spec"
install -m 755 "$repo/packaging/install-desktop.sh" "$dist/m2mc/install-desktop.sh"
echo "build-bundle: built $dist/m2mc ($(du -sh "$dist/m2mc" | cut -f1)); try: $dist/m2mc/m2mc-chat --version"
