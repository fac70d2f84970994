// Generate the TypeScript sources that mirror toolwire's published schemas:
//   src/protocol.ts   every type, from schema/toolwire.schema.json
//   src/methods.ts    the method table, from schema/openrpc.json
//
//   npm run gen          rewrite both
//   npm run gen:check    exit 1 when either is stale
//
// Both schemas are generated from the Rust types by
// `toolwire schema --out schema`; editors/regenerate.sh runs everything.
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { compile } from "json-schema-to-typescript";

const here = dirname(fileURLToPath(import.meta.url));
const schemaDir = join(here, "../../../schema");
const src = join(here, "../src");
const note = "Do not edit: run editors/regenerate.sh (or `npm run gen` in editors/typescript).";

async function protocol() {
  const schema = JSON.parse(readFileSync(join(schemaDir, "toolwire.schema.json"), "utf8"));
  // The bundle is a set of named definitions with no root type of its own.
  const root = { ...schema, title: "ToolwireSchemaBundle", type: "object", properties: {}, additionalProperties: false };
  return compile(root, "ToolwireSchemaBundle", {
    bannerComment: `/* Generated from schema/toolwire.schema.json by editors/typescript/scripts/gen.mjs.\n * ${note} */`,
    unreachableDefinitions: true,
    additionalProperties: false,
    strictIndexSignatures: true,
    format: false,
    cwd: schemaDir,
  });
}

const pascal = (method) =>
  method
    .split(/[/_.-]/)
    .map((part) => part.charAt(0).toUpperCase() + part.slice(1))
    .join("");
const camel = (method) => {
  const p = pascal(method);
  return p.charAt(0).toLowerCase() + p.slice(1);
};

function methods() {
  const rpc = JSON.parse(readFileSync(join(schemaDir, "openrpc.json"), "utf8"));
  const bundle = JSON.parse(readFileSync(join(schemaDir, "toolwire.schema.json"), "utf8"));
  const defs = bundle.$defs ?? bundle.definitions ?? {};
  const typeOf = (schema, fallback) => {
    const ref = schema && typeof schema === "object" && schema.$ref;
    if (ref) return `P.${ref.split("/").pop()}`;
    if (defs[fallback]) return `P.${fallback}`;
    return "unknown";
  };
  // Lifecycle methods (initialize, shutdown) belong to the client itself.
  const table = rpc.methods.filter((m) => m["x-execution"] !== "lifecycle");
  const rows = table.map((m) => {
    const params = defs[`${pascal(m.name)}Params`] ? `P.${pascal(m.name)}Params` : "Record<string, never>";
    const result = typeOf(m.result.schema, `${pascal(m.name)}Result`);
    const progress = m.params.some((p) => p.name === "workDoneToken");
    return { name: m.name, camel: camel(m.name), params, result, progress, summary: m.summary ?? "" };
  });
  const lines = [
    `/* Generated from schema/openrpc.json by editors/typescript/scripts/gen.mjs.`,
    ` * ${note} */`,
    `import type * as P from "./protocol";`,
    ``,
    `/** Every toolwire method a client calls (lifecycle aside): its params and result. */`,
    `export interface MethodTable {`,
    ...rows.map((r) => `  ${JSON.stringify(r.name)}: { params: ${r.params}; result: ${r.result} };`),
    `}`,
    ``,
    `export type MethodName = keyof MethodTable;`,
    ``,
    `/** The method names, in the order of the server's method table. */`,
    `export const METHOD_NAMES: readonly MethodName[] = [${rows.map((r) => JSON.stringify(r.name)).join(", ")}];`,
    ``,
    `/** Methods that report \`$/progress\` when their params carry a \`workDoneToken\`. */`,
    `export const PROGRESS_METHODS: ReadonlySet<MethodName> = new Set<MethodName>([${rows
      .filter((r) => r.progress)
      .map((r) => JSON.stringify(r.name))
      .join(", ")}]);`,
    ``,
    `/** Per-call options: cancellation and progress. */`,
    `export interface CallOptions {`,
    `  /** Aborting sends \`$/cancelRequest\`; the call then rejects with \`CancelledError\` unless it had already completed. */`,
    `  signal?: AbortSignal;`,
    `  /** Receives the \`value\` of each \`$/progress\` notification, for the methods that report progress. */`,
    `  onProgress?: (value: unknown) => void;`,
    `}`,
    ``,
    `/** One typed method per entry of the method table, over \`request\`. */`,
    `export abstract class ToolwireMethods {`,
    `  abstract request<M extends MethodName>(method: M, params: MethodTable[M]["params"], options?: CallOptions): Promise<MethodTable[M]["result"]>;`,
    ...rows.flatMap((r) => [
      ``,
      `  /** \`${r.name}\`: ${r.summary.replace(/\*\//g, "* /")} */`,
      `  ${r.camel}(params: MethodTable[${JSON.stringify(r.name)}]["params"], options?: CallOptions): Promise<MethodTable[${JSON.stringify(r.name)}]["result"]> {`,
      `    return this.request(${JSON.stringify(r.name)}, params, options);`,
      `  }`,
    ]),
    `}`,
    ``,
  ];
  return lines.join("\n");
}

const outputs = [
  [join(src, "protocol.ts"), await protocol()],
  [join(src, "methods.ts"), methods()],
];
if (process.argv.includes("--check")) {
  const stale = outputs.filter(([path, text]) => !existsSync(path) || readFileSync(path, "utf8") !== text);
  if (stale.length > 0) {
    for (const [path] of stale) console.error(`${path} is stale: run editors/regenerate.sh`);
    process.exit(1);
  }
  console.log("src/protocol.ts and src/methods.ts are up to date");
} else {
  for (const [path, text] of outputs) {
    writeFileSync(path, text);
    console.log(`wrote ${path}`);
  }
}
