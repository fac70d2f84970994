#!/usr/bin/env bash
# The coding-agent CLIs tests/agents.rs runs through `toolwire proxy`,
# pinned and installed into ignored node_modules folders:
#   tests/agents/           Claude Code (@anthropic-ai/claude-code), Codex
#                           (@openai/codex), Gemini CLI (@google/gemini-cli)
#                           and pi (@mariozechner/pi-coding-agent), `npm ci`
#                           from package-lock.json;
#   tests/agents/opencode/  opencode (opencode-ai), `npm install` from its
#                           package-lock.json: the registry answers only some
#                           of its per-platform optional packages, so the lock
#                           cannot list them all and `npm ci` refuses it;
#                           `npm install` keeps the locked versions.
# npm 11 skips their install scripts; each CLI runs without them.
# Idempotent; a no-op when up to date. Needs node >= 20 (Gemini CLI's
# minimum).
set -euo pipefail
here="$(cd "$(dirname "$0")/../agents" && pwd)"

command -v node >/dev/null || { echo "70-agents.sh: node (>= 20) is required: apt-get install nodejs npm" >&2; exit 1; }
major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 20 ]; then
  echo "70-agents.sh: node $(node --version) is too old: Gemini CLI needs node >= 20" >&2
  exit 1
fi

# npm and what the packages run on install keep scratch files under
# $TMPDIR (opencode's `opencode/` and its runtime's extracted `.so`): in a
# directory of their own, removed after, not in the suite's TMPDIR.
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
export TMPDIR="$scratch"

stale() { [ ! -d "$1/node_modules" ] || [ "$1/package-lock.json" -nt "$1/node_modules/.package-lock.json" ]; }
if stale "$here"; then
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
fi
if stale "$here/opencode"; then
  (cd "$here/opencode" && npm install --no-audit --no-fund --loglevel=error)
fi
