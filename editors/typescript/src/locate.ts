// Find the toolwire binary: an explicit setting first, then the
// TOOLWIRE_BIN environment variable, then the binary of the `toolwire` npm
// package, then PATH. When none works the error names every place it
// looked, so the user knows what to set.
import { accessSync, constants, statSync } from "node:fs";
import { delimiter, dirname, isAbsolute, join, resolve } from "node:path";

export class ToolwireNotFoundError extends Error {
  /** Each place looked at, with what was wrong there. */
  readonly searched: readonly string[];

  constructor(searched: string[]) {
    super(
      `toolwire binary not found; looked at:\n${searched.map((s) => `  - ${s}`).join("\n")}\n` +
        "Install toolwire (npm install toolwire, pip install toolwire or cargo install toolwire) or set the binary path.",
    );
    this.name = "ToolwireNotFoundError";
    this.searched = searched;
  }
}

export interface LocateOptions {
  /** An explicit path from a setting (for example VS Code's `toolwire.binaryPath`). */
  binary?: string | undefined;
  /** Where the setting came from, for the error message (default "setting"). */
  settingName?: string;
  /** The environment to read TOOLWIRE_BIN and PATH from (default process.env). */
  env?: NodeJS.ProcessEnv;
}

function executable(path: string): string | undefined {
  try {
    if (!statSync(path).isFile()) return "not a file";
    accessSync(path, constants.X_OK);
    return undefined;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "ENOENT" ? "does not exist" : "not executable";
  }
}

/**
 * The binary that `npm install toolwire` put next to this package: npm
 * installs it as the platform package (`toolwire-linux-x64`, ...) that
 * matches the machine, resolved from here as Node resolves any dependency.
 * It comes before PATH so that the toolwire a project pins in its
 * package.json is the one its client runs, not an older one on PATH.
 */
function npmPackaged(searched: string[]): string | undefined {
  // A musl build is a package of its own; Node's report names the glibc
  // it runs on, and names none on musl.
  const report = process.platform === "linux" ? (process.report?.getReport() as { header?: { glibcVersionRuntime?: string } }) : {};
  const musl = process.platform === "linux" && report.header?.glibcVersionRuntime === undefined ? "-musl" : "";
  const name = `toolwire-${process.platform}-${process.arch}${musl}`;
  let dir: string;
  try {
    dir = dirname(require.resolve(`${name}/package.json`));
  } catch {
    searched.push(`npm package ${name}: not installed`);
    return undefined;
  }
  const path = join(dir, "bin", "toolwire");
  const problem = executable(path);
  if (problem === undefined) return path;
  searched.push(`npm package ${name}: ${path} (${problem})`);
  return undefined;
}

/** The absolute path of the toolwire binary, or a ToolwireNotFoundError. */
export function locateToolwire(options: LocateOptions = {}): string {
  const env = options.env ?? process.env;
  const searched: string[] = [];
  const setting = options.binary?.trim();
  const settingName = options.settingName ?? "setting";
  if (setting) {
    const path = resolve(setting);
    const problem = executable(path);
    if (problem === undefined) return path;
    // An explicit setting that does not work is an error, not a reason to
    // silently run some other toolwire from PATH.
    throw new ToolwireNotFoundError([`${settingName}: ${path} (${problem})`]);
  }
  searched.push(`${settingName}: not set`);
  const fromEnv = env.TOOLWIRE_BIN?.trim();
  if (fromEnv) {
    const path = resolve(fromEnv);
    const problem = executable(path);
    if (problem === undefined) return path;
    throw new ToolwireNotFoundError([...searched, `TOOLWIRE_BIN: ${path} (${problem})`]);
  }
  searched.push("TOOLWIRE_BIN: not set");
  const packaged = npmPackaged(searched);
  if (packaged !== undefined) return packaged;
  const dirs = (env.PATH ?? "").split(delimiter).filter((d) => d !== "" && isAbsolute(d));
  for (const dir of dirs) {
    const path = join(dir, "toolwire");
    if (executable(path) === undefined) return path;
  }
  searched.push(`PATH: no executable 'toolwire' in ${dirs.length > 0 ? dirs.join(delimiter) : "(empty)"}`);
  throw new ToolwireNotFoundError(searched);
}
