"""The LiteLLM guardrail in a real LiteLLM proxy (PROTOCOL.md 12.4).

Run by tests/litellm.rs with the venv of tests/setup.d/45-litellm.sh,
TOOLWIRE_BIN naming the binary. A scripted provider on loopback answers
every turn with a tool call; the official Anthropic and OpenAI SDKs run the
same multi-turn sessions, with large and old tool results, once through
LiteLLM with the guardrail (config.yaml read from docs/litellm.md) and once
through ``toolwire proxy``, and the provider must receive the same results
byte for byte. Skipped where LiteLLM is not installed (the wheel test of
scripts/test_installed.py).
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("litellm")
anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from toolwire_client.litellm import ToolwireGuardrail, derive_session  # noqa: E402

BINARY = os.environ["TOOLWIRE_BIN"]
REPO = Path(__file__).resolve().parents[3]
START_LIMIT = 240
LITELLM_KEY = "sk-litellm-test"

def output(turn: int) -> str:
    """A tool's output: every third one large, the others mid-sized."""
    size = 20000 if turn % 3 == 0 else 2500
    text = "".join(f"turn {turn} line {i}: build step output\n" for i in range(size // 30))
    return text[:size]


# -- the scripted provider ------------------------------------------------


class Provider:
    """Answers each request with a tool call and writes down what it got."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
                # Claude Code adds `?beta=true`, which toolwire proxy passes on.
                path = self.path.split("?")[0]
                with provider.lock:
                    provider.received.append((path, body))
                answer = provider.answer(path, body)
                if answer is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                if body.get("stream") is True and path.endswith("/v1/messages"):
                    events = anthropic_events(answer)
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("content-length", str(len(events)))
                    self.end_headers()
                    self.wfile.write(events)
                    return
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def answer(path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        if path.endswith("/v1/messages/count_tokens"):
            return {"input_tokens": len(json.dumps(body)) // 4}
        if path.endswith("/v1/messages") and body.get("tools"):
            return agent_answer(body)
        if path.endswith("/v1/messages"):
            n = len(body["messages"])
            return {
                "id": f"msg_{n}",
                "type": "message",
                "role": "assistant",
                "model": body.get("model", "m"),
                "content": [{"type": "tool_use", "id": f"toolu_{n:02d}", "name": "bash", "input": {"command": "make"}}],
                "stop_reason": "tool_use",
                "stop_sequence": None,
                "usage": {"input_tokens": 100 + n, "output_tokens": 7, "cache_read_input_tokens": 50, "cache_creation_input_tokens": 0},
            }
        if path.endswith("/chat/completions"):
            n = len(body["messages"])
            return {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": 1,
                "model": body.get("model", "m"),
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "tool_calls",
                        "message": {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [
                                {"id": f"call_{n:02d}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
                            ],
                        },
                    }
                ],
                "usage": {"prompt_tokens": 100 + n, "completion_tokens": 7, "total_tokens": 107 + n},
            }
        if path.endswith("/responses"):
            n = len(body["input"]) if isinstance(body.get("input"), list) else 1
            return {
                "id": f"resp_{n}",
                "object": "response",
                "created_at": 1,
                "status": "completed",
                "model": body.get("model", "m"),
                "output": [
                    {
                        "type": "function_call",
                        "id": f"fc_{n:02d}",
                        "call_id": f"call_{n:02d}",
                        "name": "bash",
                        "arguments": "{}",
                        "status": "completed",
                    }
                ],
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
                "usage": {
                    "input_tokens": 100 + n,
                    "output_tokens": 7,
                    "total_tokens": 107 + n,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens_details": {"reasoning_tokens": 0},
                },
            }
        if ":generateContent" in path:
            n = len(body["contents"])
            call = {"functionCall": {"name": "bash", "args": {"command": "make"}}}
            return {
                "candidates": [{"content": {"role": "model", "parts": [call]}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": 100 + n, "candidatesTokenCount": 7, "totalTokenCount": 107 + n},
                "modelVersion": "gemini-2.5-flash",
            }
        return None

    def since(self, mark: int) -> list[tuple[str, dict[str, Any]]]:
        with self.lock:
            return list(self.received[mark:])

    def mark(self) -> int:
        with self.lock:
            return len(self.received)


AGENT_CALLS = 3


def agent_answer(body: dict[str, Any]) -> dict[str, Any]:
    """An agent's request (it sends tools): a Bash call that prints a large
    output, until it has had AGENT_CALLS results, then text."""
    n = len(body["messages"])
    done = sum(
        1
        for m in body["messages"]
        if isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    )
    if done >= AGENT_CALLS:
        content: list[dict[str, Any]] = [{"type": "text", "text": "All done."}]
        stop = "end_turn"
    else:
        command = f"seq 1 {4000 + 1000 * done}"
        content = [
            {"type": "tool_use", "id": f"toolu_cc{done:02d}", "name": "Bash", "input": {"command": command, "description": "count"}}
        ]
        stop = "tool_use"
    return {
        "id": f"msg_cc{n}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "m"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 100 + n, "output_tokens": 7, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
    }


def anthropic_events(message: dict[str, Any]) -> bytes:
    """A Messages answer as Anthropic streams it."""
    start = {**message, "content": [], "stop_reason": None}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(message["content"]):
        if block["type"] == "tool_use":
            empty = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            empty = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": empty}))
        events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None}, "usage": message["usage"]},
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


def results_sent(path: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """The tool results of one request as the provider got them: (id, the
    result's content as compact JSON)."""
    out: list[tuple[str, str]] = []
    if path.endswith("/v1/messages"):
        for m in body["messages"]:
            if isinstance(m.get("content"), list):
                for b in m["content"]:
                    if b.get("type") == "tool_result":
                        out.append((b["tool_use_id"], _compact(b.get("content"))))
    elif path.endswith("/chat/completions"):
        for m in body["messages"]:
            if m.get("role") == "tool":
                out.append((m["tool_call_id"], _compact(m.get("content"))))
    elif path.endswith("/responses"):
        for item in body["input"]:
            if item.get("type") == "function_call_output":
                out.append((item["call_id"], _compact(item.get("output"))))
    elif ":generateContent" in path:
        for n, content in enumerate(body["contents"]):
            for part in content.get("parts", []):
                if "functionResponse" in part:
                    out.append((str(n), _compact(part["functionResponse"])))
    return out


def _compact(value: Any) -> str:
    # A text result LiteLLM sent as one text block is the same text.
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict) and value[0].get("type") == "text":
        value = value[0]["text"]
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# -- the sessions, through the official SDKs ------------------------------


def session(send, first: str, turns: int, between=None, first_item=None) -> list[dict[str, str]]:
    """An agent's loop: ``send(conversation)`` makes one call and answers
    (the raw response, the items its tool call adds to the conversation
    with the tool's output for ``turn``); the response headers of each turn."""
    conversation: list[dict[str, Any]] = [first_item or {"role": "user", "content": first}]
    headers = []
    for turn in range(turns):
        if between is not None:
            between(turn)
        raw, items = send(conversation, turn)
        headers.append({k.lower(): v for k, v in raw.headers.items()})
        conversation.extend(items)
    return headers


def anthropic_session(base_url: str, key: str, model: str, first: str, turns: int, between=None) -> list[dict[str, str]]:
    client = anthropic.Anthropic(base_url=base_url, api_key=key, max_retries=0)

    def send(messages: list[dict[str, Any]], turn: int):
        raw = client.messages.with_raw_response.create(model=model, max_tokens=64, messages=messages)
        call = next(b for b in raw.parse().content if b.type == "tool_use")
        use = {"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}
        result = {"type": "tool_result", "tool_use_id": call.id, "content": output(turn)}
        return raw, [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]

    return session(send, first, turns, between)


def chat_session(base_url: str, key: str, model: str, first: str, turns: int) -> list[dict[str, str]]:
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)

    def send(messages: list[dict[str, Any]], turn: int):
        raw = client.chat.completions.with_raw_response.create(model=model, messages=messages)
        call = raw.parse().choices[0].message.tool_calls[0]
        function = {"name": call.function.name, "arguments": call.function.arguments}
        use = {"role": "assistant", "content": None, "tool_calls": [{"id": call.id, "type": "function", "function": function}]}
        return raw, [use, {"role": "tool", "tool_call_id": call.id, "content": output(turn)}]

    return session(send, first, turns)


def responses_session(base_url: str, key: str, model: str, first: str, turns: int) -> list[dict[str, str]]:
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)

    def send(items: list[dict[str, Any]], turn: int):
        raw = client.responses.with_raw_response.create(model=model, input=items)
        call = next(o for o in raw.parse().output if o.type == "function_call")
        use = {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments}
        return raw, [use, {"type": "function_call_output", "call_id": call.call_id, "output": output(turn)}]

    return session(send, first, turns)


def gemini_session(base_url: str, key: str, model: str, first: str, turns: int) -> list[dict[str, str]]:
    # Gemini's REST API as its SDKs call it (no SDK is pinned here).
    client = httpx.Client(base_url=base_url, headers={"x-goog-api-key": key}, timeout=60)

    def send(contents: list[dict[str, Any]], turn: int):
        raw = client.post(f"/v1beta/models/{model}:generateContent", json={"contents": contents})
        raw.raise_for_status()
        call = raw.json()["candidates"][0]["content"]["parts"][0]["functionCall"]
        response = {"functionResponse": {"name": call["name"], "response": {"output": output(turn)}}}
        return raw, [{"role": "model", "parts": [{"functionCall": call}]}, {"role": "user", "parts": [response]}]

    # Gemini's first element is {"role", "parts"}, not {"role", "content"}.
    return session(send, first, turns, first_item={"role": "user", "parts": [{"text": first}]})


# -- the processes ----------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def from_docs(name: str, language: str) -> str:
    """A configuration block of docs/litellm.md: what the page shows is what runs."""
    page = (REPO / "docs/litellm.md").read_text()
    found = re.search(f"<!-- {name} -->\n```{language}\n(.*?)```\n<!-- /{name} -->", page, re.S)
    assert found, f"docs/litellm.md has no <!-- {name} --> block"
    return found.group(1)


def config_yaml() -> str:
    return from_docs("litellm-config", "yaml")


# The workspaces' toolwire.toml.
TOOLWIRE_TOML = from_docs("litellm-toolwire-toml", "toml")


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


class Stack:
    """A scripted provider, ``toolwire proxy`` and LiteLLM with the guardrail."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.provider = Provider()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Any] = []
        self.runtimes: list[Path] = []
        self.proxy_ws = tmp / "proxy-ws"
        self.litellm_ws = tmp / "litellm-ws"
        for ws in (self.proxy_ws, self.litellm_ws):
            ws.mkdir()
            (ws / "toolwire.toml").write_text(TOOLWIRE_TOML)
        # The daemons' sockets and lock files, this test's own.
        self.runtime = tmp / "run"
        self.runtime.mkdir(mode=0o700)
        # toolwire "missing" while this file exists.
        self.down = tmp / "toolwire-down"
        self.wrapper = tmp / "toolwire"
        self.wrapper.write_text(
            f'#!/bin/sh\nif [ -e "{self.down}" ]; then echo "toolwire is down (test)" >&2; exit 1; fi\nexec "{BINARY}" "$@"\n'
        )
        self.wrapper.chmod(0o755)
        try:
            self._start_all(tmp)
        except BaseException:
            # Nothing this started outlives a failed start.
            self.close()
            raise

    def _start_all(self, tmp: Path) -> None:
        self.proxy_url = self._start_proxy()
        # With a PostgreSQL store at hand, this LiteLLM keeps its sessions
        # there, and a second replica on a workspace of its own (another
        # host, as far as toolwire can tell) shares it, started meanwhile
        # (LiteLLM takes long to start).
        pg = os.environ.get("TOOLWIRE_PG_URL")
        shared = f'[storage]\nbackend = "postgres"\n[storage.postgres]\nurl = "{pg}"\n'
        if pg:
            with (self.litellm_ws / "toolwire.toml").open("a") as f:
                f.write(shared)
        ready = self.start_litellm("litellm", self.litellm_ws, self.runtime)
        self.replicas: list[tuple[Path, Any]] = []
        if pg:
            ws = tmp / "replica-ws"
            ws.mkdir()
            (ws / "toolwire.toml").write_text(TOOLWIRE_TOML + shared)
            runtime = tmp / "replica-run"
            runtime.mkdir(mode=0o700)
            self.replicas.append((ws, self.start_litellm("replica", ws, runtime)))
        self.litellm_url = ready()
        self.replicas.insert(0, (self.litellm_ws, lambda: self.litellm_url))
        self.replicas = [(ws, replica_ready()) for ws, replica_ready in self.replicas]

    def _start_proxy(self) -> str:
        with (self.proxy_ws / "toolwire.toml").open("a") as f:
            f.write(
                f'[proxy.upstreams]\nanthropic = "{self.provider.url}"\nopenai = "{self.provider.url}"\ngemini = "{self.provider.url}"\n'
            )
        proc = subprocess.Popen(
            [BINARY, "proxy", "--listen", "127.0.0.1:0"],
            cwd=self.proxy_ws,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, "RUST_LOG": "toolwire=warn"},
        )
        self.procs.append(proc)
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode(errors="replace").strip()
            if line.startswith("toolwire proxy listening on "):
                stderr = proc.stderr
                threading.Thread(target=lambda: [None for _ in stderr], daemon=True).start()
                return line.removeprefix("toolwire proxy listening on ")
            print("proxy:", line, file=sys.stderr)
        raise AssertionError("toolwire proxy exited before listening")

    def start_litellm(self, name: str, ws: Path, runtime: Path) -> Any:
        """Start LiteLLM with the guardrail on workspace ``ws``, its shared
        daemon's socket under ``runtime``, logging to ``<name>.log``; call
        what this returns for its URL once it answers (LiteLLM takes a while
        to start: several start at once)."""
        config = self.tmp / "config.yaml"
        config.write_text(config_yaml())
        port = free_port()
        log = (self.tmp / f"{name}.log").open("wb")
        self.logs.append(log)
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO / "editors/python"),
            "TOOLWIRE_BIN": str(self.wrapper),
            "XDG_RUNTIME_DIR": str(runtime),
            "TOOLWIRE_WORKSPACE": str(ws),
            "PROVIDER_URL": self.provider.url,
            "PROVIDER_OPENAI_URL": self.provider.url + "/v1",
            "PROVIDER_GEMINI_URL": self.provider.url,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_TELEMETRY": "False",
            "LITELLM_MASTER_KEY": LITELLM_KEY,
            "NO_PROXY": "127.0.0.1,localhost",
        }
        litellm = Path(sys.executable).parent / "litellm"
        proc = subprocess.Popen(
            [str(litellm), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)],
            cwd=self.tmp,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        self.procs.append(proc)
        self.runtimes.append(runtime)
        url = f"http://127.0.0.1:{port}"
        return lambda: self._ready(name, proc, url)

    def _ready(self, name: str, proc: subprocess.Popen[bytes], url: str) -> str:
        deadline = time.monotonic() + START_LIMIT
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"litellm exited ({proc.returncode}):\n{self.log_tail(name)}")
            try:
                with urllib.request.urlopen(url + "/health/liveliness", timeout=5) as r:
                    if r.status == 200:
                        return url
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"litellm did not answer within {START_LIMIT} s:\n{self.log_tail(name)}")

    def log_tail(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")[-6000:]

    def daemon_pids(self, runtime: Path | None = None) -> list[int]:
        pids = []
        for lock in ((runtime or self.runtime) / "toolwire").glob("*.lock"):
            text = lock.read_text().strip()
            # A lock file outlives its daemon: only a live toolwire counts.
            if text.isdigit() and b"toolwire" in _cmdline(int(text)):
                pids.append(int(text))
        return pids

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for runtime in self.runtimes:
            for pid in self.daemon_pids(runtime):
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        self.provider.server.shutdown()
        for log in self.logs:
            log.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    s = Stack(tmp_path_factory.mktemp("litellm"))
    try:
        yield s
    finally:
        s.close()


def normalized(stack: Stack, requests: list[tuple[str, dict[str, Any]]], ws: Path) -> list[list[tuple[str, str]]]:
    # A preview names its saved output by path, under each path's own workspace.
    root = json.dumps(str(ws))[1:-1]
    return [[(i, c.replace(root, "<workspace>")) for i, c in results_sent(p, b)] for p, b in requests]


SESSIONS = {
    "anthropic": (
        anthropic_session,
        lambda s: (s.proxy_url, "sk-ant-test", "claude-sonnet-4-5"),
        lambda s: (s.litellm_url, LITELLM_KEY, "claude-test"),
    ),
    "openai-chat": (
        chat_session,
        lambda s: (s.proxy_url + "/v1", "sk-test", "gpt-4o"),
        lambda s: (s.litellm_url + "/v1", LITELLM_KEY, "gpt-test"),
    ),
    "openai-responses": (
        responses_session,
        lambda s: (s.proxy_url + "/v1", "sk-test", "gpt-4o"),
        lambda s: (s.litellm_url + "/v1", LITELLM_KEY, "gpt-test"),
    ),
    "gemini": (
        gemini_session,
        lambda s: (s.proxy_url, "gemini-test-key", "gemini-2.5-flash"),
        lambda s: (s.litellm_url, LITELLM_KEY, "gemini-test"),
    ),
}


@pytest.mark.parametrize("route", list(SESSIONS))
def test_the_provider_gets_the_previews_the_proxy_sends(stack: Stack, route: str) -> None:
    run, via_proxy, via_litellm = SESSIONS[route]
    first = f"fix the build ({route})"
    turns = 7

    mark = stack.provider.mark()
    proxy_headers = run(*via_proxy(stack), first, turns)
    through_proxy = normalized(stack, stack.provider.since(mark), stack.proxy_ws)

    mark = stack.provider.mark()
    litellm_headers = run(*via_litellm(stack), first, turns)
    through_litellm = normalized(stack, stack.provider.since(mark), stack.litellm_ws)

    # One session, as the proxy derives it, on both paths.
    session = proxy_headers[0]["x-toolwire-session"]
    assert [h.get("x-toolwire-session") for h in litellm_headers] == [session] * turns, litellm_headers
    assert [h.get("x-toolwire-budget", "").split(";")[0] for h in litellm_headers] == ["applied"] * turns, litellm_headers
    assert len(through_litellm) == len(through_proxy) == turns
    assert through_litellm == through_proxy
    texts = [c for request in through_litellm for _, c in request]
    assert any("<persisted-output>" in c for c in texts), "no result was persisted"
    # The ids and the reason; the rent and cost figures are measured on the
    # conversation as each path serializes it, which LiteLLM may respell.
    def why(headers):
        return [h["x-toolwire-cleared"].split("; rentChars=")[0] for h in headers if h.get("x-toolwire-cleared")]
    cleared = why(litellm_headers)
    assert cleared == why(proxy_headers)
    assert cleared, "no old result was cleared"


def test_toolwire_missing_fails_open_and_coming_back_restores_its_decisions(stack: Stack) -> None:
    first = "fix the build while toolwire restarts"
    seen: dict[int, list[tuple[str, str]]] = {}
    mark = stack.provider.mark()

    def between(turn: int) -> None:
        if turn == 4:
            # toolwire killed mid-session, and kept from starting again.
            stack.down.touch()
            pids = stack.daemon_pids()
            assert pids, "no shared daemon is running"
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
        if turn == 5:
            stack.down.unlink()

    headers = anthropic_session(stack.litellm_url, LITELLM_KEY, "claude-test", first, 6, between)
    requests = stack.provider.since(mark)
    for turn, (path, body) in enumerate(requests):
        seen[turn] = results_sent(path, body)

    # Down: LiteLLM answered, the request went as it came, and said so.
    assert headers[4].get("x-toolwire-budget", "").startswith("failed; "), headers[4]
    assert "x-toolwire-degraded" in headers[4], headers[4]
    assert [c for _, c in seen[4]] == [json.dumps(output(t)) for t in range(4)]
    # Back: applied again, and every result decided before keeps its
    # preview byte for byte (the cache prefix is what it was).
    assert headers[5]["x-toolwire-budget"].startswith("applied"), headers[5]
    cleared = set((headers[5].get("x-toolwire-cleared") or "").split(";")[0].split(","))
    before = dict(seen[3])
    after = dict(seen[5])
    kept = [i for i in before if i not in cleared]
    assert kept
    for i in kept:
        assert after[i] == before[i], i
    assert any("<persisted-output>" in after[i] for i in kept)
    # ...and the log said why, at WARNING.
    log = (stack.tmp / "litellm.log").read_text(errors="replace")
    assert "toolwire: budgeting failed, forwarding the request as it came" in log


def test_usage_through_litellm_reaches_toolwire_stats(stack: Stack) -> None:
    first = "count my tokens"
    turns = 3
    anthropic_session(stack.litellm_url, LITELLM_KEY, "claude-test", first, turns)
    session = derive_session("anthropic", [{"role": "user", "content": first}])
    stats = stats_of(stack.litellm_ws, str(session), turns)
    assert stats["requests"] == turns
    assert stats["requestsWithoutUsage"] == 0
    assert stats["tokens"]["output"] == 7 * turns
    assert stats["tokens"]["cacheRead"] == 50 * turns
    assert stats["resultsPersisted"] >= 1


def stats_of(ws: Path, session: str, requests: int) -> dict[str, Any]:
    """``toolwire stats`` of one session, once it counts ``requests`` (a
    usage record is written after its response has gone: a bounded wait)."""
    deadline = time.monotonic() + 30
    while True:
        out = subprocess.run([BINARY, "stats", "--json", "--session", session], cwd=ws, capture_output=True, text=True)
        stats = json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else []
        if stats and stats[0]["requests"] >= requests or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert stats, out.stderr
    return stats[0]


def test_the_derived_session_is_the_proxys() -> None:
    # src/proxy/conversation.rs's own case: cache_control left out.
    first = [{"role": "user", "content": [{"type": "text", "text": "fix it", "cache_control": {"type": "ephemeral"}}]}]
    later = [{"role": "user", "content": [{"type": "text", "text": "fix it"}]}, {"role": "assistant", "content": "ok"}]
    a = derive_session("anthropic", first)
    assert a == derive_session("anthropic", later)
    assert a != derive_session("openai-chat", later)
    assert a is not None and a.startswith("px-") and len(a) == 35


def test_a_pairing_the_provider_would_refuse_is_repaired_as_the_proxy_repairs_it(stack: Stack) -> None:
    def use(i: str) -> dict[str, Any]:
        return {"role": "assistant", "content": [{"type": "tool_use", "id": i, "name": "bash", "input": {}}]}

    messages = [
        {"role": "user", "content": "fix the build, interrupted"},
        use("toolu_lost"),
        {"role": "user", "content": "never mind, go on"},
        use("toolu_kept"),
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_kept", "content": output(0)}]},
    ]
    got = {}
    for name, url, key in (("proxy", stack.proxy_url, "sk-ant-test"), ("litellm", stack.litellm_url, LITELLM_KEY)):
        client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)
        mark = stack.provider.mark()
        raw = client.messages.with_raw_response.create(model="claude-test", max_tokens=64, messages=messages)
        [(path, body)] = stack.provider.since(mark)
        ws = stack.proxy_ws if name == "proxy" else stack.litellm_ws
        ids = [b.get("id") for m in body["messages"] if isinstance(m["content"], list) for b in m["content"] if b["type"] == "tool_use"]
        got[name] = (raw.headers.get("x-toolwire-repaired"), ids, normalized(stack, [(path, body)], ws))
    assert got["litellm"] == got["proxy"]
    assert got["litellm"][0] == "droppedToolUses=toolu_lost; droppedToolResults=; movedToolResults=; renamedToolUses="
    assert got["litellm"][1] == ["toolu_kept"]


@pytest.mark.parametrize("toolwire", ["slow", "missing"])
def test_a_slow_or_missing_toolwire_leaves_the_request_as_it_came(tmp_path: Path, toolwire: str) -> None:
    binary = tmp_path / "toolwire"
    if toolwire == "slow":
        # Started, but never answers `initialize`.
        binary.write_text("#!/bin/sh\nexec sleep 60\n")
        binary.chmod(0o755)
    guard = ToolwireGuardrail(
        guardrail_name="toolwire",
        event_hook="pre_call",
        default_on=True,
        workspace=str(tmp_path),
        deadline_seconds=1,
        binary=str(binary),
    )
    data = {
        "model": "claude-test",
        "litellm_call_id": "call-1",
        "messages": [
            {"role": "user", "content": "fix it"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": output(0)}]},
        ],
    }
    sent = copy.deepcopy(data)

    async def main() -> tuple[Any, int, Any]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        running = asyncio.create_task(ticker())
        out = await guard.async_pre_call_hook(None, None, data, "anthropic_messages")
        running.cancel()
        headers = await guard.async_post_call_response_headers_hook(data, None, None)
        return out, ticks, headers

    out, ticks, headers = asyncio.run(main())
    assert out == sent
    # LiteLLM's event loop went on serving while the guardrail waited.
    if toolwire == "slow":
        assert ticks > 0
        assert headers["x-toolwire-budget"] == "failed; toolwire did not answer within 1 s (deadline_seconds)"
    else:
        assert headers["x-toolwire-budget"].startswith("failed; ToolwireNotFoundError: toolwire binary not found"), headers
    assert headers["x-toolwire-degraded"].startswith("sent as is; ")
    assert headers["x-toolwire-session"] == derive_session("anthropic", sent["messages"])


@pytest.mark.skipif("TOOLWIRE_PG_URL" not in os.environ, reason="needs TOOLWIRE_PG_URL (tests/litellm.rs makes one)")
def test_two_litellm_replicas_on_one_postgres_store_decide_each_result_once(stack: Stack) -> None:
    # Two hosts, as far as toolwire can tell: each replica its own workspace
    # and daemon, sharing only the PostgreSQL store (see Stack).
    workspaces = [ws for ws, _ in stack.replicas]
    urls = [url for _, url in stack.replicas]
    clients = [anthropic.Anthropic(base_url=u, api_key=LITELLM_KEY, max_retries=0) for u in urls]
    turns = 8
    messages: list[dict[str, Any]] = [{"role": "user", "content": "fix the build on two replicas"}]
    mark = stack.provider.mark()
    headers = []
    for turn in range(turns):
        # Alternating: every turn goes to the other replica.
        raw = clients[turn % 2].messages.with_raw_response.create(model="claude-test", max_tokens=64, messages=messages)
        headers.append(raw.headers)
        call = next(b for b in raw.parse().content if b.type == "tool_use")
        messages.append({"role": "assistant", "content": [{"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}]})
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": output(turn)}]})
    assert [h.get("x-toolwire-budget", "").split(";")[0] for h in headers] == ["applied"] * turns
    requests = [dict(results_sent(p, b)) for p, b in stack.provider.since(mark)]
    # One decision per result: once a result is sent replaced, every later
    # request, from either replica, sends the same bytes until it is
    # cleared, and a cleared result stays as it was cleared.
    originals = {f"toolu_{2 * t + 1:02d}": json.dumps(output(t)) for t in range(turns)}
    persisted = 0
    for i, original in originals.items():
        seen = [r[i] for r in requests if i in r]
        changed = [c for c in seen if c != original]
        first = seen.index(changed[0]) if changed else len(seen)
        assert all(c != original for c in seen[first:]), i
        distinct = list(dict.fromkeys(changed))
        assert len(distinct) <= 2, (i, distinct)
        if distinct:
            persisted += "<persisted-output>" in distinct[0]
            # Each replaced form is sent in one unbroken run, never flipping back.
            runs = [c for n, c in enumerate(changed) if n == 0 or changed[n - 1] != c]
            assert runs == distinct, i
    assert persisted >= 2
    # The previews name saved outputs where the replica that decided wrote them.
    texts = " ".join(c for r in requests for c in r.values())
    assert str(workspaces[0]) in texts and str(workspaces[1]) in texts


# The Claude Code CLI tests/setup.d's agents part installs (or another, named).
CLAUDE = os.environ.get("TOOLWIRE_TEST_CLAUDE") or str(REPO / "tests/agents/node_modules/.bin/claude")


@pytest.mark.skipif(not os.access(CLAUDE, os.X_OK), reason=f"no Claude Code CLI at {CLAUDE}")
def test_claude_code_through_litellm_sends_what_it_sends_through_the_proxy(stack: Stack, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    scratch = tmp_path / "tmp"
    scratch.mkdir()

    def run(base_url: str, key: str, ws: Path) -> list[list[tuple[str, str]]]:
        mark = stack.provider.mark()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            # Its scratch files (`$TMPDIR/claude-<uid>/`) stay in the test's directory.
            "TMPDIR": str(scratch),
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_API_KEY": key,
            "ANTHROPIC_SMALL_FAST_MODEL": "claude-test",
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": "claude-test",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
        argv = [CLAUDE, "-p", "count for me", "--model", "claude-test", "--allowedTools", "Bash"]
        argv += ["--output-format", "json", "--max-turns", "8"]
        out = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, (out.stdout, out.stderr)
        result = json.loads(out.stdout)
        assert result["result"] == "All done." and not result["is_error"], result
        # The agent's own requests (it sends tools), each turn of its loop.
        turns = [(p, b) for p, b in stack.provider.since(mark) if b.get("tools")]
        assert len(turns) == AGENT_CALLS + 1
        return turns

    via_proxy = run(stack.proxy_url, "sk-ant-test", stack.proxy_ws)
    via_litellm = run(stack.litellm_url, LITELLM_KEY, stack.litellm_ws)
    assert normalized(stack, via_litellm, stack.litellm_ws) == normalized(stack, via_proxy, stack.proxy_ws)
    assert [len(results_sent(p, b)) for p, b in via_litellm] == list(range(AGENT_CALLS + 1))
    # Its streamed responses' usage reaches toolwire stats, as the proxy's does.
    session = derive_session("anthropic", via_litellm[0][1]["messages"])
    for ws in (stack.proxy_ws, stack.litellm_ws):
        stats = stats_of(ws, str(session), AGENT_CALLS + 1)
        assert stats["requests"] == AGENT_CALLS + 1, (ws, stats)
        assert stats["requestsWithoutUsage"] == 0, (ws, stats)
        assert stats["tokens"]["output"] == 7 * (AGENT_CALLS + 1), (ws, stats)


def test_a_session_named_in_the_request_is_the_session(stack: Stack) -> None:
    client = anthropic.Anthropic(base_url=stack.litellm_url, api_key=LITELLM_KEY, max_retries=0)
    raw = client.messages.with_raw_response.create(
        model="claude-test",
        max_tokens=64,
        messages=[{"role": "user", "content": "a named session"}],
        extra_headers={"x-toolwire-session": "team-build-7"},
    )
    assert raw.headers.get("x-toolwire-session") == "team-build-7"
    assert raw.headers.get("x-toolwire-budget") == "applied; persisted=0"
