#!/usr/bin/env bash
# The official provider SDKs (Python) that tests/proxy.rs points at
# `toolwire proxy`: a venv in tests/proxy/.venv from the pinned
# tests/proxy/requirements.txt. Idempotent; a no-op when up to date.
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "$here/pinned-venv.sh" "$here/proxy"
