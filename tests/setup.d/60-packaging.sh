#!/usr/bin/env bash
# auditwheel, which tests/packaging.rs runs on the wheel packaging/package.py
# builds: a venv in tests/packaging/.venv from the pinned
# tests/packaging/requirements.txt. Idempotent; a no-op when up to date.
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "$here/pinned-venv.sh" "$here/packaging"
