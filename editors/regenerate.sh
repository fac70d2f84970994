#!/usr/bin/env bash
# Regenerate every published artifact from the Rust types, in order:
# schema/ (JSON Schemas + OpenRPC), the TypeScript types and method table
# (editors/typescript/src/{protocol,methods}.ts), the Python models.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/editors/install.sh"
cd "$root" && cargo run --quiet -- schema --out schema
cd "$root/editors/typescript" && npm run -s gen
cd "$root/editors/python" && .venv/bin/python generate.py
