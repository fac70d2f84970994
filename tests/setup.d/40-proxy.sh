#!/usr/bin/env bash
# The official provider SDKs (Python) that tests/proxy.rs points at
# `toolwire proxy`: a venv in tests/proxy/.venv from the pinned
# tests/proxy/requirements.txt. Idempotent; a no-op when up to date.
set -euo pipefail
here="$(cd "$(dirname "$0")/../proxy" && pwd)"
command -v python3 >/dev/null || { echo "40-proxy.sh: python3 (>= 3.9) is required: apt-get install python3 python3-venv" >&2; exit 1; }
cd "$here"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if [ ! -f .venv/.installed ] || [ requirements.txt -nt .venv/.installed ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
  touch .venv/.installed
fi
