# Generated from schema/toolwire.schema.json by editors/python/generate.py. Do not edit: run editors/regenerate.sh.

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from ._verbatim import Verbatim
from pydantic import BaseModel, ConfigDict, Field, RootModel, confloat, conint, constr


class Toolwire(RootModel[Any]):
    root: Any = Field(..., title='toolwire')
    """
    Every toolwire type as a named definition. `<Method>Params` are what a client sends (optional fields may be omitted); `<Method>Result` are what the server sends (fields it always writes are required). Where the two shapes of one type differ, the server's is `<Name>Output`.
    """


class WorkspaceFolder(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
    )
    uri: str
    name: str | None = ''


class NameVersion(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
    )
    name: str
    version: str | None = None


class SessionId(
    RootModel[
        constr(
            pattern=r'^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$',
            min_length=1,
            max_length=128,
        )
    ]
):
    root: constr(
        pattern=r'^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$', min_length=1, max_length=128
    )
    """
    1-128 characters of [A-Za-z0-9._-], not starting with '.'
    """


class Role(StrEnum):
    user = 'user'
    assistant = 'assistant'
    system = 'system'


class ContentItem(Verbatim):
    model_config = ConfigDict(
        extra='allow',
        populate_by_name=True,
    )
    type: str


class Message1(Verbatim):
    """
    format `anthropic`: a Messages API message; calls are `tool_use` blocks, results `tool_result` blocks; a `system` message (Claude Code 2.1 sends them among its messages) belongs to no turn.
    """

    model_config = ConfigDict(
        extra='allow',
        populate_by_name=True,
    )
    role: Role
    content: str | list[ContentItem]


class Role1(StrEnum):
    system = 'system'
    developer = 'developer'
    user = 'user'
    assistant = 'assistant'
    tool = 'tool'
    function = 'function'


class Function(Verbatim):
    model_config = ConfigDict(
        extra='allow',
        populate_by_name=True,
    )
    name: str | None = None
    arguments: str | None = None


class ToolCall(Verbatim):
    model_config = ConfigDict(
        extra='allow',
        populate_by_name=True,
    )
    id: constr(min_length=1)
    type: str | None = None
    function: Function | None = None


class Message2(Verbatim):
    """
    format `openai-chat`: a Chat Completions message; calls are `tool_calls` entries, results `tool` messages.
    """

    model_config = ConfigDict(
        extra='allow',
        populate_by_name=True,
    )
    role: Role1
    content: str | list[ContentItem] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: constr(min_length=1) | None = None


class OutputItem(Verbatim):
    model_config = ConfigDict(
        extra='allow',
        populate_by_name=True,
    )
    type: str


class Message3(Verbatim):
    """
    format `openai-responses`: one input item.
    """

    model_config = ConfigDict(
        extra='allow',
        populate_by_name=True,
    )
    type: str
    """
    `message` (or absent, with a `role`), `function_call`, `function_call_output`, `custom_tool_call`, `custom_tool_call_output`, `local_shell_call`, `reasoning`, ...
    """
    role: str | None = None
    call_id: constr(min_length=1) | None = None
    name: str | None = None
    output: str | list[OutputItem] | dict[str, Any] | None = None


class Message4(Verbatim):
    """
    format `openai-responses`: one input item.
    """

    model_config = ConfigDict(
        extra='allow',
        populate_by_name=True,
    )
    type: str | None = None
    """
    `message` (or absent, with a `role`), `function_call`, `function_call_output`, `custom_tool_call`, `custom_tool_call_output`, `local_shell_call`, `reasoning`, ...
    """
    role: str
    call_id: constr(min_length=1) | None = None
    name: str | None = None
    output: str | list[OutputItem] | dict[str, Any] | None = None


class Role2(StrEnum):
    user = 'user'
    model = 'model'
    function = 'function'


class FunctionCall(Verbatim):
    model_config = ConfigDict(
        extra='allow',
        populate_by_name=True,
    )
    name: str
    id: str | None = None
    args: dict[str, Any] | None = None


class FunctionResponse(Verbatim):
    model_config = ConfigDict(
        extra='allow',
        populate_by_name=True,
    )
    name: str
    id: str | None = None
    response: dict[str, Any] | None = None


class Part(Verbatim):
    model_config = ConfigDict(
        extra='allow',
        populate_by_name=True,
    )
    function_call: FunctionCall | None = Field(None, alias='functionCall')
    function_response: FunctionResponse | None = Field(None, alias='functionResponse')
    thought_signature: str | None = Field(None, alias='thoughtSignature')


class Message5(Verbatim):
    """
    format `gemini`: one content; calls are `functionCall` parts of a `model` content, results `functionResponse` parts of a `user` content.
    """

    model_config = ConfigDict(
        extra='allow',
        populate_by_name=True,
    )
    role: Role2 | None = None
    parts: list[Part]


class Message(RootModel[Message1 | Message2 | Message3 | Message4 | Message5]):
    root: Message1 | Message2 | Message3 | Message4 | Message5
    """
    A message in the session's provider format (PROTOCOL.md 10.3), one variant per format; unknown fields, blocks, parts and items round-trip unchanged.
    """


class LimitsOverride(BaseModel):
    """
    Per-request overrides of [`Limits`].
    """

    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    max_result_chars: conint(ge=0) | None = Field(None, alias='maxResultChars')
    max_message_chars: conint(ge=0) | None = Field(None, alias='maxMessageChars')
    preview_chars: conint(ge=0) | None = Field(None, alias='previewChars')


class PreviewMode(StrEnum):
    """
    How the preview of a persisted result is cut.
    """

    head = 'head'
    """
    The first `previewChars` of the original (PROTOCOL.md section 4).
    """
    head_tail = 'headTail'
    """
    The first and the last part of the original, with a line saying how
    much was left out between them (build logs fail at their end).
    """


class Never(StrEnum):
    never = 'never'


class Format(StrEnum):
    """
    Which provider's message shapes a conversation uses.
    """

    anthropic = 'anthropic'
    openai_chat = 'openai-chat'
    openai_responses = 'openai-responses'
    gemini = 'gemini'


class ClearingMode(StrEnum):
    """
    When old results are cleared.
    """

    off = 'off'
    """
    Never.
    """
    batch = 'batch'
    """
    As soon as the old results sent whole reach `triggerChars`.
    """
    cold = 'cold'
    """
    Only when the provider's cache has gone cold (the session idle for
    `coldAfterSeconds`), or at four times `triggerChars`.
    """
    auto = 'auto'
    """
    When it pays under the provider's prices (PROTOCOL.md 12.1): the
    cache reads a batch has run up since it became clearable reach what
    clearing it now costs extra, or at once when the cache has expired.
    """


class CacheTtl(StrEnum):
    """
    How long the request asked its provider to keep the cache.
    """

    field_5m = '5m'
    """
    Anthropic's default `cache_control` lifetime.
    """
    field_1h = '1h'
    """
    Anthropic `cache_control: {ttl: "1h"}`: writes cost 2×.
    """
    field_24h = '24h'
    """
    OpenAI `prompt_cache_retention: "24h"`.
    """


class Multiple(RootModel[confloat(ge=0.0)]):
    root: confloat(ge=0.0)
    """
    A price as a multiple of the uncached input price: finite and not
    negative, refused at its key otherwise.
    """


class StateForkParams(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    session_id: SessionId = Field(..., alias='sessionId')
    new_session_id: SessionId | None = Field(None, alias='newSessionId')
    """
    A fresh id is chosen when absent.
    """
    copy_transcript: bool | None = Field(None, alias='copyTranscript')
    """
    Copy the source's committed transcript (default true).
    """


class ReplacementRecord(BaseModel):
    """
    The exact string that was sent in place of an original tool result.
    """

    model_config = ConfigDict(
        populate_by_name=True,
    )
    kind: str
    """
    `"tool-result"`; records of other kinds are ignored on read.
    """
    tool_use_id: str = Field(..., alias='toolUseId')
    replacement: str
    digest: str | None = None
    """
    Digest of the original the replacement was made from, a hash of
    the result's content as compact JSON: `xxh3:` and 16 hex digits
    (XXH3-64), or 16 hex digits (the first 8 bytes of SHA-256, written
    before XXH3 and still read). The replacement is put back only on
    that original.
    Absent in version-1 transcripts: then it applies to any original
    with this id.
    """
    cleared: bool | None = None
    """
    The replacement clears an old result that was sent whole before
    (PROTOCOL.md 11.3): it takes the place of that earlier decision.
    """


class ProgressToken(RootModel[int | str]):
    root: int | str
    """
    An LSP progress token (`workDoneToken`): `$/progress` notifications for
    long work carry it.
    """


class StateGetParams(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    session_id: SessionId = Field(..., alias='sessionId')


class AppendMessage1(Verbatim):
    """
    format `openai-responses`: one input item.
    """

    model_config = ConfigDict(
        extra='allow',
        populate_by_name=True,
    )
    type: str
    """
    `message` (or absent, with a `role`), `function_call`, `function_call_output`, `custom_tool_call`, `custom_tool_call_output`, `local_shell_call`, `reasoning`, ...
    """
    role: str | None = None
    call_id: constr(min_length=1) | None = None
    name: str | None = None
    output: str | list[OutputItem] | dict[str, Any] | None = None


class AppendMessage2(Verbatim):
    """
    format `openai-responses`: one input item.
    """

    model_config = ConfigDict(
        extra='allow',
        populate_by_name=True,
    )
    type: str | None = None
    """
    `message` (or absent, with a `role`), `function_call`, `function_call_output`, `custom_tool_call`, `custom_tool_call_output`, `local_shell_call`, `reasoning`, ...
    """
    role: str
    call_id: constr(min_length=1) | None = None
    name: str | None = None
    output: str | list[OutputItem] | dict[str, Any] | None = None


class AppendMessage(RootModel[Message | list[AppendMessage1 | AppendMessage2]]):
    root: Message | list[AppendMessage1 | AppendMessage2]
    """
    One message, or in `openai-responses` one input item or an array of them.
    """


class AbortMode(StrEnum):
    """
    What an interrupted tool pair becomes.
    """

    discard = 'discard'
    """
    The buffered pair is dropped unwritten.
    """
    synthetic = 'synthetic'
    """
    The pair is committed with an `is_error` result for each unanswered call.
    """


class TranscriptRepairParams(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    path: str
    format: Format | None = None
    """
    The transcript's format; default: its `session` line, else what its
    content shows.
    """
    dry_run: bool | None = Field(None, alias='dryRun')
    work_done_token: ProgressToken | None = Field(None, alias='workDoneToken')


class ArtifactReadParams(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    session_id: SessionId = Field(..., alias='sessionId')
    tool_use_id: str = Field(..., alias='toolUseId')
    """
    The tool_use_id whose saved output to read (data, never a path).
    """
    offset: conint(ge=0) | None = None
    """
    First line to read (0-based); with `grep`, where the search starts.
    """
    limit: conint(ge=0) | None = None
    """
    Lines to read (default 2000); with `grep`, matching lines to show.
    """
    grep: str | None = None
    """
    A regular expression (Rust `regex` syntax): show the matching lines,
    numbered, instead of a range.
    """
    context: conint(ge=0) | None = None
    """
    With `grep`: lines shown before and after each match (at most 100).
    """


class StorageGcParams(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    dry_run: bool | None = Field(None, alias='dryRun')
    """
    Only report what would be removed.
    """
    work_done_token: ProgressToken | None = Field(None, alias='workDoneToken')


class TranscriptCheckParams(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    path: str | None = None
    """
    A transcript file (relative paths are resolved against the workspace).
    """
    messages: list[Message] | None = None
    """
    Messages to check instead of a file.
    """
    format: Format | None = None
    """
    Default `anthropic`.
    """


class Limits(BaseModel):
    """
    Size limits, all counted in `sizeUnit`.
    """

    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    max_result_chars: conint(ge=0) | None = Field(50000, alias='maxResultChars')
    """
    A single fresh tool result larger than this is persisted.
    """
    max_message_chars: conint(ge=0) | None = Field(200000, alias='maxMessageChars')
    """
    Aggregate tool_result size allowed in one outbound user message.
    """
    preview_chars: conint(ge=0) | None = Field(2000, alias='previewChars')
    """
    Size of the preview kept in place of a persisted result.
    """


class Durability(StrEnum):
    """
    Whether each commit reaches the disk before its reply.
    """

    fsync = 'fsync'
    none = 'none'


class SizeUnit(StrEnum):
    """
    How sizes are counted.
    """

    chars = 'chars'
    """
    Unicode scalar values.
    """
    utf16 = 'utf16'
    """
    UTF-16 code units, as JavaScript's `length`.
    """
    bytes = 'bytes'
    """
    UTF-8 bytes.
    """


class Retention(BaseModel):
    """
    When saved outputs are removed (`toolwire gc`, `storage/gc`, and the
    shared daemon's schedule).
    """

    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    max_age_days: float | None = Field(30.0, alias='maxAgeDays')
    """
    A session whose journal was last written more than this many days
    ago, and that no client holds, is removed with its artifacts;
    `null`: never by age.
    """
    max_total_bytes: conint(ge=0) | None = Field(None, alias='maxTotalBytes')
    """
    Over this many bytes in all, the least recently written sessions go
    first; `null`: no limit.
    """
    auto: bool | None = True
    """
    Whether the shared daemon collects on a schedule.
    """
    interval_hours: float | None = Field(24.0, alias='intervalHours')
    """
    Hours between the shared daemon's collections.
    """


class Upstreams(BaseModel):
    """
    `[proxy.upstreams]`: the only hosts the proxy ever forwards to.
    """

    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    anthropic: str | None = 'https://api.anthropic.com'
    """
    For `POST /v1/messages`.
    """
    openai: str | None = 'https://api.openai.com'
    """
    For `POST /v1/chat/completions` and `POST /v1/responses`.
    """
    gemini: str | None = 'https://generativelanguage.googleapis.com'
    """
    For `POST /v1beta/models/{model}:generateContent` and
    `:streamGenerateContent`.
    """


class TenantToken(BaseModel):
    """
    One tenant: its name and the hex SHA-256 of its token (the token
    itself is never written down).
    """

    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    name: str
    """
    1-32 characters of [A-Za-z0-9_-]; it prefixes the tenant's session
    ids.
    """
    sha256: str
    """
    The token's SHA-256, 64 hex digits.
    """


class Previews(StrEnum):
    """
    `[proxy] previews`.
    """

    mcp = 'mcp'
    path = 'path'


class Backend(StrEnum):
    """
    `storage.backend`.
    """

    local = 'local'
    postgres = 'postgres'


class PostgresConfig(BaseModel):
    """
    `[storage.postgres]`.
    """

    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    url: str
    """
    Connection URL, e.g. `postgresql://toolwire@db.internal:5432/toolwire`
    (or a `key=value` connection string).
    """
    max_connections: conint(ge=0) | None = Field(16, alias='maxConnections')
    """
    Connections this process keeps at most (default 16).
    """


class OptionValue(RootModel[str | bool | conint(ge=0)]):
    root: str | bool | conint(ge=0)
    """
    An option's value: TOML and JSON may spell `true` or `9000` bare.
    """


class Clearing(BaseModel):
    """
    `clearing` in the configuration (file, `initializationOptions`). The
    defaults are the ones measured in docs/clearing.md.
    """

    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    mode: ClearingMode | None = ClearingMode.auto
    keep_recent: conint(ge=0) | None = Field(3, alias='keepRecent')
    """
    Results of this many most recent assistant tool turns are never
    cleared.
    """
    min_chars: conint(ge=0) | None = Field(1000, alias='minChars')
    """
    Results smaller than this (in `sizeUnit`) are never cleared.
    """
    trigger_chars: conint(ge=0) | None = Field(40000, alias='triggerChars')
    """
    `batch` and `cold`: the old results still sent whole must add up to
    this before a batch is cleared.
    """
    cold_after_seconds: conint(ge=0) | None = Field(300, alias='coldAfterSeconds')
    """
    `cold`: how long a session must have been idle for its provider
    cache to count as expired.
    """
    preview_chars: conint(ge=0) | None = Field(200, alias='previewChars')
    """
    Size of the preview a cleared result keeps.
    """


class PriceOverride(BaseModel):
    """
    One provider's prices, key by key (`[pricing.<provider>]`, or a
    request's `pricing`); what is left out keeps the documented figure.
    """

    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    cache_read: Multiple | None = Field(None, alias='cacheRead')
    """
    A cached input token, as a multiple of an uncached one.
    """
    cache_write: Multiple | None = Field(None, alias='cacheWrite')
    """
    An input token written to the cache (Anthropic charges a premium;
    1 where writing costs what uncached input costs).
    """
    cache_seconds: conint(ge=0) | None = Field(None, alias='cacheSeconds')
    """
    How long the cache outlives the last request that used it.
    """


class TranscriptLine1(BaseModel):
    """
    One line of a session transcript.
    """

    model_config = ConfigDict(
        populate_by_name=True,
    )
    type: Literal['message']
    message: Message


class TranscriptLine2(BaseModel):
    """
    One line of a session transcript.
    """

    model_config = ConfigDict(
        populate_by_name=True,
    )
    type: Literal['replacement']
    record: ReplacementRecord


class TranscriptLine3(BaseModel):
    """
    Results `budget/apply` decided to send whole, journaled before it
    replies (`{"type":"seen","toolUseIds":[...],"digests":[...]}`).
    """

    model_config = ConfigDict(
        populate_by_name=True,
    )
    type: Literal['seen']
    tool_use_ids: list[str] = Field(..., alias='toolUseIds')
    digests: list[str] | None = []
    """
    The digest of each id's original, in the same order (see
    `ReplacementRecord.digest`); may be shorter in hand-written files,
    an id without a digest then applies to any original.
    """


class TranscriptLine4(BaseModel):
    """
    The first line of a transcript in a format other than `anthropic`.
    """

    model_config = ConfigDict(
        populate_by_name=True,
    )
    type: Literal['session']
    format: Format


class Segment(BaseModel):
    """
    One byte range of another transcript.
    """

    model_config = ConfigDict(
        populate_by_name=True,
    )
    file: str
    """
    A hard link, in the fork's directory, to the transcript the bytes
    are in.
    """
    from_: conint(ge=0) = Field(..., alias='from')
    """
    First byte (the start of a line).
    """
    to: conint(ge=0)
    """
    End, exclusive (the end of a line).
    """
    tail: str
    """
    SHA-256 of the range's last 4 KiB (or all of it when shorter), hex.
    """


class ToolwireCapabilities(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
    )
    protocol_version: conint(ge=0) = Field(..., alias='protocolVersion')
    methods: list[str]
    """
    Every custom method this server supports.
    """


class ArtifactKind(StrEnum):
    text = 'text'
    """
    String content, saved as `.txt`.
    """
    json = 'json'
    """
    Block-array content, saved as `.json` (the array itself).
    """


class PersistFailure(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
    )
    tool_use_id: str = Field(..., alias='toolUseId')
    message: str


class Decision(StrEnum):
    """
    What one apply decided about clearing, and why.
    """

    cleared = 'cleared'
    """
    A batch was cleared: it pays (`auto`), or reached the trigger
    (`batch`, `cold`).
    """
    expired = 'expired'
    """
    `auto`: the session was idle past the cache's lifetime, so the
    rewrite costs nothing extra: every old result was cleared.
    """
    waiting = 'waiting'
    """
    There are old results to clear, but clearing them does not pay yet
    (or, in `batch` and `cold`, they are under the trigger).
    """
    none = 'none'
    """
    Nothing to clear (or clearing is off).
    """


class Provider(StrEnum):
    """
    Whose cache prices apply.
    """

    anthropic = 'anthropic'
    openai = 'openai'
    gemini = 'gemini'


class PriceSource(StrEnum):
    """
    Where the prices in force came from.
    """

    model = 'model'
    """
    The documented prices of the request's model family.
    """
    default = 'default'
    """
    No model toolwire knows: the provider's documented default.
    """
    configured = 'configured'
    """
    `[pricing.<provider>]` in the configuration set at least one.
    """
    request = 'request'
    """
    The request's `pricing` set at least one.
    """


class StateForkResult(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
    )
    session_id: SessionId = Field(..., alias='sessionId')
    """
    The new session's id.
    """
    seen_count: conint(ge=0) = Field(..., alias='seenCount')
    replacement_count: conint(ge=0) = Field(..., alias='replacementCount')


class StateReconstructResult(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
    )
    seen_count: conint(ge=0) = Field(..., alias='seenCount')
    replacement_count: conint(ge=0) = Field(..., alias='replacementCount')
    messages_read: conint(ge=0) = Field(..., alias='messagesRead')
    records_read: conint(ge=0) = Field(..., alias='recordsRead')
    skipped_lines: conint(ge=0) = Field(..., alias='skippedLines')
    """
    Torn or unparsable transcript lines that were skipped.
    """


class StateGetResult(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
    )
    seen_ids: list[str] = Field(..., alias='seenIds')
    replacements: dict[str, str]
    pending: list[str]
    """
    tool_use ids of the pair now buffered.
    """


class AppendStatus(StrEnum):
    buffered = 'buffered'
    """
    Held back until every pending tool call has its result.
    """
    committed = 'committed'
    """
    Written to the transcript.
    """


class FlushResult(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
    )
    mode: AbortMode
    discarded: list[str]
    """
    Ids of calls dropped unwritten.
    """
    synthesized: list[str]
    """
    Ids closed with a synthetic error result.
    """
    written: conint(ge=0)


class RenamedId(BaseModel):
    """
    A call id repair changed, and what it became.
    """

    model_config = ConfigDict(
        populate_by_name=True,
    )
    from_: str = Field(..., alias='from')
    to: str


class ReadResult(BaseModel):
    """
    A page of an artifact (`artifact/read`'s result).
    """

    model_config = ConfigDict(
        populate_by_name=True,
    )
    text: str
    """
    The lines read: verbatim for a range, numbered `grep -n` style for a
    grep (see the module documentation of `artifact::read`).
    """
    start_line: conint(ge=0) = Field(..., alias='startLine')
    """
    First line shown (0-based).
    """
    end_line: conint(ge=0) = Field(..., alias='endLine')
    """
    One past the last line shown (0-based): the next page's `offset`.
    """
    total_lines: conint(ge=0) = Field(..., alias='totalLines')
    total_chars: conint(ge=0) = Field(..., alias='totalChars')
    """
    The artifact's size in the configured `sizeUnit`.
    """
    truncated: bool
    """
    More follows what `text` shows (lines after `endLine`, more matches,
    or a line shown cut).
    """


class GcReport(BaseModel):
    """
    What a run removed (or, in a dry run, would remove).
    """

    model_config = ConfigDict(
        populate_by_name=True,
    )
    sessions_removed: list[str] = Field(..., alias='sessionsRemoved')
    """
    Ids of the sessions removed whole (transcript and artifacts).
    """
    artifacts_removed: list[str] = Field(..., alias='artifactsRemoved')
    """
    Paths of files removed from kept sessions (unreferenced artifacts)
    and of temporary leftovers.
    """
    bytes_freed: conint(ge=0) = Field(..., alias='bytesFreed')
    """
    Bytes of every file removed.
    """
    kept: conint(ge=0)
    """
    Sessions left in place.
    """


class Violation(BaseModel):
    """
    One fault the provider would refuse.
    """

    model_config = ConfigDict(
        populate_by_name=True,
    )
    index: conint(ge=0)
    """
    Index of the message the fault is in (0-based, counting messages
    only), as the provider numbers `messages.N`.
    """
    kind: str
    """
    `missingResult`, `unexpectedResult`, `duplicateResult`,
    `resultAfterContent` or `wrongRole`.
    """
    ids: list[str]
    provider_error: str = Field(..., alias='providerError')
    """
    What the provider answers for this fault (HTTP 400).
    """


class ErrorData(BaseModel):
    """
    The `data` member of every toolwire error.
    """

    model_config = ConfigDict(
        populate_by_name=True,
    )
    kind: str
    """
    Stable machine-readable error kind, e.g. `unknownToolResult`.
    """
    path: str | None = None
    """
    For `invalidParams`: the offending field; for storage and lock errors: the file.
    """
    tool_use_id: str | None = Field(None, alias='toolUseId')
    session_id: str | None = Field(None, alias='sessionId')
    method: str | None = None


class ShutdownParams(RootModel[Any]):
    root: Any


class ShutdownResult(RootModel[Any]):
    root: Any


class PairFlushResult(RootModel[FlushResult]):
    root: FlushResult


class ArtifactReadResult(RootModel[ReadResult]):
    root: ReadResult


class StorageGcResult(RootModel[GcReport]):
    root: GcReport


class InitializeParams(BaseModel):
    """
    `initialize`'s params. Any other LSP field (`trace`, `locale`,
    `rootPath`, `workDoneToken`, ...) is accepted and ignored.
    """

    model_config = ConfigDict(
        populate_by_name=True,
    )
    process_id: int | None = Field(None, alias='processId')
    """
    The client's process id; not used.
    """
    root_uri: str | None = Field(None, alias='rootUri')
    """
    The workspace root as a `file://` URI.
    """
    workspace_folders: list[WorkspaceFolder] | None = Field(
        None, alias='workspaceFolders'
    )
    client_info: NameVersion | None = Field(None, alias='clientInfo')
    capabilities: Any | None = None
    """
    The client's LSP `ClientCapabilities`; accepted and not used.
    """
    initialization_options: Any | None = Field(None, alias='initializationOptions')
    """
    A toolwire `Config` (see `config.json`).
    """


class MaxOrNever(RootModel[conint(ge=0) | Never]):
    root: conint(ge=0) | Never
    """
    A tool's `maxResultChars`: a number, or `null` / `"never"`.
    """


class ClearingOverride(BaseModel):
    """
    Per-request overrides of [`Clearing`], key by key.
    """

    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    mode: ClearingMode | None = None
    keep_recent: conint(ge=0) | None = Field(None, alias='keepRecent')
    min_chars: conint(ge=0) | None = Field(None, alias='minChars')
    trigger_chars: conint(ge=0) | None = Field(None, alias='triggerChars')
    cold_after_seconds: conint(ge=0) | None = Field(None, alias='coldAfterSeconds')
    preview_chars: conint(ge=0) | None = Field(None, alias='previewChars')


class PricingParams(BaseModel):
    """
    `pricing` in `budget/apply`'s params: what the request says about the
    prices it is sent at. The proxy fills it from the request it forwards.
    """

    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    model: str | None = None
    """
    The model the request is for (`claude-sonnet-4-5`, `gpt-5-codex`,
    `gemini-2.5-pro`, …): picks the model family's discount.
    """
    cache_ttl: CacheTtl | None = Field(None, alias='cacheTtl')
    """
    The cache lifetime the request asked for.
    """
    cache_read: Multiple | None = Field(None, alias='cacheRead')
    """
    Explicit prices, over everything else (see [`PriceOverride`]; the
    keys are repeated here rather than flattened, because serde cannot
    refuse unknown keys of a struct that flattens another).
    """
    cache_write: Multiple | None = Field(None, alias='cacheWrite')
    cache_seconds: conint(ge=0) | None = Field(None, alias='cacheSeconds')


class StateReconstructParams(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    session_id: SessionId = Field(..., alias='sessionId')
    messages: list[Message] | None = None
    records: list[ReplacementRecord] | None = None
    inherited_replacements: dict[str, Any] | None = Field(
        None, alias='inheritedReplacements'
    )
    """
    A parent's replacements, for a fork that did not copy its transcript.
    """
    transcript: str | None = None
    """
    Path of a transcript file to read as well.
    """
    format: Format | None = None
    """
    The provider format of the messages (PROTOCOL.md 10.3); default: the
    configuration's `format`, else the session's, else `anthropic`.
    """
    work_done_token: ProgressToken | None = Field(None, alias='workDoneToken')


class PairAppendParams(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    session_id: SessionId = Field(..., alias='sessionId')
    message: AppendMessage
    """
    One message; in `openai-responses`, one input item or an array of
    them (one model response, or one batch of outputs).
    """
    format: Format | None = None
    """
    The provider format of the messages (PROTOCOL.md 10.3); default: the
    configuration's `format`, else the session's, else `anthropic`.
    """


class PairFlushParams(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    session_id: SessionId = Field(..., alias='sessionId')
    mode: AbortMode | None = None
    """
    Default: the session's `abortMode`.
    """
    reason: str | None = None
    """
    Named in synthetic error results.
    """


class ProxyAuth(BaseModel):
    """
    `[proxy.auth]`: who may use the proxy. Each token is a tenant, whose
    sessions, saved outputs and stats are its own (PROTOCOL.md 12.3).
    """

    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    tokens: list[TenantToken] | None = Field([], validate_default=True)


class ObjectsConfig(BaseModel):
    """
    `[storage.objects]`: the bucket saved outputs go to.
    """

    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    url: str
    """
    The bucket and prefix: `s3://bucket/prefix`, `gs://bucket/prefix`,
    `az://container/prefix` or `file:///absolute/dir`. Saved outputs are
    `<url>/sessions/<sessionId>/tool-results/<name>`.
    """
    options: dict[str, OptionValue] | None = Field({}, validate_default=True)
    """
    The `object_store` options of the URL's service, by their names
    there (`endpoint`, `region`, `allow_http`, `access_key_id`, ...; in
    snake_case or camelCase). Unset ones come from the environment
    (`AWS_*`, `GOOGLE_*`, `AZURE_*`), as the services' own tools read it.
    """


class PricingConfig(BaseModel):
    """
    `[pricing]` in `toolwire.toml`: overrides per provider.
    """

    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    anthropic: PriceOverride | None = None
    openai: PriceOverride | None = None
    gemini: PriceOverride | None = None


class TranscriptLine5(BaseModel):
    """
    The first line of a fork's transcript (`state/fork` with
    `copyTranscript`): its parent's committed bytes, read before the
    lines that follow it.
    """

    model_config = ConfigDict(
        populate_by_name=True,
    )
    type: Literal['fork']
    parent: str
    """
    The session this one was forked from.
    """
    segments: list[Segment]
    """
    Byte ranges of other transcripts, read in order before this file's
    own lines.
    """


class TranscriptLine(
    RootModel[
        TranscriptLine1
        | TranscriptLine2
        | TranscriptLine3
        | TranscriptLine4
        | TranscriptLine5
    ]
):
    root: (
        TranscriptLine1
        | TranscriptLine2
        | TranscriptLine3
        | TranscriptLine4
        | TranscriptLine5
    )
    """
    One line of a session transcript.
    """


class Experimental(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
    )
    toolwire: ToolwireCapabilities


class Persisted(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
    )
    tool_use_id: str = Field(..., alias='toolUseId')
    path: str
    """
    Absolute path of the artifact.
    """
    original_chars: conint(ge=0) = Field(..., alias='originalChars')
    """
    The original's size in the configured `sizeUnit`.
    """
    content_type: ArtifactKind = Field(..., alias='contentType')
    """
    `text` (saved as `.txt`) or `json` (a block array, saved as `.json`).
    """
    reused: bool
    """
    An identical artifact was already on disk and was kept.
    """


class Prices(BaseModel):
    """
    The prices one apply weighs clearing with.
    """

    model_config = ConfigDict(
        populate_by_name=True,
    )
    provider: Provider
    cache_read: float = Field(..., alias='cacheRead')
    cache_write: float = Field(..., alias='cacheWrite')
    cache_seconds: conint(ge=0) = Field(..., alias='cacheSeconds')
    source: PriceSource


class PairAppendResult(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
    )
    status: AppendStatus
    pending: list[str]
    """
    tool_use ids still waiting for their results.
    """
    written: conint(ge=0)
    """
    Transcript lines this call wrote, including any flush it caused.
    """
    flushed: FlushResult | None = None
    """
    Present when this message interrupted a pending pair.
    """


class TranscriptRepairResult(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
    )
    changed: bool
    """
    Whether the file was rewritten (with `dryRun`: would be). A valid
    transcript is never rewritten and gets no `.bak`.
    """
    kept: conint(ge=0)
    """
    Lines kept.
    """
    dropped_tool_uses: list[str] = Field(..., alias='droppedToolUses')
    dropped_tool_results: list[str] = Field(..., alias='droppedToolResults')
    moved_tool_results: list[str] = Field(..., alias='movedToolResults')
    """
    Ids of results moved ahead of the other content of their turn
    (a result that came after text in the message answering its call).
    """
    renamed_tool_uses: list[RenamedId] = Field(..., alias='renamedToolUses')
    """
    Calls given a new id to keep the provider's id rules (PROTOCOL.md
    11.2), their results with them.
    """
    torn_lines: conint(ge=0) = Field(..., alias='tornLines')


class TranscriptCheckResult(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
    )
    ok: bool
    violations: list[Violation]


class BudgetApplyParams(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    session_id: SessionId = Field(..., alias='sessionId')
    messages: list[Message]
    """
    The conversation, or its tail, about to be sent.
    """
    limits: LimitsOverride | None = None
    preview_mode: PreviewMode | None = Field(None, alias='previewMode')
    """
    How this request's fresh previews are cut (decided ones keep theirs).
    """
    tools: dict[str, Any] | None = None
    """
    Per-tool settings for this request, over the configuration's.
    """
    format: Format | None = None
    """
    The provider format of the messages (PROTOCOL.md 10.3); default: the
    configuration's `format`, else the session's, else `anthropic`.
    """
    clearing: ClearingOverride | None = None
    """
    Clearing of old results for this request, over the configuration's
    (PROTOCOL.md 11.3).
    """
    pricing: PricingParams | None = None
    """
    What the request says about its provider's prices, for `auto`
    clearing (PROTOCOL.md 12.1); the provider is the format's.
    """
    link_session: str | None = Field(None, alias='linkSession')
    """
    The session id this request's fresh previews name in their
    `toolwire://saved-output/<linkSession>/<toolUseId>` links, to be
    read with the `read_saved_output` tool of an MCP front (PROTOCOL.md
    12.3); absent: previews name the saved output's path alone.
    Decided previews keep their text.
    """


class ToolSettings(BaseModel):
    """
    Settings of one tool (`tools.<name>`), overriding the general ones for
    its results.
    """

    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    max_result_chars: MaxOrNever | None = Field(None, alias='maxResultChars')
    """
    Persist this tool's results above this size; `null` (in TOML, which
    has no null: `"never"`) never persists them, as `exemptTools`.
    """
    preview_mode: PreviewMode | None = Field(None, alias='previewMode')


class ProxyConfig(BaseModel):
    """
    `[proxy]` in `toolwire.toml`: the HTTP face (`toolwire proxy`).
    """

    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    listen: str | None = '127.0.0.1:8787'
    """
    Address to listen on (`--listen` overrides it). A non-loopback
    address needs `--allow-remote`.
    """
    upstreams: Upstreams | None = Field(
        {
            'anthropic': 'https://api.anthropic.com',
            'openai': 'https://api.openai.com',
            'gemini': 'https://generativelanguage.googleapis.com',
        },
        validate_default=True,
    )
    """
    Base URL per provider; the request's path is appended to it.
    """
    max_request_bytes: conint(ge=0) | None = Field(33554432, alias='maxRequestBytes')
    """
    Largest request body accepted, in bytes; a larger one is answered
    413 with an error in the provider's shape.
    """
    header_timeout_seconds: conint(ge=0) | None = Field(
        30, alias='headerTimeoutSeconds'
    )
    """
    Seconds a client has to send a request's head (method, path,
    headers) once the proxy waits for it; a connection that takes
    longer is closed. HTTP/1.1 waits for the next head as soon as a
    response is sent, so this also closes an idle HTTP/1.1 connection.
    """
    body_timeout_seconds: conint(ge=0) | None = Field(300, alias='bodyTimeoutSeconds')
    """
    Seconds a client has to send a request's whole body once its head
    has arrived; a slower body is answered 408.
    """
    idle_timeout_seconds: conint(ge=0) | None = Field(120, alias='idleTimeoutSeconds')
    """
    Seconds a connection may stay open with no request in progress and
    no byte moving either way before the proxy closes it.
    """
    system_proxy: bool | None = Field(True, alias='systemProxy')
    """
    Whether outbound connections (the upstreams, object storage) go
    through the proxy that `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` name
    (minus `NO_PROXY`; loopback never). `false`: always direct.
    """
    ca_file: str | None = Field(None, alias='caFile')
    """
    A PEM file of certificates to trust for outbound TLS besides the
    system's store (and `SSL_CERT_FILE` / `SSL_CERT_DIR`): a company's
    TLS-inspecting proxy's CA. Relative to the workspace root.
    """
    metrics_token: str | None = Field(None, alias='metricsToken')
    """
    The hex SHA-256 of a token that may read `GET /metrics` (a
    Prometheus scraper's, sent as `Authorization: Bearer <token>`), so
    the scraper needs no tenant's token.
    """
    metrics_by_tenant: bool | None = Field(False, alias='metricsByTenant')
    """
    Label the proxy's metrics with the tenant too (one series per
    tenant and route: only for a handful of tenants).
    """
    auth: ProxyAuth | None = None
    """
    `[proxy.auth]`: the tenants' tokens. Required to listen beyond
    loopback.
    """
    previews: Previews | None = None
    """
    What a fresh preview tells the model about the saved output:
    `"mcp"` adds its `toolwire://` link and the `read_saved_output`
    tool of the proxy's `/mcp` (for agents that cannot open the proxy's
    disk); `"path"` only the path. Unset: `"mcp"` when listening beyond
    loopback, else `"path"`.
    """


class StorageConfig(BaseModel):
    """
    `[storage]` in `toolwire.toml`.
    """

    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    backend: Backend | None = Backend.local
    """
    `local` (transcripts as files under the data directory, one process
    per workspace) or `postgres` (shared by every replica).
    """
    postgres: PostgresConfig | None = None
    """
    `[storage.postgres]`, for `backend = "postgres"`.
    """
    objects: ObjectsConfig | None = None
    """
    Saved outputs on object storage (S3, GCS, Azure, or a local
    directory through the same interface) instead of under `dataDir`.
    """


class ServerCapabilities(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
    )
    experimental: Experimental


class Report(BaseModel):
    """
    `clearing` in `budget/apply`'s result (PROTOCOL.md 12.1).
    """

    model_config = ConfigDict(
        populate_by_name=True,
    )
    mode: ClearingMode
    decision: Decision
    rent_chars: conint(ge=0) = Field(..., alias='rentChars')
    """
    The cache reads the batch weighed has run up since its results
    became clearable, in chars at the input price.
    """
    cost_chars: conint(ge=0) = Field(..., alias='costChars')
    """
    What clearing that batch now costs beyond not clearing it, in chars
    at the input price (0 when clearing already saves on this request).
    """
    pricing: Prices
    """
    The prices weighed, and where they came from.
    """


class Config(BaseModel):
    """
    The whole configuration, as accepted in `toolwire.toml` and in
    `initializationOptions`.
    """

    model_config = ConfigDict(
        extra='forbid',
        populate_by_name=True,
    )
    data_dir: str | None = Field(None, alias='dataDir')
    """
    Root of everything toolwire writes; relative paths are taken from the
    workspace root. Default: `<workspace>/.toolwire`.
    """
    limits: Limits | None = Field(
        {'maxResultChars': 50000, 'maxMessageChars': 200000, 'previewChars': 2000},
        validate_default=True,
    )
    exempt_tools: list[str] | None = Field([], alias='exemptTools')
    """
    Tool names whose results are never replaced.
    """
    abort_mode: AbortMode | None = Field(AbortMode.discard, alias='abortMode')
    durability: Durability | None = Durability.fsync
    size_unit: SizeUnit | None = Field(SizeUnit.chars, alias='sizeUnit')
    preview_mode: PreviewMode | None = Field(PreviewMode.head, alias='previewMode')
    """
    How previews are cut: `head` or `headTail`.
    """
    tools: dict[str, ToolSettings] | None = Field({}, validate_default=True)
    """
    Per-tool settings by tool name (names kept exactly as the tools
    have them, also in `toolwire.toml`).
    """
    retention: Retention | None = Field(
        {
            'maxAgeDays': 30.0,
            'maxTotalBytes': None,
            'auto': True,
            'intervalHours': 24.0,
        },
        validate_default=True,
    )
    proxy: ProxyConfig | None = None
    """
    `toolwire proxy`: where it listens and where it forwards.
    """
    format: Format | None = None
    """
    The provider format of new sessions (PROTOCOL.md 10.3):
    `anthropic`, `openai-chat`, `openai-responses` or `gemini`. When
    unset, a session keeps the format it was created with and a new one
    is `anthropic`.
    """
    storage: StorageConfig | None = None
    """
    Where session state and transcripts live. Read once, from
    `toolwire.toml`, when the process starts (`toolwire proxy`,
    `serve`, `migrate`, `gc`); every session of the process uses it.
    `[storage.objects]`: where saved outputs go.
    """
    clearing: Clearing | None = Field(
        {
            'mode': 'auto',
            'keepRecent': 3,
            'minChars': 1000,
            'triggerChars': 40000,
            'coldAfterSeconds': 300,
            'previewChars': 200,
        },
        validate_default=True,
    )
    """
    Clearing old results (PROTOCOL.md 11.3).
    """
    pricing: PricingConfig | None = None
    """
    `[pricing.<provider>]`: the cache prices `auto` clearing weighs
    with, over the documented ones (PROTOCOL.md 12.1).
    """


class InitializeResult(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
    )
    server_info: NameVersion = Field(..., alias='serverInfo')
    capabilities: ServerCapabilities


class BudgetApplyResult(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
    )
    messages: list[Message]
    """
    Same length and order as the input, replacements applied.
    """
    records: list[ReplacementRecord]
    """
    Newly made replacements only, for journaling.
    """
    persisted: list[Persisted]
    failures: list[PersistFailure]
    over_limit: list[conint(ge=0)] = Field(..., alias='overLimit')
    """
    Indexes of messages still above `maxMessageChars`.
    """
    cleared: list[str]
    """
    Old results this apply cleared (PROTOCOL.md 11.3), in order; their
    records are in `records` too.
    """
    clearing: Report | None = None
    """
    Why this apply cleared what it did, or nothing (PROTOCOL.md 12.1).
    """
