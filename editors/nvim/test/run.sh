#!/usr/bin/env bash
# Install the plugin the way a user does (a native package: a copy under
# pack/*/opt, `packadd` in init.lua), then run test/run.lua in headless
# Neovim against the real binary. Everything (the package, Neovim's state
# and log, the daemon's socket directory) lives in a temporary directory
# that is removed at the end, once the shared daemon has exited.
#
#   editors/nvim/test/run.sh /path/to/toolwire
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
binary="$(realpath "$1")"
command -v nvim >/dev/null || {
  echo "nvim is missing: apt-get install neovim (listed in .ci/apt/editors.txt)" >&2
  exit 1
}
tmp="$(mktemp -d "${TMPDIR:-/tmp}/toolwire-nvim-XXXXXX")"
cleanup() {
  # The daemon ends once idle (idle_timeout = 1): wait for its socket.
  for _ in $(seq 300); do
    compgen -G "$tmp/run/toolwire/*.sock" >/dev/null || break
    sleep 0.1
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -p "$tmp/pack/toolwire/opt" "$tmp/root" "$tmp/root/empty" "$tmp/run" "$tmp/xdg"
chmod 700 "$tmp/run"
cp -r "$here" "$tmp/pack/toolwire/opt/toolwire"
cat > "$tmp/init.lua" <<LUA
vim.opt.packpath:prepend("$tmp")
vim.cmd("packadd toolwire")
require("toolwire").setup({ root = "$tmp/root", idle_timeout = 1, config = { durability = "none" } })
LUA
cd "$tmp/root"
TW_ROOT="$tmp/root" TOOLWIRE_BIN="$binary" XDG_RUNTIME_DIR="$tmp/run" \
  XDG_CONFIG_HOME="$tmp/xdg" XDG_DATA_HOME="$tmp/xdg" XDG_STATE_HOME="$tmp/xdg" XDG_CACHE_HOME="$tmp/xdg" \
  timeout 300 nvim --headless -u "$tmp/init.lua" -i NONE -n \
  -c "luafile $tmp/pack/toolwire/opt/toolwire/test/run.lua"
