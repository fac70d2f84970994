// A typed toolwire client for Node: starts `toolwire serve --shared` (the
// workspace's shared daemon, through its stdio forwarder), `toolwire serve`,
// or any command that speaks toolwire on stdio, and calls it over
// vscode-jsonrpc, the JSON-RPC library VS Code extensions already use.
//
// Every params and result type comes from ./protocol.ts and the method
// table from ./methods.ts, both generated from toolwire's published
// schemas, so the compiler checks each call.
import { spawn, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { realpathSync } from "node:fs";
import { tmpdir } from "node:os";
import { isAbsolute, join } from "node:path";
import { Writable } from "node:stream";
import { pathToFileURL } from "node:url";
import {
  CancellationTokenSource,
  createMessageConnection,
  ResponseError,
  StreamMessageReader,
  StreamMessageWriter,
  type MessageConnection,
} from "vscode-jsonrpc/node";
import { CancelledError, toToolwireError } from "./errors";
import { locateToolwire } from "./locate";
import { PROGRESS_METHODS, ToolwireMethods, type CallOptions, type MethodName, type MethodTable } from "./methods";
import type * as P from "./protocol";

export const CLIENT_VERSION = "0.2.0";

export interface StartOptions {
  /** The workspace root: a directory path or a `file://` URI. */
  root: string;
  /**
   * The command to run instead of a located toolwire (`[program, ...args]`);
   * it must speak toolwire's JSON-RPC on stdio. `binary` and `shared` are
   * then ignored.
   */
  command?: readonly string[];
  /**
   * The toolwire binary (a setting); else TOOLWIRE_BIN, else the binary of
   * the `toolwire` npm package for this platform, else PATH (see
   * `locateToolwire`).
   */
  binary?: string | undefined;
  /** Name of the setting `binary` came from, for the not-found error. */
  binarySettingName?: string;
  /** `serve --shared` (default: the workspace's one shared daemon) or `serve` (a private server). */
  shared?: boolean;
  /** With `shared`: seconds the daemon stays up with no client (toolwire's default when absent). */
  idleTimeout?: number;
  /** `initializationOptions`: overrides of the workspace's toolwire.toml. */
  config?: P.Config;
  /** Who is calling (`clientInfo`). */
  clientInfo?: P.NameVersion;
  /** Environment of the child (default process.env). */
  env?: NodeJS.ProcessEnv;
  /** Receives the child's stderr (its log) as it arrives. */
  onLog?: (text: string) => void;
}

function rootToUri(root: string): { uri: string; path: string | undefined } {
  if (root.startsWith("file:")) return { uri: root, path: new URL(root).pathname };
  if (!isAbsolute(root)) throw new Error(`toolwire: the workspace root must be absolute, got ${root}`);
  return { uri: pathToFileURL(root).href, path: root };
}

/**
 * The log file of the shared daemon of `root` (its stderr), as toolwire
 * names it: `<runtime dir>/<first 8 bytes of sha256(canonical root), hex>-<version>.log`,
 * the runtime dir being `$XDG_RUNTIME_DIR/toolwire`, else `<tmp>/toolwire-<uid>`.
 */
export function daemonLogPath(root: string, serverVersion: string, env: NodeJS.ProcessEnv = process.env): string {
  const xdg = env.XDG_RUNTIME_DIR;
  const dir = xdg ? join(xdg, "toolwire") : join(env.TMPDIR || tmpdir(), `toolwire-${process.geteuid?.() ?? 0}`);
  const key = createHash("sha256").update(realpathSync(root)).digest("hex").slice(0, 16);
  return join(dir, `${key}-${serverVersion}.log`);
}

/**
 * The child's stdin as the connection writes it. Writing to a child that
 * has died fails with EPIPE, or ERR_STREAM_DESTROYED once Node has torn the
 * pipe down, and vscode-jsonrpc lets one of those escape as an unhandled
 * rejection that ends the caller's whole process. What is written to a
 * dead child is dropped instead: its death is reported once, by the end of
 * its output (every pending request fails) or, while starting, by its exit
 * status and stderr.
 */
function childInput(stdin: Writable): Writable {
  stdin.on("error", () => undefined);
  return new Writable({
    write(chunk: Buffer, _encoding, callback) {
      if (stdin.destroyed || !stdin.writable) return callback();
      stdin.write(chunk, () => callback());
    },
    final(callback) {
      stdin.end(() => callback());
    },
    destroy(_err, callback) {
      stdin.destroy();
      callback(null);
    },
  });
}

/**
 * Whether a rejection is the server's answer, not vscode-jsonrpc's word
 * that the connection failed (its codes -32099 to -32096, or a plain Error).
 */
function isAnswer(err: unknown): boolean {
  return err instanceof ResponseError && !(err.code >= -32099 && err.code <= -32096);
}

/** The first lines of a child's stderr, for an error message. */
function describeStderr(stderr: string): string {
  const lines = stderr.trimEnd().split("\n");
  if (lines.length === 1 && lines[0] === "") return " (it wrote nothing on stderr)";
  const first = lines.slice(0, 10);
  if (lines.length > first.length) first.push("...");
  return `:\n${first.join("\n")}`;
}

export class ToolwireClient extends ToolwireMethods {
  private readonly progress = new Map<string, (value: unknown) => void>();
  private nextToken = 1;
  private readonly listeners = new Set<(method: string, params: unknown, result: unknown) => void>();
  /** With the shared daemon: its log file (see `daemonLogPath`). */
  daemonLog: string | undefined;
  /** Set once the child has exited: what calls then fail with. */
  private ended: string | undefined;
  /** Resolves with the child's exit code (null when killed by a signal) once it has exited. */
  readonly exited: Promise<number | null>;

  private constructor(
    private readonly connection: MessageConnection,
    private readonly child: ChildProcess,
    /** What `initialize` answered: server version, protocol version, methods. */
    public initializeResult: P.InitializeResult,
    program: string,
    closed: Promise<unknown>,
  ) {
    super();
    // A child that ends fails every call still waiting, and every later
    // one, with its exit status (vscode-jsonrpc alone would leave them
    // waiting forever: what is written to a dead child is dropped).
    this.exited = new Promise((resolve) => {
      const exited = (code: number | null, signal: NodeJS.Signals | null) => {
        this.ended = `toolwire: ${program} exited (${signal ? `signal ${signal}` : `status ${code}`})`;
        resolve(code);
      };
      if (child.exitCode !== null || child.signalCode !== null) exited(child.exitCode, child.signalCode);
      else child.once("exit", exited);
    });
    void closed.then(() => connection.dispose());
    connection.onNotification("$/progress", (params: { token?: unknown; value?: unknown }) => {
      const handler = typeof params?.token === "string" ? this.progress.get(params.token) : undefined;
      handler?.(params.value);
    });
  }

  /** Start toolwire for a workspace and initialize it. */
  static async start(options: StartOptions): Promise<ToolwireClient> {
    const { uri, path } = rootToUri(options.root);
    let argv: string[];
    if (options.command && options.command.length > 0) {
      argv = [...options.command];
    } else {
      const located = locateToolwire({
        binary: options.binary,
        ...(options.binarySettingName ? { settingName: options.binarySettingName } : {}),
        ...(options.env ? { env: options.env } : {}),
      });
      argv = [located, "serve"];
      if (options.shared ?? true) {
        argv.push("--shared");
        if (path) argv.push("--workspace", path);
        if (options.idleTimeout !== undefined) argv.push("--idle-timeout", String(options.idleTimeout));
      }
    }
    const [program, ...args] = argv as [string, ...string[]];
    const child = spawn(program, args, {
      stdio: ["pipe", "pipe", "pipe"],
      env: options.env ?? process.env,
      ...(path ? { cwd: path } : {}),
    });
    const spawned = new Promise<void>((resolve, reject) => {
      child.once("spawn", () => resolve());
      child.once("error", (err) => reject(new Error(`toolwire: could not start ${program}: ${err.message}`)));
    });
    // The beginning of its stderr (where a failing start says why) for the
    // error, and all of it for `onLog`.
    let stderr = "";
    child.stderr?.setEncoding("utf8");
    child.stderr?.on("data", (chunk: string) => {
      if (stderr.length < 4000) stderr = (stderr + chunk).slice(0, 4000);
      options.onLog?.(chunk);
    });
    // 'close': the child has exited and its stderr has been read to the end.
    const closed = new Promise<string>((resolve) =>
      child.once("close", (code, signal) => resolve(signal ? `signal ${signal}` : `status ${code}`)),
    );
    await spawned;
    if (!child.stdout || !child.stdin) throw new Error("toolwire: no stdio pipes");
    const connection = createMessageConnection(new StreamMessageReader(child.stdout), new StreamMessageWriter(childInput(child.stdin)));
    connection.listen();
    const params: P.InitializeParams = {
      processId: process.pid,
      rootUri: uri,
      clientInfo: options.clientInfo ?? { name: "toolwire-client (node)", version: CLIENT_VERSION },
      initializationOptions: { ...(options.config ?? {}) },
    };
    // A child that dies before answering (a bad command, a store it cannot
    // open) gives one error, whatever came first: the failed write of
    // `initialize` (EPIPE) or the end of its output.
    const died = closed.then((status) => {
      throw new Error(`toolwire: ${program} exited (${status}) before initializing${describeStderr(stderr)}`);
    });
    died.catch(() => undefined);
    let result: P.InitializeResult;
    try {
      result = await Promise.race([connection.sendRequest<P.InitializeResult>("initialize", params), died]);
    } catch (err) {
      connection.dispose();
      child.kill();
      throw toToolwireError("initialize", err);
    }
    await connection.sendNotification("initialized", {}).catch(() => undefined);
    const client = new ToolwireClient(connection, child, result, program, closed);
    if (path && (options.shared ?? true) && !options.command) {
      client.daemonLog = daemonLogPath(path, result.serverInfo.version ?? "", options.env ?? process.env);
    }
    return client;
  }

  /** The methods this server supports (`capabilities.experimental.toolwire.methods`). */
  get serverMethods(): readonly string[] {
    return this.initializeResult.capabilities.experimental.toolwire.methods;
  }

  /** Call any method of the method table; errors reject as typed `ToolwireError`s. */
  request<M extends MethodName>(
    method: M,
    params: MethodTable[M]["params"],
    options: CallOptions = {},
  ): Promise<MethodTable[M]["result"]> {
    return this.requestAny(method, params, options) as Promise<MethodTable[M]["result"]>;
  }

  /**
   * Call a method by name without compile-time types: for methods newer
   * than this client (check `serverMethods` first). A server that does not
   * know the method rejects with `MethodNotFoundError`.
   */
  async requestAny(method: string, params: unknown, options: CallOptions = {}): Promise<unknown> {
    let sent: unknown = params;
    let token: string | undefined;
    if (options.onProgress && PROGRESS_METHODS.has(method as MethodName)) {
      token = `toolwire-node-${this.nextToken++}`;
      this.progress.set(token, options.onProgress);
      sent = { ...(params as object), workDoneToken: token };
    }
    if (options.signal?.aborted) {
      // Aborted before the call: nothing is sent, as `fetch` does with an
      // aborted signal; the same CancelledError as a call the server
      // cancelled before committing anything.
      throw new CancelledError(method, -32800, "request cancelled before it was sent", { kind: "cancelled" });
    }
    const cancel = options.signal ? new CancellationTokenSource() : undefined;
    // The token is made before anything can cancel it: a source cancelled
    // first hands out a static token that never sends `$/cancelRequest`.
    const cancelToken = cancel?.token;
    const onAbort = () => cancel?.cancel();
    options.signal?.addEventListener("abort", onAbort, { once: true });
    try {
      // vscode-jsonrpc reads a trailing `undefined` as a second positional
      // param, so the token is passed only when there is one.
      const result: unknown = await (cancelToken
        ? this.connection.sendRequest(method, sent, cancelToken)
        : this.connection.sendRequest(method, sent));
      for (const listener of this.listeners) listener(method, params, result);
      return result;
    } catch (err) {
      if (this.ended !== undefined && !isAnswer(err)) throw new Error(this.ended);
      throw toToolwireError(method, err);
    } finally {
      options.signal?.removeEventListener("abort", onAbort);
      cancel?.dispose();
      if (token) this.progress.delete(token);
    }
  }

  /** Be told of every call that succeeded (method, params, result): for status displays. */
  onDidComplete(listener: (method: string, params: unknown, result: unknown) => void): { dispose(): void } {
    this.listeners.add(listener);
    return { dispose: () => this.listeners.delete(listener) };
  }

  /** `shutdown` then `exit`; resolves with the child's exit code (0 after a clean shutdown). */
  async close(): Promise<number | null> {
    try {
      await this.connection.sendRequest("shutdown");
      await this.connection.sendNotification("exit");
    } catch {
      // Already gone: what matters is that the child is.
      this.child.kill();
    }
    const code = await this.exited;
    this.connection.dispose();
    return code;
  }

  /** End the child without the LSP goodbye (its pending pairs are flushed by the server as on any EOF). */
  dispose(): void {
    this.connection.dispose();
    this.child.stdin?.end();
  }
}
