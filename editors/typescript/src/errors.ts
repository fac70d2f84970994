// JSON-RPC errors from toolwire as typed exceptions: one class per stable
// error code, so callers can `catch (e) { if (e instanceof
// TranscriptLockedError) ... }` instead of comparing numbers.
import { ResponseError } from "vscode-jsonrpc/node";
import type { ErrorData } from "./protocol";

/** Any error toolwire answered; `code` and `kind` (`data.kind`) are stable. */
export class ToolwireError extends Error {
  readonly code: number;
  readonly kind: string;
  readonly data: ErrorData | undefined;
  readonly method: string;

  constructor(method: string, code: number, message: string, data: ErrorData | undefined) {
    super(`${method} failed (${code}${data?.kind ? ` ${data.kind}` : ""}): ${message}`);
    this.name = new.target.name;
    this.method = method;
    this.code = code;
    this.kind = data?.kind ?? "unknown";
    this.data = data;
  }
}

/** -32700: the frame was not valid JSON. */
export class ParseError extends ToolwireError {}
/** -32600: not a valid request, or sent after `shutdown`. */
export class InvalidRequestError extends ToolwireError {}
/** -32601: the server does not know the method (an older server). */
export class MethodNotFoundError extends ToolwireError {}
/** -32602: bad params; `data.path` names the offending field. */
export class InvalidParamsError extends ToolwireError {}
/** -32002: a request before `initialize`. */
export class NotInitializedError extends ToolwireError {}
/** -32800: the request was cancelled before it committed anything. */
export class CancelledError extends ToolwireError {}
/** -32010: a tool_result answers no pending tool_use. */
export class UnknownToolResultError extends ToolwireError {}
/** -32011: fork onto an existing session id. */
export class SessionExistsError extends ToolwireError {}
/** -32012: the method needs a session that does not exist. */
export class SessionNotFoundError extends ToolwireError {}
/** -32013: another process holds the transcript. */
export class TranscriptLockedError extends ToolwireError {}
/** -32014: the disk refused; nothing half-done remains. */
export class StorageError extends ToolwireError {}
/** -32015: no saved output for that tool_use id in that session. */
export class ArtifactNotFoundError extends ToolwireError {}

type ErrorClass = new (method: string, code: number, message: string, data: ErrorData | undefined) => ToolwireError;

/** The class for each error code. */
export const ERROR_CLASSES: ReadonlyMap<number, ErrorClass> = new Map<number, ErrorClass>([
  [-32700, ParseError],
  [-32600, InvalidRequestError],
  [-32601, MethodNotFoundError],
  [-32602, InvalidParamsError],
  [-32002, NotInitializedError],
  [-32800, CancelledError],
  [-32010, UnknownToolResultError],
  [-32011, SessionExistsError],
  [-32012, SessionNotFoundError],
  [-32013, TranscriptLockedError],
  [-32014, StorageError],
  [-32015, ArtifactNotFoundError],
]);

/** Turn what a request rejected with into a typed error (other errors pass through). */
export function toToolwireError(method: string, err: unknown): unknown {
  if (err instanceof ResponseError) {
    const data = isErrorData(err.data) ? err.data : undefined;
    const cls = ERROR_CLASSES.get(err.code) ?? ToolwireError;
    return new cls(method, err.code, err.message, data);
  }
  return err;
}

function isErrorData(value: unknown): value is ErrorData {
  return typeof value === "object" && value !== null && typeof (value as { kind?: unknown }).kind === "string";
}
