"""Spawn ``toolwire serve`` and call its methods with typed params/results.

The wire is JSON-RPC 2.0 with LSP framing (``Content-Length`` headers) over
the child's stdin/stdout. Calls are sequential, as a harness makes them.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from . import models as m

T = TypeVar("T", bound=BaseModel)


class ToolwireError(Exception):
    """A JSON-RPC error answer; ``data.kind`` is stable, branch on it."""

    def __init__(self, method: str, code: int, message: str, data: m.ErrorData) -> None:
        super().__init__(f"{method} failed ({code}): {message}")
        self.code = code
        self.data = data


class ToolwireClient:
    def __init__(self, binary: str | Path, root: Path, config: m.Config | None = None) -> None:
        self._proc = subprocess.Popen(
            [str(binary), "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self._next_id = 1
        params = m.InitializeParams(
            process_id=None,
            root_uri=root.resolve().as_uri(),
            client_info=m.NameVersion(name="toolwire-python-client", version="0.1.0"),
            initialization_options=(
                config.model_dump(by_alias=True, exclude_none=True, mode="json") if config else None
            ),
        )
        self.initialize_result = self._call("initialize", params, m.InitializeResult)
        self._notify("initialized", {})

    # -- methods ---------------------------------------------------------

    def budget_apply(self, params: m.BudgetApplyParams) -> m.BudgetApplyResult:
        return self._call("budget/apply", params, m.BudgetApplyResult)

    def state_fork(self, params: m.StateForkParams) -> m.StateForkResult:
        return self._call("state/fork", params, m.StateForkResult)

    def state_get(self, params: m.StateGetParams) -> m.StateGetResult:
        return self._call("state/get", params, m.StateGetResult)

    def state_reconstruct(self, params: m.StateReconstructParams) -> m.StateReconstructResult:
        return self._call("state/reconstruct", params, m.StateReconstructResult)

    def pair_append(self, params: m.PairAppendParams) -> m.PairAppendResult:
        return self._call("pair/append", params, m.PairAppendResult)

    def pair_flush(self, params: m.PairFlushParams) -> m.FlushResult:
        return self._call("pair/flush", params, m.FlushResult)

    def transcript_repair(self, params: m.TranscriptRepairParams) -> m.TranscriptRepairResult:
        return self._call("transcript/repair", params, m.TranscriptRepairResult)

    def close(self) -> int:
        """``shutdown`` then ``exit``; returns the server's exit code."""
        self._request("shutdown", None)
        self._notify("exit", None)
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        return self._proc.wait(timeout=30)

    # -- wire ------------------------------------------------------------

    def _call(self, method: str, params: BaseModel, result: type[T]) -> T:
        body = params.model_dump(by_alias=True, exclude_none=True, mode="json")
        return result.model_validate(self._request(method, body))

    def _send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        assert self._proc.stdin is not None
        self._proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self._proc.stdin.flush()

    def _notify(self, method: str, params: Any) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def _request(self, method: str, params: Any) -> Any:
        request_id = self._next_id
        self._next_id += 1
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        while True:
            message = self._read()
            if message.get("id") != request_id:
                continue  # a notification such as $/progress
            if "error" in message:
                err = message["error"]
                raise ToolwireError(
                    method, err["code"], err["message"], m.ErrorData.model_validate(err["data"])
                )
            return message.get("result")

    def _read(self) -> dict[str, Any]:
        out = self._proc.stdout
        assert out is not None
        length = None
        while True:
            line = out.readline()
            if not line:
                raise ConnectionError("toolwire closed its output")
            line = line.strip()
            if not line:
                break
            name, _, value = line.decode().partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        if length is None:
            raise ConnectionError("frame without Content-Length")
        return json.loads(out.read(length))
