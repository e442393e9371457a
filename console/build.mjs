// Builds the web console into src/palyra/console/assets/ (committed, shipped in the
// Python package). `node console/build.mjs --check` rebuilds in memory and fails
// when the committed files differ or the script exceeds its size budget.

import { build } from "esbuild";
import { readFileSync } from "node:fs";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "src", "palyra", "console", "assets");
const BUDGET_GZIP = 150 * 1024;
const check = process.argv.includes("--check");

const result = await build({
  entryPoints: [join(here, "src", "main.tsx")],
  bundle: true,
  minify: true,
  format: "esm",
  target: "es2022",
  jsx: "automatic",
  jsxImportSource: "preact",
  write: false,
  outfile: join(out, "console.js"),
  logLevel: "warning",
  absWorkingDir: join(here, ".."),
});

const files = new Map([
  ["console.js", Buffer.from(result.outputFiles[0].contents)],
  ["console.css", readFileSync(join(here, "style.css"))],
  ["index.html", readFileSync(join(here, "index.html"))],
]);

const gz = gzipSync(files.get("console.js"), { level: 9 }).length;
console.log(`console.js: ${files.get("console.js").length} bytes, ${gz} gzipped (budget ${BUDGET_GZIP})`);
let failed = gz > BUDGET_GZIP;
if (failed) console.error(`console.js is over its budget of ${BUDGET_GZIP} gzipped bytes`);

if (check) {
  for (const [name, bytes] of files) {
    let committed = null;
    try { committed = await readFile(join(out, name)); } catch { /* missing */ }
    if (!committed || !committed.equals(bytes)) {
      console.error(`src/palyra/console/assets/${name} is stale: run \`node console/build.mjs\` (npm run build:console)`);
      failed = true;
    }
  }
} else {
  await mkdir(out, { recursive: true });
  for (const [name, bytes] of files) await writeFile(join(out, name), bytes);
}
process.exit(failed ? 1 : 0);
