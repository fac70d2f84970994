/* Generated from schema/openrpc.json by editors/typescript/scripts/gen.mjs.
 * Do not edit: run editors/regenerate.sh (or `npm run gen` in editors/typescript). */
import type * as P from "./protocol";

/** Every toolwire method a client calls (lifecycle aside): its params and result. */
export interface MethodTable {
  "budget/apply": { params: P.BudgetApplyParams; result: P.BudgetApplyResult };
  "state/fork": { params: P.StateForkParams; result: P.StateForkResult };
  "state/reconstruct": { params: P.StateReconstructParams; result: P.StateReconstructResult };
  "state/get": { params: P.StateGetParams; result: P.StateGetResult };
  "pair/append": { params: P.PairAppendParams; result: P.PairAppendResult };
  "pair/flush": { params: P.PairFlushParams; result: P.FlushResult };
  "transcript/repair": { params: P.TranscriptRepairParams; result: P.TranscriptRepairResult };
  "artifact/read": { params: P.ArtifactReadParams; result: P.ReadResult };
  "storage/gc": { params: P.StorageGcParams; result: P.GcReport };
  "transcript/check": { params: P.TranscriptCheckParams; result: P.TranscriptCheckResult };
}

export type MethodName = keyof MethodTable;

/** The method names, in the order of the server's method table. */
export const METHOD_NAMES: readonly MethodName[] = ["budget/apply", "state/fork", "state/reconstruct", "state/get", "pair/append", "pair/flush", "transcript/repair", "artifact/read", "storage/gc", "transcript/check"];

/** Methods that report `$/progress` when their params carry a `workDoneToken`. */
export const PROGRESS_METHODS: ReadonlySet<MethodName> = new Set<MethodName>(["state/reconstruct", "transcript/repair", "storage/gc"]);

/** Per-call options: cancellation and progress. */
export interface CallOptions {
  /** Aborting sends `$/cancelRequest`; the call then rejects with `CancelledError` unless it had already completed. */
  signal?: AbortSignal;
  /** Receives the `value` of each `$/progress` notification, for the methods that report progress. */
  onProgress?: (value: unknown) => void;
}

/** One typed method per entry of the method table, over `request`. */
export abstract class ToolwireMethods {
  abstract request<M extends MethodName>(method: M, params: MethodTable[M]["params"], options?: CallOptions): Promise<MethodTable[M]["result"]>;

  /** `budget/apply`: Keep each user message's tool results within the size budget, persisting the largest fresh ones. */
  budgetApply(params: MethodTable["budget/apply"]["params"], options?: CallOptions): Promise<MethodTable["budget/apply"]["result"]> {
    return this.request("budget/apply", params, options);
  }

  /** `state/fork`: Start a new session from a snapshot of another's replacement state. */
  stateFork(params: MethodTable["state/fork"]["params"], options?: CallOptions): Promise<MethodTable["state/fork"]["result"]> {
    return this.request("state/fork", params, options);
  }

  /** `state/reconstruct`: Rebuild a session's replacement state from messages, records and a transcript. */
  stateReconstruct(params: MethodTable["state/reconstruct"]["params"], options?: CallOptions): Promise<MethodTable["state/reconstruct"]["result"]> {
    return this.request("state/reconstruct", params, options);
  }

  /** `state/get`: Read a session's replacement state and pending tool calls. */
  stateGet(params: MethodTable["state/get"]["params"], options?: CallOptions): Promise<MethodTable["state/get"]["result"]> {
    return this.request("state/get", params, options);
  }

  /** `pair/append`: Append a message to the session transcript; tool calls are committed only with all their results. */
  pairAppend(params: MethodTable["pair/append"]["params"], options?: CallOptions): Promise<MethodTable["pair/append"]["result"]> {
    return this.request("pair/append", params, options);
  }

  /** `pair/flush`: Resolve the pending tool pair: discard it or close it with synthetic error results. */
  pairFlush(params: MethodTable["pair/flush"]["params"], options?: CallOptions): Promise<MethodTable["pair/flush"]["result"]> {
    return this.request("pair/flush", params, options);
  }

  /** `transcript/repair`: Rewrite a transcript so that every tool call is directly followed by all its results. */
  transcriptRepair(params: MethodTable["transcript/repair"]["params"], options?: CallOptions): Promise<MethodTable["transcript/repair"]["result"]> {
    return this.request("transcript/repair", params, options);
  }

  /** `artifact/read`: Read a saved output back: a range of lines, or the lines matching a regular expression with context. */
  artifactRead(params: MethodTable["artifact/read"]["params"], options?: CallOptions): Promise<MethodTable["artifact/read"]["result"]> {
    return this.request("artifact/read", params, options);
  }

  /** `storage/gc`: Remove expired sessions, unreferenced artifacts and temporary leftovers by the retention rules. */
  storageGc(params: MethodTable["storage/gc"]["params"], options?: CallOptions): Promise<MethodTable["storage/gc"]["result"]> {
    return this.request("storage/gc", params, options);
  }

  /** `transcript/check`: Say, changing nothing, whether the provider would accept a conversation's tool calls and results. */
  transcriptCheck(params: MethodTable["transcript/check"]["params"], options?: CallOptions): Promise<MethodTable["transcript/check"]["result"]> {
    return this.request("transcript/check", params, options);
  }
}
