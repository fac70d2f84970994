#!/usr/bin/env bash
# README's test command: everything from a fresh Debian machine to the last
# test. In order:
#   1. the Debian packages of .ci/apt/*.txt: installed when this can (root,
#      or sudo without a password), otherwise it stops before building
#      anything, naming every missing package and the one command that
#      installs them (a list of all of them, so a second run never finds
#      the next one missing);
#   2. tests/setup.sh: the pinned npm and PyPI packages of the tests;
#   3. `cargo test --no-fail-fast`: every test target runs even when one
#      fails, so one failure never hides the others;
#   4. the test targets that apply to the shared store again, on a real
#      PostgreSQL (docs/testing.md).
# Exits non-zero when any step failed, after running every step it could.
#
# TOOLWIRE_APT_INSTALL=no only checks the packages, never installs them (for
# a machine whose packages you manage yourself).
set -uo pipefail
cd "$(dirname "$0")/.."

# --- 1. Debian packages --------------------------------------------------
shopt -s nullglob
wanted=()
for list in .ci/apt/*.txt; do
  # One name a line; `#` starts a comment.
  wanted+=($(sed 's/#.*//' "$list"))
done
mapfile -t wanted < <(printf '%s\n' "${wanted[@]}" | sed '/^$/d' | sort -u)

# The packages of $wanted that dpkg does not have installed, one a line.
# A name counts as installed when an installed package provides it too
# (nodesource's nodejs provides `npm` without a package of that name).
missing_packages() {
  local have
  have="$(dpkg-query -W -f='${db:Status-Status} ${Package},${Provides}\n' 2>/dev/null |
    awk '$1 == "installed" { $1 = ""; print }' | tr ',' '\n' |
    sed 's/([^)]*)//g; s/:[a-z0-9]*$//; s/^ *//; s/ *$//' | sort -u)"
  for pkg in "${wanted[@]}"; do
    grep -qxF -- "$pkg" <<<"$have" || echo "$pkg"
  done
}

if ! command -v dpkg-query >/dev/null; then
  echo "tests/run.sh: no dpkg-query, so this is not Debian: the tests need the equivalents of these Debian packages: ${wanted[*]}" >&2
else
  mapfile -t missing < <(missing_packages)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then sudo=(); else sudo=(sudo); fi
    install=("${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}")
    if [ "${TOOLWIRE_APT_INSTALL:-yes}" != no ] && { [ ${#sudo[@]} -eq 0 ] || sudo -n true 2>/dev/null; }; then
      echo "tests/run.sh: installing the missing Debian packages: ${missing[*]}" >&2
      export DEBIAN_FRONTEND=noninteractive
      if ! "${sudo[@]}" apt-get update -qq || ! "${install[@]}" -qq; then
        echo "tests/run.sh: installing them failed (above); nothing was built or tested" >&2
        exit 1
      fi
      mapfile -t still < <(missing_packages)
      if [ ${#still[@]} -gt 0 ]; then
        echo "tests/run.sh: apt-get succeeded but these are still not installed: ${still[*]}; nothing was built or tested" >&2
        exit 1
      fi
    else
      {
        echo "tests/run.sh: ${#missing[@]} Debian package(s) the tests need are missing: ${missing[*]}"
        echo "Install them all with:"
        echo "  ${sudo[*]}${sudo[*]:+ }apt-get update && ${install[*]}"
        echo "then run this again. Nothing was built or tested."
      } >&2
      exit 1
    fi
  fi
fi

if ! command -v cargo >/dev/null; then
  echo "tests/run.sh: no cargo on PATH: install Rust $(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml) or newer with rustup (https://rustup.rs), then run this again" >&2
  exit 1
fi

# --- 2-4. set-up, the suite, the shared-store matrix ----------------------
failed=()
./tests/setup.sh || failed+=("tests/setup.sh")
cargo test --no-fail-fast || failed+=("cargo test")
TOOLWIRE_TEST_BACKEND=postgres cargo test --no-fail-fast \
  --test budget --test state --test tools --test artifact --test faults \
  --test formats --test gc --test objects --test protocol --test transcripts \
  --test pair || failed+=("the PostgreSQL matrix")

if [ ${#failed[@]} -gt 0 ]; then
  echo "tests/run.sh: failed: ${failed[*]} (each step's own output above says what)" >&2
  exit 1
fi
echo "tests/run.sh: every step passed"
