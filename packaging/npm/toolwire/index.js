// Where the toolwire binary for this machine is: inside the platform
// package that npm installed next to this one (an optional dependency
// chosen by os, cpu and libc, as biome and esbuild ship theirs).
"use strict";

const { existsSync } = require("node:fs");
const { dirname, join } = require("node:path");

/** The platform packages published with this version, by `platform-arch`. */
const PLATFORMS = {
  "linux-x64": "toolwire-linux-x64",
};

function isMusl() {
  // Node's report names the glibc it runs on; musl has none to name.
  const header = process.report?.getReport?.().header;
  return header !== undefined && header.glibcVersionRuntime === undefined;
}

/** The name of the platform package for this machine, or undefined. */
function platformPackage() {
  const key = `${process.platform}-${process.arch}`;
  if (process.platform === "linux" && isMusl()) return PLATFORMS[`${key}-musl`];
  return PLATFORMS[key];
}

/** The absolute path of the toolwire binary; throws saying what is missing. */
function binaryPath() {
  const name = platformPackage();
  if (name === undefined) {
    const libc = process.platform === "linux" && isMusl() ? " (musl)" : "";
    throw new Error(
      `toolwire has no npm package for ${process.platform} ${process.arch}${libc} yet; ` +
        "build it from source with `cargo install toolwire`",
    );
  }
  let dir;
  try {
    dir = dirname(require.resolve(`${name}/package.json`));
  } catch {
    throw new Error(
      `toolwire: the package ${name}, which carries the binary for this machine, is not installed; ` +
        "reinstall without --no-optional / --omit=optional (npm install toolwire)",
    );
  }
  const path = join(dir, "bin", "toolwire");
  if (!existsSync(path)) throw new Error(`toolwire: ${name} is installed but has no ${path}`);
  return path;
}

module.exports = { binaryPath, platformPackage };
