// Canonical JSON (LoopGuard docs/semantics.md §3): the text OpenClaw's stableStringify writes, so the
// hashes this plugin computes in privacy mode equal the worker's and OpenClaw's own.
import { createHash } from "node:crypto";

/** The canonical JSON text of a value (keys sorted by UTF-16 units, cycles as "[Circular]"). */
export function canonicalJson(value) {
  return write(value, new Set());
}

function write(value, stack) {
  if (value === null || value === undefined) return String(value);
  if (typeof value === "number" && !Number.isFinite(value)) return JSON.stringify(String(value));
  if (typeof value === "bigint") return JSON.stringify(value.toString());
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value !== "object") return JSON.stringify(value) ?? "null";
  if (stack.has(value)) return JSON.stringify("[Circular]");
  stack.add(value);
  try {
    if (value instanceof Error) {
      return write({ name: value.name, message: value.message, stack: value.stack }, stack);
    }
    if (value instanceof Uint8Array) {
      return write({ type: "Uint8Array", data: Buffer.from(value).toString("base64") }, stack);
    }
    if (Array.isArray(value)) return `[${value.map((item) => write(item, stack)).join(",")}]`;
    const keys = Object.keys(value).sort(); // default sort: UTF-16 code units, as OpenClaw
    return `{${keys.map((k) => `${JSON.stringify(k)}:${write(value[k], stack)}`).join(",")}}`;
  } finally {
    stack.delete(value);
  }
}

/** Lower-case hex SHA-256 of the UTF-8 bytes of a value's canonical JSON. */
export function digest(value) {
  return createHash("sha256").update(canonicalJson(value), "utf8").digest("hex");
}
