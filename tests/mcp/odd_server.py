"""MCP servers that misbehave, or behave at the edges, written from the
specification's stdio transport (newline-delimited JSON-RPC) without an
SDK: the SDKs cannot be made to misbehave this way. Run by tests/mcp.rs
behind `toolwire mcp`:

    odd_server.py refuses      answers every request with an error: speaks
                               neither 2025-11-25 nor 2026-07-28
    odd_server.py silent       reads everything, answers nothing
    odd_server.py garbage      answers every request with a line that is
                               not JSON
    odd_server.py toolless     a 2025-11-25 server with prompts only (no tools,
                               no resources)
    odd_server.py echo         a 2025-11-25 server whose `tools/call` result
                               carries the arguments back as structured
                               content and the SHA-256 of the exact line it
                               read (deep JSON, both ways)
    odd_server.py flood FILE   a 2025-11-25 server whose `tools/call` of
                               `flood {count, size}` writes `count`
                               progress notifications of `size` bytes as
                               fast as it can, then the result; it writes
                               its pid and then, before each notification,
                               how many it has written, to FILE

Python's own recursion limit would refuse the deep JSON the echo server
must read and write, so it is raised.
"""

import hashlib
import json
import os
import sys

sys.setrecursionlimit(100_000)

out = sys.stdout.buffer


def send(msg):
    out.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
    out.flush()


def result(id, value):
    send({"jsonrpc": "2.0", "id": id, "result": value})


INIT = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"tools": {}},
    "serverInfo": {"name": "odd", "version": "1"},
}


def main():
    mode = sys.argv[1]
    progress_file = sys.argv[2] if mode == "flood" else None
    if progress_file:
        with open(progress_file, "w") as f:
            f.write(f"{os.getpid()}\n")
    for raw in sys.stdin.buffer:
        line = raw.rstrip(b"\n")
        if not line.strip():
            continue
        msg = json.loads(line)
        if "id" not in msg or "method" not in msg:
            continue
        id, method = msg["id"], msg["method"]
        if mode == "silent":
            continue
        if mode == "garbage":
            out.write(b"this is not JSON-RPC\n")
            out.flush()
            continue
        if mode == "refuses":
            send({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": f"no method {method}"}})
            continue
        if method == "initialize" and mode == "toolless":
            result(id, {**INIT, "capabilities": {"prompts": {}}})
        elif method == "initialize":
            result(id, INIT)
        elif method == "tools/list":
            result(id, {"tools": [{"name": "echo" if mode == "echo" else "flood", "inputSchema": {"type": "object"}}]})
        elif method == "tools/call" and mode == "echo":
            digest = hashlib.sha256(line).hexdigest()
            result(id, {"content": [{"type": "text", "text": digest}], "structuredContent": msg["params"]["arguments"]})
        elif method == "tools/call" and mode == "flood":
            args = msg["params"]["arguments"]
            pad = "x" * args["size"]
            with open(progress_file, "a") as f:
                for i in range(args["count"]):
                    f.write(f"{i}\n")
                    f.flush()
                    send({"jsonrpc": "2.0", "method": "notifications/progress",
                          "params": {"progressToken": id, "progress": i, "message": pad}})
            result(id, {"content": [{"type": "text", "text": "flooded"}]})
        else:
            send({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": f"no method {method}"}})


if __name__ == "__main__":
    main()
