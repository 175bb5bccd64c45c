// Canonical JSON against the repository's JavaScript reference vectors and against OpenClaw's
// own stableStringify and hashToolCall (the openclaw devDependency, pinned to 2026.9.6).
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { canonicalJson, digest } from "../src/canonical.js";
import { argsHash, normalizeTool, unknownToolName } from "../src/hashing.js";

const VECTORS = JSON.parse(readFileSync(new URL("../../../tests/data/canonical_vectors.json", import.meta.url), "utf8"));
const SPECIAL = { undefined: undefined, NaN: NaN, Infinity: Infinity, "-Infinity": -Infinity, "-0": -0 };

function f64(hex) {
  const view = new DataView(new ArrayBuffer(8));
  view.setBigUint64(0, BigInt(`0x${hex}`));
  return view.getFloat64(0);
}

function revive(value, ancestors = []) {
  if (value === null || typeof value !== "object") return value;
  if (!Array.isArray(value)) {
    const keys = Object.keys(value);
    if (keys.length === 1 && keys[0] === "$js") return SPECIAL[value.$js];
    if (keys.length === 1 && keys[0] === "$f64") return f64(value.$f64);
    if (keys.length === 1 && keys[0] === "$anc") return ancestors[ancestors.length - value.$anc];
  }
  ancestors.push(value);
  for (const key of Object.keys(value)) value[key] = revive(value[key], ancestors);
  ancestors.pop();
  return value;
}

// The package exports no ./package.json; its dist/ sits next to the resolved plugin-sdk entry.
const distDir = dirname(dirname(fileURLToPath(import.meta.resolve("openclaw/plugin-sdk/plugin-entry"))));
const distModule = async (prefix) => import(pathToFileURL(join(distDir, readdirSync(distDir).find((f) => f.startsWith(prefix) && f.endsWith(".mjs")))));
const { t: stableStringify } = await distModule("stable-stringify-");
const { n: hashToolCall } = await distModule("tool-loop-detection-");

test("every canonical vector: the text and its SHA-256", () => {
  assert.ok(VECTORS.canonical.length > 50);
  for (const v of VECTORS.canonical) {
    const value = revive(JSON.parse(v.input));
    assert.equal(canonicalJson(value), v.canonical, v.id);
    assert.equal(digest(value), v.sha256, v.id);
  }
});

test("canonical JSON is OpenClaw's stableStringify on every vector", () => {
  for (const v of VECTORS.canonical) {
    const value = revive(JSON.parse(v.input));
    assert.equal(canonicalJson(value), stableStringify(value), v.id);
  }
});

test("args hashes are OpenClaw's hashToolCall", () => {
  for (const v of VECTORS.canonical) {
    const value = revive(JSON.parse(v.input));
    assert.equal(argsHash("read", value), hashToolCall("read", value), v.id);
  }
});

test("tool names and unknown-tool names as JavaScript computed them", () => {
  for (const c of VECTORS.tool_names) assert.equal(normalizeTool(c.name), c.normalized, c.name);
  for (const c of VECTORS.unknown_tool) assert.equal(unknownToolName(c.text), c.name ?? null, c.text);
});
