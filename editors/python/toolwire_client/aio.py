"""The asyncio client: the same methods as ``ToolwireClient``, awaitable.

Cancelling the task that awaits a call sends ``$/cancelRequest`` for it (and
re-raises ``asyncio.CancelledError``, as asyncio code expects); a
``CancelToken`` instead lets the server's answer through, so the caller sees
``CancelledError`` (-32800) when the work had not committed, or the result
when it had.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from . import _wire, models as m
from ._cancel import CancelToken
from ._methods import AsyncMethods
from .errors import ToolwireError, ToolwireExitedError, error_from_response

_T = TypeVar("_T", bound=BaseModel)


async def _pass_on(stream: asyncio.StreamReader, head: bytearray) -> None:
    """Copy a child's stderr to ours, keeping its beginning in ``head``."""
    while chunk := await stream.read(65536):
        _wire.pass_on(head, chunk)


class AsyncToolwireClient(AsyncMethods, _wire.Router):
    """One connection to toolwire. Use ``await AsyncToolwireClient.start(root)``; close with ``await close()`` or ``async with``."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        if proc.stdin is None or proc.stdout is None:
            raise ValueError("toolwire: the process needs stdin and stdout pipes")
        _wire.Router.__init__(self)
        self._proc = proc
        self._stdin = proc.stdin
        self._stdout = proc.stdout
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._closed: BaseException | None = None
        self._reader = asyncio.get_running_loop().create_task(self._read_loop())
        self._stderr_pump: asyncio.Task[None] | None = None
        self.initialize_result: m.InitializeResult | None = None

    @classmethod
    async def start(
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
        stderr: int | None = None,
    ) -> AsyncToolwireClient:
        """Start ``toolwire serve --shared`` for ``root`` (or ``serve``, or ``command``) and initialize it."""
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
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            # By default its stderr (its log) is passed on to ours, and its
            # beginning kept for the error should it die while starting.
            stderr=asyncio.subprocess.PIPE if stderr is None else stderr,
            cwd=path,
            env=dict(env) if env is not None else None,
            limit=_wire.MAX_FRAME,
        )
        head: bytearray | None = None
        pump = None
        if stderr is None and proc.stderr is not None:
            head = bytearray()
            pump = asyncio.get_running_loop().create_task(_pass_on(proc.stderr, head))
        client = cls(proc)
        client._stderr_pump = pump
        try:
            result = await client.request("initialize", _wire.initialize_params(path, config, client_info))
            client.initialize_result = m.InitializeResult.model_validate(result)
            await client._notify("initialized", {})
        except (ConnectionError, OSError) as err:
            # The process is gone or going (its output ended, or the write
            # of `initialize` found the pipe closed): its exit status and
            # stderr say why, whichever came first.
            try:
                code = await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                await client._kill()
                raise err
            if pump is not None:
                await asyncio.wait_for(pump, 30)
            await client._kill()
            raise ToolwireExitedError(
                argv[0], _wire.exit_status(code), _wire.first_lines(head) if head is not None else None
            ) from err
        except BaseException:
            await client._kill()
            raise
        return client

    @property
    def server_methods(self) -> list[str]:
        assert self.initialize_result is not None
        return list(self.initialize_result.capabilities.experimental.toolwire.methods)

    async def request(
        self,
        method: str,
        params: BaseModel | Mapping[str, Any] | None = None,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> Any:
        """Call any method with raw params; returns the raw result or raises a typed ``ToolwireError``."""
        _wire.check_not_cancelled(method, cancel)
        if self._closed is not None:
            raise ConnectionError(f"toolwire connection is closed: {self._closed}")
        request_id, message, token = self._prepare(method, params, on_progress)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending[request_id] = future
        unsubscribe = None
        try:
            # Written at once, so that a cancel from here on follows it.
            self._stdin.write(_wire.encode(message))

            def send_cancel() -> None:
                # A token may be cancelled from another thread.
                loop.call_soon_threadsafe(lambda: loop.create_task(self._cancel(request_id)))

            if cancel is not None:
                unsubscribe = cancel._on_cancel(send_cancel)
            try:
                await self._stdin.drain()
                answer = await asyncio.shield(future)
            except asyncio.CancelledError:
                await self._cancel(request_id)
                raise
        finally:
            if unsubscribe is not None:
                unsubscribe()
            self._done(token)
            self._pending.pop(request_id, None)
            # Left unawaited when the write failed: its end of the
            # connection, if set, is the write's failure told twice.
            if not future.done():
                future.cancel()
            elif not future.cancelled():
                future.exception()
        if "error" in answer:
            raise error_from_response(method, answer["error"])
        return answer.get("result")

    async def _call(
        self,
        method: str,
        params: BaseModel,
        result: type[_T],
        cancel: CancelToken | None,
        on_progress: Callable[[Any], None] | None,
    ) -> _T:
        return result.model_validate(await self.request(method, params, cancel=cancel, on_progress=on_progress))

    async def close(self, timeout: float = 30) -> int:
        """``shutdown`` then ``exit``; returns the server's exit code (0 after a clean shutdown)."""
        try:
            await self.request("shutdown")
            await self._notify("exit", None)
        except (ToolwireError, ConnectionError, OSError):
            pass
        self._stdin.close()
        try:
            code = await asyncio.wait_for(self._proc.wait(), timeout)
        except TimeoutError:
            await self._kill()
            code = await self._proc.wait()
        await asyncio.wait_for(self._reader, timeout)
        if self._stderr_pump is not None:
            await asyncio.wait_for(self._stderr_pump, timeout)
        return code

    async def __aenter__(self) -> AsyncToolwireClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- wire ------------------------------------------------------------

    async def _cancel(self, request_id: int) -> None:
        try:
            await self._notify("$/cancelRequest", {"id": request_id})
        except (ConnectionError, OSError):
            pass

    async def _kill(self) -> None:
        if self._proc.returncode is None:
            self._proc.kill()
        await self._proc.wait()
        self._reader.cancel()
        if self._stderr_pump is not None:
            self._stderr_pump.cancel()

    async def _send(self, message: dict[str, Any]) -> None:
        self._stdin.write(_wire.encode(message))
        await self._stdin.drain()

    async def _notify(self, method: str, params: Any) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._send(message)

    async def _read_loop(self) -> None:
        reason: BaseException = ConnectionError("toolwire closed its output")
        try:
            while True:
                headers: list[bytes] = []
                while True:
                    line = await self._stdout.readline()
                    if not line:
                        raise ConnectionError("toolwire closed its output")
                    if not line.strip():
                        break
                    headers.append(line.strip())
                body = await self._stdout.readexactly(_wire.content_length(headers))
                self._dispatch(json.loads(body))
        except (ConnectionError, OSError, ValueError, asyncio.IncompleteReadError) as err:
            reason = err
        self._closed = reason
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError(f"toolwire connection ended: {reason}"))

    def _dispatch(self, message: Any) -> None:
        response = self._route(message)
        if response is not None:
            future = self._pending.get(response[0])
            if future is not None and not future.done():
                future.set_result(response[1])
