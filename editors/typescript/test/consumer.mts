// A strict TypeScript consumer of the installed toolwire-client tarball,
// run against the real binary: every method of the table, both ways of
// finding the binary, the shared daemon, progress, cancellation and typed
// errors.
//
//   node consumer.mjs TOOLWIRE_BINARY EMPTY_DIR
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  ArtifactNotFoundError,
  CancelledError,
  InvalidParamsError,
  MethodNotFoundError,
  METHOD_NAMES,
  SessionExistsError,
  ToolwireClient,
  ToolwireError,
  ToolwireNotFoundError,
  UnknownToolResultError,
  type Message,
  type MethodName,
} from "toolwire-client";

const [binary, emptyDir] = process.argv.slice(2) as [string, string];
const root = mkdtempSync(join(tmpdir(), "toolwire-ts-root-"));

const call = (id: string): Message => ({ role: "assistant", content: [{ type: "tool_use", id, name: "Bash", input: {} }] });
const result = (id: string, text: string): Message => ({
  role: "user",
  content: [{ type: "tool_result", tool_use_id: id, content: text }],
});

async function notFound(): Promise<void> {
  // A setting that points nowhere is an error naming the setting.
  await assert.rejects(
    ToolwireClient.start({ root, binary: "/nonexistent/toolwire", binarySettingName: "toolwire.binaryPath" }),
    (err: unknown) => err instanceof ToolwireNotFoundError && /toolwire\.binaryPath: \/nonexistent\/toolwire \(does not exist\)/.test(err.message),
  );
  // Nothing set and nothing on PATH: every place is named.
  await assert.rejects(ToolwireClient.start({ root, env: { PATH: emptyDir } }), (err: unknown) => {
    assert.ok(err instanceof ToolwireNotFoundError);
    assert.deepEqual(err.searched, [
      "setting: not set",
      "TOOLWIRE_BIN: not set",
      `npm package toolwire-${process.platform}-${process.arch}: not installed`,
      `PATH: no executable 'toolwire' in ${emptyDir}`,
    ]);
    return true;
  });
}

async function dyingBinary(): Promise<void> {
  // A binary that fails at start: one error naming it, its exit status and
  // its stderr's first lines, the same every time (it used to depend on
  // whether the write of `initialize` or the exit came first), and the
  // caller's process lives on (it used to die of an unhandled EPIPE).
  const dying = join(root, "dying");
  writeFileSync(dying, "#!/bin/sh\necho 'cannot open the store: permission denied' >&2\necho 'second line' >&2\nexit 3\n", { mode: 0o755 });
  for (let i = 0; i < 10; i++) {
    await assert.rejects(ToolwireClient.start({ root, binary: dying }), (err: unknown) => {
      assert.ok(err instanceof Error);
      assert.equal(err.message, `toolwire: ${dying} exited (status 3) before initializing:\ncannot open the store: permission denied\nsecond line`);
      return true;
    });
  }
}

async function endedChild(): Promise<void> {
  // Calls after the child has ended fail with its exit status (they used
  // to wait forever once writes to a dead child were dropped).
  const c = await ToolwireClient.start({ root, command: [binary, "serve"], config: { durability: "none" } });
  c.dispose();
  assert.equal(await c.exited, 1); // an input that ended without `shutdown` (LSP)
  await assert.rejects(c.stateGet({ sessionId: "gone" }), (err: unknown) => {
    assert.ok(err instanceof Error);
    assert.equal(err.message, `toolwire: ${binary} exited (status 1)`);
    return true;
  });
}

async function main(): Promise<void> {
  await notFound();
  await dyingBinary();
  await endedChild();
  // Found through TOOLWIRE_BIN, shared (the default): two clients, one daemon.
  // RUST_LOG reaches the daemon its first client starts.
  const env = { ...process.env, TOOLWIRE_BIN: binary, PATH: emptyDir, RUST_LOG: "toolwire=info" };
  const logs: string[] = [];
  const a = await ToolwireClient.start({ root, env, idleTimeout: 1, config: { durability: "none" }, onLog: (t) => logs.push(t) });
  const b = await ToolwireClient.start({ root, binary, idleTimeout: 1 });
  try {
    assert.equal(a.initializeResult.serverInfo.name, "toolwire");
    for (const m of METHOD_NAMES) assert.ok(a.serverMethods.includes(m), `server lacks ${m}`);
    // The client covers what the server lists (a newer server may list more).
    const client = a as unknown as Record<string, unknown>;
    for (const m of METHOD_NAMES) {
      const camel = m.replace(/[/_.-](.)/g, (_: string, c: string) => c.toUpperCase());
      assert.equal(typeof client[camel], "function", `no method ${camel}`);
    }

    const completed: string[] = [];
    a.onDidComplete((method) => completed.push(method));
    // budget/apply on one client is seen by the other: one daemon.
    const applied = await a.budgetApply({ sessionId: "ts", messages: [call("t1"), result("t1", "x".repeat(60_000))] });
    assert.deepEqual(applied.persisted.map((p) => p.toolUseId), ["t1"]);
    assert.equal(readFileSync(applied.persisted[0]!.path, "utf8"), "x".repeat(60_000));
    assert.deepEqual((await b.stateGet({ sessionId: "ts" })).seenIds, ["t1"]);
    assert.deepEqual(completed, ["budget/apply"]);
    await assert.rejects(a.requestAny("no/such", {}), MethodNotFoundError);
    // The daemon's log names what it persisted.
    assert.ok(a.daemonLog && b.daemonLog === a.daemonLog, "one daemon log");
    assert.ok(readFileSync(a.daemonLog, "utf8").includes(applied.persisted[0]!.path), "the daemon log names the artifact");
    const page = await b.artifactRead({ sessionId: "ts", toolUseId: "t1", limit: 1 });
    assert.equal(page.text, "x".repeat(60_000));
    await assert.rejects(b.artifactRead({ sessionId: "ts", toolUseId: "nope" }), (err: unknown) => err instanceof ArtifactNotFoundError && err.code === -32015);

    // pair/append, pair/flush, typed errors.
    assert.equal((await a.pairAppend({ sessionId: "ts", message: call("t2") })).status, "buffered");
    assert.equal((await b.pairAppend({ sessionId: "ts", message: result("t2", "ok") })).status, "committed");
    await assert.rejects(a.pairAppend({ sessionId: "ts", message: result("t2", "late") }), (err: unknown) => {
      assert.ok(err instanceof UnknownToolResultError && err instanceof ToolwireError);
      assert.equal(err.code, -32010);
      assert.equal(err.kind, "unknownToolResult");
      return true;
    });
    await a.pairAppend({ sessionId: "ts", message: call("t3") });
    const flushed = await a.pairFlush({ sessionId: "ts", mode: "synthetic", reason: "test" });
    assert.deepEqual(flushed.synthesized, ["t3"]);
    await assert.rejects(
      a.request("state/get", { sessionId: "../bad" } as never),
      (err: unknown) => err instanceof InvalidParamsError && err.data?.path === "sessionId",
    );

    // state/fork.
    const fork = await a.stateFork({ sessionId: "ts", newSessionId: "ts-fork" });
    assert.equal(fork.replacementCount, 1);
    await assert.rejects(a.stateFork({ sessionId: "ts", newSessionId: "ts-fork" }), SessionExistsError);

    // state/reconstruct of a large transcript, with progress; a budget/apply
    // queued behind it on the same session is cancelled before it runs.
    const transcript = join(root, "big.jsonl");
    const line = (m: Message) => JSON.stringify({ type: "message", message: m }) + "\n";
    const chunk = line(call("r")) + line(result("r", "y".repeat(100_000)));
    writeFileSync(transcript, Array.from({ length: 300 }, (_, i) => chunk.replaceAll('"r"', `"r${i}"`)).join(""));
    const progress: unknown[] = [];
    const rebuilt = a.stateReconstruct({ sessionId: "big", transcript }, { onProgress: (v) => progress.push(v) });
    const abort = new AbortController();
    const cancelled = a.budgetApply({ sessionId: "big", messages: [result("c1", "z".repeat(60_000))] }, { signal: abort.signal });
    abort.abort();
    await assert.rejects(cancelled, (err: unknown) => err instanceof CancelledError && err.code === -32800);
    const counts = await rebuilt;
    assert.equal(counts.seenCount, 300);
    const kinds = progress.map((v) => (v as { kind?: string }).kind);
    assert.equal(kinds[0], "begin");
    assert.equal(kinds[kinds.length - 1], "end");
    assert.ok(!(await a.stateGet({ sessionId: "big" })).seenIds.includes("c1"), "a cancelled apply decides nothing");

    // transcript/repair, with progress.
    const broken = join(root, "broken.jsonl");
    writeFileSync(broken, line(call("o1")) + line({ role: "user", content: "hi" }));
    const repairProgress: unknown[] = [];
    const repaired = await b.transcriptRepair({ path: broken }, { onProgress: (v) => repairProgress.push(v) });
    assert.deepEqual(repaired.droppedToolUses, ["o1"]);
    assert.ok(repairProgress.length >= 2, "repair reports progress");

    // An AbortSignal aborted before the call: rejected at once, nothing sent.
    await assert.rejects(
      a.budgetApply({ sessionId: "pre", messages: [call("p1"), result("p1", "z".repeat(60_000))] }, { signal: AbortSignal.abort() }),
      (err: unknown) => err instanceof CancelledError && err.code === -32800 && err.kind === "cancelled",
    );
    assert.deepEqual((await a.stateGet({ sessionId: "pre" })).seenIds, [], "an apply aborted before the call decides nothing");

    // Messages pass through byte for byte: nulls, key order, unknown fields
    // (the transcript keeps what the server received).
    const exact = { role: "user", z: 1.5, content: [{ type: "text", text: "hi", cache_control: null }], metadata: null } as unknown as Message;
    await a.pairAppend({ sessionId: "bytes", message: exact });
    const kept = readFileSync(join(root, ".toolwire/sessions/bytes.jsonl"), "utf8");
    assert.equal(kept, JSON.stringify({ type: "message", message: exact }) + "\n");

    // The generic entry point takes any method name of the table.
    const name: MethodName = "state/get";
    assert.deepEqual((await b.request(name, { sessionId: "nobody" })).seenIds, []);
  } finally {
    assert.equal(await a.close(), 0);
    assert.equal(await b.close(), 0);
    rmSync(root, { recursive: true, force: true });
  }
  console.log(`toolwire-client drove ${METHOD_NAMES.length} methods`);
}

await main();
