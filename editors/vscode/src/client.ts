// A typed toolwire client for Node: spawns `toolwire serve` (or
// `toolwire serve --shared`) and speaks JSON-RPC over its stdio with
// vscode-jsonrpc, the library VS Code extensions already use.
//
// Every params and result type comes from ./protocol.ts, generated from
// toolwire's published JSON Schema, so the compiler checks each call.
import { spawn, type ChildProcess } from "node:child_process";
import {
  createMessageConnection,
  StreamMessageReader,
  StreamMessageWriter,
  type MessageConnection,
} from "vscode-jsonrpc/node";
import type * as P from "./protocol";

/** Stable error kinds (`error.data.kind`) a caller can branch on. */
export type ErrorKind = P.ErrorData["kind"];

export class ToolwireClient {
  private constructor(
    private readonly connection: MessageConnection,
    private readonly child: ChildProcess,
    readonly initializeResult: P.InitializeResult,
  ) {}

  /** Start a server for the workspace at `rootUri` and initialize it. */
  static async start(binary: string, rootUri: string, config: Partial<P.Config> = {}): Promise<ToolwireClient> {
    const child = spawn(binary, ["serve"], { stdio: ["pipe", "pipe", "inherit"] });
    if (!child.stdout || !child.stdin) {
      throw new Error("toolwire: no stdio pipes");
    }
    const connection = createMessageConnection(
      new StreamMessageReader(child.stdout),
      new StreamMessageWriter(child.stdin),
    );
    connection.listen();
    const params: P.InitializeParams = {
      processId: process.pid,
      rootUri,
      clientInfo: { name: "toolwire-node-client", version: "0.1.0" },
      initializationOptions: config,
    };
    const result: P.InitializeResult = await connection.sendRequest("initialize", params);
    await connection.sendNotification("initialized", {});
    return new ToolwireClient(connection, child, result);
  }

  budgetApply(params: P.BudgetApplyParams): Promise<P.BudgetApplyResult> {
    return this.connection.sendRequest("budget/apply", params);
  }

  stateFork(params: P.StateForkParams): Promise<P.StateForkResult> {
    return this.connection.sendRequest("state/fork", params);
  }

  stateGet(params: P.StateGetParams): Promise<P.StateGetResult> {
    return this.connection.sendRequest("state/get", params);
  }

  stateReconstruct(params: P.StateReconstructParams): Promise<P.StateReconstructResult> {
    return this.connection.sendRequest("state/reconstruct", params);
  }

  pairAppend(params: P.PairAppendParams): Promise<P.PairAppendResult> {
    return this.connection.sendRequest("pair/append", params);
  }

  pairFlush(params: P.PairFlushParams): Promise<P.FlushResult> {
    return this.connection.sendRequest("pair/flush", params);
  }

  transcriptRepair(params: P.TranscriptRepairParams): Promise<P.TranscriptRepairResult> {
    return this.connection.sendRequest("transcript/repair", params);
  }

  /** `shutdown` then `exit`; resolves with the server's exit code. */
  async close(): Promise<number | null> {
    await this.connection.sendRequest("shutdown");
    const exited = new Promise<number | null>((resolve) => this.child.once("exit", (code) => resolve(code)));
    await this.connection.sendNotification("exit");
    const code = await exited;
    this.connection.dispose();
    return code;
  }
}
