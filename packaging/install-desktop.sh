#!/usr/bin/env bash
# Installs M2MC's desktop integration for the current user: the menu entry (.desktop),
# AppStream metainfo and the app icon at every size, in the XDG places; with --bundle also
# the one-folder bundle itself, linked into PREFIX/bin.  Works from the repo (files come
# from resources/) and from inside a built bundle (files come from _internal/resources/).
#
#   usage: install-desktop.sh [--prefix DIR] [--bundle DIR | --exec COMMAND] [--uninstall]
#     --prefix DIR    install under DIR/share (DIR/bin, DIR/lib for the bundle); default ~/.local,
#                     with the share part at $XDG_DATA_HOME when that is set
#     --bundle DIR    also copy the bundle DIR (e.g. dist/m2mc) to PREFIX/lib/m2mc and link
#                     m2mc-chat and m2mc-peer into PREFIX/bin; the menu entry runs that copy.
#                     Run from inside a bundle, that bundle is the default.
#     --exec COMMAND  program the menu entry starts (default m2mc-chat, found on PATH)
#     --uninstall     remove the files an install into the same prefix put there
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
app_id="io.github.m2mc.chat"
desktop_name="m2mc-chat.desktop"
icon_name="m2mc-chat"

usage() { sed -n '/^#   usage/,/--uninstall/s/^# //p' "$0"; }
die() { echo "install-desktop: $*" >&2; exit 1; }

if [ -d "$here/_internal/resources/desktop" ]; then
  resources="$here/_internal/resources"
  bundle="$here"
else
  resources="$here/../resources"
  bundle=""
fi

prefix="" exec_cmd="" uninstall=0
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || { usage >&2; exit 2; }; prefix="$2"; shift 2 ;;
    --bundle) [ $# -ge 2 ] || { usage >&2; exit 2; }; bundle="$2"; shift 2 ;;
    --exec) [ $# -ge 2 ] || { usage >&2; exit 2; }; exec_cmd="$2"; bundle=""; shift 2 ;;
    --uninstall) uninstall=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "install-desktop: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done

if [ -n "$prefix" ]; then
  mkdir -p "$prefix" || die "cannot create prefix $prefix"
  prefix="$(cd "$prefix" && pwd)"
  share="$prefix/share"
else
  [ -n "${HOME:-}" ] || die "HOME is not set; pass --prefix DIR"
  prefix="$HOME/.local"
  share="${XDG_DATA_HOME:-$HOME/.local/share}"
fi

[ -f "$resources/desktop/$desktop_name" ] || die "desktop files not found in $resources/desktop"
if [ -n "$bundle" ] && [ "$uninstall" -eq 0 ]; then
  [ -x "$bundle/m2mc-chat" ] && [ -x "$bundle/m2mc-peer" ] \
    || die "$bundle is not a built bundle (no m2mc-chat and m2mc-peer in it); run packaging/build-bundle.sh"
  bundle="$(cd "$bundle" && pwd)"
fi

applications="$share/applications"
metainfo="$share/metainfo"
icons="$share/icons/hicolor"
libdir="$prefix/lib/m2mc"
bindir="$prefix/bin"
sizes=()
for dir in "$resources"/icons/hicolor/*x*/; do sizes+=("$(basename "$dir")"); done

refresh_caches() {
  # Menus and icon themes pick up new files by themselves on most desktops; refreshing the
  # caches (when the tools exist) makes it immediate.  A failure here is not an install failure.
  if command -v update-desktop-database >/dev/null; then update-desktop-database -q "$applications" 2>/dev/null || true; fi
  if command -v gtk-update-icon-cache >/dev/null && [ -f "$icons/index.theme" ]; then
    gtk-update-icon-cache -q -t "$icons" 2>/dev/null || true
  fi
}

if [ "$uninstall" -eq 1 ]; then
  rm -f "$applications/$desktop_name" "$metainfo/$app_id.metainfo.xml" "$icons/scalable/apps/$icon_name.svg"
  for size in "${sizes[@]}"; do rm -f "$icons/$size/apps/$icon_name.png"; done
  for program in m2mc-chat m2mc-peer; do
    # Only our own links: a pip-installed m2mc-chat in the same bin stays.
    if [ "$(readlink "$bindir/$program" 2>/dev/null)" = "$libdir/$program" ]; then rm -f "$bindir/$program"; fi
  done
  if [ -x "$libdir/m2mc-chat" ]; then rm -rf "$libdir"; fi
  refresh_caches
  echo "install-desktop: removed M2MC from $share and $prefix"
  exit 0
fi

if [ -n "$bundle" ]; then
  if [ "$bundle" != "$libdir" ]; then
    # Copy beside the old copy and swap, so a failed copy leaves the old install working.
    mkdir -p "$prefix/lib"
    rm -rf "$libdir.new"
    cp -a "$bundle" "$libdir.new"
    rm -rf "$libdir"
    mv "$libdir.new" "$libdir"
  fi
  mkdir -p "$bindir"
  ln -sfn "$libdir/m2mc-chat" "$bindir/m2mc-chat"
  ln -sfn "$libdir/m2mc-peer" "$bindir/m2mc-peer"
  exec_cmd="$libdir/m2mc-chat"
fi
exec_cmd="${exec_cmd:-m2mc-chat}"

# Desktop Entry Exec quoting: a path with spaces and the like goes in double quotes; the
# characters that would need escaping inside the quotes are refused rather than escaped.
case "$exec_cmd" in
  *[\"\`\$\\%]*|*$'\n'*) die "the program path may not contain \", \`, \$, \\, % or a newline: $exec_cmd" ;;
  *[!A-Za-z0-9_./+-]*) exec_line="\"$exec_cmd\"" ;;
  *) exec_line="$exec_cmd" ;;
esac

mkdir -p "$applications" "$metainfo" "$icons/scalable/apps"
# TryExec is a plain string: the menu hides the entry when that program is gone.
while IFS= read -r line; do
  case "$line" in
    Exec=*) printf 'Exec=%s\n' "$exec_line" ;;
    TryExec=*) printf 'TryExec=%s\n' "$exec_cmd" ;;
    *) printf '%s\n' "$line" ;;
  esac
done < "$resources/desktop/$desktop_name" > "$applications/$desktop_name.tmp"
mv "$applications/$desktop_name.tmp" "$applications/$desktop_name"
chmod 644 "$applications/$desktop_name"
install -m 644 "$resources/desktop/$app_id.metainfo.xml" "$metainfo/$app_id.metainfo.xml"
install -m 644 "$resources/icons/m2mc.svg" "$icons/scalable/apps/$icon_name.svg"
for size in "${sizes[@]}"; do
  install -D -m 644 "$resources/icons/hicolor/$size/apps/$icon_name.png" "$icons/$size/apps/$icon_name.png"
done
refresh_caches
echo "install-desktop: installed $applications/$desktop_name (runs: $exec_cmd), metainfo and ${#sizes[@]} icon sizes + SVG under $share"
