#!/usr/bin/env python3
"""Clearing measured on real public agent sessions (docs/clearing.md).

    sessions.py extract MIRRORS   # sessions.tsv's files, from git mirrors, into $TOOLWIRE_SESSIONS
    sessions.py price             # every session (and --synthetic ones) priced with the defaults
    sessions.py sweep             # the same per keepRecent / minChars / triggerChars value

The sessions are never committed here: `sessions.tsv` names each one
(repository, commit, path) and `extract` reads them from mirrors of those
repositories (`MIRRORS/<owner>+<name>/repo`, a bare git directory as the
search tool's fetch leaves it) into the directory $TOOLWIRE_SESSIONS
(default /work/sessions). Files `toolwire replay` reads as they are (`native`:
pi sessions, Codex CLI rollouts, Claude Code session files) are copied; two
export shapes it does not read are converted into plain Anthropic messages,
keeping every tool call and result as recorded: `engram` (a Claude Code
session exported one block a line by the Engram hook) and `gemini-stream`
(Gemini CLI's `--output-format stream-json`).

`before-compaction-N` is a Claude Code session file cut just before its Nth
`compact_boundary` line, then read natively. Replay reads a Claude Code file
as Claude Code resumes it: the main line from its last message back to the
latest compaction, so a long session that compacted would be priced on its
last stretch only. Cut before a boundary, the same walk yields the stretch
that ended there (from the compaction before it, if any): the conversation
as Claude Code sent it up to that compaction, every line as recorded.

Pricing runs `toolwire replay --price PROVIDER --json` ($TOOLWIRE, default
target/release/toolwire else target/debug/toolwire) on each file.
"""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SESSIONS = Path(os.environ.get("TOOLWIRE_SESSIONS", "/work/sessions"))
SYNTHETIC = [(200, 1), (300, 2)]  # heavy sessions: (turns, seed)


def manifest():
    rows = []
    for line in (HERE / "sessions.tsv").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, agent, shape, repo, commit, path = line.split("\t")
        rows.append(dict(name=name, agent=agent, shape=shape, repo=repo, commit=commit, path=path))
    return rows


def engram_to_messages(lines):
    """One block a line ({role, content: block}) into Anthropic messages."""
    messages = []

    def put(role, block):
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": role, "content": [block]})

    for line in lines:
        entry = json.loads(line)
        block = entry.get("content") or {}
        kind = block.get("type")
        if entry.get("role") == "assistant" and kind == "text":
            put("assistant", {"type": "text", "text": block["text"]})
        elif entry.get("role") == "assistant" and kind == "tool_use":
            put("assistant", {"type": "tool_use", "id": block["tool_id"], "name": block["tool_name"],
                              "input": block.get("input") or {}})
        elif entry.get("role") == "tool" and kind == "tool_result":
            out = block.get("output")
            put("user", {"type": "tool_result", "tool_use_id": block["tool_id"],
                         "content": out if isinstance(out, str) else json.dumps(out),
                         **({"is_error": True} if block.get("is_error") else {})})
        elif entry.get("role") == "user" and kind == "text":
            put("user", {"type": "text", "text": block["text"]})
        # thinking blocks carry no signature in the export: left out
    return messages


def gemini_stream_to_messages(lines):
    """Gemini CLI stream-json events into Anthropic messages."""
    messages = []

    def put(role, block):
        if messages and messages[-1]["role"] == role:
            last = messages[-1]["content"]
            if block["type"] == "text" and last and last[-1]["type"] == "text" and role == "assistant":
                last[-1]["text"] += block["text"]  # streamed deltas
            else:
                last.append(block)
        else:
            messages.append({"role": role, "content": [block]})

    for line in lines:
        event = json.loads(line)
        kind = event.get("type")
        if kind == "message" and event.get("role") in ("user", "assistant"):
            text = event.get("content")
            if isinstance(text, str) and text:
                put(event["role"], {"type": "text", "text": text})
        elif kind == "tool_use":
            put("assistant", {"type": "tool_use", "id": event["tool_id"], "name": event["tool_name"],
                              "input": event.get("parameters") or {}})
        elif kind == "tool_result":
            out = event.get("output")
            put("user", {"type": "tool_result", "tool_use_id": event["tool_id"],
                         "content": out if isinstance(out, str) else json.dumps(out),
                         **({"is_error": True} if event.get("status") == "error" else {})})
    return messages


def before_compaction(raw, n):
    """The lines of a Claude Code session before its nth compaction boundary."""
    lines = raw.splitlines(keepends=True)
    seen = 0
    for i, line in enumerate(lines):
        if b'"compact_boundary"' in line and json.loads(line).get("subtype") == "compact_boundary":
            seen += 1
            if seen == n:
                return b"".join(lines[:i])
    sys.exit(f"the session has {seen} compaction(s), not {n}")


def extract(mirrors):
    SESSIONS.mkdir(parents=True, exist_ok=True)
    for row in manifest():
        git = Path(mirrors) / row["repo"].replace("/", "+") / "repo"
        raw = subprocess.run(["git", "-C", str(git), "show", f"{row['commit']}:{row['path']}"],
                             check=True, capture_output=True).stdout
        out = SESSIONS / f"{row['name']}.jsonl"
        if row["shape"] == "native":
            out.write_bytes(raw)
        elif row["shape"].startswith("before-compaction-"):
            out.write_bytes(before_compaction(raw, int(row["shape"].rsplit("-", 1)[1])))
        else:
            convert = engram_to_messages if row["shape"] == "engram" else gemini_stream_to_messages
            messages = convert(raw.decode().splitlines())
            out.write_text("".join(json.dumps(m) + "\n" for m in messages))
        print(f"{row['name']}: {out} ({out.stat().st_size} bytes)")


def toolwire():
    if "TOOLWIRE" in os.environ:
        return os.environ["TOOLWIRE"]
    for build in ("release", "debug"):
        exe = ROOT / "target" / build / "toolwire"
        if exe.exists():
            return str(exe)
    sys.exit("no toolwire build: cargo build --release")


def price_one(target, provider="anthropic", flags=()):
    args = [toolwire(), "replay", "--price", provider, "--json", *flags]
    args += ["--synthetic", str(target[0]), "--seed", str(target[1])] if isinstance(target, tuple) else [str(target)]
    out = subprocess.run(args, check=True, capture_output=True, text=True, cwd="/").stdout
    return json.loads(out)


def targets():
    real = [(row["name"], row["agent"], SESSIONS / f"{row['name']}.jsonl") for row in manifest()]
    heavy = [(f"synthetic-{t}-s{s}", "synthetic", (t, s)) for t, s in SYNTHETIC]
    return real, heavy


def run_all(flags=(), provider="anthropic"):
    real, heavy = targets()
    with ThreadPoolExecutor(2) as pool:
        figures = list(pool.map(lambda t: price_one(t[2], provider, flags), real + heavy))
    return [(name, agent, f) for (name, agent, _), f in zip(real + heavy, figures)]


def captured(raw, cleared, floor):
    """The share of the avoidable cost (raw - floor) clearing saves."""
    return (raw - cleared) / (raw - floor) if raw > floor else 1.0


def pooled(rows, way="auto"):
    """Pooled over sessions: priced input vs raw, and the share of the
    avoidable cost (raw - floor) the way (`auto` or `batch`) saves."""
    raw = sum(f["raw"]["priced"] for _, _, f in rows)
    cleared = sum(f[way]["priced"] for _, _, f in rows)
    floor = sum(f["floor"]["priced"] for _, _, f in rows)
    return cleared / raw, captured(raw, cleared, floor)


def price(provider="anthropic"):
    rows = run_all(provider=provider)
    print(f"priced for {provider}\n")
    print("| session | agent | requests | tool output | budget | batch | auto | floor | batch captured | auto captured | recoverable |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, agent, f in rows:
        print(f"| {name} | {agent} | {f['requests']} | {f['toolOutputBytes'] / 1e6:.2f} MB | "
              f"{f['budget']['vsRaw']:.3f}× | {f['batch']['vsRaw']:.3f}× | {f['auto']['vsRaw']:.3f}× | "
              f"{f['floor']['vsRaw']:.3f}× | {f['batch']['captured'] * 100:.0f}% | "
              f"{f['auto']['captured'] * 100:.0f}% | {f['auto']['recoverable'] * 100:.0f}% |")
    real = [r for r in rows if r[1] != "synthetic"]
    for label, subset in (("real", real), ("real + heavy", rows)):
        for way in ("batch", "auto"):
            ratio, share = pooled(subset, way)
            print(f"\n{label}: {way} {ratio:.3f}× raw, {share * 100:.1f}% of the avoidable cost", end="")
        worst = max(subset, key=lambda r: r[2]["auto"]["vsRaw"])
        print(f"\n{label}: auto's highest session {worst[0]} at {worst[2]['auto']['vsRaw']:.4f}× raw")


# Each setting `auto` reads moved away from its default (3, 1000), one at a
# time (triggerChars is `batch`'s alone).
SWEEP = {
    "keep-recent": [1, 2, 5, 8],
    "min-chars": [200, 500, 2000, 4000],
}


def sweep(provider="anthropic"):
    print(f"priced for {provider}\n")
    print("| setting | value | way | real: vs raw | real: captured | real + heavy: vs raw |")
    print("|---|---:|---|---:|---:|---:|")
    for key, values in SWEEP.items():
        for value in values:
            rows = run_all(flags=(f"--{key}", str(value)), provider=provider)
            real = [r for r in rows if r[1] != "synthetic"]
            for way in ("batch", "auto"):
                ratio, share = pooled(real, way)
                mixed, _ = pooled(rows, way)
                print(f"| {key} | {value} | {way} | {ratio:.3f}× | {share * 100:.1f}% | {mixed:.3f}× |", flush=True)


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "price"
    if command == "extract":
        extract(sys.argv[2])
    elif command == "price":
        price(*sys.argv[2:3])
    elif command == "sweep":
        sweep(*sys.argv[2:3])
    else:
        sys.exit(__doc__)
