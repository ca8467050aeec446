// Renders a chat template with @huggingface/jinja (a JavaScript implementation
// written for chat templates), once per vars file:
// node render_ref.mjs MODULE_DIR TEMPLATE VARS.json... prints a JSON list of
// {"text": ...} or {"error": ...}.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [moduleDir, templatePath, ...varsPaths] = process.argv.slice(2);
const { Template } = await import(pathToFileURL(join(moduleDir, "node_modules/@huggingface/jinja/dist/index.js")).href);
const template = new Template(readFileSync(templatePath, "utf8"));
const out = varsPaths.map((p) => {
  try {
    return { text: template.render(JSON.parse(readFileSync(p, "utf8"))) };
  } catch (e) {
    return { error: String(e.message ?? e) };
  }
});
console.log(JSON.stringify(out));
