/* Generated from schema/toolwire.schema.json by editors/typescript/scripts/gen.mjs.
 * Do not edit: run editors/regenerate.sh (or `npm run gen` in editors/typescript). */

/**
 * 1-128 characters of [A-Za-z0-9._-], not starting with '.'
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "SessionId".
 */
export type SessionId = string
/**
 * A message in the session's provider format (PROTOCOL.md 10.3), one variant per format; unknown fields, blocks, parts and items round-trip unchanged.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "Message".
 */
export type Message = (AnthropicMessage | OpenaiChatMessage | OpenaiResponsesItem | GeminiContent)
/**
 * format `openai-responses`: one input item.
 */
export type OpenaiResponsesItem = {
[k: string]: unknown | undefined
}
/**
 * How the preview of a persisted result is cut.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "PreviewMode".
 */
export type PreviewMode = ("head" | "headTail")
/**
 * A tool's `maxResultChars`: a number, or `null` / `"never"`.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "MaxOrNever".
 */
export type MaxOrNever = (number | Never)
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "Never".
 */
export type Never = "never"
/**
 * Which provider's message shapes a conversation uses.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "Format".
 */
export type Format = ("anthropic" | "openai-chat" | "openai-responses" | "gemini")
/**
 * When old results are cleared.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "ClearingMode".
 */
export type ClearingMode = ("off" | "batch" | "cold" | "auto")
/**
 * How long the request asked its provider to keep the cache.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "CacheTtl".
 */
export type CacheTtl = ("5m" | "1h" | "24h")
/**
 * A price as a multiple of the uncached input price: finite and not
 * negative, refused at its key otherwise.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "Multiple".
 */
export type Multiple = number
/**
 * An LSP progress token (`workDoneToken`): `$/progress` notifications for
 * long work carry it.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "ProgressToken".
 */
export type ProgressToken = (number | string)
/**
 * format `openai-responses`: one input item.
 */
export type OpenaiResponsesItem1 = ({
[k: string]: unknown | undefined
} | {
[k: string]: unknown | undefined
})
/**
 * One message, or in `openai-responses` one input item or an array of them.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "AppendMessage".
 */
export type AppendMessage = (Message | [OpenaiResponsesItem1, ...(OpenaiResponsesItem1)[]])
/**
 * What an interrupted tool pair becomes.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "AbortMode".
 */
export type AbortMode = ("discard" | "synthetic")
/**
 * `[proxy] previews`.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "Previews".
 */
export type Previews = ("mcp" | "path")
/**
 * An option's value: TOML and JSON may spell `true` or `9000` bare.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "OptionValue".
 */
export type OptionValue = (string | boolean | number) | undefined
/**
 * Whether each commit reaches the disk before its reply.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "Durability".
 */
export type Durability = ("fsync" | "none")
/**
 * How sizes are counted.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "SizeUnit".
 */
export type SizeUnit = ("chars" | "utf16" | "bytes")
/**
 * `storage.backend`.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "Backend".
 */
export type Backend = ("local" | "postgres")
/**
 * One line of a session transcript.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "TranscriptLine".
 */
export type TranscriptLine = ({
type: "message"
message: Message
} | {
type: "replacement"
record: ReplacementRecord
} | {
type: "seen"
toolUseIds: string[]
/**
 * The digest of each id's original, in the same order (see
 * `ReplacementRecord.digest`); may be shorter in hand-written files,
 * an id without a digest then applies to any original.
 */
digests?: string[]
} | {
type: "session"
format: Format
} | {
type: "fork"
/**
 * The session this one was forked from.
 */
parent: string
/**
 * Byte ranges of other transcripts, read in order before this file's
 * own lines.
 */
segments: Segment[]
})
/**
 * What one apply decided about clearing, and why.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "Decision".
 */
export type Decision = ("cleared" | "expired" | "waiting" | "none")
/**
 * Whose cache prices apply.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "Provider".
 */
export type Provider = ("anthropic" | "openai" | "gemini")
/**
 * Where the prices in force came from.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "PriceSource".
 */
export type PriceSource = ("model" | "default" | "configured" | "request")
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "ArtifactKind".
 */
export type ArtifactKind = ("text" | "json")
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "AppendStatus".
 */
export type AppendStatus = ("buffered" | "committed")

/**
 * Every toolwire type as a named definition. `<Method>Params` are what a client sends (optional fields may be omitted); `<Method>Result` are what the server sends (fields it always writes are required). Where the two shapes of one type differ, the server's is `<Name>Output`.
 */
export interface ToolwireSchemaBundle {

}
/**
 * `initialize`'s params. Any other LSP field (`trace`, `locale`,
 * `rootPath`, `workDoneToken`, ...) is accepted and ignored.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "InitializeParams".
 */
export interface InitializeParams {
/**
 * The client's process id; not used.
 */
processId?: (number | null)
/**
 * The workspace root as a `file://` URI.
 */
rootUri?: (string | null)
workspaceFolders?: (WorkspaceFolder[] | null)
clientInfo?: (NameVersion | null)
/**
 * The client's LSP `ClientCapabilities`; accepted and not used.
 */
capabilities?: {
[k: string]: unknown | undefined
}
/**
 * A toolwire `Config` (see `config.json`).
 */
initializationOptions?: {
[k: string]: unknown | undefined
}
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "WorkspaceFolder".
 */
export interface WorkspaceFolder {
uri: string
name?: string
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "NameVersion".
 */
export interface NameVersion {
name: string
version?: (string | null)
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "BudgetApplyParams".
 */
export interface BudgetApplyParams {
sessionId: SessionId
/**
 * The conversation, or its tail, about to be sent.
 */
messages: Message[]
limits?: (LimitsOverride | null)
/**
 * How this request's fresh previews are cut (decided ones keep theirs).
 */
previewMode?: (PreviewMode | null)
/**
 * Per-tool settings for this request, over the configuration's.
 */
tools?: ({
[k: string]: ToolSettings | undefined
} | null)
/**
 * The provider format of the messages (PROTOCOL.md 10.3); default: the
 * configuration's `format`, else the session's, else `anthropic`.
 */
format?: (Format | null)
/**
 * Clearing of old results for this request, over the configuration's
 * (PROTOCOL.md 11.3).
 */
clearing?: (ClearingOverride | null)
/**
 * What the request says about its provider's prices, for `auto`
 * clearing (PROTOCOL.md 12.1); the provider is the format's.
 */
pricing?: (PricingParams | null)
/**
 * The session id this request's fresh previews name in their
 * `toolwire://saved-output/<linkSession>/<toolUseId>` links, to be
 * read with the `read_saved_output` tool of an MCP front (PROTOCOL.md
 * 12.3); absent: previews name the saved output's path alone.
 * Decided previews keep their text.
 */
linkSession?: (string | null)
}
/**
 * format `anthropic`: a Messages API message; calls are `tool_use` blocks, results `tool_result` blocks; a `system` message (Claude Code 2.1 sends them among its messages) belongs to no turn.
 */
export interface AnthropicMessage {
role: ("user" | "assistant" | "system")
content: (string | {
type: string
[k: string]: unknown | undefined
}[])
[k: string]: unknown | undefined
}
/**
 * format `openai-chat`: a Chat Completions message; calls are `tool_calls` entries, results `tool` messages.
 */
export interface OpenaiChatMessage {
role: ("system" | "developer" | "user" | "assistant" | "tool" | "function")
content?: (string | null | {
type: string
[k: string]: unknown | undefined
}[])
tool_calls?: {
id: string
type?: string
function?: {
name?: string
arguments?: string
[k: string]: unknown | undefined
}
[k: string]: unknown | undefined
}[]
tool_call_id?: string
[k: string]: unknown | undefined
}
/**
 * format `gemini`: one content; calls are `functionCall` parts of a `model` content, results `functionResponse` parts of a `user` content.
 */
export interface GeminiContent {
role?: ("user" | "model" | "function")
parts: {
functionCall?: {
name: string
id?: string
args?: {

}
[k: string]: unknown | undefined
}
functionResponse?: {
name: string
id?: string
response?: {

}
[k: string]: unknown | undefined
}
thoughtSignature?: string
[k: string]: unknown | undefined
}[]
[k: string]: unknown | undefined
}
/**
 * Per-request overrides of [`Limits`].
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "LimitsOverride".
 */
export interface LimitsOverride {
maxResultChars?: (number | null)
maxMessageChars?: (number | null)
previewChars?: (number | null)
}
/**
 * Settings of one tool (`tools.<name>`), overriding the general ones for
 * its results.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "ToolSettings".
 */
export interface ToolSettings {
/**
 * Persist this tool's results above this size; `null` (in TOML, which
 * has no null: `"never"`) never persists them, as `exemptTools`.
 */
maxResultChars?: (MaxOrNever | null)
previewMode?: (PreviewMode | null)
}
/**
 * Per-request overrides of [`Clearing`], key by key.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "ClearingOverride".
 */
export interface ClearingOverride {
mode?: (ClearingMode | null)
keepRecent?: (number | null)
minChars?: (number | null)
triggerChars?: (number | null)
coldAfterSeconds?: (number | null)
previewChars?: (number | null)
}
/**
 * `pricing` in `budget/apply`'s params: what the request says about the
 * prices it is sent at. The proxy fills it from the request it forwards.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "PricingParams".
 */
export interface PricingParams {
/**
 * The model the request is for (`claude-sonnet-4-5`, `gpt-5-codex`,
 * `gemini-2.5-pro`, …): picks the model family's discount.
 */
model?: (string | null)
/**
 * The cache lifetime the request asked for.
 */
cacheTtl?: (CacheTtl | null)
/**
 * Explicit prices, over everything else (see [`PriceOverride`]; the
 * keys are repeated here rather than flattened, because serde cannot
 * refuse unknown keys of a struct that flattens another).
 */
cacheRead?: (Multiple | null)
cacheWrite?: (Multiple | null)
cacheSeconds?: (number | null)
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "StateForkParams".
 */
export interface StateForkParams {
sessionId: SessionId
/**
 * A fresh id is chosen when absent.
 */
newSessionId?: (SessionId | null)
/**
 * Copy the source's committed transcript (default true).
 */
copyTranscript?: (boolean | null)
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "StateReconstructParams".
 */
export interface StateReconstructParams {
sessionId: SessionId
messages?: (Message[] | null)
records?: (ReplacementRecord[] | null)
/**
 * A parent's replacements, for a fork that did not copy its transcript.
 */
inheritedReplacements?: ({
[k: string]: string | undefined
} | null)
/**
 * Path of a transcript file to read as well.
 */
transcript?: (string | null)
/**
 * The provider format of the messages (PROTOCOL.md 10.3); default: the
 * configuration's `format`, else the session's, else `anthropic`.
 */
format?: (Format | null)
workDoneToken?: (ProgressToken | null)
}
/**
 * The exact string that was sent in place of an original tool result.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "ReplacementRecord".
 */
export interface ReplacementRecord {
/**
 * `"tool-result"`; records of other kinds are ignored on read.
 */
kind: string
toolUseId: string
replacement: string
/**
 * Digest of the original the replacement was made from, a hash of
 * the result's content as compact JSON: `xxh3:` and 16 hex digits
 * (XXH3-64), or 16 hex digits (the first 8 bytes of SHA-256, written
 * before XXH3 and still read). The replacement is put back only on
 * that original.
 * Absent in version-1 transcripts: then it applies to any original
 * with this id.
 */
digest?: (string | null)
/**
 * The replacement clears an old result that was sent whole before
 * (PROTOCOL.md 11.3): it takes the place of that earlier decision.
 */
cleared?: boolean
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "StateGetParams".
 */
export interface StateGetParams {
sessionId: SessionId
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "PairAppendParams".
 */
export interface PairAppendParams {
sessionId: SessionId
/**
 * One message; in `openai-responses`, one input item or an array of
 * them (one model response, or one batch of outputs).
 */
message: (Message | [OpenaiResponsesItem1, ...(OpenaiResponsesItem1)[]])
/**
 * The provider format of the messages (PROTOCOL.md 10.3); default: the
 * configuration's `format`, else the session's, else `anthropic`.
 */
format?: (Format | null)
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "PairFlushParams".
 */
export interface PairFlushParams {
sessionId: SessionId
/**
 * Default: the session's `abortMode`.
 */
mode?: (AbortMode | null)
/**
 * Named in synthetic error results.
 */
reason?: (string | null)
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "TranscriptRepairParams".
 */
export interface TranscriptRepairParams {
path: string
/**
 * The transcript's format; default: its `session` line, else what its
 * content shows.
 */
format?: (Format | null)
dryRun?: (boolean | null)
workDoneToken?: (ProgressToken | null)
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "ArtifactReadParams".
 */
export interface ArtifactReadParams {
sessionId: SessionId
/**
 * The tool_use_id whose saved output to read (data, never a path).
 */
toolUseId: string
/**
 * First line to read (0-based); with `grep`, where the search starts.
 */
offset?: (number | null)
/**
 * Lines to read (default 2000); with `grep`, matching lines to show.
 */
limit?: (number | null)
/**
 * A regular expression (Rust `regex` syntax): show the matching lines,
 * numbered, instead of a range.
 */
grep?: (string | null)
/**
 * With `grep`: lines shown before and after each match (at most 100).
 */
context?: (number | null)
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "StorageGcParams".
 */
export interface StorageGcParams {
/**
 * Only report what would be removed.
 */
dryRun?: (boolean | null)
workDoneToken?: (ProgressToken | null)
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "TranscriptCheckParams".
 */
export interface TranscriptCheckParams {
/**
 * A transcript file (relative paths are resolved against the workspace).
 */
path?: (string | null)
/**
 * Messages to check instead of a file.
 */
messages?: (Message[] | null)
/**
 * Default `anthropic`.
 */
format?: (Format | null)
}
/**
 * The whole configuration, as accepted in `toolwire.toml` and in
 * `initializationOptions`.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "Config".
 */
export interface Config {
/**
 * Root of everything toolwire writes; relative paths are taken from the
 * workspace root. Default: `<workspace>/.toolwire`.
 */
dataDir?: (string | null)
limits?: Limits
/**
 * Tool names whose results are never replaced.
 */
exemptTools?: string[]
/**
 * What an interrupted tool pair becomes.
 */
abortMode?: ("discard" | "synthetic")
/**
 * Whether each commit reaches the disk before its reply.
 */
durability?: ("fsync" | "none")
/**
 * How sizes are counted.
 */
sizeUnit?: ("chars" | "utf16" | "bytes")
/**
 * How the preview of a persisted result is cut.
 */
previewMode?: ("head" | "headTail")
/**
 * Per-tool settings by tool name (names kept exactly as the tools
 * have them, also in `toolwire.toml`).
 */
tools?: {
[k: string]: ToolSettings | undefined
}
retention?: Retention
proxy?: ProxyConfig
/**
 * The provider format of new sessions (PROTOCOL.md 10.3):
 * `anthropic`, `openai-chat`, `openai-responses` or `gemini`. When
 * unset, a session keeps the format it was created with and a new one
 * is `anthropic`.
 */
format?: (Format | null)
storage?: StorageConfig
clearing?: Clearing
pricing?: PricingConfig
}
/**
 * Size limits, all counted in `sizeUnit`.
 */
export interface Limits {
/**
 * A single fresh tool result larger than this is persisted.
 */
maxResultChars?: number
/**
 * Aggregate tool_result size allowed in one outbound user message.
 */
maxMessageChars?: number
/**
 * Size of the preview kept in place of a persisted result.
 */
previewChars?: number
}
/**
 * When saved outputs are removed (`toolwire gc`, `storage/gc`, and the
 * shared daemon's schedule).
 */
export interface Retention {
/**
 * A session whose journal was last written more than this many days
 * ago, and that no client holds, is removed with its artifacts;
 * `null`: never by age.
 */
maxAgeDays?: (number | null)
/**
 * Over this many bytes in all, the least recently written sessions go
 * first; `null`: no limit.
 */
maxTotalBytes?: (number | null)
/**
 * Whether the shared daemon collects on a schedule.
 */
auto?: boolean
/**
 * Hours between the shared daemon's collections.
 */
intervalHours?: number
}
/**
 * `toolwire proxy`: where it listens and where it forwards.
 */
export interface ProxyConfig {
/**
 * Address to listen on (`--listen` overrides it). A non-loopback
 * address needs `--allow-remote`.
 */
listen?: string
upstreams?: Upstreams
/**
 * Largest request body accepted, in bytes; a larger one is answered
 * 413 with an error in the provider's shape.
 */
maxRequestBytes?: number
/**
 * Seconds a client has to send a request's head (method, path,
 * headers) once the proxy waits for it; a connection that takes
 * longer is closed. HTTP/1.1 waits for the next head as soon as a
 * response is sent, so this also closes an idle HTTP/1.1 connection.
 */
headerTimeoutSeconds?: number
/**
 * Seconds a client has to send a request's whole body once its head
 * has arrived; a slower body is answered 408.
 */
bodyTimeoutSeconds?: number
/**
 * Seconds a connection may stay open with no request in progress and
 * no byte moving either way before the proxy closes it.
 */
idleTimeoutSeconds?: number
/**
 * Whether outbound connections (the upstreams, object storage) go
 * through the proxy that `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` name
 * (minus `NO_PROXY`; loopback never). `false`: always direct.
 */
systemProxy?: boolean
/**
 * A PEM file of certificates to trust for outbound TLS besides the
 * system's store (and `SSL_CERT_FILE` / `SSL_CERT_DIR`): a company's
 * TLS-inspecting proxy's CA. Relative to the workspace root.
 */
caFile?: (string | null)
/**
 * The hex SHA-256 of a token that may read `GET /metrics` (a
 * Prometheus scraper's, sent as `Authorization: Bearer <token>`), so
 * the scraper needs no tenant's token.
 */
metricsToken?: (string | null)
/**
 * Label the proxy's metrics with the tenant too (one series per
 * tenant and route: only for a handful of tenants).
 */
metricsByTenant?: boolean
/**
 * `[proxy.auth]`: the tenants' tokens. Required to listen beyond
 * loopback.
 */
auth?: (ProxyAuth | null)
/**
 * What a fresh preview tells the model about the saved output:
 * `"mcp"` adds its `toolwire://` link and the `read_saved_output`
 * tool of the proxy's `/mcp` (for agents that cannot open the proxy's
 * disk); `"path"` only the path. Unset: `"mcp"` when listening beyond
 * loopback, else `"path"`.
 */
previews?: (Previews | null)
}
/**
 * Base URL per provider; the request's path is appended to it.
 */
export interface Upstreams {
/**
 * For `POST /v1/messages`.
 */
anthropic?: string
/**
 * For `POST /v1/chat/completions` and `POST /v1/responses`.
 */
openai?: string
/**
 * For `POST /v1beta/models/{model}:generateContent` and
 * `:streamGenerateContent`.
 */
gemini?: string
}
/**
 * `[proxy.auth]`: who may use the proxy. Each token is a tenant, whose
 * sessions, saved outputs and stats are its own (PROTOCOL.md 12.3).
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "ProxyAuth".
 */
export interface ProxyAuth {
tokens?: TenantToken[]
}
/**
 * One tenant: its name and the hex SHA-256 of its token (the token
 * itself is never written down).
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "TenantToken".
 */
export interface TenantToken {
/**
 * 1-32 characters of [A-Za-z0-9_-]; it prefixes the tenant's session
 * ids.
 */
name: string
/**
 * The token's SHA-256, 64 hex digits.
 */
sha256: string
}
/**
 * Where session state and transcripts live. Read once, from
 * `toolwire.toml`, when the process starts (`toolwire proxy`,
 * `serve`, `migrate`, `gc`); every session of the process uses it.
 * `[storage.objects]`: where saved outputs go.
 */
export interface StorageConfig {
/**
 * `local` (transcripts as files under the data directory, one process
 * per workspace) or `postgres` (shared by every replica).
 */
backend?: ("local" | "postgres")
/**
 * `[storage.postgres]`, for `backend = "postgres"`.
 */
postgres?: (PostgresConfig | null)
/**
 * Saved outputs on object storage (S3, GCS, Azure, or a local
 * directory through the same interface) instead of under `dataDir`.
 */
objects?: (ObjectsConfig | null)
}
/**
 * `[storage.postgres]`.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "PostgresConfig".
 */
export interface PostgresConfig {
/**
 * Connection URL, e.g. `postgresql://toolwire@db.internal:5432/toolwire`
 * (or a `key=value` connection string).
 */
url: string
/**
 * Connections this process keeps at most (default 16).
 */
maxConnections?: number
}
/**
 * `[storage.objects]`: the bucket saved outputs go to.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "ObjectsConfig".
 */
export interface ObjectsConfig {
/**
 * The bucket and prefix: `s3://bucket/prefix`, `gs://bucket/prefix`,
 * `az://container/prefix` or `file:///absolute/dir`. Saved outputs are
 * `<url>/sessions/<sessionId>/tool-results/<name>`.
 */
url: string
/**
 * The `object_store` options of the URL's service, by their names
 * there (`endpoint`, `region`, `allow_http`, `access_key_id`, ...; in
 * snake_case or camelCase). Unset ones come from the environment
 * (`AWS_*`, `GOOGLE_*`, `AZURE_*`), as the services' own tools read it.
 */
options?: {
[k: string]: OptionValue | undefined
}
}
/**
 * Clearing old results (PROTOCOL.md 11.3).
 */
export interface Clearing {
/**
 * When old results are cleared.
 */
mode?: ("off" | "batch" | "cold" | "auto")
/**
 * Results of this many most recent assistant tool turns are never
 * cleared.
 */
keepRecent?: number
/**
 * Results smaller than this (in `sizeUnit`) are never cleared.
 */
minChars?: number
/**
 * `batch` and `cold`: the old results still sent whole must add up to
 * this before a batch is cleared.
 */
triggerChars?: number
/**
 * `cold`: how long a session must have been idle for its provider
 * cache to count as expired.
 */
coldAfterSeconds?: number
/**
 * Size of the preview a cleared result keeps.
 */
previewChars?: number
}
/**
 * `[pricing.<provider>]`: the cache prices `auto` clearing weighs
 * with, over the documented ones (PROTOCOL.md 12.1).
 */
export interface PricingConfig {
anthropic?: PriceOverride
openai?: PriceOverride
gemini?: PriceOverride
}
/**
 * One provider's prices, key by key (`[pricing.<provider>]`, or a
 * request's `pricing`); what is left out keeps the documented figure.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "PriceOverride".
 */
export interface PriceOverride {
/**
 * A cached input token, as a multiple of an uncached one.
 */
cacheRead?: (Multiple | null)
/**
 * An input token written to the cache (Anthropic charges a premium;
 * 1 where writing costs what uncached input costs).
 */
cacheWrite?: (Multiple | null)
/**
 * How long the cache outlives the last request that used it.
 */
cacheSeconds?: (number | null)
}
/**
 * Size limits, all counted in `sizeUnit`.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "Limits".
 */
export interface Limits1 {
/**
 * A single fresh tool result larger than this is persisted.
 */
maxResultChars?: number
/**
 * Aggregate tool_result size allowed in one outbound user message.
 */
maxMessageChars?: number
/**
 * Size of the preview kept in place of a persisted result.
 */
previewChars?: number
}
/**
 * When saved outputs are removed (`toolwire gc`, `storage/gc`, and the
 * shared daemon's schedule).
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "Retention".
 */
export interface Retention1 {
/**
 * A session whose journal was last written more than this many days
 * ago, and that no client holds, is removed with its artifacts;
 * `null`: never by age.
 */
maxAgeDays?: (number | null)
/**
 * Over this many bytes in all, the least recently written sessions go
 * first; `null`: no limit.
 */
maxTotalBytes?: (number | null)
/**
 * Whether the shared daemon collects on a schedule.
 */
auto?: boolean
/**
 * Hours between the shared daemon's collections.
 */
intervalHours?: number
}
/**
 * `[proxy]` in `toolwire.toml`: the HTTP face (`toolwire proxy`).
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "ProxyConfig".
 */
export interface ProxyConfig1 {
/**
 * Address to listen on (`--listen` overrides it). A non-loopback
 * address needs `--allow-remote`.
 */
listen?: string
upstreams?: Upstreams
/**
 * Largest request body accepted, in bytes; a larger one is answered
 * 413 with an error in the provider's shape.
 */
maxRequestBytes?: number
/**
 * Seconds a client has to send a request's head (method, path,
 * headers) once the proxy waits for it; a connection that takes
 * longer is closed. HTTP/1.1 waits for the next head as soon as a
 * response is sent, so this also closes an idle HTTP/1.1 connection.
 */
headerTimeoutSeconds?: number
/**
 * Seconds a client has to send a request's whole body once its head
 * has arrived; a slower body is answered 408.
 */
bodyTimeoutSeconds?: number
/**
 * Seconds a connection may stay open with no request in progress and
 * no byte moving either way before the proxy closes it.
 */
idleTimeoutSeconds?: number
/**
 * Whether outbound connections (the upstreams, object storage) go
 * through the proxy that `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` name
 * (minus `NO_PROXY`; loopback never). `false`: always direct.
 */
systemProxy?: boolean
/**
 * A PEM file of certificates to trust for outbound TLS besides the
 * system's store (and `SSL_CERT_FILE` / `SSL_CERT_DIR`): a company's
 * TLS-inspecting proxy's CA. Relative to the workspace root.
 */
caFile?: (string | null)
/**
 * The hex SHA-256 of a token that may read `GET /metrics` (a
 * Prometheus scraper's, sent as `Authorization: Bearer <token>`), so
 * the scraper needs no tenant's token.
 */
metricsToken?: (string | null)
/**
 * Label the proxy's metrics with the tenant too (one series per
 * tenant and route: only for a handful of tenants).
 */
metricsByTenant?: boolean
/**
 * `[proxy.auth]`: the tenants' tokens. Required to listen beyond
 * loopback.
 */
auth?: (ProxyAuth | null)
/**
 * What a fresh preview tells the model about the saved output:
 * `"mcp"` adds its `toolwire://` link and the `read_saved_output`
 * tool of the proxy's `/mcp` (for agents that cannot open the proxy's
 * disk); `"path"` only the path. Unset: `"mcp"` when listening beyond
 * loopback, else `"path"`.
 */
previews?: (Previews | null)
}
/**
 * `[proxy.upstreams]`: the only hosts the proxy ever forwards to.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "Upstreams".
 */
export interface Upstreams1 {
/**
 * For `POST /v1/messages`.
 */
anthropic?: string
/**
 * For `POST /v1/chat/completions` and `POST /v1/responses`.
 */
openai?: string
/**
 * For `POST /v1beta/models/{model}:generateContent` and
 * `:streamGenerateContent`.
 */
gemini?: string
}
/**
 * `[storage]` in `toolwire.toml`.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "StorageConfig".
 */
export interface StorageConfig1 {
/**
 * `local` (transcripts as files under the data directory, one process
 * per workspace) or `postgres` (shared by every replica).
 */
backend?: ("local" | "postgres")
/**
 * `[storage.postgres]`, for `backend = "postgres"`.
 */
postgres?: (PostgresConfig | null)
/**
 * Saved outputs on object storage (S3, GCS, Azure, or a local
 * directory through the same interface) instead of under `dataDir`.
 */
objects?: (ObjectsConfig | null)
}
/**
 * `clearing` in the configuration (file, `initializationOptions`). The
 * defaults are the ones measured in docs/clearing.md.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "Clearing".
 */
export interface Clearing1 {
/**
 * When old results are cleared.
 */
mode?: ("off" | "batch" | "cold" | "auto")
/**
 * Results of this many most recent assistant tool turns are never
 * cleared.
 */
keepRecent?: number
/**
 * Results smaller than this (in `sizeUnit`) are never cleared.
 */
minChars?: number
/**
 * `batch` and `cold`: the old results still sent whole must add up to
 * this before a batch is cleared.
 */
triggerChars?: number
/**
 * `cold`: how long a session must have been idle for its provider
 * cache to count as expired.
 */
coldAfterSeconds?: number
/**
 * Size of the preview a cleared result keeps.
 */
previewChars?: number
}
/**
 * `[pricing]` in `toolwire.toml`: overrides per provider.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "PricingConfig".
 */
export interface PricingConfig1 {
anthropic?: PriceOverride
openai?: PriceOverride
gemini?: PriceOverride
}
/**
 * One byte range of another transcript.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "Segment".
 */
export interface Segment {
/**
 * A hard link, in the fork's directory, to the transcript the bytes
 * are in.
 */
file: string
/**
 * First byte (the start of a line).
 */
from: number
/**
 * End, exclusive (the end of a line).
 */
to: number
/**
 * SHA-256 of the range's last 4 KiB (or all of it when shorter), hex.
 */
tail: string
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "InitializeResult".
 */
export interface InitializeResult {
serverInfo: NameVersion
capabilities: ServerCapabilities
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "ServerCapabilities".
 */
export interface ServerCapabilities {
experimental: Experimental
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "Experimental".
 */
export interface Experimental {
toolwire: ToolwireCapabilities
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "ToolwireCapabilities".
 */
export interface ToolwireCapabilities {
protocolVersion: number
/**
 * Every custom method this server supports.
 */
methods: string[]
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "BudgetApplyResult".
 */
export interface BudgetApplyResult {
/**
 * Same length and order as the input, replacements applied.
 */
messages: Message[]
/**
 * Newly made replacements only, for journaling.
 */
records: ReplacementRecord[]
persisted: Persisted[]
failures: PersistFailure[]
/**
 * Indexes of messages still above `maxMessageChars`.
 */
overLimit: number[]
/**
 * Old results this apply cleared (PROTOCOL.md 11.3), in order; their
 * records are in `records` too.
 */
cleared: string[]
/**
 * Why this apply cleared what it did, or nothing (PROTOCOL.md 12.1).
 */
clearing?: (Report | null)
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "Persisted".
 */
export interface Persisted {
toolUseId: string
/**
 * Absolute path of the artifact.
 */
path: string
/**
 * The original's size in the configured `sizeUnit`.
 */
originalChars: number
/**
 * `text` (saved as `.txt`) or `json` (a block array, saved as `.json`).
 */
contentType: ("text" | "json")
/**
 * An identical artifact was already on disk and was kept.
 */
reused: boolean
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "PersistFailure".
 */
export interface PersistFailure {
toolUseId: string
message: string
}
/**
 * `clearing` in `budget/apply`'s result (PROTOCOL.md 12.1).
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "Report".
 */
export interface Report {
mode: ClearingMode
decision: Decision
/**
 * The cache reads the batch weighed has run up since its results
 * became clearable, in chars at the input price.
 */
rentChars: number
/**
 * What clearing that batch now costs beyond not clearing it, in chars
 * at the input price (0 when clearing already saves on this request).
 */
costChars: number
pricing: Prices
}
/**
 * The prices weighed, and where they came from.
 */
export interface Prices {
provider: Provider
cacheRead: number
cacheWrite: number
cacheSeconds: number
source: PriceSource
}
/**
 * The prices one apply weighs clearing with.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "Prices".
 */
export interface Prices1 {
provider: Provider
cacheRead: number
cacheWrite: number
cacheSeconds: number
source: PriceSource
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "StateForkResult".
 */
export interface StateForkResult {
/**
 * 1-128 characters of [A-Za-z0-9._-], not starting with '.'
 */
sessionId: string
seenCount: number
replacementCount: number
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "StateReconstructResult".
 */
export interface StateReconstructResult {
seenCount: number
replacementCount: number
messagesRead: number
recordsRead: number
/**
 * Torn or unparsable transcript lines that were skipped.
 */
skippedLines: number
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "StateGetResult".
 */
export interface StateGetResult {
seenIds: string[]
replacements: {
[k: string]: string | undefined
}
/**
 * tool_use ids of the pair now buffered.
 */
pending: string[]
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "PairAppendResult".
 */
export interface PairAppendResult {
status: AppendStatus
/**
 * tool_use ids still waiting for their results.
 */
pending: string[]
/**
 * Transcript lines this call wrote, including any flush it caused.
 */
written: number
/**
 * Present when this message interrupted a pending pair.
 */
flushed?: (FlushResult | null)
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "FlushResult".
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "PairFlushResult".
 */
export interface FlushResult {
mode: AbortMode
/**
 * Ids of calls dropped unwritten.
 */
discarded: string[]
/**
 * Ids closed with a synthetic error result.
 */
synthesized: string[]
written: number
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "TranscriptRepairResult".
 */
export interface TranscriptRepairResult {
/**
 * Whether the file was rewritten (with `dryRun`: would be). A valid
 * transcript is never rewritten and gets no `.bak`.
 */
changed: boolean
/**
 * Lines kept.
 */
kept: number
droppedToolUses: string[]
droppedToolResults: string[]
/**
 * Ids of results moved ahead of the other content of their turn
 * (a result that came after text in the message answering its call).
 */
movedToolResults: string[]
/**
 * Calls given a new id to keep the provider's id rules (PROTOCOL.md
 * 11.2), their results with them.
 */
renamedToolUses: RenamedId[]
tornLines: number
}
/**
 * A call id repair changed, and what it became.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "RenamedId".
 */
export interface RenamedId {
from: string
to: string
}
/**
 * A page of an artifact (`artifact/read`'s result).
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "ReadResult".
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "ArtifactReadResult".
 */
export interface ReadResult {
/**
 * The lines read: verbatim for a range, numbered `grep -n` style for a
 * grep (see the module documentation of `artifact::read`).
 */
text: string
/**
 * First line shown (0-based).
 */
startLine: number
/**
 * One past the last line shown (0-based): the next page's `offset`.
 */
endLine: number
totalLines: number
/**
 * The artifact's size in the configured `sizeUnit`.
 */
totalChars: number
/**
 * More follows what `text` shows (lines after `endLine`, more matches,
 * or a line shown cut).
 */
truncated: boolean
}
/**
 * What a run removed (or, in a dry run, would remove).
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "GcReport".
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "StorageGcResult".
 */
export interface GcReport {
/**
 * Ids of the sessions removed whole (transcript and artifacts).
 */
sessionsRemoved: string[]
/**
 * Paths of files removed from kept sessions (unreferenced artifacts)
 * and of temporary leftovers.
 */
artifactsRemoved: string[]
/**
 * Bytes of every file removed.
 */
bytesFreed: number
/**
 * Sessions left in place.
 */
kept: number
}
/**
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "TranscriptCheckResult".
 */
export interface TranscriptCheckResult {
ok: boolean
violations: Violation[]
}
/**
 * One fault the provider would refuse.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "Violation".
 */
export interface Violation {
/**
 * Index of the message the fault is in (0-based, counting messages
 * only), as the provider numbers `messages.N`.
 */
index: number
/**
 * `missingResult`, `unexpectedResult`, `duplicateResult`,
 * `resultAfterContent` or `wrongRole`.
 */
kind: string
ids: string[]
/**
 * What the provider answers for this fault (HTTP 400).
 */
providerError: string
}
/**
 * The `data` member of every toolwire error.
 * 
 * This interface was referenced by `ToolwireSchemaBundle`'s JSON-Schema
 * via the `definition` "ErrorData".
 */
export interface ErrorData {
/**
 * Stable machine-readable error kind, e.g. `unknownToolResult`.
 */
kind: string
/**
 * For `invalidParams`: the offending field; for storage and lock errors: the file.
 */
path?: (string | null)
toolUseId?: (string | null)
sessionId?: (string | null)
method?: (string | null)
}
