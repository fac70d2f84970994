#!/usr/bin/env python3
"""Peak memory and time of the file commands (`check`, `repair`, `import`).

    python3 benches/file_commands.py generate DIR
    python3 benches/file_commands.py measure TOOLWIRE_BIN DIR

`generate` writes, deterministically, a ~56 MB transcript of 200,000
call/result pairs (`pairs.jsonl`), the same with one call in 1,000 left
unanswered (`broken.jsonl`), a ~48 MB file of bare messages, one a line
(`messages.jsonl`), and a session of each agent `import` reads (about 55 MB
each, one call in 1,000 unanswered, a compaction after
the first turns; the shapes of tests/data/import and tests/file_memory.rs):
`claude-code.jsonl`, `codex.jsonl`, `gemini-cli.jsonl`, `openclaw.jsonl`, and
the older single-JSON Gemini CLI record of the same turns,
`gemini-cli-legacy.json`. `measure` runs each command as its own process and
reads its peak resident set from wait4's rusage (ru_maxrss, the kernel's
VmHWM of that child), printing peak / (64 MB + the file's largest line).
"""

import json
import os
import shutil
import sys
import time

PAIRS = 200_000


def pair(i, answered=True):
    call = {
        "role": "assistant",
        "content": [
                        {"type": "tool_use", "id": f"toolu_{i:010d}", "name": "Read",
             "input": {"path": f"src/m{i % 977}.rs"}},
        ],
    }
    result = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i:010d}",
             "content": f"fn f{i}() {{ {i * 7919 % 100003} }}"},
        ],
    }
    if not answered:
        result = {"role": "user", "content": f"go on {i}"}
    return call, result


def write_jsonl(path, lines):
    with open(path, "w") as f:
        for line in lines:
            f.write(json.dumps(line, separators=(",", ":")))
            f.write("\n")


def transcript(broken):
    for i in range(PAIRS):
        call, result = pair(i, answered=not (broken and i % 1000 == 7))
        yield {"type": "message", "message": call}
        yield {"type": "message", "message": result}


def messages():
    for i in range(PAIRS):
        call, result = pair(i)
        call["content"][0]["input"]["why"] = f"step {i}"
        yield call
        yield result


# Turns of each agent's session: about 55 MB each.
TURNS = {"claude-code": 16_000, "codex": 27_000, "gemini-cli": 17_500, "openclaw": 32_000}
COMPACT_AFTER = 10


def output(i):
    return f"fn f{i}() {{ {i * 7919 % 100003} }}\n" * 40


def claude_code(turns):
    def uuid(i, k):
        return f"c{i:08d}-0000-4000-8000-{k:012d}"
    parent = None
    for i in range(turns):
        def base(kind, parent, k):
            return {"parentUuid": parent, "isSidechain": False, "userType": "external",
                    "cwd": "/home/dev/shop", "sessionId": "7f3c2a10-5b7e-4c1d-9a2e-0d4b6c8e1f20",
                    "version": "2.0.31", "type": kind, "uuid": uuid(i, k),
                    "timestamp": "2026-11-20T09:00:00.000Z"}
        if i == COMPACT_AFTER:
            boundary = base("system", None, 9)
            boundary.update(subtype="compact_boundary", logicalParentUuid=parent)
            yield boundary
            parent = uuid(i, 9)
        line = base("user", parent, 1)
        line["message"] = {"role": "user", "content": f"step {i}: read src/m{i % 977}.rs"}
        yield line
        mid, call = f"msg_{i:010d}", f"toolu_{i:010d}"
        line = base("assistant", uuid(i, 1), 2)
        line["message"] = {"id": mid, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                           "content": [{"type": "thinking", "thinking": f"Read m{i}.", "signature": "EqQBCkYIBxgCKkB9"}],
                           "stop_reason": None, "usage": {"input_tokens": 3, "output_tokens": 1}}
        yield line
        line = base("assistant", uuid(i, 2), 3)
        line["message"] = {"id": mid, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                           "content": [{"type": "tool_use", "id": call, "name": "Read",
                                        "input": {"file_path": f"src/m{i % 977}.rs"}}],
                           "stop_reason": "tool_use", "usage": {"input_tokens": 3, "output_tokens": 40}}
        yield line
        yield {"type": "progress", "uuid": uuid(i, 7), "parentUuid": uuid(i, 3), "data": {"type": "hook_progress"}}
        if i % 50 == 0:
            side = base("user", None, 8)
            side.update(isSidechain=True, message={"role": "user", "content": "a sub-agent's prompt"})
            yield side
        line = base("user", uuid(i, 3), 4)
        if i % 1000 != 7:
            line["message"] = {"role": "user", "content": [{"tool_use_id": call, "type": "tool_result", "content": output(i)}]}
        else:
            line["message"] = {"role": "user", "content": [{"type": "text", "text": "[Request interrupted by user]"}]}
        line["toolUseResult"] = {"type": "text"}
        yield line
        line = base("assistant", uuid(i, 4), 5)
        line["message"] = {"id": f"msg_r{i:010d}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                           "content": [{"type": "text", "text": f"Read m{i}."}], "stop_reason": "end_turn",
                           "usage": {"input_tokens": 5, "output_tokens": 4}}
        yield line
        parent = uuid(i, 5)


def codex(turns):
    def line(kind, payload):
        return {"timestamp": "2026-11-20T09:58:00.000Z", "type": kind, "payload": payload}
    yield line("session_meta", {"id": "019a8f3e-2b7c-7d10-9c4e-5a1b2c3d4e5f", "cwd": "/home/dev/shop",
                                "originator": "codex_cli_rs", "cli_version": "0.63.0"})
    for i in range(turns):
        if i == COMPACT_AFTER:
            yield line("compacted", {"message": "", "replacement_history": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Where is the checkout code?"}]},
                {"type": "compaction_summary", "encrypted_content": "gAAAAABpQ"}]})
        yield line("turn_context", {"cwd": "/home/dev/shop", "approval_policy": "on-request", "model": "gpt-5.1-codex"})
        call = f"call_{i:010d}"
        yield line("response_item", {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": f"step {i}: read src/m{i % 977}.rs"}]})
        yield line("response_item", {"type": "reasoning", "summary": [{"type": "summary_text", "text": f"Reading m{i}"}],
                                     "content": None, "encrypted_content": "gAAAAABpQxyz"})
        yield line("response_item", {"type": "function_call", "name": "shell",
                                     "arguments": json.dumps({"command": ["cat", f"src/m{i % 977}.rs"]}), "call_id": call})
        if i % 1000 != 7:
            yield line("response_item", {"type": "function_call_output", "call_id": call, "output": output(i)})
        yield line("response_item", {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": f"Read m{i}."}]})
        yield line("event_msg", {"type": "token_count", "info": None})


def gemini_cli(turns):
    yield {"sessionId": "5d1e9f2a-8c3b-4e7d-a6f0-2b9c4d8e1a37", "projectHash": "b3f1c9d27a4e",
           "startTime": "2026-11-20T11:00:00.000Z", "lastUpdated": "2026-11-20T11:00:00.000Z", "kind": "main"}
    for i in range(turns):
        if i == COMPACT_AFTER:
            yield {"$set": {"messages": [{"id": "c-01", "type": "user", "content": [{"text": "<state_snapshot>goal</state_snapshot>"}]}]}}
        yield {"id": f"u-{i}", "timestamp": "2026-11-20T11:07:00.000Z", "type": "user",
               "content": [{"text": f"step {i}: read src/m{i % 977}.rs"}]}
        yield {"$set": {"lastUpdated": "2026-11-20T11:07:00.000Z"}}
        call = f"read_file-{i:010d}"
        args = {"absolute_path": f"/home/dev/shop/src/m{i % 977}.rs"}
        content = [{"text": f"**Reading** m{i}", "thought": True},
                   {"functionCall": {"id": call, "name": "read_file", "args": args}, "thoughtSignature": "CiQBjz1rX0Jm2Vq8"}]

        def model(calls):
            return {"id": f"g-{i}", "timestamp": "2026-11-20T11:07:05.000Z", "type": "gemini", "content": content,
                    "toolCalls": calls, "thoughts": [], "model": "gemini-2.5-pro"}
        yield model([{"id": call, "name": "read_file", "args": args, "status": "executing"}])
        response = [{"functionResponse": {"id": call, "name": "read_file", "response": {"output": output(i)}}}]
        if i % 1000 != 7:
            yield model([{"id": call, "name": "read_file", "args": args, "result": response, "status": "success"}])
            yield {"id": f"r-{i}", "type": "user", "content": response}
        else:
            yield model([{"id": call, "name": "read_file", "args": args, "status": "cancelled"}])


def openclaw(turns):
    yield {"type": "session", "version": 3, "id": "e2b7c4d1-6f3a-4a8e-9b21-3c5d7e9f1a2b",
           "timestamp": "2026-11-20T12:00:00.000Z", "cwd": "/home/dev/shop"}
    n, parent, first_kept = 0, None, None
    for i in range(turns):
        entries = []
        if i == COMPACT_AFTER:
            entries.append({"type": "compaction", "summary": "## Goal\nRead the files.",
                            "firstKeptEntryId": first_kept, "tokensBefore": 155210})
        call = f"toolu_{i:010d}"
        entries.append({"message": {"role": "user", "content": f"step {i}: read src/m{i % 977}.rs", "timestamp": 1763640001000}})
        entries.append({"message": {"role": "assistant", "content": [
            {"type": "text", "text": f"Reading m{i}."},
            {"type": "toolCall", "id": call, "name": "read", "arguments": {"path": f"src/m{i % 977}.rs"}}],
            "api": "anthropic-messages", "model": "claude-sonnet-4-5", "stopReason": "toolUse", "timestamp": 1763640005000}})
        if i % 1000 != 7:
            entries.append({"message": {"role": "toolResult", "toolCallId": call, "toolName": "read",
                                        "content": [{"type": "text", "text": output(i)}], "isError": False,
                                        "timestamp": 1763640006000}})
        for fields in entries:
            n += 1
            entry = {"type": "message", "id": f"{n:08x}", "parentId": parent, "timestamp": "2026-11-20T12:01:05.000Z"}
            entry.update(fields)
            if i == COMPACT_AFTER - 2 and first_kept is None:
                first_kept = entry["id"]
            parent = entry["id"]
            yield entry


def gemini_cli_legacy(path, turns):
    """The records the Gemini CLI log ends with (no checkpoint), as the
    older single JSON document, one record a line."""
    with open(path, "w") as f:
        f.write('{\n  "sessionId": "0c4f7b21-9e3a-4d5b-8f60-7a1b2c3d4e5f",\n  "projectHash": "b3f1c9d27a4e",\n'
                '  "startTime": "2025-09-02T08:00:00.000Z",\n  "lastUpdated": "2025-09-02T08:01:10.000Z",\n'
                '  "messages": [')
        records = {}
        for line in gemini_cli(turns):
            if "id" in line:
                records[line["id"]] = line
        records.pop("c-01", None)
        for n, record in enumerate(records.values()):
            f.write(",\n    " if n else "\n    ")
            f.write(json.dumps(record, separators=(",", ":")))
        f.write("\n  ]\n}\n")


AGENTS = {"claude-code": claude_code, "codex": codex, "gemini-cli": gemini_cli, "openclaw": openclaw}


def generate(out):
    os.makedirs(out, exist_ok=True)
    write_jsonl(os.path.join(out, "pairs.jsonl"), transcript(False))
    write_jsonl(os.path.join(out, "broken.jsonl"), transcript(True))
    write_jsonl(os.path.join(out, "messages.jsonl"), messages())
    for agent, lines in AGENTS.items():
        write_jsonl(os.path.join(out, f"{agent}.jsonl"), lines(TURNS[agent]))
    gemini_cli_legacy(os.path.join(out, "gemini-cli-legacy.json"), TURNS["gemini-cli"])
    for name in ["pairs.jsonl", "broken.jsonl", "messages.jsonl", "gemini-cli-legacy.json"] + [f"{a}.jsonl" for a in AGENTS]:
        size = os.path.getsize(os.path.join(out, name))
        print(f"{name}: {size / 1e6:.1f} MB")


def largest_line(path):
    with open(path, "rb") as f:
        return max((len(line) for line in f), default=0)


def run(argv):
    """Run argv with stdout to /dev/null; (exit status, peak RSS bytes,
    seconds, CPU seconds: user and system, steadier than the wall clock on
    a shared machine)."""
    start = time.monotonic()
    devnull = os.open(os.devnull, os.O_WRONLY)
    pid = os.fork()
    if pid == 0:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.execv(argv[0], argv)
    os.close(devnull)
    _, status, usage = os.wait4(pid, 0)
    return (os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024,
            time.monotonic() - start, usage.ru_utime + usage.ru_stime)


def measure(binary, d):
    scratch = os.path.join(d, "scratch")
    os.makedirs(scratch, exist_ok=True)
    broken_copy = os.path.join(scratch, "broken.jsonl")
    shutil.copyfile(os.path.join(d, "broken.jsonl"), broken_copy)
    cases = [
        ("check pairs.jsonl", "pairs.jsonl", [binary, "check", os.path.join(d, "pairs.jsonl")]),
        ("check broken.jsonl", "broken.jsonl", [binary, "check", os.path.join(d, "broken.jsonl")]),
        ("repair --dry-run broken.jsonl", "broken.jsonl",
         [binary, "repair", "--dry-run", os.path.join(d, "broken.jsonl")]),
        ("repair broken.jsonl (copy)", "broken.jsonl", [binary, "repair", broken_copy]),
        ("import --from messages messages.jsonl", "messages.jsonl",
         [binary, "import", "--from", "messages", os.path.join(d, "messages.jsonl"),
          "-o", os.path.join(scratch, "imported.jsonl")]),
    ]
    for agent, src in [(a, f"{a}.jsonl") for a in AGENTS] + [("gemini-cli", "gemini-cli-legacy.json")]:
        cases += [
            (f"import --from {agent} {src}", src,
             [binary, "import", "--from", agent, os.path.join(d, src), "-o", os.path.join(scratch, "imported.jsonl")]),
            (f"check {src}", src, [binary, "check", os.path.join(d, src)]),
            (f"repair --dry-run {src}", src, [binary, "repair", "--dry-run", os.path.join(d, src)]),
        ]
    only = os.environ.get("ONLY")
    if only:
        cases = [c for c in cases if only in c[0]]
    print(f"{'command':40} {'exit':>4} {'peak MB':>8} {'bound MB':>8} {'ratio':>6} {'s':>6} {'cpu s':>6}")
    for name, src, argv in cases:
        bound = 64 * 2**20 + largest_line(os.path.join(d, src))
        code, peak, secs, cpu = run(argv)
        print(f"{name:40} {code:>4} {peak / 2**20:>8.1f} {bound / 2**20:>8.1f} "
              f"{peak / bound:>6.2f} {secs:>6.2f} {cpu:>6.2f}")
    shutil.rmtree(scratch)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "generate":
        generate(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "measure":
        measure(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
