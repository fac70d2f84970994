#!/usr/bin/env bash
# Install the plugin the way a user does (a native package: a copy under
# pack/*/opt, and README's init.lua word for word), then run test/run.lua in
# headless Neovim against the real binary: Debian's Neovim (0.7.2,
# `vim.lsp.start_client`) and Neovim 0.11.4 (`vim.lsp.start`, installed
# by test/install-neovim.sh). Everything (the package, Neovim's state and
# log, the daemon's socket directory) lives in a temporary directory that
# is removed at the end, once the shared daemons it started have been
# stopped.
#
#   editors/nvim/test/run.sh /path/to/toolwire
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
binary="$(realpath "$1")"
command -v nvim >/dev/null || {
  echo "nvim is missing: apt-get install neovim (listed in .ci/apt/editors.txt)" >&2
  exit 1
}
nvim011="$("$here/test/install-neovim.sh")" || {
  echo "Neovim 0.11.4 could not be installed: run editors/nvim/test/install-neovim.sh" >&2
  exit 1
}
tmp="$(mktemp -d "${TMPDIR:-/tmp}/toolwire-nvim-XXXXXX")"
stop_daemons() {
  # README's setup({}) leaves the shared daemon up for its idle timeout
  # (10 minutes): each daemon this test started is stopped by the pid its
  # lock file records.
  for lock in "$tmp"/run/toolwire/*.lock; do
    [ -e "$lock" ] || continue
    pid="$(tr -dc 0-9 < "$lock")"
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  done
  for _ in $(seq 300); do
    compgen -G "$tmp/run/toolwire/*.sock" >/dev/null || break
    sleep 0.1
  done
}
trap 'stop_daemons; rm -rf "$tmp"' EXIT
mkdir -p "$tmp/pack/toolwire/opt" "$tmp/run" "$tmp/xdg" "$tmp/tmp"
chmod 700 "$tmp/run"
# README's install, with the data dir as packpath: `cp -r editors/nvim ...`.
cp -r "$here" "$tmp/pack/toolwire/opt/toolwire"
# README's init.lua, word for word.
cat > "$tmp/init.lua" <<LUA
vim.opt.packpath:prepend("$tmp")
vim.cmd("packadd toolwire")
require("toolwire").setup({})
LUA
for nvim in nvim "$nvim011"; do
  rm -rf "$tmp/root" "$tmp/xdg"
  mkdir -p "$tmp/root/empty" "$tmp/xdg"
  (
    cd "$tmp/root"
    # Neovim keeps its temporary files in $TMPDIR/nvim.<user>, which it
    # never removes: this test's own TMPDIR goes with the rest of $tmp.
    TMPDIR="$tmp/tmp" TW_ROOT="$tmp/root" TOOLWIRE_BIN="$binary" XDG_RUNTIME_DIR="$tmp/run" \
      XDG_CONFIG_HOME="$tmp/xdg" XDG_DATA_HOME="$tmp/xdg" XDG_STATE_HOME="$tmp/xdg" XDG_CACHE_HOME="$tmp/xdg" \
      timeout 300 "$nvim" --headless -u "$tmp/init.lua" -i NONE -n \
      -c "luafile $tmp/pack/toolwire/opt/toolwire/test/run.lua"
  )
  stop_daemons
done
