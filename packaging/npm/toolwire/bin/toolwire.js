#!/usr/bin/env node
// The `toolwire` command of the npm package: runs the native binary from the
// platform package with the same arguments and stdio. Node cannot exec(),
// so it waits for the binary, passes on the signals it gets (a harness
// stopping `npx toolwire mcp` signals this process, not the binary) and
// exits the way the binary did.
"use strict";

const { spawn } = require("node:child_process");
const { constants } = require("node:os");
const { binaryPath } = require("../index.js");

let binary;
try {
  binary = binaryPath();
} catch (err) {
  process.stderr.write(`${err.message}\n`);
  process.exit(1);
}

const child = spawn(binary, process.argv.slice(2), { stdio: "inherit" });
const forwarded = ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"];
for (const signal of forwarded) {
  process.on(signal, () => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
  });
}
child.on("error", (err) => {
  process.stderr.write(`toolwire: could not run ${binary}: ${err.message}\n`);
  process.exit(1);
});
child.on("exit", (code, signal) => {
  if (signal !== null) {
    // Die of the same signal, so the caller sees what the binary saw.
    for (const s of forwarded) process.removeAllListeners(s);
    process.kill(process.pid, signal);
    // A signal Node ignores (SIGPIPE) does not end it: exit as a shell would say.
    setTimeout(() => process.exit(128 + (constants.signals[signal] ?? 0)), 100);
    return;
  }
  process.exit(code ?? 1);
});
