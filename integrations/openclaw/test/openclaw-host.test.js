// The plugin in a real OpenClaw (the openclaw devDependency, 2026.9.6), installed as an operator
// installs a release: `npm pack` of this package, then `plugins install npm-pack:<tarball>` into
// a throwaway home (OpenClaw installs the runtime dependencies from the npm registry into its own
// managed project), then `plugins inspect loopguard --runtime --json` lists its hooks.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const OPENCLAW = join(ROOT, "node_modules", "openclaw", "openclaw.mjs"); // run by this node (>= 24)
const home = mkdtempSync(join(tmpdir(), "loopguard-openclaw-"));
after(() => rmSync(home, { recursive: true, force: true }));

// What OpenClaw's installer needs: the manifest, package.json (its `openclaw.extensions` entry and
// dependencies), the code, and the README an operator reads. Nothing else: no tests, no lockfile.
const SHIPPED = ["README.md", "openclaw.plugin.json", "package.json", ...readdirSync(join(ROOT, "src")).map((f) => `src/${f}`)].sort();

async function packTarball() {
  const out = mkdtempSync(join(home, "pack-"));
  const { stdout } = await promisify(execFile)("npm", ["pack", "--json", "--pack-destination", out], { cwd: ROOT, timeout: 120_000 });
  const [pack] = JSON.parse(stdout);
  return { tarball: join(out, pack.filename), files: pack.files.map((f) => f.path).sort() };
}

const env = { ...process.env, HOME: home, OPENCLAW_HOME: home, OPENCLAW_STATE_DIR: join(home, "state"), NO_COLOR: "1" };
const openclaw = (...args) => promisify(execFile)(process.execPath, [OPENCLAW, ...args], { env, timeout: 180_000, maxBuffer: 64 << 20 });
const inspect = async () => JSON.parse((await openclaw("plugins", "inspect", "loopguard", "--runtime", "--json")).stdout);

test("npm pack holds exactly what OpenClaw's installer needs", async () => {
  const { files } = await packTarball();
  assert.deepEqual(files, SHIPPED);
});

test("OpenClaw installs the packed tarball and registers the plugin's hooks", async () => {
  const { tarball } = await packTarball();
  const installed = await openclaw("plugins", "install", `npm-pack:${tarball}`, "--force", "--accept-capabilities");
  assert.match(installed.stdout + installed.stderr, /Installed plugin: loopguard/);

  const first = await inspect();
  assert.equal(first.plugin.status, "loaded");
  assert.equal(first.plugin.id, "loopguard");
  assert.equal(first.plugin.configSchema, true);
  // agent_end is a conversation hook: OpenClaw keeps it until the operator grants access.
  assert.deepEqual(first.typedHooks.map((h) => h.name), ["after_compaction", "after_tool_call", "before_tool_call", "gateway_stop", "session_end", "tool_result_persist"]);
  assert.match(first.diagnostics.map((d) => d.message).join("\n"), /"agent_end" blocked .*allowConversationAccess=true/);

  await openclaw("config", "set", "plugins.entries.loopguard.hooks.allowConversationAccess", "true");
  const granted = await inspect();
  assert.deepEqual(granted.typedHooks.map((h) => h.name), ["after_compaction", "after_tool_call", "agent_end", "before_tool_call", "gateway_stop", "session_end", "tool_result_persist"]);
  assert.deepEqual(granted.diagnostics, []);
});
