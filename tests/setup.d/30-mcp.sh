#!/usr/bin/env bash
# Third-party MCP software the `toolwire mcp` tests run (tests/mcp.rs),
# pinned, installed into ignored folders of tests/mcp/:
#   node_modules/  @modelcontextprotocol/server-everything (package-lock.json)
#   .venv/         the official Python SDK, `mcp` (requirements.txt)
# Idempotent; a no-op when up to date. Needs node >= 18 and python3 >= 3.10.
set -euo pipefail
here="$(cd "$(dirname "$0")/../mcp" && pwd)"

command -v node >/dev/null || { echo "30-mcp.sh: node (>= 18) is required: apt-get install nodejs npm" >&2; exit 1; }
command -v python3 >/dev/null || { echo "30-mcp.sh: python3 (>= 3.10) is required: apt-get install python3 python3-venv" >&2; exit 1; }

cd "$here"
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if [ ! -f .venv/.installed ] || [ requirements.txt -nt .venv/.installed ]; then
  .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
  touch .venv/.installed
fi
