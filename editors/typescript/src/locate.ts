// Find the toolwire binary: an explicit setting first, then the
// TOOLWIRE_BIN environment variable, then PATH. When none works the error
// names every place it looked, so the user knows what to set.
import { accessSync, constants, statSync } from "node:fs";
import { delimiter, isAbsolute, join, resolve } from "node:path";

export class ToolwireNotFoundError extends Error {
  /** Each place looked at, with what was wrong there. */
  readonly searched: readonly string[];

  constructor(searched: string[]) {
    super(
      `toolwire binary not found; looked at:\n${searched.map((s) => `  - ${s}`).join("\n")}\n` +
        "Install toolwire (cargo install --path . in its repository) or set the binary path.",
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
  const dirs = (env.PATH ?? "").split(delimiter).filter((d) => d !== "" && isAbsolute(d));
  for (const dir of dirs) {
    const path = join(dir, "toolwire");
    if (executable(path) === undefined) return path;
  }
  searched.push(`PATH: no executable 'toolwire' in ${dirs.length > 0 ? dirs.join(delimiter) : "(empty)"}`);
  throw new ToolwireNotFoundError(searched);
}
