#!/usr/bin/env bash
# Instruction counts (valgrind's callgrind) of one toolwire binary on fixed
# workloads. The same binary and inputs give the same counts (within about
# 0.05 %) whatever else the machine is doing, so two builds can be compared
# on a loaded machine where wall-clock figures cannot: a refactoring that
# should change nothing shows it here. Needs valgrind (`apt-get install
# valgrind`).
#
#   benches/instructions.sh BIN        e.g. target/release/toolwire
set -euo pipefail
bin=$(realpath "${1:?usage: benches/instructions.sh path/to/toolwire}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# Instructions summed over every callgrind output file named.
ir() { grep -h '^summary:' "$@" | awk '{s += $2} END {print s}'; }
cg() { valgrind --tool=callgrind --callgrind-out-file="$1" "${@:2}" >/dev/null 2>>"$work/valgrind.log"; }

cg "$work/replay.%p" --trace-children=yes "$bin" replay --synthetic 40 --seed 3 --data-dir "$work/data"
echo "replay --synthetic 40 --seed 3 (client and serve): $(ir "$work"/replay.*)"
cg "$work/price.out" "$bin" replay --price anthropic --synthetic 40 --seed 3
echo "replay --price anthropic --synthetic 40 --seed 3: $(ir "$work/price.out")"
transcript=$(ls "$work"/data/sessions/*.jsonl | head -n 1)
cp "$transcript" "$work/t.jsonl"
cg "$work/check.out" "$bin" check "$work/t.jsonl" || true
echo "check of the replay's transcript ($(wc -c <"$work/t.jsonl") bytes): $(ir "$work/check.out")"
cg "$work/repair.out" "$bin" repair --dry-run "$work/t.jsonl" || true
echo "repair --dry-run of the same file: $(ir "$work/repair.out")"
