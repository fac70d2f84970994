#!/usr/bin/env python3
"""Generate tests/data/demo-session.jsonl.gz, the session `toolwire replay`
replays by default.

Deterministic: the same script always writes the same bytes (fixed seed,
gzip mtime 0), and a test checks the committed file against it.

    python3 tests/data/make_demo_session.py            # rewrite the file
    python3 tests/data/make_demo_session.py --check    # exit 1 if stale

The session is an agent fixing a failing build: a cargo build log that
fails at the end, a grep, file dumps, test runs, a screenshot (an image
result, never replaced), a turn the user interrupts mid-tool, a resume
(the server restarts and picks the session up from its transcript), and
the final green test run. Several results exceed 50,000 characters and one
user message carries more than 200,000.
"""
import gzip
import io
import json
import random
import sys
from pathlib import Path

OUT = Path(__file__).with_name("demo-session.jsonl.gz")
rng = random.Random(20261122)
lines = []


def emit(obj):
    lines.append(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))


def user(text):
    emit({"role": "user", "content": text})


def assistant(text, *calls):
    content = [{"type": "text", "text": text}]
    for cid, name, inp in calls:
        content.append({"type": "tool_use", "id": cid, "name": name, "input": inp})
    emit({"role": "assistant", "content": content})


def results(*items):
    emit({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": cid, "content": body} for cid, body in items
    ]})


CRATES = ["serde", "tokio", "bytes", "mio", "syn", "quote", "proc-macro2", "libc", "memchr",
          "itoa", "ryu", "hashbrown", "indexmap", "tracing", "futures-util", "pin-project-lite"]


def build_log(n, fail=True):
    out = []
    for i in range(n):
        c = rng.choice(CRATES)
        v = f"{rng.randint(0, 2)}.{rng.randint(0, 40)}.{rng.randint(0, 20)}"
        out.append(f"   Compiling {c} v{v}")
        if i % 7 == 0:
            out.append(f"warning: unused variable: `tmp{i}`\n  --> src/codec.rs:{rng.randint(10, 900)}:13\n   |\n   = note: `#[warn(unused_variables)]` on by default")
    if fail:
        out.append("error[E0308]: mismatched types\n   --> src/codec.rs:214:24\n    |\n"
                   "214 |         let length: u32 = header.content_length;\n"
                   "    |                     ---   ^^^^^^^^^^^^^^^^^^^^^ expected `u32`, found `usize`\n"
                   "    |                     |\n    |                     expected due to this\n\n"
                   "error: could not compile `wirecodec` (lib) due to 1 previous error")
    return "\n".join(out)


def grep_output(n):
    words = ["content_length", "parse_header", "Frame::new", "decode", "encode", "BytesMut"]
    return "\n".join(
        f"src/{rng.choice(['codec', 'frame', 'server', 'client', 'tests/e2e'])}.rs:{rng.randint(1, 2000)}:"
        f"    let {rng.choice(words)} = {rng.choice(words)}(&mut buf)?; // {rng.randint(0, 99999)}"
        for _ in range(n))


def file_dump(name, n):
    body = []
    for i in range(1, n + 1):
        indent = " " * (4 * rng.randint(0, 3))
        body.append(f"{i:>6}\t{indent}{rng.choice(['let', 'fn', 'match', 'if', 'return', '//'])} "
                    f"{rng.choice(['header', 'buf', 'frame', 'len', 'self.state'])}_{rng.randint(0, 500)};")
    return f"// {name}\n" + "\n".join(body)


def test_run(n, failing):
    out = [f"running {n} tests"]
    for i in range(n):
        status = "FAILED" if i in failing else "ok"
        out.append(f"test codec::tests::case_{i:04} ... {status}")
    out.append(f"\ntest result: {'FAILED' if failing else 'ok'}. {n - len(failing)} passed; {len(failing)} failed; 0 ignored")
    return "\n".join(out)


user("CI is red on main. Please get the build and the tests passing again.")
assistant("Let me build it first.", ("toolu_01build", "Bash", {"command": "cargo build --release 2>&1"}))
results(("toolu_01build", build_log(4200)))
assistant("The build fails in src/codec.rs. Let me look for how the header length is used.",
          ("toolu_02grep", "Grep", {"pattern": "content_length|parse_header", "path": "src"}))
results(("toolu_02grep", grep_output(900)))
assistant("Reading the codec, the frame module and the current test output.",
          ("toolu_03read", "Read", {"file_path": "src/codec.rs"}),
          ("toolu_04read", "Read", {"file_path": "src/frame.rs"}),
          ("toolu_05test", "Bash", {"command": "cargo test 2>&1"}))
results(("toolu_03read", file_dump("src/codec.rs", 1900)),
        ("toolu_04read", file_dump("src/frame.rs", 1200)),
        ("toolu_05test", test_run(2400, {17, 901, 1888})))
assistant("Here is the dashboard the failing test renders.",
          ("toolu_06shot", "Screenshot", {"url": "http://localhost:8080"}))
emit({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_06shot", "content": [
    {"type": "text", "text": "Screenshot of http://localhost:8080 (1280x800)"},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                 "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="}}]}]})
assistant("I'll run the whole workspace test suite.",
          ("toolu_07all", "Bash", {"command": "cargo test --workspace 2>&1"}))
emit({"type": "interrupt", "reason": "user pressed Esc"})
user("Stop, that takes forever. Only run the codec tests, and fix the type first.")
assistant("Fixing the cast in src/codec.rs.",
          ("toolu_08edit", "Edit", {"file_path": "src/codec.rs", "old_string": "let length: u32", "new_string": "let length: usize"}))
results(("toolu_08edit", "The file src/codec.rs has been updated."))
emit({"type": "resume"})
user("I'm back after restarting my editor. Where were we?")
assistant("We fixed the type error; rebuilding and running the codec tests.",
          ("toolu_09build", "Bash", {"command": "cargo build --release 2>&1"}),
          ("toolu_10test", "Bash", {"command": "cargo test codec 2>&1"}))
results(("toolu_09build", build_log(3000, fail=False) + "\n    Finished `release` profile [optimized] target(s) in 41.27s"),
        ("toolu_10test", test_run(2400, set())))
assistant("Everything passes. Let me check the diff once more.",
          ("toolu_11diff", "Bash", {"command": "git diff"}))
results(("toolu_11diff", "diff --git a/src/codec.rs b/src/codec.rs\n-        let length: u32 = header.content_length;\n+        let length: usize = header.content_length;"))
emit({"role": "assistant", "content": [{"type": "text", "text": "Done: the build is green and all 2400 codec tests pass."}]})

raw = ("\n".join(lines) + "\n").encode()
buf = io.BytesIO()
with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
    gz.write(raw)
data = buf.getvalue()

if "--check" in sys.argv:
    if not OUT.exists() or OUT.read_bytes() != data:
        print(f"{OUT} is stale: run python3 {Path(__file__).as_posix()}", file=sys.stderr)
        sys.exit(1)
else:
    OUT.write_bytes(data)
    print(f"wrote {OUT} ({len(data)} bytes, {len(raw)} uncompressed, {len(lines)} lines)")
