"""toolwire inside a LiteLLM proxy: a pre-call guardrail (PROTOCOL.md 12.4).

Configured in LiteLLM's ``config.yaml`` like any custom guardrail::

    guardrails:
      - guardrail_name: toolwire
        litellm_params:
          guardrail: toolwire_client.litellm.ToolwireGuardrail
          mode: pre_call
          default_on: true
          workspace: /srv/toolwire        # the daemon's workspace root
          deadline_seconds: 5             # fail open past this

Before each call on the Anthropic Messages, OpenAI Chat, Responses and
Gemini routes it puts the conversation through ``budget/apply`` of the
workspace's shared daemon (``toolwire serve --shared``, started if none
runs), under the session ``toolwire proxy`` would give the same request,
and hands LiteLLM the budgeted conversation. Every call to toolwire is
awaited on LiteLLM's own event loop through the asyncio client, so a slow
toolwire never blocks other requests; past the deadline, or on any error,
the request goes on as it came (fail-open), logged at WARNING and marked in
the ``x-toolwire-budget`` / ``x-toolwire-degraded`` response headers.

Each response's token usage is appended to the session's
``proxy-usage.jsonl`` in the data directory, as the proxy records it, so
``toolwire stats`` counts the traffic through LiteLLM.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import logging
import os
import tempfile
import time
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any

from litellm.integrations.custom_guardrail import CustomGuardrail

from .aio import AsyncToolwireClient

log = logging.getLogger("toolwire_client.litellm")

#: Response header: what budgeting did, as ``toolwire proxy`` says it.
BUDGET_HEADER = "x-toolwire-budget"
#: Response header, present only when toolwire could not budget the request.
DEGRADED_HEADER = "x-toolwire-degraded"
#: Response header, present only when old results were cleared.
CLEARED_HEADER = "x-toolwire-cleared"
#: Response header, present only when the pairing was repaired.
REPAIRED_HEADER = "x-toolwire-repaired"
#: Response header naming the request's session; also read from the request.
SESSION_HEADER = "x-toolwire-session"

# LiteLLM's call types by route, and the toolwire format and conversation
# key of each (the proxy's `Route`: src/proxy/route.rs).
_ROUTES: dict[str, tuple[str, str]] = {
    "anthropic_messages": ("anthropic", "messages"),
    "aanthropic_messages": ("anthropic", "messages"),
    "completion": ("openai-chat", "messages"),
    "acompletion": ("openai-chat", "messages"),
    "responses": ("openai-responses", "input"),
    "aresponses": ("openai-responses", "input"),
    "generate_content": ("gemini", "contents"),
    "agenerate_content": ("gemini", "contents"),
    "generate_content_stream": ("gemini", "contents"),
    "agenerate_content_stream": ("gemini", "contents"),
}

# Notes kept from a request's pre-call hook for its response headers and
# usage record: the most recent calls only, so memory stays bounded.
_PENDING_LIMIT = 4096


def derive_session(format_name: str, conversation: Any) -> str | None:
    """The session ``toolwire proxy`` gives a request without an
    ``x-toolwire-session`` header (src/proxy/conversation.rs): ``px-`` and
    the first 32 hex digits of the SHA-256 of ``<format> NUL <first user
    element>``, the element as compact JSON in the order sent with every
    ``cache_control`` member removed.

    Python writes JSON as serde_json does for everything a conversation's
    first message holds (strings, integers, objects, arrays); a float in it
    may be spelled differently (``1e-07`` against ``1e-7``) and give another
    session, which costs budgeting nothing but the sharing of decisions with
    the same conversation sent through the proxy.
    """
    if isinstance(conversation, list):
        if not conversation:
            return None
        first = next(
            (m for m in conversation if isinstance(m, dict) and m.get("role") == "user"),
            conversation[0],
        )
    elif isinstance(conversation, str):
        first = conversation
    else:
        return None
    text = json.dumps(_without_cache_control(first), ensure_ascii=False, separators=(",", ":"))
    digest = hashlib.sha256(format_name.encode() + b"\0" + text.encode("utf-8", "surrogatepass")).hexdigest()
    return f"px-{digest[:32]}"


def _without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


def _chars(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _note(text: str) -> str:
    """A header value from free text, as the proxy cleans it."""
    return "".join(c if c == " " or ("!" <= c <= "~") else "?" for c in text)[:512]


def _pricing(data: dict[str, Any]) -> dict[str, Any]:
    """What the request says about its prices, as the proxy reads it: the
    model (LiteLLM's name for it, without a ``provider/`` prefix toolwire
    strips itself) and a 24-hour OpenAI cache retention. An Anthropic
    ``ttl: "1h"`` marker is found the way the proxy finds it, in the text."""
    pricing: dict[str, Any] = {}
    model = data.get("model")
    if isinstance(model, str) and model:
        pricing["model"] = model
    if data.get("prompt_cache_retention") == "24h":
        pricing["cacheTtl"] = "24h"
    elif re.search(r'"ttl"\s*:\s*"1h"', json.dumps(data.get("messages"), default=str)):
        pricing["cacheTtl"] = "1h"
    return pricing


def _why(clearing: Any) -> str:
    """Why a request cleared, as the proxy says it after the ids:
    `; reason=pays|expired|trigger; rentChars=N; costChars=N`."""
    if not isinstance(clearing, dict):
        return ""
    if clearing.get("decision") == "expired":
        reason = "expired"
    elif clearing.get("mode") == "auto":
        reason = "pays"
    else:
        reason = "trigger"
    return f"; reason={reason}; rentChars={clearing.get('rentChars', 0)}; costChars={clearing.get('costChars', 0)}"


def _ids(ids: Any) -> str:
    """Ids comma-separated and percent-encoded, as the proxy lists them."""
    return ",".join(_form_encoded(i) for i in ids or [] if isinstance(i, str))


def _form_encoded(text: str) -> str:
    # application/x-www-form-urlencoded as the url crate writes it (`~` too).
    return "".join(
        c if c.isascii() and (c.isalnum() or c in "*-._") else "+" if c == " " else "".join(f"%{b:02X}" for b in c.encode())
        for c in text
    )


def _request_header(data: dict[str, Any], name: str) -> str | None:
    request = data.get("proxy_server_request")
    headers = request.get("headers") if isinstance(request, dict) else None
    if not isinstance(headers, dict):
        return None
    for key, value in headers.items():
        if isinstance(key, str) and key.lower() == name and isinstance(value, str):
            return value
    return None


class ToolwireGuardrail(CustomGuardrail):
    """Budget every conversation LiteLLM forwards through toolwire; fail open.

    Parameters (``litellm_params`` beside ``guardrail`` and ``mode``):

    - ``workspace``: the workspace root whose shared daemon holds the
      sessions (default: LiteLLM's working directory).
    - ``data_dir``: the daemon's data directory, where usage is recorded
      (default: ``<workspace>/.toolwire``, as toolwire's own default).
    - ``deadline_seconds``: how long a request may wait for toolwire
      (starting or reaching the daemon included) before it goes on as it
      came (default 5).
    - ``binary``: the toolwire binary (default: ``TOOLWIRE_BIN``, the
      ``toolwire`` wheel, ``PATH``).
    """

    def __init__(
        self,
        workspace: str | None = None,
        data_dir: str | None = None,
        deadline_seconds: float | str = 5.0,
        binary: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        workspace, data_dir, binary = (_setting(v) for v in (workspace, data_dir, binary))
        self.workspace = Path(workspace or os.getcwd()).expanduser().absolute()
        self.data_dir = Path(data_dir).expanduser().absolute() if data_dir else self.workspace / ".toolwire"
        self.deadline = float(_setting(str(deadline_seconds)) or 5.0)
        self.binary = binary
        self._client: AsyncToolwireClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._connecting: asyncio.Lock | None = None
        self._pending: OrderedDict[str, dict[str, Any]] = OrderedDict()

    # -- LiteLLM hooks ---------------------------------------------------

    async def async_pre_call_hook(
        self,
        user_api_key_dict: Any,
        cache: Any,
        data: dict[str, Any],
        call_type: str,
    ) -> dict[str, Any]:
        route = _ROUTES.get(str(call_type))
        if route is None or not isinstance(data, dict):
            return data
        format_name, key = route
        conversation = data.get(key)
        call_id = data.get("litellm_call_id")
        if not isinstance(call_id, str) or not call_id:
            call_id = str(uuid.uuid4())
            data["litellm_call_id"] = call_id
        pending: dict[str, Any] = {"format": format_name, "headers": {}}
        self._remember(call_id, pending)
        headers: dict[str, str] = pending["headers"]
        received = _chars(conversation) if conversation is not None else 0
        pending.update(chars_received=received, chars_sent=received)
        session = _request_header(data, SESSION_HEADER) or derive_session(format_name, conversation)
        if session is None or not isinstance(conversation, list) or not conversation:
            headers[BUDGET_HEADER] = "none; no conversation"
            return data
        pending["session"] = session
        headers[SESSION_HEADER] = session
        try:
            result, conversation, repaired = await asyncio.wait_for(
                self._apply(session, format_name, conversation, _pricing(data)), self.deadline
            )
        except Exception as err:  # fail open: whatever went wrong, the call goes on
            reason = _reason(err, self.deadline)
            log.warning("toolwire: budgeting failed, forwarding the request as it came (session %s): %s", session, reason)
            headers[BUDGET_HEADER] = _note(f"failed; {reason}")
            headers[DEGRADED_HEADER] = _note(f"sent as is; {reason}")
            return data
        messages = result.get("messages")
        if not isinstance(messages, list) or len(messages) != len(conversation):
            reason = "budget/apply answered a conversation of another length"
            log.warning("toolwire: %s; forwarding the request as it came (session %s)", reason, session)
            headers[BUDGET_HEADER] = _note(f"failed; {reason}")
            headers[DEGRADED_HEADER] = _note(f"sent as is; {reason}")
            return data
        data[key] = messages
        if repaired is not None:
            log.info("toolwire: repaired the pairing of a request (session %s): %s", session, repaired)
            headers[REPAIRED_HEADER] = _note(
                "droppedToolUses={}; droppedToolResults={}; movedToolResults={}; renamedToolUses={}".format(
                    _ids(repaired.get("droppedToolUses")),
                    _ids(repaired.get("droppedToolResults")),
                    _ids(repaired.get("movedToolResults")),
                    ",".join(
                        f"{_ids([r.get('from')])}>{_ids([r.get('to')])}"
                        for r in repaired.get("renamedToolUses") or []
                        if isinstance(r, dict)
                    ),
                )
            )
            pending["repaired"] = True
        persisted = len(result.get("persisted") or [])
        cleared = [c for c in result.get("cleared") or [] if isinstance(c, str)]
        headers[BUDGET_HEADER] = f"applied; persisted={persisted}"
        if cleared:
            headers[CLEARED_HEADER] = _note(_ids(cleared) + _why(result.get("clearing")))
        pending.update(
            budgeted=True,
            results_persisted=persisted,
            results_cleared=len(cleared),
            chars_sent=_chars(messages),
        )
        return data

    async def async_post_call_response_headers_hook(
        self,
        data: dict[str, Any],
        user_api_key_dict: Any,
        response: Any,
        request_headers: dict[str, str] | None = None,
        litellm_call_info: dict[str, object] | None = None,
    ) -> dict[str, str] | None:
        pending = self._pending.get(str(data.get("litellm_call_id"))) if isinstance(data, dict) else None
        if pending is None or not pending["headers"]:
            return None
        return dict(pending["headers"])

    async def async_log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
        self._record(kwargs, response_obj, status=200)

    async def async_log_failure_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
        status = 502
        exception = kwargs.get("exception") if isinstance(kwargs, dict) else None
        code = getattr(exception, "status_code", None)
        if isinstance(code, int):
            status = code
        self._record(kwargs, None, status=status)

    # -- toolwire --------------------------------------------------------

    async def _apply(
        self, session: str, format_name: str, conversation: list[Any], pricing: dict[str, Any]
    ) -> tuple[dict[str, Any], list[Any], dict[str, Any] | None]:
        """Repair the pairing if the provider would refuse it, then budget:
        the result of ``budget/apply``, the conversation it was given, and
        the repair's report (None when none was needed)."""
        client = await self._connected()
        try:
            repaired = await self._repair(client, format_name, conversation)
            if repaired is not None:
                conversation = repaired[0]
            result = await client.request(
                "budget/apply",
                {"sessionId": session, "messages": conversation, "format": format_name, "pricing": pricing},
            )
        except (ConnectionError, OSError):
            # The daemon went away: the next request starts or reaches a new one.
            await self._drop(client)
            raise
        if not isinstance(result, dict):
            raise ValueError("budget/apply answered something other than an object")
        return result, conversation, repaired[1] if repaired is not None else None

    async def _repair(
        self, client: AsyncToolwireClient, format_name: str, conversation: list[Any]
    ) -> tuple[list[Any], dict[str, Any]] | None:
        """The proxy's pair repair (src/transcript/repair.rs), which the
        JSON-RPC face offers on files only: ``transcript/check`` says in
        memory whether the provider would refuse the pairing; only then is
        the conversation written as a transcript in a private temporary
        directory and put through ``transcript/repair``, the same repair."""
        check = await client.request("transcript/check", {"messages": conversation, "format": format_name})
        if not isinstance(check, dict) or check.get("ok", True):
            return None
        with tempfile.TemporaryDirectory(prefix="toolwire-litellm-") as tmp:
            path = Path(tmp) / "request.jsonl"
            lines = [json.dumps({"type": "session", "format": format_name})]
            lines += [json.dumps({"type": "message", "message": m}, ensure_ascii=False) for m in conversation]
            await asyncio.to_thread(path.write_text, "\n".join(lines) + "\n", encoding="utf-8")
            report = await client.request("transcript/repair", {"path": str(path), "format": format_name})
            text = await asyncio.to_thread(path.read_text, encoding="utf-8")
        if not isinstance(report, dict) or not report.get("changed"):
            return None
        messages = []
        for line in text.splitlines():
            if line.strip():
                value = json.loads(line)
                if isinstance(value, dict) and value.get("type") == "message":
                    messages.append(value.get("message"))
        return messages, report

    async def _connected(self) -> AsyncToolwireClient:
        loop = asyncio.get_running_loop()
        if self._client_loop is not loop:
            # A client is bound to the loop that started it.
            self._client = None
            self._client_loop = loop
            self._connecting = asyncio.Lock()
        assert self._connecting is not None
        async with self._connecting:
            client = self._client
            if client is not None and client._closed is None:
                return client
            if client is not None:
                await self._drop(client)
            client = await AsyncToolwireClient.start(
                self.workspace,
                binary=self.binary,
                binary_setting_name="the guardrail's binary parameter",
                shared=True,
                client_info={"name": "toolwire-litellm", "version": "1"},
            )
            self._client = client
            return client

    async def _drop(self, client: AsyncToolwireClient) -> None:
        if self._client is client:
            self._client = None
        try:
            await client._kill()
        except (ProcessLookupError, OSError):
            pass

    # -- notes and usage -------------------------------------------------

    def _remember(self, call_id: str, pending: dict[str, Any]) -> None:
        self._pending[call_id] = pending
        self._pending.move_to_end(call_id)
        while len(self._pending) > _PENDING_LIMIT:
            self._pending.popitem(last=False)

    def _record(self, kwargs: Any, response: Any, *, status: int) -> None:
        """Append the call's usage record where ``toolwire stats`` reads it
        (``<dataDir>/sessions/<id>/proxy-usage.jsonl``, src/proxy/stats.rs)."""
        call_id = kwargs.get("litellm_call_id") if isinstance(kwargs, dict) else None
        # Kept (for the response headers, whichever hook LiteLLM runs
        # first) until newer calls push it out; recorded once.
        pending = self._pending.get(str(call_id))
        if pending is None or "session" not in pending or pending.get("recorded"):
            return
        pending["recorded"] = True
        record = {
            "timeMs": int(time.time() * 1000),
            "format": pending["format"],
            "status": status,
            "complete": response is not None,
            "charsReceived": pending["chars_received"],
            "charsSent": pending["chars_sent"],
            "resultsPersisted": pending.get("results_persisted", 0),
            "resultsCleared": pending.get("results_cleared", 0),
            "budgeted": pending.get("budgeted", False),
            "repaired": pending.get("repaired", False),
            "usage": _usage(response),
        }
        directory = self.data_dir / "sessions" / pending["session"]
        try:
            directory.mkdir(parents=True, exist_ok=True)
            # One short line with O_APPEND: concurrent writers never interleave.
            fd = os.open(directory / "proxy-usage.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())
            finally:
                os.close(fd)
        except OSError as err:
            log.warning("toolwire: could not record usage in %s: %s", directory, err)


def _setting(value: str | None) -> str | None:
    """A parameter as LiteLLM's config spells secrets and per-host values:
    ``os.environ/NAME`` is the variable's value (unset: not given)."""
    if isinstance(value, str) and value.startswith("os.environ/"):
        return os.environ.get(value.removeprefix("os.environ/")) or None
    return value


def _reason(err: BaseException, deadline: float) -> str:
    if isinstance(err, TimeoutError):
        return f"toolwire did not answer within {deadline:g} s (deadline_seconds)"
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else 'no message'}"


def _plain(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        try:
            return value.model_dump()
        except Exception:  # a response LiteLLM built loosely: read what is there
            return dict(getattr(value, "__dict__", {}))
    return value


def _usage(response: Any) -> dict[str, int] | None:
    """The response's usage in the proxy's one shape (src/proxy/usage.rs):
    ``input`` counts only tokens neither read from nor written to the cache."""
    body = _plain(response)
    if not isinstance(body, dict):
        return None
    usage = _plain(body.get("usage"))
    if isinstance(usage, dict):

        def n(d: Any, key: str) -> int:
            v = d.get(key) if isinstance(d, dict) else None
            return v if isinstance(v, int) and v >= 0 else 0

        if "prompt_tokens" in usage:
            cached = n(_plain(usage.get("prompt_tokens_details")), "cached_tokens")
            creation = n(usage, "cache_creation_input_tokens")
            return {
                "input": max(n(usage, "prompt_tokens") - cached - creation, 0),
                "cacheRead": cached,
                "cacheCreation": creation,
                "output": n(usage, "completion_tokens"),
            }
        if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:
            return {
                "input": n(usage, "input_tokens"),
                "cacheRead": n(usage, "cache_read_input_tokens"),
                "cacheCreation": n(usage, "cache_creation_input_tokens"),
                "output": n(usage, "output_tokens"),
            }
        cached = n(_plain(usage.get("input_tokens_details")), "cached_tokens")
        return {
            "input": max(n(usage, "input_tokens") - cached, 0),
            "cacheRead": cached,
            "cacheCreation": 0,
            "output": n(usage, "output_tokens"),
        }
    meta = body.get("usageMetadata")
    if isinstance(meta, dict):
        total = meta.get("promptTokenCount", 0) or 0
        cached = meta.get("cachedContentTokenCount", 0) or 0
        return {
            "input": max(total - cached, 0),
            "cacheRead": cached,
            "cacheCreation": 0,
            "output": meta.get("candidatesTokenCount", 0) or 0,
        }
    return None
