"""The blocking client: start toolwire and call its methods with typed params and results.

A reader thread takes the server's frames, so calls may come from several
threads at once (each waits for its own answer), ``$/progress`` reaches the
caller's callback while it waits, and a ``CancelToken`` can cancel a call
from another thread.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import IO, Any, TypeVar

from pydantic import BaseModel

from . import _wire, models as m
from ._cancel import CancelToken
from ._methods import SyncMethods
from .errors import ToolwireError, ToolwireExitedError, error_from_response

_T = TypeVar("_T", bound=BaseModel)


def _pass_on(stream: IO[bytes], head: bytearray) -> None:
    """Copy a child's stderr to ours, keeping its beginning in ``head``."""
    while chunk := stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536):
        _wire.pass_on(head, chunk)


class ToolwireClient(SyncMethods, _wire.Router):
    """One connection to toolwire. Use ``ToolwireClient.start(root)``; close with ``close()`` or ``with``."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.stdin is None or proc.stdout is None:
            raise ValueError("toolwire: the process needs stdin and stdout pipes")
        _wire.Router.__init__(self)
        self._proc = proc
        self._stdin: IO[bytes] = proc.stdin
        self._stdout: IO[bytes] = proc.stdout
        self._write_lock = threading.Lock()
        self._pending: dict[int, Future[Any]] = {}
        self._lock = threading.Lock()
        self._closed: BaseException | None = None
        self._reader = threading.Thread(target=self._read_loop, name="toolwire-reader", daemon=True)
        self._reader.start()
        self.initialize_result: m.InitializeResult | None = None

    @classmethod
    def start(
        cls,
        root: str | os.PathLike[str],
        *,
        binary: str | os.PathLike[str] | None = None,
        binary_setting_name: str = "setting",
        shared: bool = True,
        idle_timeout: float | None = None,
        command: Sequence[str] | None = None,
        config: m.Config | Mapping[str, Any] | None = None,
        client_info: m.NameVersion | None = None,
        env: Mapping[str, str] | None = None,
        stderr: int | IO[Any] | None = None,
    ) -> ToolwireClient:
        """Start ``toolwire serve --shared`` for ``root`` (or ``serve``, or ``command``) and initialize it.

        The binary is ``binary`` (a setting), else ``TOOLWIRE_BIN``, else the
        ``toolwire`` wheel's binary in this interpreter's scripts directory
        (and, outside a virtual environment, the user scheme's), else
        ``toolwire`` on ``PATH`` (see ``locate_toolwire``);
        ``ToolwireNotFoundError`` names where it looked.
        """
        path = _wire.root_path(root)
        argv = _wire.command_line(
            path,
            binary=binary,
            binary_setting_name=binary_setting_name,
            shared=shared,
            idle_timeout=idle_timeout,
            command=command,
            env=env,
        )
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            # By default its stderr (its log) is passed on to ours, and its
            # beginning kept for the error should it die while starting.
            stderr=subprocess.PIPE if stderr is None else stderr,
            cwd=path,
            env=dict(env) if env is not None else None,
        )
        head: bytearray | None = None
        pump = None
        if stderr is None and proc.stderr is not None:
            head = bytearray()
            pump = threading.Thread(target=_pass_on, args=(proc.stderr, head), name="toolwire-stderr", daemon=True)
            pump.start()
        client = cls(proc)
        try:
            result = client.request("initialize", _wire.initialize_params(path, config, client_info))
            client.initialize_result = m.InitializeResult.model_validate(result)
            client._notify("initialized", {})
        except (ConnectionError, OSError) as err:
            # The process is gone or going (its output ended, or the write
            # of `initialize` found the pipe closed): its exit status and
            # stderr say why, whichever came first.
            try:
                code = proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                client._kill()
                raise err
            if pump is not None:
                pump.join(timeout=30)
            client._kill()
            raise ToolwireExitedError(
                argv[0], _wire.exit_status(code), _wire.first_lines(head) if head is not None else None
            ) from err
        except BaseException:
            client._kill()
            raise
        return client

    @property
    def server_methods(self) -> list[str]:
        """The methods the server lists (``capabilities.experimental.toolwire.methods``)."""
        assert self.initialize_result is not None
        return list(self.initialize_result.capabilities.experimental.toolwire.methods)

    # -- calls -----------------------------------------------------------

    def request(
        self,
        method: str,
        params: BaseModel | Mapping[str, Any] | None = None,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> Any:
        """Call any method with raw params; returns the raw result or raises a typed ``ToolwireError``."""
        _wire.check_not_cancelled(method, cancel)
        request_id, message, token = self._prepare(method, params, on_progress)
        future: Future[Any] = Future()
        with self._lock:
            if self._closed is not None:
                raise ConnectionError(f"toolwire connection is closed: {self._closed}")
            self._pending[request_id] = future
        unsubscribe = None
        try:
            self._send(message)
            if cancel is not None:
                unsubscribe = cancel._on_cancel(lambda: self._notify("$/cancelRequest", {"id": request_id}))
            answer = future.result()
        finally:
            if unsubscribe is not None:
                unsubscribe()
            self._done(token)
            with self._lock:
                self._pending.pop(request_id, None)
        if "error" in answer:
            raise error_from_response(method, answer["error"])
        return answer.get("result")

    def _call(
        self,
        method: str,
        params: BaseModel,
        result: type[_T],
        cancel: CancelToken | None,
        on_progress: Callable[[Any], None] | None,
    ) -> _T:
        return result.model_validate(self.request(method, params, cancel=cancel, on_progress=on_progress))

    def close(self, timeout: float = 30) -> int:
        """``shutdown`` then ``exit``; returns the server's exit code (0 after a clean shutdown)."""
        try:
            self.request("shutdown")
            self._notify("exit", None)
        except (ToolwireError, ConnectionError, OSError):
            pass  # already gone: what matters is that the process is
        try:
            self._stdin.close()
        except OSError:
            pass
        try:
            code = self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill()
            code = self._proc.wait()
        self._reader.join(timeout=timeout)
        self._stdout.close()
        return code

    def __enter__(self) -> ToolwireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- wire ------------------------------------------------------------

    def _kill(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()

    def _send(self, message: dict[str, Any]) -> None:
        frame = _wire.encode(message)
        with self._write_lock:
            self._stdin.write(frame)
            self._stdin.flush()

    def _notify(self, method: str, params: Any) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self._send(message)

    def _read_loop(self) -> None:
        import json

        reason: BaseException = ConnectionError("toolwire closed its output")
        try:
            while True:
                headers: list[bytes] = []
                while True:
                    line = self._stdout.readline()
                    if not line:
                        raise ConnectionError("toolwire closed its output")
                    if not line.strip():
                        break
                    headers.append(line.strip())
                length = _wire.content_length(headers)
                body = self._stdout.read(length)
                if len(body) < length:
                    raise ConnectionError("toolwire closed its output mid-frame")
                self._dispatch(json.loads(body))
        except (ConnectionError, OSError, ValueError) as err:
            reason = err
        with self._lock:
            self._closed = reason
            pending = list(self._pending.values())
        for future in pending:
            if not future.done():
                future.set_exception(ConnectionError(f"toolwire connection ended: {reason}"))

    def _dispatch(self, message: Any) -> None:
        response = self._route(message)
        if response is not None:
            with self._lock:
                future = self._pending.get(response[0])
            if future is not None and not future.done():
                future.set_result(response[1])
