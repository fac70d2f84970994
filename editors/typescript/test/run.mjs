// The package as a user gets it: `npm pack`, install the tarball into a
// scratch project, compile a strict TypeScript consumer against its types
// (ESM, module nodenext), require it from CommonJS, and drive the real
// toolwire binary with it.
//
//   node test/run.mjs /path/to/toolwire
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync, copyFileSync, chmodSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const pkg = join(here, "..");
const binary = process.argv[2];
if (!binary) {
  console.error("usage: node test/run.mjs TOOLWIRE_BINARY");
  process.exit(2);
}
const npm = process.platform === "win32" ? "npm.cmd" : "npm";
const run = (cmd, args, opts = {}) => execFileSync(cmd, args, { stdio: ["ignore", "pipe", "inherit"], encoding: "utf8", ...opts });

const scratch = mkdtempSync(join(tmpdir(), "toolwire-ts-"));
try {
  const packed = JSON.parse(run(npm, ["pack", "--json", "--pack-destination", scratch], { cwd: pkg }))[0];
  const files = packed.files.map((f) => f.path);
  for (const want of ["dist/index.js", "dist/index.mjs", "dist/index.d.ts", "dist/protocol.d.ts", "README.md"]) {
    if (!files.includes(want)) throw new Error(`the tarball lacks ${want}: ${files.join(", ")}`);
  }
  const app = join(scratch, "app");
  mkdirSync(app);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "scratch", private: true, type: "module" }));
  run(npm, ["install", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error", join(scratch, packed.filename)], { cwd: app });
  copyFileSync(join(here, "consumer.mts"), join(app, "consumer.mts"));
  writeFileSync(
    join(app, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        target: "ES2022",
        module: "nodenext",
        moduleResolution: "nodenext",
        strict: true,
        noEmitOnError: true,
        types: ["node"],
        typeRoots: [join(pkg, "node_modules/@types")],
        skipLibCheck: false,
      },
      files: ["consumer.mts"],
    }),
  );
  run(process.execPath, [join(pkg, "node_modules/typescript/bin/tsc"), "-p", "."], { cwd: app, stdio: "inherit" });
  // CommonJS users get the same classes.
  run(process.execPath, ["-e", "const t = require('toolwire-client'); if (typeof t.ToolwireClient.start !== 'function' || !(new t.CancelledError('m', -32800, 'x', undefined) instanceof t.ToolwireError)) process.exit(1)"], { cwd: app });

  // The reproduction, from CommonJS: a binary that fails at start
  // is one rejection, and the process exits 0 (it used to die of EPIPE).
  writeFileSync(join(app, "dying"), "#!/bin/sh\necho 'no store' >&2\nexit 3\n", { mode: 0o755 });
  const said = run(process.execPath, ["-e", 'require("toolwire-client").ToolwireClient.start({root:process.cwd(),binary:"./dying"}).catch(e=>console.log(e.message))'], { cwd: app });
  const want = `toolwire: ${join(app, "dying")} exited (status 3) before initializing:\nno store\n`;
  if (said !== want) throw new Error(`a dying binary: ${JSON.stringify(said)}, want ${JSON.stringify(want)}`);

  // The shared daemon's socket directory, private to this run.
  const runtime = join(scratch, "run");
  mkdirSync(runtime);
  chmodSync(runtime, 0o700);
  const empty = join(scratch, "empty-path");
  mkdirSync(empty);
  run(process.execPath, ["consumer.mjs", binary, empty], {
    cwd: app,
    stdio: "inherit",
    env: { ...process.env, XDG_RUNTIME_DIR: runtime, TOOLWIRE_BIN: "" },
  });
  // The daemons end once idle (the consumer asked for a 1 s timeout): wait
  // for their sockets to go so that no process outlives the test.
  const dir = join(runtime, "toolwire");
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    let left;
    try {
      left = readdirSync(dir).filter((n) => n.endsWith(".sock"));
    } catch {
      left = [];
    }
    if (left.length === 0) break;
    execFileSync("sleep", ["0.1"]);
  }
  console.log("typescript package test passed");
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
