#!/usr/bin/env bash
# Install the pinned Node and Python packages the generated clients (and
# their tests inside `cargo test`) need. Idempotent; fast when up to date.
#   editors/typescript: npm ci (package-lock.json), then its build (dist/)
#   editors/vscode: npm ci (it bundles the built editors/typescript)
#   editors/python: a .venv with requirements.txt
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

command -v node >/dev/null || { echo "install.sh: node (>= 18) is required: apt-get install nodejs npm" >&2; exit 1; }
command -v python3 >/dev/null || { echo "install.sh: python3 (>= 3.11) is required: apt-get install python3 python3-venv" >&2; exit 1; }
python3 -c 'import ensurepip' 2>/dev/null || { echo "install.sh: python3's venv module is incomplete: apt-get install python3-venv" >&2; exit 1; }

npm_ci() {
  if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    npm ci --no-audit --no-fund --loglevel=error
  fi
}
cd "$here/typescript"
npm_ci
if [ ! -f dist/index.mjs ] || [ -n "$(find src package.json -newer dist/index.mjs -print -quit)" ]; then
  npm run -s build
fi
cd "$here/vscode"
npm_ci

cd "$here/python"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if [ ! -f .venv/.installed ] || [ requirements.txt -nt .venv/.installed ]; then
  .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
  touch .venv/.installed
fi
