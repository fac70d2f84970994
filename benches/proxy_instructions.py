#!/usr/bin/env python3
"""Instructions per request of `toolwire proxy` (callgrind).

    python3 benches/proxy_instructions.py BIN

Runs BIN `proxy` under valgrind's callgrind in front of node's provider
(benches/node/proxy_upstream.js), with the configuration users run (no
`durability` or `[clearing]` set: durable commits, `auto` clearing), and
has node's client (benches/node/proxy_client.js) send it the conversation
`cargo bench --bench proxy` sends (199 KB, 20 tool results of 9,800
chars, one session), one request at a time: once 5 + 20 requests, once
5 + 60, and prints the difference in instructions (every thread of the
proxy) divided by the 40 requests between. The first request decides
(and under `auto` clearing clears 17 of the 20 results); every later one
puts the same previews back, as each turn of an agent does for the
results already decided. Callgrind's counts repeat within a fraction of
a percent whatever else the machine does, so two builds compare where
wall-clock figures cannot. Needs valgrind and node.

    KEEP=/tmp/proxy.cg python3 benches/proxy_instructions.py BIN
    callgrind_annotate --inclusive=yes /tmp/proxy.cg    # where they go
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NODE = os.path.join(HERE, "node")


def result_text(turn, size):
    line = f"turn {turn}: compiling crate {turn} ... warning: unused variable `x`\n"
    return (line * (size // len(line) + 1))[:size]


def body():
    """The bench's conversation, as benches/proxy.rs writes it."""
    messages = [{"role": "user", "content": "The build fails; find out why."}]
    for t in range(20):
        id_ = f"toolu_{t:04}"
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": id_, "name": "bash",
             "input": {"command": f"cat part-{t}.log"}}]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id_,
             "content": result_text(t, 9800)}]})
    return json.dumps(
        {"model": "claude-fake", "max_tokens": 1024, "stream": True,
         "system": "You are a coding agent.", "messages": messages},
        separators=(",", ":"), ensure_ascii=False)


def instructions(bin_, work, requests):
    """Callgrind's total for the proxy over 5 + `requests` requests."""
    run = tempfile.mkdtemp(dir=work)
    upstream = subprocess.Popen(
        ["node", os.path.join(NODE, "proxy_upstream.js")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    port = json.loads(upstream.stdout.readline())["port"]
    with open(os.path.join(run, "toolwire.toml"), "w") as f:
        f.write(f'[proxy.upstreams]\nanthropic = "http://127.0.0.1:{port}"\n')
    out = os.path.join(run, "cg.out")
    log = open(os.path.join(run, "proxy.log"), "w+")
    proxy = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
         bin_, "proxy", "--listen", "127.0.0.1:0"],
        cwd=run, stdout=subprocess.DEVNULL, stderr=log,
        env={**os.environ, "RUST_LOG": "toolwire=warn"})
    try:
        url = None
        for _ in range(600):
            log.seek(0)
            m = re.search(r"toolwire proxy listening on (\S+)", log.read())
            if m:
                url = m.group(1)
                break
            time.sleep(0.1)
        if url is None:
            sys.exit("the proxy did not start under valgrind")
        body_file = os.path.join(work, "body.json")
        # Latency mode, one client: warm-up and `requests` each way,
        # alternating with the provider directly.
        subprocess.run(
            ["node", os.path.join(NODE, "proxy_client.js"), body_file,
             f"http://127.0.0.1:{port}", url, str(requests), "5", "1", "0"],
            check=True, stdout=subprocess.DEVNULL)
    finally:
        proxy.send_signal(2)
        proxy.wait(timeout=120)
        upstream.stdin.close()
        upstream.wait(timeout=10)
    with open(out) as f:
        total = sum(int(line.split()[1]) for line in f if line.startswith("summary:"))
    if os.environ.get("KEEP") and requests > 20:
        shutil.copy(out, os.environ["KEEP"])
    return total


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    bin_ = os.path.abspath(sys.argv[1])
    work = tempfile.mkdtemp()
    try:
        with open(os.path.join(work, "body.json"), "w") as f:
            f.write(body())
        few = instructions(bin_, work, 20)
        many = instructions(bin_, work, 60)
        print(f"instructions per request: {(many - few) / 40:,.0f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
