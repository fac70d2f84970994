// A coding agent as another extension would be one: it gets the toolwire
// client of its folder from toolwire's exported API, budgets a turn with a
// large tool result and commits the pair, then writes what it saw to
// agent-result.json in the folder for the test to read.
const vscode = require("vscode");
const fs = require("node:fs");
const path = require("node:path");

function activate(context) {
  context.subscriptions.push(
    // The user fixing toolwire.binaryPath (as the Settings editor does):
    // the test's binary, from code-server's environment.
    vscode.commands.registerCommand("toolwireTestAgent.fixBinary", () =>
      vscode.workspace.getConfiguration("toolwire").update("binaryPath", process.env.TOOLWIRE_E2E_BINARY, vscode.ConfigurationTarget.Global),
    ),
    vscode.commands.registerCommand("toolwireTestAgent.run", async () => {
      const folder = vscode.workspace.workspaceFolders[0];
      const out = path.join(folder.uri.fsPath, "agent-result.json");
      try {
        const api = await vscode.extensions.getExtension("toolwire.toolwire").activate();
        const client = await api.getClient(folder);
        const again = await api.getClient(folder.uri);
        const lines = Array.from({ length: 4000 }, (_, i) => `agent output line ${i + 1}`).join("\n");
        const call = { role: "assistant", content: [{ type: "tool_use", id: "toolu_agent1", name: "Bash", input: { command: "make" } }] };
        const result = { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_agent1", content: lines }] };
        const applied = await client.budgetApply({ sessionId: "agent", messages: [call, result] });
        await client.pairAppend({ sessionId: "agent", message: call });
        const committed = await client.pairAppend({ sessionId: "agent", message: applied.messages[1] });
        fs.writeFileSync(
          out,
          JSON.stringify({
            apiVersion: api.apiVersion,
            sameClient: client === again,
            serverMethods: client.serverMethods,
            daemonLog: client.daemonLog,
            persisted: applied.persisted,
            preview: applied.messages[1].content[0].content,
            committed: committed.status,
          }),
        );
      } catch (err) {
        fs.writeFileSync(out, JSON.stringify({ error: String(err && err.stack ? err.stack : err) }));
      }
    }),
  );
}

module.exports = { activate, deactivate() {} };
