"""toolwire's JSON-RPC errors as typed exceptions: one class per stable code."""

from __future__ import annotations

from typing import Any

from . import models as m


class ToolwireError(Exception):
    """An error toolwire answered. ``code`` and ``kind`` (``data.kind``) are stable."""

    def __init__(self, method: str, code: int, message: str, data: m.ErrorData | None) -> None:
        kind = data.kind if data is not None else "unknown"
        super().__init__(f"{method} failed ({code} {kind}): {message}")
        self.method = method
        self.code = code
        self.kind = kind
        self.message = message
        self.data = data


class ToolwireExitedError(ConnectionError):
    """toolwire exited before answering ``initialize``: ``binary``, ``status``
    (``status 3``, ``signal 9``) and the first lines of its ``stderr`` (when
    the client read it) say why."""

    def __init__(self, binary: str, status: str, stderr: str | None) -> None:
        if stderr is None:
            said = " (its stderr went where stderr= sent it)"
        elif stderr:
            said = ":\n" + stderr
        else:
            said = " (it wrote nothing on stderr)"
        super().__init__(f"toolwire: {binary} exited ({status}) before initializing{said}")
        self.binary = binary
        self.status = status
        self.stderr = stderr


class ParseError(ToolwireError):
    """-32700: the frame was not valid JSON."""


class InvalidRequestError(ToolwireError):
    """-32600: not a valid request, or sent after ``shutdown``."""


class MethodNotFoundError(ToolwireError):
    """-32601: the server does not know the method (an older server)."""


class InvalidParamsError(ToolwireError):
    """-32602: bad params; ``data.path`` names the offending field."""


class NotInitializedError(ToolwireError):
    """-32002: a request before ``initialize``."""


class CancelledError(ToolwireError):
    """-32800: the request was cancelled before it committed anything."""


class UnknownToolResultError(ToolwireError):
    """-32010: a tool_result answers no pending tool_use."""


class SessionExistsError(ToolwireError):
    """-32011: fork onto an existing session id."""


class SessionNotFoundError(ToolwireError):
    """-32012: the method needs a session that does not exist."""


class TranscriptLockedError(ToolwireError):
    """-32013: another process holds the transcript."""


class StorageError(ToolwireError):
    """-32014: the disk refused; nothing half-done remains."""


class ArtifactNotFoundError(ToolwireError):
    """-32015: no saved output for that tool_use id in that session."""


ERROR_CLASSES: dict[int, type[ToolwireError]] = {
    -32700: ParseError,
    -32600: InvalidRequestError,
    -32601: MethodNotFoundError,
    -32602: InvalidParamsError,
    -32002: NotInitializedError,
    -32800: CancelledError,
    -32010: UnknownToolResultError,
    -32011: SessionExistsError,
    -32012: SessionNotFoundError,
    -32013: TranscriptLockedError,
    -32014: StorageError,
    -32015: ArtifactNotFoundError,
}


def error_from_response(method: str, error: dict[str, Any]) -> ToolwireError:
    """The typed exception for a JSON-RPC ``error`` member."""
    code = int(error.get("code", 0))
    raw = error.get("data")
    data = m.ErrorData.model_validate(raw) if isinstance(raw, dict) and "kind" in raw else None
    return ERROR_CLASSES.get(code, ToolwireError)(method, code, str(error.get("message", "")), data)
