#!/usr/bin/env python3
"""Instructions per small pair of `toolwire serve` over stdio (callgrind).

    python3 benches/pair_instructions.py BIN [durability]   # default: none

Runs BIN `serve` under valgrind's callgrind twice, driven over its pipes
the way `cargo bench --bench storage -- stdio` drives it (16 sessions,
one pair, both halves sent together, in flight per session; each reply
that acknowledges a pair sends that session's next), once with 50 pairs
per session and once with 250, and prints the difference in instructions
(every thread of the server) divided by the difference in pairs: what
one more pair costs, without the start, `initialize` and each session's
first pair. Callgrind's counts repeat within about 1% (how replies
batch into writes moves a little) whatever else the machine does, so two
builds compare on a loaded machine where the bench's CPU-time figures
move by more than a change. Needs valgrind.

    KEEP=/tmp/pairs.cg python3 benches/pair_instructions.py BIN
    callgrind_annotate --inclusive=yes /tmp/pairs.cg    # where they go

    CPU=1 python3 benches/pair_instructions.py BIN     # user and system CPU instead

With CPU=1 the server runs without valgrind, five times with 5,000 pairs
a session, and each run prints the user and the system CPU time per pair
that /proc/PID/stat gives the server over the pairs (clock ticks: 80,000
pairs take about a second, a hundred ticks). The kernel's part of a pair
is not in the instruction count; this shows how large it is.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SESSIONS = 16


def frame(id_, method, params):
    body = json.dumps(
        {"jsonrpc": "2.0", "id": id_, "method": method, "params": params},
        separators=(",", ":"),
    ).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def pair(call_id):
    return [
        {"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": "make"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "exit status 0"}]},
    ]


def append(id_, s, message):
    return frame(id_, "pair/append", {"sessionId": f"s-{s}", "message": message})


class Replies:
    def __init__(self, fd):
        self.fd = fd
        self.buf = b""

    def next(self):
        """The id of the next response (notifications are skipped)."""
        while True:
            blank = self.buf.find(b"\r\n\r\n")
            if blank >= 0:
                length = int(self.buf[len(b"Content-Length: "):blank])
                start = blank + 4
                if len(self.buf) >= start + length:
                    body = self.buf[start:start + length]
                    self.buf = self.buf[start + length:]
                    m = re.match(rb'\{"jsonrpc":"2.0","id":(\d+),"result"', body)
                    if m:
                        return int(m.group(1))
                    if b'"id"' in body[:40]:
                        sys.exit(f"an error reply: {body[:300]!r}")
                    continue
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                sys.exit("the server closed its stdout")
            self.buf += chunk


def cpu_ticks(pid):
    """The user and system CPU clock ticks process `pid` has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def run(binary, durability, pairs, work, cpu=False):
    out = os.path.join(work, f"callgrind.{pairs}")
    data = os.path.join(work, f"data-{pairs}")
    os.makedirs(data)
    under = [] if cpu else ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    server = subprocess.Popen(
        under + [binary, "serve"],
        cwd=data,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    to = server.stdin
    replies = Replies(server.stdout.fileno())
    options = {"rootUri": f"file://{data}"}
    if durability != "fsync":
        options["initializationOptions"] = {"durability": durability}
    to.write(frame(0, "initialize", options))
    to.flush()
    assert replies.next() == 0
    first = []
    for s in range(SESSIONS):
        for half, m in enumerate(pair(f"toolu_{s}_first")):
            first.append(append(1 + s * 2 + half, s, m))
    to.write(b"".join(first))
    to.flush()
    for _ in range(SESSIONS * 2):
        replies.next()
    base = 1000

    def both(s, p):
        a, u = pair(f"toolu_{s}_{p}")
        id_ = base + (s * pairs + p) * 2
        return append(id_, s, a) + append(id_ + 1, s, u)

    ticks = cpu_ticks(server.pid)
    to.write(b"".join(both(s, 0) for s in range(SESSIONS)))
    to.flush()
    acked = [0] * SESSIONS
    left = SESSIONS * pairs
    while left:
        k = replies.next() - base
        if k % 2 == 1:
            s = k // 2 // pairs
            acked[s] += 1
            left -= 1
            if acked[s] < pairs:
                to.write(both(s, acked[s]))
                to.flush()
    if cpu:
        (user, system), (user0, system0) = cpu_ticks(server.pid), ticks
        to.close()
        server.wait()
        per = 1e6 / os.sysconf("SC_CLK_TCK") / (pairs * SESSIONS)
        return (user - user0) * per, (system - system0) * per
    to.close()
    server.wait()
    total = 0
    for name in os.listdir(work):
        if name.startswith(f"callgrind.{pairs}"):
            with open(os.path.join(work, name)) as f:
                for line in f:
                    if line.startswith("summary:") or line.startswith("totals:"):
                        total = max(total, int(line.split()[1]))
    return total


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: benches/pair_instructions.py path/to/toolwire [durability]")
    binary = os.path.realpath(sys.argv[1])
    durability = sys.argv[2] if len(sys.argv) > 2 else "none"
    keep = os.environ.get("KEEP")
    if os.environ.get("CPU"):
        with tempfile.TemporaryDirectory() as work:
            for round_ in range(5):
                part = os.path.join(work, str(round_))
                user, system = run(binary, durability, 5000, part, cpu=True)
                print(f"{binary} durability {durability}, {5000 * SESSIONS} pairs: user {user:.1f} us, system {system:.1f} us, together {user + system:.1f} us per pair")
        return
    with tempfile.TemporaryDirectory() as work:
        few, many = 50, 250
        a = run(binary, durability, few, work)
        b = run(binary, durability, many, work)
        if keep:
            # The larger run's profile, for callgrind_annotate.
            shutil.copy(os.path.join(work, f"callgrind.{many}"), keep)
    per = (b - a) / ((many - few) * SESSIONS)
    print(f"{binary} durability {durability}: {a} instructions with {few} pairs a session, {b} with {many}; {per:.0f} per pair")


if __name__ == "__main__":
    main()
