// Drive a real toolwire binary through budget/apply, state/fork and
// pair/append with the typed client. Exits non-zero on any mismatch.
//
//   node out/smoke.js /path/to/toolwire
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { ResponseError } from "vscode-jsonrpc/node";
import { ToolwireClient } from "./client";
import type { ErrorData, Message } from "./protocol";

function check(cond: boolean, what: string): void {
  if (!cond) {
    throw new Error(`smoke check failed: ${what}`);
  }
}

async function main(): Promise<void> {
  const binary = process.argv[2];
  check(typeof binary === "string", "usage: smoke.js TOOLWIRE_BINARY");
  const root = mkdtempSync(join(tmpdir(), "toolwire-node-"));
  const client = await ToolwireClient.start(binary, pathToFileURL(root).href, { durability: "none" });
  check(client.initializeResult.capabilities.experimental.toolwire.methods.includes("budget/apply"), "capabilities");

  const call: Message = { role: "assistant", content: [{ type: "tool_use", id: "toolu_n1", name: "Bash", input: {} }] };
  const result: Message = {
    role: "user",
    content: [{ type: "tool_result", tool_use_id: "toolu_n1", content: "n".repeat(60_000) }],
  };
  const applied = await client.budgetApply({ sessionId: "node", messages: [call, result] });
  check(applied.persisted.length === 1 && applied.persisted[0].toolUseId === "toolu_n1", "one result persisted");
  check(applied.records.length === 1 && applied.records[0].kind === "tool-result", "one record");
  const sent = applied.messages[1];
  check(Array.isArray(sent.content), "content kept as blocks");

  const appended = await client.pairAppend({ sessionId: "node", message: call });
  check(appended.status === "buffered" && appended.pending[0] === "toolu_n1", "call buffered");
  const committed = await client.pairAppend({ sessionId: "node", message: sent });
  check(committed.status === "committed" && committed.written === 2, "pair committed");

  const fork = await client.stateFork({ sessionId: "node", newSessionId: "node-fork" });
  check(fork.seenCount === 1 && fork.replacementCount === 1, "fork counts");
  const forked = await client.stateGet({ sessionId: "node-fork" });
  check(forked.replacements["toolu_n1"] === applied.records[0].replacement, "fork has the replacement");

  try {
    await client.pairAppend({ sessionId: "node", message: result });
    check(false, "a late result must be refused");
  } catch (err) {
    check(err instanceof ResponseError && err.code === -32010, "unknownToolResult code");
    const data = (err as ResponseError<ErrorData>).data;
    check(data?.kind === "unknownToolResult", "unknownToolResult kind");
  }
  const code = await client.close();
  check(code === 0, `exit code ${code}`);
  console.log("node client smoke test passed");
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
