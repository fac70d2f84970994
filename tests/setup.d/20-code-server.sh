#!/usr/bin/env bash
# code-server 4.100.3 (a real VS Code) for the VS Code extension's test,
# cached outside the checkout; needs the Debian packages of .ci/apt/editors.txt.
exec "$(dirname "$0")/../../editors/vscode/scripts/install-code-server.sh" >/dev/null
