#!/usr/bin/env python3
"""Peak memory and time of the file commands (`check`, `repair`, `import`).

    python3 benches/file_commands.py generate DIR
    python3 benches/file_commands.py measure TOOLWIRE_BIN DIR

`generate` writes, deterministically, a ~56 MB transcript of 200,000
call/result pairs (`pairs.jsonl`), the same with one call in 1,000 left
unanswered (`broken.jsonl`), and a ~48 MB file of bare messages, one a line
(`messages.jsonl`). `measure` runs each command as its own process and
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


def generate(out):
    os.makedirs(out, exist_ok=True)
    write_jsonl(os.path.join(out, "pairs.jsonl"), transcript(False))
    write_jsonl(os.path.join(out, "broken.jsonl"), transcript(True))
    write_jsonl(os.path.join(out, "messages.jsonl"), messages())
    for name in ("pairs.jsonl", "broken.jsonl", "messages.jsonl"):
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
