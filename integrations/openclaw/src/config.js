// The plugin's settings: `plugins.entries.loopguard.config` in openclaw.json, validated against
// the configSchema of openclaw.plugin.json (the one source of names, bounds and defaults).
import { readFileSync } from "node:fs";

const MANIFEST = JSON.parse(readFileSync(new URL("../openclaw.plugin.json", import.meta.url), "utf8"));
export const CONFIG_SCHEMA = MANIFEST.configSchema;
export const PLUGIN_ID = MANIFEST.id;

export class ConfigError extends Error {
  /** Every problem of a config, each as `path: message`. */
  constructor(issues) {
    super(`invalid LoopGuard plugin config: ${issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`).join("; ")}`);
    this.name = "ConfigError";
    this.issues = issues;
  }
}

function typeOk(schema, value) {
  switch (schema.type) {
    case "object": return value !== null && typeof value === "object" && !Array.isArray(value);
    case "array": return Array.isArray(value);
    case "string": return typeof value === "string";
    case "boolean": return typeof value === "boolean";
    case "integer": return Number.isInteger(value);
    default: return true;
  }
}

// The subset of JSON Schema the manifest uses: type, enum, properties (strict), items, bounds.
function check(schema, value, path, issues) {
  if (schema.enum && !schema.enum.includes(value)) {
    issues.push({ path, message: `must be one of ${schema.enum.map((v) => JSON.stringify(v)).join(", ")}` });
    return undefined;
  }
  if (!typeOk(schema, value)) {
    issues.push({ path, message: `must be ${schema.type === "integer" ? "an integer" : `a ${schema.type}`}` });
    return undefined;
  }
  if (schema.type === "object") {
    const out = {};
    for (const key of Object.keys(value)) {
      if (!schema.properties?.[key]) {
        issues.push({ path: [...path, key], message: `unknown key (valid: ${Object.keys(schema.properties ?? {}).join(", ")})` });
      }
    }
    for (const [key, sub] of Object.entries(schema.properties ?? {})) {
      const given = value[key];
      const resolved = given === undefined ? defaults(sub) : check(sub, given, [...path, key], issues);
      if (resolved !== undefined) out[key] = resolved;
    }
    return out;
  }
  if (schema.type === "array") {
    if (schema.minItems && value.length < schema.minItems) issues.push({ path, message: `needs at least ${schema.minItems} item(s)` });
    return value.map((item, i) => check(schema.items, item, [...path, i], issues));
  }
  if (schema.type === "integer") {
    if (schema.minimum !== undefined && value < schema.minimum) issues.push({ path, message: `must be >= ${schema.minimum}` });
    if (schema.maximum !== undefined && value > schema.maximum) issues.push({ path, message: `must be <= ${schema.maximum}` });
  }
  if (schema.type === "string") {
    if (schema.minLength && value.length < schema.minLength) issues.push({ path, message: "must not be empty" });
    if (schema.pattern && !new RegExp(schema.pattern).test(value)) issues.push({ path, message: `must match ${schema.pattern}` });
  }
  return value;
}

function defaults(schema) {
  if (schema.type === "object") return check(schema, {}, [], []);
  return schema.default === undefined ? undefined : structuredClone(schema.default);
}

/** OpenClaw's configSchema contract: `{success, data}` or `{success: false, error: {issues}}`. */
export function safeParseConfig(value) {
  const issues = [];
  const data = check(CONFIG_SCHEMA, value ?? {}, [], issues);
  return issues.length ? { success: false, error: { issues } } : { success: true, data };
}

/** Bootstrap servers as `host:port` items: entries may list several and carry `kafka://`. */
export function bootstrapServers(brokers) {
  return brokers.flatMap((entry) => entry.split(",")).map((hostPort) => hostPort.replace(/^kafka:\/\//, ""));
}

/** The resolved settings (every default filled in); throws ConfigError listing every problem. */
export function resolveConfig(value) {
  const parsed = safeParseConfig(value);
  if (!parsed.success) throw new ConfigError(parsed.error.issues);
  return { ...parsed.data, brokers: bootstrapServers(parsed.data.brokers) };
}
