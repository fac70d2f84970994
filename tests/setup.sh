#!/usr/bin/env bash
# Install the project-local test dependencies (pinned npm and PyPI packages,
# into ignored folders of this checkout). Each part is one script under
# tests/setup.d/, run in name order; a part that fails is reported by name
# and the others still run, so the tests that do not need it can still pass.
# System packages (Debian) that some tests need are listed in .ci/apt/*.txt;
# tests/run.sh (README's test command) installs them before it runs this,
# and each part says which it needs when one is missing.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
failed=()
for part in "$here"/setup.d/*.sh; do
  [ -e "$part" ] || continue
  if ! bash "$part"; then
    failed+=("$(basename "$part")")
  fi
done
# A failed part does not stop README's test command (tests/run.sh):
# the tests that need it fail, saying which command fixes it, and every
# other test still runs.
if [ ${#failed[@]} -gt 0 ]; then
  echo "tests/setup.sh: these parts failed: ${failed[*]}; the tests that need them will fail and say how to fix it, every other test still runs" >&2
fi
exit 0
