// Generates tests/data/canonical_vectors.json: reference vectors for LoopGuard's canonical JSON,
// number formatting, trim, tool-name normalisation, unknown-tool extraction and wire events
// as JavaScript writes and reads them (lone surrogates, number forms), computed by
// JavaScript itself (JSON.stringify for strings, String()/JSON.stringify for numbers,
// Array.prototype.sort for key order, String.prototype.trim, RegExp), so the Python tests check
// against an independent implementation. The tests only read the committed JSON file.
//
//   node tests/data/gen_canonical_vectors.mjs      (node >= 20; output is deterministic)
//
// Inputs are JSON texts that both JSON.parse and Python's json.loads read to the same value,
// plus these tag objects, revived after parsing on both sides:
//   {"$js": "undefined" | "NaN" | "Infinity" | "-Infinity" | "-0"}   values JSON cannot spell
//   {"$f64": "<16 hex digits>"}   the IEEE-754 double with these big-endian bits
//   {"$anc": n}                   a reference to the enclosing container n levels up (a cycle)

import { createHash } from "node:crypto";
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

// SPEC §3 canonical JSON, as OpenClaw's stableStringify writes it.
function canonical(value, stack = new Set()) {
  if (value === null || value === undefined) return String(value);
  if (typeof value === "number" && !Number.isFinite(value)) return JSON.stringify(String(value));
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value !== "object") return JSON.stringify(value);
  if (stack.has(value)) return JSON.stringify("[Circular]");
  stack.add(value);
  try {
    if (Array.isArray(value)) return `[${value.map((v) => canonical(v, stack)).join(",")}]`;
    const keys = Object.keys(value).sort(); // default sort: UTF-16 code units
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical(value[k], stack)}`).join(",")}}`;
  } finally {
    stack.delete(value);
  }
}

const SPECIAL = { undefined: undefined, NaN: NaN, Infinity: Infinity, "-Infinity": -Infinity, "-0": -0 };

function f64FromHex(hex) {
  const view = new DataView(new ArrayBuffer(8));
  view.setBigUint64(0, BigInt(`0x${hex}`));
  return view.getFloat64(0);
}

function hexFromF64(x) {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  return view.getBigUint64(0).toString(16).padStart(16, "0");
}

function revive(value, ancestors = []) {
  if (value === null || typeof value !== "object") return value;
  if (!Array.isArray(value)) {
    const keys = Object.keys(value);
    if (keys.length === 1 && keys[0] === "$js") return SPECIAL[value.$js];
    if (keys.length === 1 && keys[0] === "$f64") return f64FromHex(value.$f64);
    if (keys.length === 1 && keys[0] === "$anc") return ancestors[ancestors.length - value.$anc];
  }
  ancestors.push(value);
  for (const key of Object.keys(value)) value[key] = revive(value[key], ancestors);
  ancestors.pop();
  return value;
}

const sha256 = (text) => createHash("sha256").update(text, "utf8").digest("hex");
const vectors = [];
const ids = new Set();

function vector(id, inputText) {
  if (ids.has(id)) throw new Error(`duplicate id ${id}`);
  ids.add(id);
  const out = canonical(revive(JSON.parse(inputText)));
  vectors.push({ id, input: inputText, canonical: out, sha256: sha256(out) });
}

const hex4 = (c) => c.toString(16).padStart(4, "0");
// JSON text for a string made of the given UTF-16 code units (escaped, so lone surrogates survive).
const jsonString = (units) => `"${units.map((u) => `\\u${hex4(u)}`).join("")}"`;

// --- scalars -------------------------------------------------------------------------------
vector("null", "null");
vector("true", "true");
vector("false", "false");
for (const s of ["undefined", "NaN", "Infinity", "-Infinity", "-0"]) {
  vector(`special ${s}`, `{"$js":"${s}"}`);
}

// --- strings -------------------------------------------------------------------------------
for (let c = 0; c < 0x20; c += 1) vector(`string control U+${hex4(c)}`, jsonString([0x61, c, 0x62]));
for (const c of [0x22, 0x5c, 0x2f, 0x7f, 0x80, 0x85, 0x9f, 0xa0, 0xad, 0x2028, 0x2029, 0xfeff,
  0xfffe, 0xffff, 0xe000]) {
  vector(`string char U+${hex4(c)}`, jsonString([0x61, c, 0x62]));
}
const surrogateCases = {
  "lone high": [0xd800],
  "lone high max": [0xdbff],
  "lone low": [0xdc00],
  "lone low max": [0xdfff],
  "reversed pair": [0xdc00, 0xd800],
  "high then text": [0xd83d, 0x61],
  "text then low": [0x61, 0xde00],
  "pair (emoji)": [0xd83d, 0xde00],
  "high high low": [0xd800, 0xd800, 0xdc00],
  "high low low": [0xd800, 0xdc00, 0xdc00],
  "max astral": [0xdbff, 0xdfff],
};
for (const [name, units] of Object.entries(surrogateCases)) vector(`string ${name}`, jsonString(units));
vector("string empty", '""');
vector("string plain", '"hello world"');
vector("string non-ASCII", '"héllo wörld ✓ 日本語"');
vector("string mixed escapes", '"tab\\there \\"quoted\\" back\\\\slash\\nnew\\r\\u0000\\u001f é 😀"');
vector("string html", '"</script><!-- & \' >"');

// --- numbers -------------------------------------------------------------------------------
const numberTexts = [
  "0", "-0", "0.0", "-0.0", "1", "-1", "1.0", "1.5", "-1.5", "0.1", "0.2", "0.3", "100", "1e2",
  "123456789", "0.000001", "1e-6", "0.0000012345", "1e-7", "1.5e-7", "-1e-7", "0.00001", "0.0001",
  "1e-5", "1e16", "1e15", "1e17", "12345678901234567", "1e20", "1e21", "-1e21", "1.5e21",
  "123456789012345678901", "123456789012345680000", "99999999999999999999", "999999999999999999999",
  "9.999999999999999e20", "1e22", "1e100", "1e300", "1.7976931348623157e308", "5e-324", "2.5e-324",
  "1e-400", "1e400", "-1e400", "2.2250738585072014e-308", "4.35", "0.1e1", "123e-20", "1E+2",
  "9007199254740991", "9007199254740992", "9007199254740993", "-9007199254740993",
  "18446744073709551616", "-18446744073709551617", "123456789012345678901234567890",
  `1${"0".repeat(400)}`, `-1${"0".repeat(400)}`, "3.141592653589793", "2.718281828459045",
  "1.7976931348623157e308", "0.30000000000000004", "1234.5678", "1e-323",
];
for (const text of new Set(numberTexts)) vector(`number ${text.length > 40 ? `${text.slice(0, 12)}…(${text.length} digits)` : text}`, text);

// Deterministic pseudo-random doubles (mulberry32), given by their bits.
let seed = 0x5eed1e55;
function rand32() {
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return (t ^ (t >>> 14)) >>> 0;
}
let made = 0;
while (made < 300) {
  const bits = `${rand32().toString(16).padStart(8, "0")}${rand32().toString(16).padStart(8, "0")}`;
  if (!Number.isFinite(f64FromHex(bits))) continue;
  vector(`number bits ${bits}`, `{"$f64":"${bits}"}`);
  made += 1;
}
// Doubles near the formatting boundaries: a random 1-17 digit mantissa at exponents -9..23.
for (let i = 0; i < 400; i += 1) {
  const digits = 1 + (rand32() % 17);
  let mantissa = String(1 + (rand32() % 9));
  while (mantissa.length < digits) mantissa += String(rand32() % 10);
  const exponent = -9 - digits + 1 + (rand32() % 33);
  const x = (rand32() % 2 ? -1 : 1) * Number(`${mantissa}e${exponent}`);
  const bits = hexFromF64(x);
  if (!ids.has(`number bits ${bits}`)) vector(`number bits ${bits}`, `{"$f64":"${bits}"}`);
}
// Integers above 2**53 written out in full (Python reads them as exact ints).
for (let i = 0; i < 60; i += 1) {
  let text = String(1 + (rand32() % 9));
  const length = 16 + (rand32() % 10);
  while (text.length < length) text += String(rand32() % 10);
  if (!ids.has(`number ${text}`)) vector(`number ${text}`, text);
}

// --- containers ----------------------------------------------------------------------------
vector("array empty", "[]");
vector("object empty", "{}");
vector("array mixed", '[1,"a",null,true,false,[],{},1.5,[[]]]');
vector("object keys sorted", '{"b":1,"a":2,"c":{"z":1,"y":[3,2,1]}}');
vector("object ascii key order", '{"b":1,"a":2,"A":3,"_":4,"":5,"aa":6,"a\\u0000":7,"~":8,"0":9,"10":10,"9":11}');
vector("object non-ASCII keys", '{"é":1,"e":2,"z":3,"ä":4,"€":5,"日":6}');
vector("object keys U+FFFF vs astral", '{"\\uffff":1,"😀":2}');
vector("object keys U+E000 vs astral vs D7FF", '{"\\ue000":1,"\\ud7ff":2,"😀":3,"\\uffff":4}');
vector("object keys lone high vs astral", '{"\\ud800":1,"😀":2,"\\ue000":3}');
vector("object keys lone low vs astral", '{"\\udc00":1,"😀":2,"\\udbff":3,"\\uffff":4}');
vector("object keys astral prefix", '{"a😀":1,"a\\uffff":2,"a":3,"a\\uffffb":4,"a😀b":5}');
vector("object keys escaped", '{"\\n":1,"\\"":2,"\\\\":3,"\\u0001":4}');
vector("object undefined value kept", '{"b":{"$js":"undefined"},"a":1}');
vector("array undefined item", '[1,{"$js":"undefined"},2]');
vector("object non-finite values", '{"n":{"$js":"NaN"},"i":{"$js":"Infinity"},"m":{"$js":"-Infinity"},"z":{"$js":"-0"}}');
vector("nested 50 deep", `${"[".repeat(50)}1${"]".repeat(50)}`);
vector("nested objects", '{"a":{"b":{"c":{"d":[{"e":null}]}}}}');
vector("circular object", '{"a":1,"self":{"$anc":1}}');
vector("circular array", '[1,{"$anc":1},2]');
vector("circular grandparent", '{"x":{"y":{"$anc":2},"z":1},"w":[{"$anc":2},{"$anc":1}]}');
vector("tool args", '{"path":"/f/123.txt"}');
vector("trace read args", '{"path":"/Users…DMAP.md"}');
vector("exec result shape", '{"details":{"status":"completed","exitCode":0,"timedOut":false,"output":"ok"},"text":"ok"}');

// --- trim, \s, tool names, unknown tool ----------------------------------------------------
const trimmed = [];
const regexSpace = [];
for (let c = 0; c <= 0xffff; c += 1) {
  const ch = String.fromCharCode(c);
  if (`${ch}x${ch}`.trim() === "x") trimmed.push(c);
  if (/\s/.test(ch)) regexSpace.push(c);
}

const ALIASES = { bash: "exec", "apply-patch": "apply_patch" };
function normalizeTool(name) {
  const n = name.trim().toLowerCase();
  return ALIASES[n] ?? (n || "tool");
}
const toolNames = [
  "read", " Read ", "BASH", "bash", " bash\n", "Apply-Patch", "apply-patch", "apply_patch", "",
  "   ", "\u00a0exec\u3000", "\ufeffmessage\u2028", "\u0085read", "\u001fread", "\u180eread",
  "Sessions_Send", "İstanbul", "ΑΣ", "ẞ", "EXEC ", "Ⅻ", "ǅ",
];

const UNKNOWN_FIRST = /unknown tool[:\s]+["']?([a-z0-9_.-]+)["']?/i;
const UNKNOWN_SECOND = /tool\s+["']?([a-z0-9_.-]+)["']?\s+(?:not found|is not available)/i;
function unknownToolName(text) {
  const raw = text.trim();
  if (!raw) return null;
  const match = raw.match(UNKNOWN_FIRST) ?? raw.match(UNKNOWN_SECOND);
  const name = match?.[1]?.trim();
  return name ? name.toLowerCase() : null;
}
const errorTexts = [
  "Unknown tool: foo", "unknown tool 'Bar.Baz'", 'UNKNOWN TOOL:\t"x-y_z"', "Error: unknown tool:: weird",
  "unknown tool", "unknown tool: ", "unknowntool: x", "Tool exec not found", "tool 'Read' is not available",
  "tool  read  not  found", "Tool read not found.", "the tool foo not found", "tool foo was not found",
  "  Unknown tool: trimmed  ", "unknown tool:\u00a0nbsp", "unknown tool:\u0085nel", "unknown tool:\u001fus",
  "unknown tool:\ufeffbom", "unknown tool:\u2028ls", "unknown tool: \u212aelvin", "unknown tool: \u017fharp",
  "unknown tool: \u0130dot", 'tool "foo" not found', "tool foo is not available", "tool foo\tis not available",
  "Unknown Tool: first; tool second not found", "unknown tool: 'a'b", "unknown tool: ''x", "unknown tool:\n\nfoo",
  "", "   ", "\u3000", "unknown tool: \"\"", "tool \u0085x not found", "Tool \"exec\" is not available here",
  "unknown tool:é", "unknown tool: MixedCase.Name-1_2", "prefix unknown tool: zzz suffix", "tool x not foundx",
  'Tool read not found', "tool read\u00a0not found", "tool read\u0085not found", "UNKNOWN\u00a0TOOL: x",
  "unknown  tool: x", "unknown tool:,x", "unknown tool: -.-", "tool ..  not found",
];

// --- wire events as a JavaScript runtime writes them ---------------------------------------
// `wire` is the event text (JSON.stringify's own output, or a number form JSON.parse reads);
// the expectations are canonical JSON and SHA-256 of what JSON.parse gives back, and the
// args hash OpenClaw computes (normalised tool name, ":", SHA-256 of the canonical args).
const wire = [];
function wireVector(id, text) {
  const event = JSON.parse(text);
  const entry = { id, wire: text, tool: event.tool, args_hash: null };
  if ("args" in event) {
    entry.args_hash = `${normalizeTool(event.tool)}:${sha256(canonical(event.args))}`;
  }
  for (const field of ["result", "error"]) {
    if (field in event) entry[field] = { canonical: canonical(event[field]), sha256: sha256(canonical(event[field])) };
  }
  wire.push(entry);
}
const u = (units) => String.fromCharCode(...units);
const base = { type: "tool_result", event_id: "w1", run_id: "wire-run", seq: 2, tool_call_id: "c1" };
const wireCases = {
  "lone high in a value": { tool: "read", args: { path: `/a${u([0xd83d])}` }, result: { content: [{ type: "text", text: `cut ${u([0xd83d])}` }] } },
  "lone low in a value": { tool: "read", args: { path: u([0xde00, 0x61]) }, error: `File not found: ${u([0xdc00])}` },
  "lone high in a key": { tool: "exec", args: { [u([0x6b, 0xd800])]: 1 }, result: { details: { [u([0xdbff])]: u([0xdfff]) } } },
  "pair split across key and value": { tool: "read", args: { [`a${u([0xd83d])}`]: `${u([0xde00])}b` }, result: "x" },
  "reversed pair": { tool: "read", args: { p: u([0xdc00, 0xd800]) }, result: u([0xdc00, 0xd800]) },
  "intact pair": { tool: "read", args: { p: "😀", q: u([0xd83d, 0xde00]) }, result: { text: "😀" } },
  "lone surrogate in the tool name": { tool: `Read${u([0xd83d])}`, args: {}, result: "ok" },
  "lone surrogates in ids": { tool: "read", args: {}, result: "ok", run_id: `run${u([0xd800])}`, event_id: `e${u([0xdfff])}`, tool_call_id: u([0xd83d]) },
  "error object with a lone surrogate": { tool: "read", args: {}, error: { message: u([0xd83d]) } },
};
let deep = ["\ud83d"];
for (let i = 1; i < 1500; i += 1) deep = i % 2 ? { k: deep } : [deep]; // deeper than orjson reads
wireCases["nesting 1500 deep"] = { tool: "read", args: deep, result: { deep } };
for (const [id, fields] of Object.entries(wireCases)) wireVector(id, JSON.stringify({ ...base, ...fields }));
const numberForms = ["12345678901234567890", "1e400", "-1e400", "-0", "-0.0", "1E+21", "1e-400",
  "9007199254740993", "-12345678901234567890123", "0.1e1", "123e-20", `1${"0".repeat(400)}`];
for (const text of numberForms) {
  const id = `number ${text.length > 40 ? `${text.slice(0, 12)}…(${text.length} digits)` : text}`;
  wireVector(id, `{"type":"tool_result","event_id":"n1","run_id":"wire-run","seq":2,"tool":"read","args":{"n":${text},"a":[${text}]},"result":{"n":${text}}}`);
}

const out = {
  generated_by: "tests/data/gen_canonical_vectors.mjs",
  node: process.version,
  tags: {
    $js: "undefined | NaN | Infinity | -Infinity | -0",
    $f64: "IEEE-754 double from 16 big-endian hex digits",
    $anc: "reference to the enclosing container n levels up",
  },
  canonical: vectors,
  trim_code_points: trimmed,
  regex_space_code_points: regexSpace,
  tool_names: toolNames.map((name) => ({ name, normalized: normalizeTool(name) })),
  unknown_tool: errorTexts.map((text) => ({ text, name: unknownToolName(text) })),
  wire,
};
const target = join(dirname(fileURLToPath(import.meta.url)), "canonical_vectors.json");
writeFileSync(target, `${JSON.stringify(out, null, 1)}\n`);
console.log(`wrote ${vectors.length} canonical vectors to ${target}`);
