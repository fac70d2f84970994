#!/usr/bin/env bash
# The LiteLLM proxy and the official provider SDKs that
# editors/python/tests/test_litellm.py (run by tests/litellm.rs) drives: a
# venv in tests/litellm/.venv from the pinned tests/litellm/requirements.txt.
# Idempotent; a no-op when up to date.
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "$here/pinned-venv.sh" "$here/litellm"
