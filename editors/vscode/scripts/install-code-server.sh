#!/usr/bin/env bash
# Install code-server (a real VS Code served to a browser) for the
# extension's end-to-end test, following the recipe that works without the
# hosts its install scripts would download from:
#   - its npm scripts are skipped, then run by hand;
#   - @vscode/ripgrep gets Debian's `rg` (its postinstall would download
#     ripgrep, and skips when bin/ exists);
#   - native modules are rebuilt against this machine's node.
# Pinned: code-server 4.100.3 = VS Code 1.100.3 (later versions need node 24).
# Needs the Debian packages in .ci/apt/editors.txt.
#
# It is cached outside the checkout (a fresh clone reuses it):
#   ${TOOLWIRE_CODE_SERVER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/toolwire/code-server-4.100.3}
# and prints that directory. Idempotent: a finished install is reused.
set -euo pipefail
version=4.100.3
dir="${TOOLWIRE_CODE_SERVER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/toolwire/code-server-$version}"
if [ -f "$dir/.installed" ]; then
  echo "$dir"
  exit 0
fi
for tool in node npm rg make g++ pkg-config; do
  command -v "$tool" >/dev/null || {
    echo "install-code-server.sh: '$tool' is missing: apt-get install \$(cat .ci/apt/editors.txt)" >&2
    exit 1
  }
done
rm -rf "$dir"
mkdir -p "$dir"
cd "$dir"
export npm_config_yes=true npm_config_unsafe_perm=true npm_config_fund=false npm_config_audit=false
npm_quiet=(--no-audit --no-fund --loglevel=error)
echo '{"private":true}' > package.json
npm install "${npm_quiet[@]}" --ignore-scripts "code-server@$version" >&2
cs="$dir/node_modules/code-server"
cd "$cs/lib/vscode"
npm install "${npm_quiet[@]}" --omit=dev --ignore-scripts >&2
mkdir -p node_modules/@vscode/ripgrep/bin
ln -sf "$(command -v rg)" node_modules/@vscode/ripgrep/bin/rg
npm rebuild "${npm_quiet[@]}" >&2
cd extensions
npm install "${npm_quiet[@]}" --omit=dev >&2
# code-server's own native modules (argon2, ...) are hoisted to the top.
cd "$dir"
npm rebuild "${npm_quiet[@]}" >&2
touch "$dir/.installed"
echo "$dir"
