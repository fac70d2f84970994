// Generate src/protocol.ts from toolwire's bundled JSON Schema.
//
//   npm run gen          rewrite src/protocol.ts
//   npm run gen:check    exit 1 when src/protocol.ts is stale
//
// The schema is ../../schema/toolwire.schema.json, itself generated from the
// Rust types by `toolwire schema --out schema`.
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { compile } from "json-schema-to-typescript";

const here = dirname(fileURLToPath(import.meta.url));
const schemaPath = join(here, "../../../schema/toolwire.schema.json");
const outPath = join(here, "../src/protocol.ts");

const schema = JSON.parse(readFileSync(schemaPath, "utf8"));
// The bundle is a set of named definitions with no root type of its own.
const root = { ...schema, title: "ToolwireSchemaBundle", type: "object", properties: {}, additionalProperties: false };

const banner = `/* Generated from schema/toolwire.schema.json by editors/vscode/scripts/gen-protocol.mjs.
 * Do not edit: run \`npm run gen\` in editors/vscode after \`toolwire schema --out schema\`. */`;
const ts = await compile(root, "ToolwireSchemaBundle", {
  bannerComment: banner,
  unreachableDefinitions: true,
  additionalProperties: false,
  strictIndexSignatures: true,
  format: false,
  cwd: dirname(schemaPath),
});

if (process.argv.includes("--check")) {
  const current = existsSync(outPath) ? readFileSync(outPath, "utf8") : "";
  if (current !== ts) {
    console.error(`${outPath} is stale: run \`npm run gen\` in editors/vscode`);
    process.exit(1);
  }
  console.log("src/protocol.ts is up to date");
} else {
  writeFileSync(outPath, ts);
  console.log(`wrote ${outPath}`);
}
