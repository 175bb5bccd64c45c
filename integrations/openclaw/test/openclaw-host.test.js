// The plugin in a real OpenClaw (the openclaw devDependency, 2026.9.6): `plugins install --link`
// into a throwaway home, then `plugins inspect loopguard --runtime --json` lists its hooks.
//
// The linked directory holds what an npm install of this package holds (src, manifests and the
// runtime dependencies, copied): linking this checkout itself would put the host's own
// node_modules/openclaw, with its bundled plugins, inside the plugin's root, which OpenClaw
// refuses as conflicting package ownership; symlinked dependencies it refuses as escaping.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const OPENCLAW = join(ROOT, "node_modules", "openclaw", "openclaw.mjs"); // run by this node (>= 24)
const home = mkdtempSync(join(tmpdir(), "loopguard-openclaw-"));
after(() => rmSync(home, { recursive: true, force: true }));

function runtimeDependencies(names, seen = new Set()) {
  for (const name of names) {
    const dir = join(ROOT, "node_modules", name);
    if (seen.has(name) || !existsSync(dir)) continue; // an optional dependency may be absent
    seen.add(name);
    const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
    runtimeDependencies(Object.keys({ ...pkg.dependencies, ...pkg.optionalDependencies }), seen);
  }
  return seen;
}

function stagePackage() {
  const dir = join(home, "loopguard-plugin");
  for (const entry of ["package.json", "openclaw.plugin.json", "src"]) cpSync(join(ROOT, entry), join(dir, entry), { recursive: true });
  const own = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"));
  for (const name of runtimeDependencies(Object.keys(own.dependencies))) {
    cpSync(join(ROOT, "node_modules", name), join(dir, "node_modules", name), { recursive: true });
  }
  return dir;
}

const env = { ...process.env, HOME: home, OPENCLAW_HOME: home, OPENCLAW_STATE_DIR: join(home, "state"), NO_COLOR: "1" };
const openclaw = (...args) => promisify(execFile)(process.execPath, [OPENCLAW, ...args], { env, timeout: 180_000, maxBuffer: 64 << 20 });
const inspect = async () => JSON.parse((await openclaw("plugins", "inspect", "loopguard", "--runtime", "--json")).stdout);

test("OpenClaw installs the plugin with --link and registers its hooks", async () => {
  const dir = stagePackage();
  const installed = await openclaw("plugins", "install", "--link", dir, "--force", "--accept-capabilities");
  assert.match(installed.stdout + installed.stderr, /Linked plugin path/);

  const first = await inspect();
  assert.equal(first.plugin.status, "loaded");
  assert.equal(first.plugin.id, "loopguard");
  assert.equal(first.plugin.configSchema, true);
  // agent_end is a conversation hook: OpenClaw keeps it until the operator grants access.
  assert.deepEqual(first.typedHooks.map((h) => h.name), ["after_compaction", "after_tool_call", "before_tool_call", "gateway_stop", "session_end"]);
  assert.match(first.diagnostics.map((d) => d.message).join("\n"), /"agent_end" blocked .*allowConversationAccess=true/);

  await openclaw("config", "set", "plugins.entries.loopguard.hooks.allowConversationAccess", "true");
  const granted = await inspect();
  assert.deepEqual(granted.typedHooks.map((h) => h.name), ["after_compaction", "after_tool_call", "agent_end", "before_tool_call", "gateway_stop", "session_end"]);
  assert.deepEqual(granted.diagnostics, []);
});
