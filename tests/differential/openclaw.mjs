// OpenClaw's published modules (npm openclaw, pinned in this folder's package-lock.json), loaded
// once for every harness that drives them: the differential driver and bench/openclaw_engine.mjs.
//
// `silence()` must run before anything is loaded: OpenClaw's own loggers write every warning to
// a log file under its state directory unless OPENCLAW_LOG_LEVEL=silent, which would make both
// the differential's stdout and a benchmark measure logging instead of detection.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

/** The pinned package's dist folder. */
export const dist = fileURLToPath(new URL("./node_modules/openclaw/dist/", import.meta.url));

/** Mute OpenClaw's loggers and point its state at a throwaway folder; returns stdout's writer. */
export function silence(prefix, home) {
  const scratch = mkdtempSync(join(tmpdir(), prefix));
  process.on("exit", () => rmSync(scratch, { recursive: true, force: true }));
  process.env.OPENCLAW_LOG_LEVEL = "silent";
  process.env.OPENCLAW_STATE_DIR ??= scratch;
  process.env.HOME = home ?? scratch;
  const writeOut = process.stdout.write.bind(process.stdout);
  for (const name of ["log", "info", "warn", "error", "debug", "trace"]) console[name] = () => {};
  return writeOut;
}

/** A dist bundle by its file-name prefix; returns a lookup of its exports by source name. */
export async function bundle(prefix, exclude) {
  const file = readdirSync(dist).find(
    (name) => name.startsWith(prefix) && name.endsWith(".mjs") && !(exclude && name.startsWith(exclude)),
  );
  if (!file) throw new Error(`no dist/${prefix}*.mjs in ${dist} (npm ci in tests/differential)`);
  // The bundle exports minified names; its export clause maps them back to the source names.
  const exported = readFileSync(join(dist, file), "utf8").match(/export\s*\{([^}]*)\}\s*;?\s*$/);
  if (!exported) throw new Error(`no export clause in ${file}`);
  const names = Object.fromEntries(
    exported[1].split(",").map((part) => part.trim().split(/\s+as\s+/)).map(([name, alias]) => [name, alias]),
  );
  const loaded = await import(pathToFileURL(join(dist, file)).href);
  return (name) => {
    const fn = loaded[names[name]];
    if (typeof fn !== "function") throw new Error(`${file} does not export ${name}`);
    return fn;
  };
}

/** The tool-loop detector's three entry points, as the runner calls them. */
export async function detector() {
  const api = await bundle("tool-loop-detection-", "tool-loop-detection-config-");
  return {
    detectToolCallLoop: api("detectToolCallLoop"),
    recordToolCall: api("recordToolCall"),
    recordToolCallOutcome: api("recordToolCallOutcome"),
  };
}

// The runner's tool-name normalisation (normalizeToolPolicyName after `name || "tool"`).
const ALIASES = new Map([["bash", "exec"], ["apply-patch", "apply_patch"], ["cron", "automations"]]);

/** A raw tool name as the runner normalises it before detection. */
export function toolName(raw) {
  const folded = String(raw || "tool").trim().toLowerCase();
  return ALIASES.get(folded) ?? folded;
}

/** The blocked result the runner records for a vetoed call (blockToolCall). */
export function vetoResult(message) {
  return {
    content: [{ type: "text", text: message }],
    details: { status: "blocked", deniedReason: "tool-loop", reason: message },
  };
}
