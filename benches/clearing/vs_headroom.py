#!/usr/bin/env python3
"""Headroom through the same sessions and the same cost model as
`toolwire replay --price` (docs/clearing.md).

    HEADROOM_OFFLINE=1 VENV/bin/python vs_headroom.py [SESSION.jsonl ...]

Run it with the Python of a virtual environment outside this repository
that has `pip install headroom-ai` (it is not a dependency of toolwire).
Without arguments it takes the real sessions of sessions.tsv from
$TOOLWIRE_SESSIONS, converted to plain Anthropic messages by
`toolwire import` where needed.

Each model request (the conversation up to each assistant message) goes
through Headroom the way its proxy's compress endpoint drives it in its
cache-safe (replayable prefix) posture: `prepare_turn` freezes what was
already returned, `compress` runs its default pipeline on the rest,
`finalize_turn` replays the previous turn's bytes over any drift, and the
session's compression cache learns the result. Every request is then priced
like `replay --price` does: compact JSON per message plus one separator
byte, the longest byte prefix shared with the previous request read from
the cache (Anthropic: 0.1x), the rest written (1.25x).

Recoverable: the share of tool-output bytes sent whole in the last request.
Headroom keeps what its markers removed in the process's memory (CCR), which
a restart loses, so it is not counted.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HEADROOM_OFFLINE", "1")

from headroom import compress  # noqa: E402
from headroom.cache.compression_cache import CompressionCache  # noqa: E402
from headroom.proxy.session_engine import (  # noqa: E402
    FREEZE_POLICY_REPLAYABLE,
    finalize_turn,
    prepare_turn,
)

HERE = Path(__file__).resolve().parent
SESSIONS = Path(os.environ.get("TOOLWIRE_SESSIONS", "/work/sessions"))
READ, WRITE = 0.1, 1.25
STUB = "[output cleared]"


def dumps(message):
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


def load(path):
    """Plain Anthropic messages: as they are, or (a pi session) through
    `toolwire import --from openclaw`."""
    lines = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    if lines and all("role" in m for m in lines):
        return lines
    exe = os.environ.get("TOOLWIRE", str(HERE.parent.parent / "target/debug/toolwire"))
    out = subprocess.run([exe, "import", "--from", "openclaw", str(path)], check=True, capture_output=True, text=True).stdout
    return [json.loads(line)["message"] for line in out.splitlines()
            if line.strip() and json.loads(line).get("type") == "message"]


class Priced:
    def __init__(self):
        self.previous = []
        self.priced = 0.0

    def request(self, sent):
        sent = [m.encode() for m in sent]
        prefix, total = 0, sum(len(m) + 1 for m in sent)
        for old, new in zip(self.previous, sent):
            if old == new:
                prefix += len(old) + 1
                continue
            prefix += len(os.path.commonprefix([old, new]))
            break
        prefix = min(prefix, total)
        self.priced += prefix * READ + (total - prefix) * WRITE
        self.previous = sent


def results_of(message):
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def text_of(block):
    c = block.get("content")
    return c if isinstance(c, str) else json.dumps(c, separators=(",", ":"), ensure_ascii=False)


def stubbed(message):
    if not results_of(message):
        return message
    out = dict(message)
    out["content"] = [dict(b, content=STUB) if b.get("type") == "tool_result" else b for b in message["content"]]
    return out


def run(path):
    messages = load(path)
    raw, floor, headroom = Priced(), Priced(), Priced()
    cache = CompressionCache()
    prev_original = prev_returned = None
    final = []
    requests = 0
    for k, message in enumerate(messages):
        if message.get("role") != "assistant" or k == 0:
            continue
        requests += 1
        history = messages[:k]
        raw.request([dumps(m) for m in history])
        floor.request([dumps(stubbed(m)) for m in history])
        prep = prepare_turn(cache, history, policy=FREEZE_POLICY_REPLAYABLE)
        result = compress(prep.pipeline_input, model="claude-sonnet-4-5-20250929",
                          frozen_message_count=prep.frozen_message_count)
        final = finalize_turn(result.messages, history, prev_original, prev_returned).messages
        cache.update_from_result(history, final)
        prev_original, prev_returned = history, final
        headroom.request([dumps(m) for m in final])
    originals = {b["tool_use_id"]: text_of(b) for m in messages for b in results_of(m)}
    whole = sum(len(text_of(b).encode()) for m in final for b in results_of(m)
                if originals.get(b.get("tool_use_id")) == text_of(b))
    total = sum(len(t.encode()) for t in originals.values()) or 1
    avoidable = raw.priced - floor.priced
    return {
        "session": Path(path).stem,
        "requests": requests,
        "raw": raw.priced,
        "floor": floor.priced,
        "headroom": headroom.priced,
        "vsRaw": headroom.priced / raw.priced if raw.priced else 1.0,
        "captured": (raw.priced - headroom.priced) / avoidable if avoidable > 0 else 1.0,
        "recoverable": whole / total,
    }


def main():
    paths = sys.argv[1:]
    if not paths:
        rows = [line.split("\t") for line in (HERE / "sessions.tsv").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
        paths = [str(SESSIONS / f"{row[0]}.jsonl") for row in rows]
    print("| session | requests | Headroom vs raw | captured | recoverable |")
    print("|---|---:|---:|---:|---:|")
    figures = []
    for path in paths:
        f = run(path)
        figures.append(f)
        print(f"| {f['session']} | {f['requests']} | {f['vsRaw']:.2f}× | {f['captured'] * 100:.0f}% | "
              f"{f['recoverable'] * 100:.0f}% |", flush=True)
    raw = sum(f["raw"] for f in figures)
    floor = sum(f["floor"] for f in figures)
    head = sum(f["headroom"] for f in figures)
    print(f"\npooled: Headroom {head / raw:.3f}× raw, {(raw - head) / (raw - floor) * 100:.1f}% of the avoidable cost")


if __name__ == "__main__":
    main()
