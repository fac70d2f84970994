// The extension in a real VS Code: code-server 4.100.3 (VS Code 1.100.3)
// with the packaged toolwire.vsix and a stand-in agent extension installed
// from their .vsix files, a workspace opened in headless Debian Chromium
// driven by Playwright, every command run through the Command Palette, the
// status bar and the output channel read back from the page.
//
//   node test/e2e.mjs TOOLWIRE_BINARY SCREENSHOT.png
//
// Needs: scripts/install-code-server.sh (prints code-server's directory)
// and Debian's chromium (.ci/apt/editors.txt). Everything runs in a
// temporary directory, loopback only, and is removed at the end.
import { execFileSync, spawn } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";

const here = dirname(fileURLToPath(import.meta.url));
const ext = join(here, "..");
const require = createRequire(import.meta.url);
const { chromium } = require("playwright-core");
const [binary, screenshot] = process.argv.slice(2);
if (!binary || !screenshot) {
  console.error("usage: node test/e2e.mjs TOOLWIRE_BINARY SCREENSHOT.png");
  process.exit(2);
}
const CHROMIUM = "/usr/bin/chromium";
if (!existsSync(CHROMIUM)) {
  console.error("chromium is missing: apt-get install chromium (listed in .ci/apt/editors.txt)");
  process.exit(1);
}
const step = (what) => console.error(`[vscode e2e] ${what}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, pred, ms = 60_000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(200);
  }
}
function assert(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}
const line = (message) => JSON.stringify({ type: "message", message });
// Monaco renders spaces as no-break spaces.
const text = async (locator) => (await locator.innerText().catch(() => "")).replace(/\u00a0/g, " ");

const csDir = execFileSync("bash", [join(ext, "scripts/install-code-server.sh")], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] }).trim();
const entry = join(csDir, "node_modules/code-server/out/node/entry.js");

const tmp = mkdtempSync(join(tmpdir(), "toolwire-vscode-"));
const ws = join(tmp, "ws");
const ud = join(tmp, "user-data");
const extDir = join(tmp, "extensions");
const run = join(tmp, "run");
for (const d of [ws, join(ud, "User"), extDir, run, join(tmp, "xdg"), join(tmp, "tmp")]) mkdirSync(d, { recursive: true });
chmodSync(run, 0o700);
const env = {
  ...process.env,
  XDG_RUNTIME_DIR: run,
  XDG_CONFIG_HOME: join(tmp, "xdg"),
  XDG_DATA_HOME: join(tmp, "xdg"),
  XDG_CACHE_HOME: join(tmp, "xdg"),
  // What code-server and its extensions leave in the temporary directory
  // (the TypeScript server's vscode-typescript<uid> folder, which it does
  // not always remove as it ends) goes with the rest of this run's folder.
  TMPDIR: join(tmp, "tmp"),
  TOOLWIRE_BIN: "",
  TOOLWIRE_E2E_BINARY: binary,
};
delete env.RUST_LOG;
// A binary that fails at start: the window opens with it, then the setting
// is pointed at the real one (test/agent's "Fix the binary setting").
const dying = join(tmp, "dying-toolwire");
writeFileSync(dying, "#!/bin/sh\necho 'cannot open the store: permission denied' >&2\nexit 3\n", { mode: 0o755 });
const settings = (toolwire) =>
  writeFileSync(
    join(ud, "User/settings.json"),
    JSON.stringify({
      "security.workspace.trust.enabled": false,
      "workbench.startupEditor": "none",
      "workbench.tips.enabled": false,
      "telemetry.telemetryLevel": "off",
      "extensions.autoCheckUpdates": false,
      "extensions.autoUpdate": false,
      "toolwire.binaryPath": toolwire,
      "toolwire.idleTimeout": 1,
      "toolwire.config": { durability: "none" },
    }),
  );
settings(dying);
// A transcript whose agent died between a call and its result.
const call = (id) => ({ role: "assistant", content: [{ type: "tool_use", id, name: "Bash", input: {} }] });
writeFileSync(
  join(ws, "broken.jsonl"),
  [
    line({ role: "user", content: "build it" }),
    line(call("toolu_lost")),
    line({ role: "user", content: "where is my result?" }),
    line(call("toolu_ok")),
    line({ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_ok", content: "fine" }] }),
  ].join("\n") + "\n",
);

let server;
let browser;
let failed = false;
try {
  step("packaging toolwire.vsix and the test agent");
  const vsce = join(ext, "node_modules/@vscode/vsce/vsce");
  execFileSync("npm", ["run", "-s", "build"], { cwd: ext, stdio: ["ignore", "ignore", "inherit"] });
  execFileSync(process.execPath, [vsce, "package", "--no-dependencies", "--skip-license", "--allow-missing-repository", "-o", join(tmp, "toolwire.vsix")], { cwd: ext, stdio: "ignore" });
  execFileSync(process.execPath, [vsce, "package", "--no-dependencies", "--skip-license", "--allow-missing-repository", "-o", join(tmp, "agent.vsix")], { cwd: join(here, "agent"), stdio: "ignore" });
  const cs = ["--user-data-dir", ud, "--extensions-dir", extDir, "--disable-telemetry", "--disable-update-check"];
  step("installing the .vsix files into code-server");
  execFileSync(process.execPath, [entry, ...cs, "--install-extension", join(tmp, "toolwire.vsix"), "--install-extension", join(tmp, "agent.vsix")], { env, stdio: ["ignore", "ignore", "inherit"] });
  const installed = readdirSync(extDir);
  assert(installed.some((n) => n.startsWith("toolwire.toolwire-0.2.0")), `toolwire installed: ${installed}`);

  step("starting code-server");
  server = spawn(process.execPath, [entry, ...cs, "--auth", "none", "--bind-addr", "127.0.0.1:0", "--config", join(tmp, "config.yaml"), ws], {
    env,
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  let serverLog = "";
  server.stdout.on("data", (d) => (serverLog += d));
  server.stderr.on("data", (d) => (serverLog += d));
  const url = await until("code-server's address", () => /HTTP server listening on (http:\/\/127\.0\.0\.1:\d+)\//.exec(serverLog)?.[1], 60_000);

  step(`opening ${url} in headless chromium`);
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  await page.goto(`${url}/?folder=${encodeURIComponent(ws)}`);
  await page.waitForSelector(".monaco-workbench", { timeout: 120_000 });

  step("a binary that fails at start: one error naming it, its exit status and its stderr");
  const startError = page.locator(".notifications-toasts .notification-list-item", { hasText: "before initializing" });
  await startError.first().waitFor({ timeout: 120_000 });
  const told = await startError.first().innerText();
  assert(told.includes(`${dying} exited (status 3) before initializing`) && told.includes("cannot open the store: permission denied"), `the start error: ${told}`);
  const toasts = await page.locator(".notifications-toasts .notification-list-item").allInnerTexts();
  assert(toasts.filter((t) => t.includes("toolwire")).length === 1 && !toasts.some((t) => /EPIPE|-32099|DESTROYED/.test(t)), `one error: ${JSON.stringify(toasts)}`);
  await command("toolwire test agent: Fix the binary setting");

  const statusItem = page.locator(".statusbar-item", { hasText: "toolwire:" });
  step("the setting fixed, the extension starts toolwire: status bar item");
  await statusItem.first().waitFor({ timeout: 120_000 });
  assert((await statusItem.first().innerText()).includes("0 saved"), "status starts at 0 saved");

  async function command(title) {
    await page.keyboard.press("F1");
    const input = page.locator(".quick-input-widget input");
    await input.waitFor();
    await input.fill(`>${title}`);
    await page.locator(".quick-input-list .monaco-list-row", { hasText: title }).first().waitFor();
    await page.keyboard.press("Enter");
  }
  async function notification(text) {
    await page.locator(".notifications-toasts .notification-list-item", { hasText: text }).first().waitFor({ timeout: 60_000 });
  }

  step("an agent extension uses the exported API");
  await command("toolwire test agent: Run");
  const resultFile = join(ws, "agent-result.json");
  const agent = JSON.parse(await until("agent-result.json", () => existsSync(resultFile) && readFileSync(resultFile, "utf8")));
  assert(!agent.error, `agent: ${agent.error}`);
  assert(agent.apiVersion === 1 && agent.sameClient, "one client per folder from the API");
  assert(agent.persisted.length === 1 && agent.persisted[0].toolUseId === "toolu_agent1", "the agent's result was persisted");
  assert(agent.committed === "committed", "the agent's pair was committed");
  await until("the status bar to count it", async () => /1 saved · \d+(\.\d)?K chars saved/.test(await statusItem.first().innerText()));

  step("the output channel shows the daemon's log");
  await command("toolwire: Show daemon log");
  const panel = page.locator(".part.panel .view-lines");
  await until("the daemon log in the output channel", async () => (await text(panel.first())).includes("persisted tool result"));
  const outputText = await text(panel.first());
  assert(outputText.includes("connected: toolwire"), "the extension's own log is there too");

  step("open the broken transcript");
  await page.keyboard.press("F1");
  await page.locator(".quick-input-widget input").fill("broken.jsonl");
  await page.locator(".quick-input-list .monaco-list-row", { hasText: "broken.jsonl" }).first().waitFor();
  await page.keyboard.press("Enter");
  await page.locator(".tab", { hasText: "broken.jsonl" }).first().waitFor();

  step("Check transcript");
  await command("toolwire: Check transcript");
  if (agent.serverMethods.includes("transcript/check")) {
    await notification("pairing fault");
    // The fault is a diagnostic of the file: the Problems count shows it.
    await until("the fault in Problems", async () => /^\D*1\D/.test(await text(page.locator('[id="status.problems"]').first())));
  } else {
    // A server without transcript/check (issue 8 not landed yet) is named.
    await notification("does not know transcript/check");
  }

  step("Repair transcript: diff preview, Cancel closes it and changes nothing");
  await command("toolwire: Repair transcript");
  const dialog = page.locator(".monaco-dialog-box", { hasText: "Repair broken.jsonl?" });
  await dialog.waitFor({ timeout: 60_000 });
  const previewTab = page.locator(".tab", { hasText: "repaired (preview)" });
  await previewTab.first().waitFor();
  await page.locator(".monaco-diff-editor").first().waitFor();
  await dialog.locator(".monaco-button", { hasText: "Cancel" }).first().click();
  await until("the preview's diff tab to close", async () => (await previewTab.count()) === 0);
  // Logged once the transcript is the active editor again (a palette
  // opened before that would be closed by the focus moving).
  await until("the cancel in the log", async () => (await text(panel.first())).includes("broken.jsonl: cancelled"));
  assert(!existsSync(join(ws, "broken.jsonl.bak")), "nothing written after Cancel");

  step("Repair transcript again: the same file (no file picker), confirmed");
  await command("toolwire: Repair transcript");
  await dialog.waitFor({ timeout: 60_000 });
  await page.locator(".monaco-diff-editor").first().waitFor();
  assert(!existsSync(join(ws, "broken.jsonl.bak")), "nothing written before confirming");
  mkdirSync(dirname(screenshot), { recursive: true });
  await page.screenshot({ path: screenshot });
  await dialog.locator(".monaco-button", { hasText: "Repair" }).first().click();
  await until("the preview's diff tab to close after Repair", async () => (await previewTab.count()) === 0);
  await until("broken.jsonl.bak", () => existsSync(join(ws, "broken.jsonl.bak")));
  const repaired = readFileSync(join(ws, "broken.jsonl"), "utf8").trim().split("\n");
  assert(repaired.length === 4 && !repaired.some((l) => l.includes("toolu_lost")), "the lost call was dropped");
  await notification("repaired broken.jsonl");

  step("Open saved output");
  await command("toolwire: Open saved output");
  await page.locator(".quick-input-list .monaco-list-row", { hasText: "toolu_agent1" }).first().waitFor();
  await page.keyboard.press("Enter");
  await page.locator(".tab", { hasText: "toolu_agent1" }).first().waitFor();
  await until("the saved output's text", async () =>
    (await text(page.locator(".editor-instance .view-lines").first())).includes("agent output line 1"),
  );

  step("Show sessions");
  await command("toolwire: Show sessions");
  await page.locator(".quick-input-list .monaco-list-row", { hasText: "agent" }).first().waitFor();
  await page.keyboard.press("Enter");
  await page.locator(".tab", { hasText: "agent.jsonl" }).first().waitFor();
  console.error("[vscode e2e] passed");
} catch (err) {
  failed = true;
  console.error(err);
  if (browser) {
    const pages = browser.contexts().flatMap((c) => c.pages());
    if (pages[0]) await pages[0].screenshot({ path: screenshot.replace(/\.png$/, "-failure.png") }).catch(() => undefined);
  }
} finally {
  await browser?.close().catch(() => undefined);
  if (server?.pid) {
    try {
      process.kill(-server.pid, "SIGTERM");
    } catch {
      // already gone
    }
    await until("code-server to exit", () => server.exitCode !== null || server.signalCode !== null, 30_000).catch(() => {
      process.kill(-server.pid, "SIGKILL");
    });
  }
  // The daemon leaves once idle (toolwire.idleTimeout = 1).
  await until("the daemon to leave", () => !existsSync(join(run, "toolwire")) || !readdirSync(join(run, "toolwire")).some((n) => n.endsWith(".sock")), 30_000).catch(() => {
    failed = true;
    console.error("the toolwire daemon did not leave");
  });
  rmSync(tmp, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
