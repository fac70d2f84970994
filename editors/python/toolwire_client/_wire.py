"""What the sync and async clients share: the command line, ``initialize``
params and LSP framing (``Content-Length`` headers, JSON-RPC 2.0 bodies)."""

from __future__ import annotations

import itertools
import json
import os
import sys
from decimal import Decimal
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from . import models as m
from ._methods import PROGRESS_METHODS
from .locate import locate_toolwire

CLIENT_VERSION = "0.2.0"
#: Frames up to this size are read (the server accepts up to 1 GiB too).
MAX_FRAME = 1 << 30


def root_path(root: str | os.PathLike[str]) -> Path:
    text = os.fspath(root)
    if text.startswith("file://"):
        from urllib.parse import unquote, urlparse

        return Path(unquote(urlparse(text).path))
    path = Path(text)
    if not path.is_absolute():
        raise ValueError(f"toolwire: the workspace root must be absolute, got {text}")
    return path


def command_line(
    root: Path,
    *,
    binary: str | os.PathLike[str] | None,
    binary_setting_name: str,
    shared: bool,
    idle_timeout: float | None,
    command: Sequence[str] | None,
    env: Mapping[str, str] | None,
) -> list[str]:
    """``command`` as given, else ``toolwire serve [--shared ...]`` of the located binary."""
    if command:
        return list(command)
    argv = [str(locate_toolwire(binary, setting_name=binary_setting_name, env=env)), "serve"]
    if shared:
        argv += ["--shared", "--workspace", str(root)]
        if idle_timeout is not None:
            argv += ["--idle-timeout", str(int(idle_timeout))]
    return argv


def initialize_params(
    root: Path, config: m.Config | Mapping[str, Any] | None, client_info: m.NameVersion | None
) -> dict[str, Any]:
    if isinstance(config, BaseModel):
        options: Any = config.model_dump(by_alias=True, exclude_none=True, mode="json")
    else:
        options = dict(config or {})
    params = m.InitializeParams(
        process_id=os.getpid(),
        root_uri=root.as_uri(),
        client_info=client_info or m.NameVersion(name="toolwire-client (python)", version=CLIENT_VERSION),
        initialization_options=options,
    )
    return params.model_dump(by_alias=True, exclude_none=True, mode="json")


#: How much of a child's stderr is kept for the error when it dies at start.
STDERR_HEAD = 4000


def pass_on(head: bytearray, chunk: bytes) -> None:
    """A chunk of a child's stderr: copied to ours, and kept in ``head``
    while that is short (a failing start says why at the beginning)."""
    if len(head) < STDERR_HEAD:
        head += chunk[: STDERR_HEAD - len(head)]
    out = getattr(sys.stderr, "buffer", None)
    try:
        if out is not None:
            out.write(chunk)
            out.flush()
        else:
            sys.stderr.write(chunk.decode("utf-8", "replace"))
    except (OSError, ValueError):
        pass  # our stderr is closed: the head is still kept


def first_lines(head: bytes, n: int = 10) -> str:
    lines = head.decode("utf-8", "replace").rstrip().split("\n")
    if lines == [""]:
        return ""
    return "\n".join(lines[:n] + (["..."] if len(lines) > n else []))


def exit_status(returncode: int) -> str:
    return f"signal {-returncode}" if returncode < 0 else f"status {returncode}"


def check_not_cancelled(method: str, cancel: Any) -> None:
    """A token cancelled before the call: nothing is sent, and the call
    raises as one the server cancelled before committing anything."""
    if cancel is not None and cancel.cancelled:
        from .errors import CancelledError

        raise CancelledError(method, -32800, "request cancelled before it was sent", m.ErrorData(kind="cancelled"))


def dump_params(params: BaseModel | Mapping[str, Any] | None) -> Any:
    """Params as sent. A model's unset optional fields are left out; the
    provider messages in it are sent as given (``_verbatim.Verbatim``), in
    "python" mode so that their ``Decimal`` numbers reach ``encode``."""
    if isinstance(params, BaseModel):
        return params.model_dump(by_alias=True, exclude_unset=True, mode="python")
    return dict(params) if params is not None else None


def _json(value: Any, out: list[str]) -> None:
    """JSON text of ``value``: ``json.dumps``' output, keys in their order,
    and a ``Decimal`` written as it was read (``1.10``), which ``json``
    cannot do."""
    if isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=False))
    elif value is None or isinstance(value, (bool, int, float)):
        out.append(json.dumps(value, allow_nan=False))
    elif isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"toolwire: {value} is not a JSON number")
        out.append(str(value))
    elif isinstance(value, Mapping):
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            if not isinstance(key, str):
                raise TypeError(f"toolwire: a JSON object key must be a string, got {key!r}")
            out.append("," if i else "")
            out.append(json.dumps(key, ensure_ascii=False))
            out.append(":")
            _json(item, out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            out.append("," if i else "")
            _json(item, out)
        out.append("]")
    elif isinstance(value, BaseModel):
        _json(value.model_dump(by_alias=True, exclude_unset=True, mode="python"), out)
    else:
        raise TypeError(f"toolwire: {type(value).__name__} is not JSON: {value!r}")


def encode(message: dict[str, Any]) -> bytes:
    out: list[str] = []
    _json(message, out)
    body = "".join(out).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def content_length(header_lines: list[bytes]) -> int:
    """The body length a frame's header lines announce."""
    length = None
    for line in header_lines:
        name, _, value = line.decode("ascii", "replace").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    if length is None or not 0 <= length <= MAX_FRAME:
        raise ConnectionError(f"toolwire sent a frame without a valid Content-Length: {header_lines!r}")
    return length


class Router:
    """Request ids, progress tokens and the routing of incoming frames,
    for both clients (which differ only in how they wait)."""

    _pending: MutableMapping[int, Any]

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._tokens = itertools.count(1)
        self._progress: dict[str, Callable[[Any], None]] = {}

    def _prepare(
        self,
        method: str,
        params: BaseModel | Mapping[str, Any] | None,
        on_progress: Callable[[Any], None] | None,
    ) -> tuple[int, dict[str, Any], str | None]:
        """The request frame's id and message, and the progress token it registered (if any)."""
        body = dump_params(params)
        token = None
        if on_progress is not None and method in PROGRESS_METHODS:
            token = f"toolwire-py-{next(self._tokens)}"
            body = {**(body or {}), "workDoneToken": token}
            self._progress[token] = on_progress
        request_id = next(self._ids)
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if body is not None:
            message["params"] = body
        return request_id, message, token

    def _done(self, token: str | None) -> None:
        if token is not None:
            self._progress.pop(token, None)

    def _route(self, message: Any) -> tuple[int, dict[str, Any]] | None:
        """A response as (id, message) for the caller to complete; progress is delivered here."""
        if not isinstance(message, dict):
            return None
        if "id" in message and ("result" in message or "error" in message):
            return message["id"], message
        if message.get("method") == "$/progress":
            params = message.get("params") or {}
            handler = self._progress.get(str(params.get("token")))
            if handler is not None:
                handler(params.get("value"))
        return None
