// OpenClaw plugin entry (package.json `openclaw.extensions`): the object definePluginEntry
// returns, written out so the plugin needs nothing from the openclaw package at run time.
import { CONFIG_SCHEMA, PLUGIN_ID, resolveConfig, safeParseConfig } from "./config.js";
import { LoopGuardPlugin } from "./plugin.js";
import { connectionOptions, describeSecurity } from "./security.js";
import { KafkaTransport } from "./transport.js";

// Survives OpenClaw's hybrid reload (a config edit re-runs register in the same process), so
// an open run keeps its seq: a restarted seq would be dropped by the worker as redelivered.
const RUNS_KEY = Symbol.for("loopguard.openclaw.runs");
globalThis[RUNS_KEY] ??= new Map();

/** Wire a LoopGuardPlugin into an OpenClaw plugin api: one api.on per hook. */
export function registerLoopGuard(api, { createTransport, runs = globalThis[RUNS_KEY], clock } = {}) {
  const config = resolveConfig(api.pluginConfig ?? {});
  const connection = connectionOptions(config.security); // at registration: errors show at once
  const logger = api.logger ?? console;
  const plugin = new LoopGuardPlugin({
    config,
    logger,
    runs,
    ...(clock !== undefined ? { clock } : {}),
    createTransport: createTransport ?? ((onControl) => new KafkaTransport({
      brokers: config.brokers, topics: config.topics, clientId: config.clientId,
      bufferMaxEvents: config.bufferMaxEvents, logger, onControl, connection,
    })),
  });
  // Each handler is total: an exception in before_tool_call would make OpenClaw fail closed.
  const guarded = (name, fn) => async (event, ctx) => {
    try {
      return await fn(event, ctx);
    } catch (error) {
      logger.error(`loopguard: ${name} failed, failing open: ${error?.stack ?? error}`);
      return undefined;
    }
  };
  api.on("before_tool_call", guarded("before_tool_call", (e, c) => plugin.beforeToolCall(e, c)));
  api.on("after_tool_call", guarded("after_tool_call", (e, c) => plugin.afterToolCall(e, c)));
  api.on("after_compaction", guarded("after_compaction", (e, c) => plugin.afterCompaction(e, c)));
  api.on("agent_end", guarded("agent_end", (e, c) => plugin.agentEnd(e, c)));
  api.on("session_end", guarded("session_end", (e, c) => plugin.sessionEnd(e, c)));
  api.on("gateway_stop", guarded("gateway_stop", () => plugin.stop()));
  logger.info?.(`loopguard: ${config.mode} mode, brokers ${config.brokers.join(",")} (${describeSecurity(config.security)})${config.privacy ? ", privacy on" : ""}`);
  return plugin;
}

export default {
  id: PLUGIN_ID,
  name: "LoopGuard",
  description: "Publishes every tool call to LoopGuard (Kafka) and enforces its block_call / abort_run verdicts.",
  configSchema: { jsonSchema: CONFIG_SCHEMA, safeParse: safeParseConfig },
  register(api) {
    registerLoopGuard(api);
  },
};
