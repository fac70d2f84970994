#!/usr/bin/env bash
# The coding-agent CLIs tests/agents.rs runs through `toolwire proxy`,
# pinned in tests/agents/package-lock.json and installed with `npm ci` into
# tests/agents/node_modules (ignored): Claude Code (@anthropic-ai/claude-code),
# Codex (@openai/codex), Gemini CLI (@google/gemini-cli), pi
# (@mariozechner/pi-coding-agent) and opencode (opencode-ai). npm 11 skips
# their install scripts; each CLI runs without them. Idempotent; a no-op
# when up to date. Needs node >= 20 (Gemini CLI's minimum).
set -euo pipefail
here="$(cd "$(dirname "$0")/../agents" && pwd)"

command -v node >/dev/null || { echo "70-agents.sh: node (>= 20) is required: apt-get install nodejs npm" >&2; exit 1; }
major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 20 ]; then
  echo "70-agents.sh: node $(node --version) is too old: Gemini CLI needs node >= 20" >&2
  exit 1
fi

cd "$here"
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
