#!/usr/bin/env bash
# The generated TypeScript and Python clients' packages.
exec "$(dirname "$0")/../../editors/install.sh"
