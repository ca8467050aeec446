// Renders a chat template with @huggingface/jinja (a JavaScript implementation
// written for chat templates), once per vars file:
// node render_ref.mjs MODULE_DIR TEMPLATE VARS.json... prints a JSON list of
// {"text": ...} or {"error": ...}. Its strftime_now reads the clock through
// Date; the clock is pinned to the time transformers_env.py pins it to.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const NOW_MS = 1700000000 * 1000;
globalThis.Date = class extends Date {
  constructor(...args) {
    super(...(args.length ? args : [NOW_MS]));
  }
  static now() {
    return NOW_MS;
  }
};

const [moduleDir, templatePath, ...varsPaths] = process.argv.slice(2);
const { Template } = await import(pathToFileURL(join(moduleDir, "node_modules/@huggingface/jinja/dist/index.js")).href);
let template, compileError;
try {
  template = new Template(readFileSync(templatePath, "utf8"));
} catch (e) {
  compileError = String(e.message ?? e);
}
const out = varsPaths.map((p) => {
  if (compileError) return { error: compileError };
  try {
    return { text: template.render(JSON.parse(readFileSync(p, "utf8"))) };
  } catch (e) {
    return { error: String(e.message ?? e) };
  }
});
console.log(JSON.stringify(out));
