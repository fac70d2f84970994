#!/usr/bin/env bash
# A venv in DIR/.venv with DIR/requirements.txt installed (pinned PyPI
# packages a test needs), for the parts of tests/setup.d. Idempotent; a
# no-op when the venv is newer than the requirements.
#   tests/pinned-venv.sh DIR
set -euo pipefail
dir="$1"
part="$(basename "$dir")"
command -v python3 >/dev/null || { echo "setup of tests/$part: python3 is required: apt-get install python3 python3-venv" >&2; exit 1; }
cd "$dir"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if [ ! -f .venv/.installed ] || [ requirements.txt -nt .venv/.installed ]; then
  # Through the venv's python: a copied venv's pip script may point at another venv.
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
  touch .venv/.installed
fi
