// Tool-name normalisation, args_hash, result_hash and unknown-tool extraction (LoopGuard
// docs/semantics.md §3), the same functions as the worker's detectors/hashing.py: the shared vectors in
// tests/data/wire_vectors.json prove both give the same hashes.
import { canonicalJson, digest } from "./canonical.js";
import { createHash } from "node:crypto";

export const DEFAULT_CHANNEL_TOOLS = Object.freeze(["telegram"]);

const TOOL_ALIASES = new Map([
  ["bash", "exec"],
  ["apply-patch", "apply_patch"],
]);
const SEND_ACTIONS = new Set([
  "send", "broadcast", "reply", "thread-reply", "sendWithEffect", "sendAttachment",
  "upload-file", "sticker", "poll",
]);
const VOLATILE_SEND_KEYS = new Set([
  "messageId", "message_id", "messageIds", "platformMessageId", "platformMessageIds",
  "fileId", "file_id", "fileKey", "pollId", "poll_id", "receipt", "runId", "idempotencyKey",
  "ts", "timestamp", "sentAt", "deliveredAt", "createdAt",
]);
const UNKNOWN_TOOL_PATTERNS = [
  /unknown tool[:\s]+["']?([a-z0-9_.-]+)/i,
  /tool\s+["']?([a-z0-9_.-]+)["']?\s+(?:not found|is not available)/i,
];

const isPlainObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const isNumber = (v) => typeof v === "number";
const strOr = (v, fallback) => (typeof v === "string" ? v : fallback);

/** Trim and lower-case a tool name; bash → exec, apply-patch → apply_patch, empty → tool. */
export function normalizeTool(name) {
  const trimmed = String(name ?? "").trim().toLowerCase();
  return TOOL_ALIASES.get(trimmed) ?? (trimmed || "tool");
}

/** The call signature `<normalised tool>:<digest(args)>`. */
export function argsHash(tool, args) {
  return `${normalizeTool(tool)}:${digest(args)}`;
}

/** An error's text: a string as is, an Error its message, a number or boolean as written, else JSON. */
export function errorText(error) {
  if (error instanceof Error) return error.message || error.name;
  if (typeof error === "string") return error;
  if (typeof error === "number" || typeof error === "boolean" || typeof error === "bigint") {
    return String(error);
  }
  return canonicalJson(error); // objects are never unpacked, even with a `message` key
}

/** The lower-cased missing tool an error text names, or null. */
export function unknownToolName(text) {
  const raw = String(text).trim();
  if (!raw) return null;
  for (const pattern of UNKNOWN_TOOL_PATTERNS) {
    const match = raw.match(pattern);
    if (match) return match[1].toLowerCase();
  }
  return null;
}

/** The trimmed, newline-joined `text` of the typed text items of `result.content`. */
export function outcomeText(result) {
  if (!isPlainObject(result) || !Array.isArray(result.content)) return "";
  return result.content
    .filter((item) => isPlainObject(item) && typeof item.type === "string" && typeof item.text === "string")
    .map((item) => item.text)
    .join("\n")
    .trim();
}

function execOutcome(status, details, text) {
  if (status === "running") return { status, tail: strOr(details.tail, "") };
  if (status === "completed" || status === "failed") {
    const output = typeof details.aggregated === "string" ? details.aggregated.trim() : "";
    return {
      status,
      exitCode: isNumber(details.exitCode) ? details.exitCode : null,
      timedOut: details.timedOut === true,
      output: output || text,
    };
  }
  if (status === "approval-pending" || status === "approval-unavailable") {
    return {
      status,
      reason: strOr(details.reason, null),
      host: strOr(details.host, null),
      command: strOr(details.command, ""),
      warningText: strOr(details.warningText, ""),
    };
  }
  return null;
}

function pollOutcome(action, details, text) {
  const fields = action === "log"
    ? ["totalLines", "totalChars", "truncated", "exitCode", "exitSignal"]
    : ["exitCode", "exitSignal", "aggregated"];
  const out = { action, status: details.status }; // absent status stays undefined (docs/semantics.md §3 rule 6)
  for (const field of fields) out[field] = details[field] ?? null;
  out.text = text;
  return out;
}

function isMessageObject(obj) {
  return typeof obj.id === "string" && typeof obj.text === "string" &&
    (typeof obj.direction === "string" || typeof obj.senderId === "string" ||
      typeof obj.accountId === "string" || isPlainObject(obj.conversation));
}

function stripSendIds(value, copies = new Map()) {
  if (value === null || typeof value !== "object") return value;
  if (copies.has(value)) return copies.get(value); // a cycle stays a cycle (canonical: "[Circular]")
  if (Array.isArray(value)) {
    const copy = [];
    copies.set(value, copy);
    for (const item of value) copy.push(stripSendIds(item, copies));
    return copy;
  }
  const copy = {};
  copies.set(value, copy);
  const dropId = isMessageObject(value);
  for (const [key, item] of Object.entries(value)) {
    if (VOLATILE_SEND_KEYS.has(key) || (dropId && key === "id")) continue;
    copy[key] = stripSendIds(item, copies);
  }
  return copy;
}

function isSend(tool, args, channelTools) {
  if (tool === "sessions_send" || channelTools.includes(tool)) return true;
  const action = isPlainObject(args) ? args.action : undefined;
  return tool === "message" && typeof action === "string" && SEND_ACTIONS.has(action);
}

/**
 * docs/semantics.md §3 result_hash of an outcome of `tool` called with `args`: `{error}` (any value, null
 * included, is an error) or `{result}`; null when there is nothing to hash.
 */
export function resultHash(tool, args, outcome, channelTools = DEFAULT_CHANNEL_TOOLS) {
  const name = normalizeTool(tool);
  if (Object.hasOwn(outcome, "error")) return `error:${digest(errorText(outcome.error))}`;
  const result = outcome.result;
  if (result === undefined) return null;
  if (!isPlainObject(result)) return digest(result);
  const details = isPlainObject(result.details) ? result.details : {};
  if (details.status === "blocked" && details.deniedReason === "tool-loop") return null;
  const text = outcomeText(result);
  if (name === "exec" && typeof details.status === "string") {
    const exec = execOutcome(details.status, details, text);
    if (exec !== null) return digest(exec);
  }
  if (name === "process" && isPlainObject(args) && (args.action === "poll" || args.action === "log")) {
    return digest(pollOutcome(args.action, details, text));
  }
  if (isSend(name, args, channelTools)) return digest(stripSendIds(details));
  return createHash("sha256").update(canonicalJson({ details, text }), "utf8").digest("hex");
}

/** The unknown tool an outcome's error names (docs/semantics.md §3), or null for results. */
export function outcomeUnknownToolName(outcome) {
  return Object.hasOwn(outcome, "error") ? unknownToolName(errorText(outcome.error)) : null;
}
