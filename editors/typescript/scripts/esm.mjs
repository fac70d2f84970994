// Write dist/index.mjs, the ESM entry point: it re-exports the CommonJS
// build by name, so `import` and `require` users share one module instance
// (no dual-package hazard: one ToolwireError class, one instanceof).
import { writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const dist = join(dirname(fileURLToPath(import.meta.url)), "../dist");
const names = Object.keys(createRequire(import.meta.url)(join(dist, "index.js"))).filter((n) => n !== "default");
const text = `// ESM entry point of toolwire-client: the CommonJS build, re-exported by name.
import cjs from "./index.js";
export const { ${names.join(", ")} } = cjs;
export default cjs;
`;
writeFileSync(join(dist, "index.mjs"), text);
writeFileSync(join(dist, "index.d.mts"), 'export * from "./index.js";\n');
