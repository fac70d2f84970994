# Generated from schema/openrpc.json by editors/python/generate.py. Do not edit: run editors/regenerate.sh.
"""The method table: one typed method per toolwire method, for the sync and async clients."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from . import models as m
from ._cancel import CancelToken

_T = TypeVar("_T", bound=BaseModel)

#: Every method a client calls (lifecycle aside), in the server's order.
METHOD_NAMES: tuple[str, ...] = ('budget/apply', 'state/fork', 'state/reconstruct', 'state/get', 'pair/append', 'pair/flush', 'transcript/repair', 'artifact/read', 'storage/gc', 'transcript/check',)

#: Methods that report ``$/progress`` when their params carry a ``workDoneToken``.
PROGRESS_METHODS: frozenset[str] = frozenset({'state/reconstruct', 'transcript/repair', 'storage/gc'})



class SyncMethods:
    """Typed wrappers over ``_call``; blocking."""

    def _call(
        self,
        method: str,
        params: BaseModel,
        result: type[_T],
        cancel: CancelToken | None,
        on_progress: Callable[[Any], None] | None,
    ) -> _T:
        raise NotImplementedError

    def budget_apply(
        self,
        params: m.BudgetApplyParams,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> m.BudgetApplyResult:
        """``budget/apply``: Keep each user message's tool results within the size budget, persisting the largest fresh ones."""
        return self._call("budget/apply", params, m.BudgetApplyResult, cancel, on_progress)

    def state_fork(
        self,
        params: m.StateForkParams,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> m.StateForkResult:
        """``state/fork``: Start a new session from a snapshot of another's replacement state."""
        return self._call("state/fork", params, m.StateForkResult, cancel, on_progress)

    def state_reconstruct(
        self,
        params: m.StateReconstructParams,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> m.StateReconstructResult:
        """``state/reconstruct``: Rebuild a session's replacement state from messages, records and a transcript."""
        return self._call("state/reconstruct", params, m.StateReconstructResult, cancel, on_progress)

    def state_get(
        self,
        params: m.StateGetParams,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> m.StateGetResult:
        """``state/get``: Read a session's replacement state and pending tool calls."""
        return self._call("state/get", params, m.StateGetResult, cancel, on_progress)

    def pair_append(
        self,
        params: m.PairAppendParams,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> m.PairAppendResult:
        """``pair/append``: Append a message to the session transcript; tool calls are committed only with all their results."""
        return self._call("pair/append", params, m.PairAppendResult, cancel, on_progress)

    def pair_flush(
        self,
        params: m.PairFlushParams,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> m.FlushResult:
        """``pair/flush``: Resolve the pending tool pair: discard it or close it with synthetic error results."""
        return self._call("pair/flush", params, m.FlushResult, cancel, on_progress)

    def transcript_repair(
        self,
        params: m.TranscriptRepairParams,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> m.TranscriptRepairResult:
        """``transcript/repair``: Rewrite a transcript so that every tool call is directly followed by all its results."""
        return self._call("transcript/repair", params, m.TranscriptRepairResult, cancel, on_progress)

    def artifact_read(
        self,
        params: m.ArtifactReadParams,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> m.ReadResult:
        """``artifact/read``: Read a saved output back: a range of lines, or the lines matching a regular expression with context."""
        return self._call("artifact/read", params, m.ReadResult, cancel, on_progress)

    def storage_gc(
        self,
        params: m.StorageGcParams,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> m.GcReport:
        """``storage/gc``: Remove expired sessions, unreferenced artifacts and temporary leftovers by the retention rules."""
        return self._call("storage/gc", params, m.GcReport, cancel, on_progress)

    def transcript_check(
        self,
        params: m.TranscriptCheckParams,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> m.TranscriptCheckResult:
        """``transcript/check``: Say, changing nothing, whether the provider would accept a conversation's tool calls and results."""
        return self._call("transcript/check", params, m.TranscriptCheckResult, cancel, on_progress)


class AsyncMethods:
    """Typed wrappers over ``_call``; awaitable."""

    async def _call(
        self,
        method: str,
        params: BaseModel,
        result: type[_T],
        cancel: CancelToken | None,
        on_progress: Callable[[Any], None] | None,
    ) -> _T:
        raise NotImplementedError

    async def budget_apply(
        self,
        params: m.BudgetApplyParams,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> m.BudgetApplyResult:
        """``budget/apply``: Keep each user message's tool results within the size budget, persisting the largest fresh ones."""
        return await self._call("budget/apply", params, m.BudgetApplyResult, cancel, on_progress)

    async def state_fork(
        self,
        params: m.StateForkParams,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> m.StateForkResult:
        """``state/fork``: Start a new session from a snapshot of another's replacement state."""
        return await self._call("state/fork", params, m.StateForkResult, cancel, on_progress)

    async def state_reconstruct(
        self,
        params: m.StateReconstructParams,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> m.StateReconstructResult:
        """``state/reconstruct``: Rebuild a session's replacement state from messages, records and a transcript."""
        return await self._call("state/reconstruct", params, m.StateReconstructResult, cancel, on_progress)

    async def state_get(
        self,
        params: m.StateGetParams,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> m.StateGetResult:
        """``state/get``: Read a session's replacement state and pending tool calls."""
        return await self._call("state/get", params, m.StateGetResult, cancel, on_progress)

    async def pair_append(
        self,
        params: m.PairAppendParams,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> m.PairAppendResult:
        """``pair/append``: Append a message to the session transcript; tool calls are committed only with all their results."""
        return await self._call("pair/append", params, m.PairAppendResult, cancel, on_progress)

    async def pair_flush(
        self,
        params: m.PairFlushParams,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> m.FlushResult:
        """``pair/flush``: Resolve the pending tool pair: discard it or close it with synthetic error results."""
        return await self._call("pair/flush", params, m.FlushResult, cancel, on_progress)

    async def transcript_repair(
        self,
        params: m.TranscriptRepairParams,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> m.TranscriptRepairResult:
        """``transcript/repair``: Rewrite a transcript so that every tool call is directly followed by all its results."""
        return await self._call("transcript/repair", params, m.TranscriptRepairResult, cancel, on_progress)

    async def artifact_read(
        self,
        params: m.ArtifactReadParams,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> m.ReadResult:
        """``artifact/read``: Read a saved output back: a range of lines, or the lines matching a regular expression with context."""
        return await self._call("artifact/read", params, m.ReadResult, cancel, on_progress)

    async def storage_gc(
        self,
        params: m.StorageGcParams,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> m.GcReport:
        """``storage/gc``: Remove expired sessions, unreferenced artifacts and temporary leftovers by the retention rules."""
        return await self._call("storage/gc", params, m.GcReport, cancel, on_progress)

    async def transcript_check(
        self,
        params: m.TranscriptCheckParams,
        *,
        cancel: CancelToken | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> m.TranscriptCheckResult:
        """``transcript/check``: Say, changing nothing, whether the provider would accept a conversation's tool calls and results."""
        return await self._call("transcript/check", params, m.TranscriptCheckResult, cancel, on_progress)
