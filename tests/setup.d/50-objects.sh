#!/usr/bin/env bash
# The S3-compatible server the object-storage tests start on loopback
# (tests/objects.rs): moto's server mode from PyPI, pinned in
# tests/objects/requirements.txt, in the ignored venv tests/objects/.venv.
# Idempotent; a no-op when up to date (about 10 s when not).
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "$here/pinned-venv.sh" "$here/objects"
