#!/usr/bin/env bash
# Neovim 0.11.4 (from PyPI, cached outside the checkout) for the Neovim
# plugin's test of the 0.8+ path; Debian's 0.7.2 is tested too.
exec "$(dirname "$0")/../../editors/nvim/test/install-neovim.sh" >/dev/null
