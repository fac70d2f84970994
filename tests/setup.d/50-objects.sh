#!/usr/bin/env bash
# The S3-compatible server the object-storage tests start on loopback
# (tests/objects.rs): moto's server mode from PyPI, pinned in
# tests/objects/requirements.txt, in the ignored venv tests/objects/.venv.
# Idempotent; a no-op when up to date (about 10 s when not).
set -euo pipefail
here="$(cd "$(dirname "$0")/../objects" && pwd)"
command -v python3 >/dev/null || { echo "50-objects.sh: python3 (>= 3.9) is required: apt-get install python3 python3-venv" >&2; exit 1; }
cd "$here"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if [ ! -f .venv/.installed ] || [ requirements.txt -nt .venv/.installed ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
  touch .venv/.installed
fi
