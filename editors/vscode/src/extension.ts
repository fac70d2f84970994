// The toolwire extension: one toolwire client per workspace folder, on the
// folder's shared daemon (`toolwire serve --shared`, through the
// toolwire-client package), so this editor and every coding agent of the
// folder share one process. Other extensions get a client for their folder
// from the exported API:
//
//   const api = vscode.extensions.getExtension("toolwire.toolwire")!.exports as ToolwireApi;
//   const client = await api.getClient(folder);
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as vscode from "vscode";
import { MethodNotFoundError, ToolwireClient, ToolwireError, type BudgetApplyResult } from "toolwire-client";

/** What `extensions.getExtension("toolwire.toolwire").exports` is. */
export interface ToolwireApi {
  readonly apiVersion: 1;
  /** The client of the folder (default: the first folder), started on first use. */
  getClient(folder?: vscode.WorkspaceFolder | vscode.Uri): Promise<ToolwireClient>;
}

interface Violation {
  index: number;
  kind: string;
  ids: string[];
  providerError: string;
}

const OUTPUT_SCHEME = "toolwire-output";
const PREVIEW_SCHEME = "toolwire-preview";

class Extension implements ToolwireApi {
  readonly apiVersion = 1 as const;
  private readonly clients = new Map<string, Promise<ToolwireClient>>();
  private readonly tails = new Map<string, () => void>();
  private readonly output = vscode.window.createOutputChannel("toolwire");
  private readonly status = vscode.window.createStatusBarItem("toolwire.status", vscode.StatusBarAlignment.Left, 10);
  private readonly diagnostics = vscode.languages.createDiagnosticCollection("toolwire");
  private readonly previews = new Map<string, string>();
  private savedChars = 0;
  private persistedThisSession = 0;

  constructor(private readonly context: vscode.ExtensionContext) {
    this.status.name = "toolwire";
    this.status.command = "toolwire.showSessions";
    this.status.text = "$(sync~spin) toolwire";
    this.status.show();
    context.subscriptions.push(this.output, this.status, this.diagnostics);
  }

  log(line: string): void {
    this.output.appendLine(`[${new Date().toISOString()}] ${line}`);
  }

  private folderOf(target?: vscode.WorkspaceFolder | vscode.Uri): vscode.WorkspaceFolder {
    const folders = vscode.workspace.workspaceFolders ?? [];
    if (target instanceof vscode.Uri) {
      const folder = vscode.workspace.getWorkspaceFolder(target);
      if (folder) return folder;
    } else if (target) {
      return target;
    }
    const first = folders[0];
    if (!first) throw new Error("toolwire: open a folder first (toolwire serves one workspace folder)");
    return first;
  }

  getClient(target?: vscode.WorkspaceFolder | vscode.Uri): Promise<ToolwireClient> {
    const folder = this.folderOf(target);
    const key = folder.uri.toString();
    let client = this.clients.get(key);
    if (!client) {
      client = this.start(folder);
      this.clients.set(key, client);
      client.catch(() => this.clients.delete(key));
    }
    return client;
  }

  private async start(folder: vscode.WorkspaceFolder): Promise<ToolwireClient> {
    const settings = vscode.workspace.getConfiguration("toolwire", folder.uri);
    const binary = settings.get<string>("binaryPath") ?? "";
    const level = settings.get<string>("logLevel") ?? "info";
    const idle = settings.get<number | null>("idleTimeout");
    const env = { ...process.env, RUST_LOG: process.env.RUST_LOG ?? `toolwire=${level}` };
    this.log(`starting toolwire for ${folder.uri.fsPath}`);
    try {
      const client = await ToolwireClient.start({
        root: folder.uri.fsPath,
        binary: binary || undefined,
        binarySettingName: "setting toolwire.binaryPath",
        shared: settings.get<boolean>("shared") ?? true,
        ...(typeof idle === "number" ? { idleTimeout: idle } : {}),
        config: settings.get<object>("config") ?? {},
        clientInfo: { name: "vscode-toolwire", version: String(this.context.extension.packageJSON.version) },
        env,
        onLog: (text) => this.output.append(text),
      });
      const info = client.initializeResult;
      this.log(
        `connected: ${info.serverInfo.name} ${info.serverInfo.version ?? ""}, protocol ${info.capabilities.experimental.toolwire.protocolVersion}, ` +
          `methods ${client.serverMethods.join(", ")}`,
      );
      client.onDidComplete((method, _params, result) => {
        if (method === "budget/apply") this.count(result as BudgetApplyResult);
      });
      if (client.daemonLog) this.tail(folder, client.daemonLog);
      void client.exited.then((code) => {
        this.log(`toolwire for ${folder.uri.fsPath} exited (${code})`);
        this.clients.delete(folder.uri.toString());
      });
      void this.refreshStatus();
      return client;
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      this.log(message);
      this.status.text = "$(error) toolwire";
      this.status.tooltip = message;
      void vscode.window.showErrorMessage(message, "Open settings").then((choice) => {
        if (choice) void vscode.commands.executeCommand("workbench.action.openSettings", "toolwire.binaryPath");
      });
      throw err;
    }
  }

  /** Copy the daemon's log file into the output channel as it grows. */
  private tail(folder: vscode.WorkspaceFolder, file: string): void {
    const key = folder.uri.toString();
    this.tails.get(key)?.();
    this.output.appendLine(`--- daemon log ${file} ---`);
    let offset = 0;
    const read = () => {
      try {
        const size = fs.statSync(file).size;
        if (size < offset) offset = 0; // a new daemon started the file afresh
        if (size === offset) return;
        const fd = fs.openSync(file, "r");
        try {
          const buffer = Buffer.alloc(size - offset);
          fs.readSync(fd, buffer, 0, buffer.length, offset);
          offset = size;
          this.output.append(buffer.toString("utf8"));
        } finally {
          fs.closeSync(fd);
        }
      } catch {
        // Not there (yet, or any more): nothing to show.
      }
    };
    read();
    const timer = setInterval(read, 500);
    this.tails.set(key, () => clearInterval(timer));
  }

  private count(result: BudgetApplyResult): void {
    const replacementOf = new Map(result.records.map((r) => [r.toolUseId, r.replacement.length]));
    for (const p of result.persisted) {
      const replacement = replacementOf.get(p.toolUseId);
      if (p.reused || replacement === undefined) continue;
      this.persistedThisSession += 1;
      this.savedChars += Math.max(0, p.originalChars - replacement);
    }
    void this.refreshStatus();
  }

  dataDir(folder: vscode.WorkspaceFolder): string {
    const config = vscode.workspace.getConfiguration("toolwire", folder.uri).get<{ dataDir?: string }>("config") ?? {};
    const dir = config.dataDir ?? ".toolwire";
    return path.resolve(folder.uri.fsPath, dir);
  }

  /** Every saved output on disk, over all folders. */
  savedOutputs(): { folder: vscode.WorkspaceFolder; sessionId: string; name: string; file: string; size: number }[] {
    const out = [];
    for (const folder of vscode.workspace.workspaceFolders ?? []) {
      const sessions = path.join(this.dataDir(folder), "sessions");
      for (const sessionId of safeReaddir(sessions)) {
        const dir = path.join(sessions, sessionId, "tool-results");
        for (const entry of safeReaddir(dir)) {
          if (entry.startsWith(".")) continue; // temporary files
          const file = path.join(dir, entry);
          const stat = safeStat(file);
          if (stat?.isFile()) out.push({ folder, sessionId, name: entry.replace(/\.(txt|json)$/, ""), file, size: stat.size });
        }
      }
    }
    return out;
  }

  async refreshStatus(): Promise<void> {
    const total = this.savedOutputs().length;
    this.status.text = `$(archive) toolwire: ${total} saved · ${formatChars(this.savedChars)} chars saved`;
    this.status.tooltip =
      `toolwire: ${total} persisted tool outputs in this workspace; ` +
      `${this.persistedThisSession} persisted through this window this session, saving ${this.savedChars} chars. Click: sessions.`;
  }

  // -- commands ------------------------------------------------------------

  private async pickTranscript(arg: unknown): Promise<vscode.Uri | undefined> {
    if (arg instanceof vscode.Uri) return arg;
    const active = vscode.window.activeTextEditor?.document.uri;
    if (active?.scheme === "file" && active.fsPath.endsWith(".jsonl")) return active;
    // In a diff (the repair preview, or any diff of a transcript) the
    // focused side may be a preview document: the transcript is its file.
    if (active?.scheme === PREVIEW_SCHEME) return vscode.Uri.file(active.path);
    const tab = vscode.window.tabGroups.activeTabGroup.activeTab?.input;
    if (tab instanceof vscode.TabInputTextDiff) {
      for (const side of [tab.original, tab.modified]) {
        if (side.scheme === "file" && side.fsPath.endsWith(".jsonl")) return side;
        if (side.scheme === PREVIEW_SCHEME) return vscode.Uri.file(side.path);
      }
    }
    const picked = await vscode.window.showOpenDialog({
      canSelectMany: false,
      filters: { Transcripts: ["jsonl"] },
      openLabel: "Select transcript",
      ...(vscode.workspace.workspaceFolders?.[0] ? { defaultUri: vscode.workspace.workspaceFolders[0].uri } : {}),
    });
    return picked?.[0];
  }

  async check(arg?: unknown): Promise<{ ok: boolean; violations: Violation[] } | undefined> {
    const uri = await this.pickTranscript(arg);
    if (!uri) return undefined;
    const client = await this.getClient(uri);
    let result: { ok: boolean; violations: Violation[] };
    try {
      result = (await client.requestAny("transcript/check", { path: uri.fsPath })) as typeof result;
    } catch (err) {
      const message =
        err instanceof MethodNotFoundError
          ? `This toolwire (${client.initializeResult.serverInfo.version}) does not know transcript/check: update toolwire.`
          : describe(err);
      this.log(`check ${uri.fsPath}: ${message}`);
      void vscode.window.showErrorMessage(`toolwire: ${message}`);
      return undefined;
    }
    const lines = messageLines(uri.fsPath);
    this.diagnostics.set(
      uri,
      result.violations.map((v) => {
        const line = lines[v.index] ?? 0;
        const d = new vscode.Diagnostic(
          new vscode.Range(line, 0, line, 1000),
          `${v.kind} (${v.ids.join(", ")}): ${v.providerError}`,
          vscode.DiagnosticSeverity.Error,
        );
        d.source = "toolwire";
        return d;
      }),
    );
    const name = path.basename(uri.fsPath);
    this.log(`check ${uri.fsPath}: ${result.ok ? "ok" : `${result.violations.length} fault(s)`}`);
    if (result.ok) void vscode.window.showInformationMessage(`toolwire: ${name}: the provider would accept it.`);
    else void vscode.window.showWarningMessage(`toolwire: ${name}: ${result.violations.length} pairing fault(s), see Problems.`);
    return result;
  }

  /** Close every diff tab showing the preview `previewUri`. */
  private async closePreview(previewUri: vscode.Uri): Promise<void> {
    const shown = previewUri.toString();
    const tabs = vscode.window.tabGroups.all
      .flatMap((group) => group.tabs)
      .filter((tab) => tab.input instanceof vscode.TabInputTextDiff && tab.input.modified.toString() === shown);
    if (tabs.length > 0) await vscode.window.tabGroups.close(tabs);
  }

  async repair(arg?: unknown): Promise<boolean> {
    const uri = await this.pickTranscript(arg);
    if (!uri) return false;
    const client = await this.getClient(uri);
    const name = path.basename(uri.fsPath);
    // Repair a copy first: its result is the preview, the original untouched.
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "toolwire-vscode-"));
    let preview: string;
    let summary: string;
    let changed: boolean;
    try {
      const copy = path.join(dir, name);
      fs.copyFileSync(uri.fsPath, copy);
      const r = await client.transcriptRepair({ path: copy });
      changed = fs.existsSync(`${copy}.bak`);
      preview = fs.readFileSync(copy, "utf8");
      summary = `drops ${r.droppedToolUses.length} call(s), ${r.droppedToolResults.length} result(s) and ${r.tornLines} torn line(s), keeps ${r.kept} line(s)`;
    } catch (err) {
      void vscode.window.showErrorMessage(`toolwire: repair preview of ${name} failed: ${describe(err)}`);
      return false;
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    if (!changed) {
      void vscode.window.showInformationMessage(`toolwire: ${name} is valid: nothing to repair.`);
      return false;
    }
    const previewUri = vscode.Uri.from({ scheme: PREVIEW_SCHEME, path: uri.path, query: String(Date.now()) });
    this.previews.set(previewUri.toString(), preview);
    await vscode.commands.executeCommand("vscode.diff", uri, previewUri, `${name} ↔ repaired (preview)`);
    const choice = await vscode.window.showWarningMessage(
      `Repair ${name}? The repair ${summary}. The original is kept as ${name}.bak.`,
      { modal: true },
      "Repair",
    );
    // The preview is over either way: its diff tab closes and the
    // transcript is the active editor again, so that running the command
    // again repairs it (the diff's preview side is no file to pick).
    await this.closePreview(previewUri);
    this.previews.delete(previewUri.toString());
    await vscode.window.showTextDocument(uri, { preview: false });
    if (choice !== "Repair") {
      this.log(`repair ${uri.fsPath}: cancelled`);
      return false;
    }
    try {
      const r = await client.transcriptRepair({ path: uri.fsPath });
      this.log(`repair ${uri.fsPath}: dropped calls ${JSON.stringify(r.droppedToolUses)}, results ${JSON.stringify(r.droppedToolResults)}`);
      void vscode.window.showInformationMessage(`toolwire: repaired ${name} (original kept as ${name}.bak).`);
      return true;
    } catch (err) {
      void vscode.window.showErrorMessage(`toolwire: repair of ${name} failed: ${describe(err)}`);
      return false;
    }
  }

  async openSavedOutput(arg?: { sessionId: string; toolUseId: string; folder?: vscode.Uri }): Promise<void> {
    let target = arg;
    if (!target) {
      // On a preview line naming the saved file?
      const editor = vscode.window.activeTextEditor;
      const line = editor?.document.lineAt(editor.selection.active.line).text ?? "";
      const m = /\/sessions\/([A-Za-z0-9._-]+)\/tool-results\/([A-Za-z0-9_-]+)\.(?:txt|json)/.exec(line);
      if (m?.[1] && m[2]) target = { sessionId: m[1], toolUseId: m[2], ...(editor ? { folder: editor.document.uri } : {}) };
    }
    if (!target) {
      const items = this.savedOutputs().map((o) => ({
        label: o.name,
        description: o.sessionId,
        detail: `${formatChars(o.size)} bytes · ${o.file}`,
        output: o,
      }));
      if (items.length === 0) {
        void vscode.window.showInformationMessage("toolwire: no saved outputs in this workspace yet.");
        return;
      }
      const picked = await vscode.window.showQuickPick(items, { placeHolder: "Saved tool output to open", matchOnDescription: true });
      if (!picked) return;
      if (picked.output.name.startsWith("h.")) {
        // A hashed name: the id is not recoverable from it; open the file.
        await vscode.window.showTextDocument(vscode.Uri.file(picked.output.file), { preview: false });
        return;
      }
      target = { sessionId: picked.output.sessionId, toolUseId: picked.output.name, folder: picked.output.folder.uri };
    }
    const folder = this.folderOf(target.folder);
    const uri = vscode.Uri.from({
      scheme: OUTPUT_SCHEME,
      path: `/${target.sessionId}/${target.toolUseId}`,
      query: folder.uri.toString(),
    });
    const doc = await vscode.workspace.openTextDocument(uri);
    await vscode.window.showTextDocument(doc, { preview: false });
  }

  /** The text of `toolwire-output:/<session>/<toolUseId>?<folder>`, through artifact/read. */
  async readOutput(uri: vscode.Uri): Promise<string> {
    const [, sessionId, toolUseId] = uri.path.split("/");
    if (!sessionId || !toolUseId) return "";
    const client = await this.getClient(vscode.Uri.parse(uri.query));
    const r = await client.artifactRead({ sessionId, toolUseId, limit: 1_000_000 });
    return r.truncated ? `${r.text}\n[toolwire: lines ${r.startLine + 1}-${r.endLine} of ${r.totalLines} shown]\n` : r.text;
  }

  async showSessions(): Promise<void> {
    const items: (vscode.QuickPickItem & { file: string; folder: vscode.WorkspaceFolder; sessionId: string })[] = [];
    for (const folder of vscode.workspace.workspaceFolders ?? []) {
      const sessions = path.join(this.dataDir(folder), "sessions");
      for (const entry of safeReaddir(sessions)) {
        if (!entry.endsWith(".jsonl")) continue;
        const file = path.join(sessions, entry);
        const stat = safeStat(file);
        if (!stat) continue;
        const sessionId = entry.slice(0, -".jsonl".length);
        const outputs = safeReaddir(path.join(sessions, sessionId, "tool-results")).filter((n) => !n.startsWith(".")).length;
        items.push({
          label: sessionId,
          description: `${outputs} saved output(s) · ${formatChars(stat.size)} bytes · ${stat.mtime.toLocaleString()}`,
          detail: folder.name,
          file,
          folder,
          sessionId,
        });
      }
    }
    if (items.length === 0) {
      void vscode.window.showInformationMessage("toolwire: no sessions in this workspace yet.");
      return;
    }
    const picked = await vscode.window.showQuickPick(items, { placeHolder: "toolwire sessions: pick one to open its transcript" });
    if (!picked) return;
    const client = await this.getClient(picked.folder);
    const state = await client.stateGet({ sessionId: picked.sessionId });
    this.log(
      `session ${picked.sessionId}: ${state.seenIds.length} decided, ${Object.keys(state.replacements).length} replaced, pending [${state.pending.join(", ")}]`,
    );
    await vscode.window.showTextDocument(vscode.Uri.file(picked.file), { preview: false });
  }

  register(): void {
    const c = this.context.subscriptions;
    c.push(
      vscode.commands.registerCommand("toolwire.checkTranscript", (uri?: unknown) => this.check(uri)),
      vscode.commands.registerCommand("toolwire.repairTranscript", (uri?: unknown) => this.repair(uri)),
      vscode.commands.registerCommand("toolwire.openSavedOutput", (arg?: { sessionId: string; toolUseId: string }) =>
        this.openSavedOutput(arg),
      ),
      vscode.commands.registerCommand("toolwire.showSessions", () => this.showSessions()),
      vscode.commands.registerCommand("toolwire.showLog", () => this.output.show(true)),
      vscode.workspace.registerTextDocumentContentProvider(OUTPUT_SCHEME, {
        provideTextDocumentContent: (uri) => this.readOutput(uri),
      }),
      vscode.workspace.registerTextDocumentContentProvider(PREVIEW_SCHEME, {
        provideTextDocumentContent: (uri) => this.previews.get(uri.toString()) ?? "",
      }),
      vscode.workspace.onDidChangeWorkspaceFolders((e) => {
        for (const folder of e.removed) void this.stop(folder.uri.toString());
        for (const folder of e.added) void this.getClient(folder).catch(() => undefined);
      }),
      vscode.workspace.onDidChangeConfiguration(async (e) => {
        if (!e.affectsConfiguration("toolwire")) return;
        this.log("settings changed: restarting");
        for (const key of [...this.clients.keys()]) await this.stop(key);
        for (const folder of vscode.workspace.workspaceFolders ?? []) void this.getClient(folder).catch(() => undefined);
      }),
    );
    const watcher = vscode.workspace.createFileSystemWatcher("**/sessions/*/tool-results/*");
    watcher.onDidCreate(() => void this.refreshStatus());
    watcher.onDidDelete(() => void this.refreshStatus());
    c.push(watcher);
  }

  async stop(key: string): Promise<void> {
    const client = this.clients.get(key);
    this.clients.delete(key);
    this.tails.get(key)?.();
    this.tails.delete(key);
    if (client) await client.then((c) => c.close()).catch(() => undefined);
  }

  async dispose(): Promise<void> {
    await Promise.all([...this.clients.keys()].map((key) => this.stop(key)));
  }
}

function safeReaddir(dir: string): string[] {
  try {
    return fs.readdirSync(dir);
  } catch {
    return [];
  }
}

function safeStat(file: string): fs.Stats | undefined {
  try {
    return fs.lstatSync(file);
  } catch {
    return undefined;
  }
}

/** The 0-based line of each message of a transcript: violations count messages only. */
function messageLines(file: string): number[] {
  const lines: number[] = [];
  let text = "";
  try {
    text = fs.readFileSync(file, "utf8");
  } catch {
    return lines;
  }
  text.split("\n").forEach((line, i) => {
    try {
      const v = JSON.parse(line) as { type?: string; role?: string };
      if (v.type === "message" || (v.type === undefined && v.role !== undefined)) lines.push(i);
    } catch {
      // a torn line is not a message
    }
  });
  return lines;
}

function formatChars(n: number): string {
  if (n < 1000) return String(n);
  if (n < 1_000_000) return `${(n / 1000).toFixed(1)}K`;
  return `${(n / 1_000_000).toFixed(1)}M`;
}

function describe(err: unknown): string {
  if (err instanceof ToolwireError) return `${err.message}${err.data?.path ? ` (${err.data.path})` : ""}`;
  return err instanceof Error ? err.message : String(err);
}

let extension: Extension | undefined;

export function activate(context: vscode.ExtensionContext): ToolwireApi {
  extension = new Extension(context);
  extension.register();
  // One shared daemon per workspace folder, from the start.
  for (const folder of vscode.workspace.workspaceFolders ?? []) void extension.getClient(folder).catch(() => undefined);
  if (!vscode.workspace.workspaceFolders?.length) extension.log("no workspace folder: nothing to serve");
  void extension.refreshStatus();
  const api = extension;
  return { apiVersion: 1, getClient: (folder) => api.getClient(folder) };
}

export async function deactivate(): Promise<void> {
  await extension?.dispose();
}
