// OpenClaw plugin entry (package.json `openclaw.extensions`): the object definePluginEntry
// returns, written out so the plugin needs nothing from the openclaw package at run time.
import { CONFIG_SCHEMA, PLUGIN_ID, resolveConfig, safeParseConfig } from "./config.js";
import { SharedConnection, processConnection } from "./connection.js";
import { LoopGuardPlugin } from "./plugin.js";
import { connectionOptions, describeSecurity } from "./security.js";
import { KafkaTransport } from "./transport.js";

// Survives OpenClaw's hybrid reload (a config edit re-runs register in the same process), so
// an open run keeps its seq: a restarted seq would be dropped by the worker as redelivered.
const RUNS_KEY = Symbol.for("loopguard.openclaw.runs");
globalThis[RUNS_KEY] ??= new Map();

/**
 * Wire a LoopGuardPlugin into an OpenClaw plugin api: one api.on per hook, and a service whose
 * stop flushes the process's Kafka connection. `connection` null: a private one (tests).
 */
export function registerLoopGuard(api, { createTransport, runs = globalThis[RUNS_KEY], clock, connection } = {}) {
  const config = resolveConfig(api.pluginConfig ?? {});
  const security = connectionOptions(config.security); // at registration: errors show at once
  const logger = api.logger ?? console;
  const plugin = new LoopGuardPlugin({
    config,
    logger,
    runs,
    connection: connection ?? (connection === null || createTransport ? new SharedConnection() : processConnection()),
    gatewayConfig: api.config,
    ...(clock !== undefined ? { clock } : {}),
    createTransport: createTransport ?? ((onControl) => new KafkaTransport({
      brokers: config.brokers, topics: config.topics, clientId: config.clientId,
      bufferMaxEvents: config.bufferMaxEvents, logger, onControl, connection: security,
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
  api.on("gateway_stop", guarded("gateway_stop", () => plugin.stop({ shutdown: true })));
  // Synchronous by OpenClaw's contract (a returned promise is ignored): no `guarded` here.
  api.on("tool_result_persist", (event, ctx) => {
    try {
      return plugin.toolResultPersist(event, ctx);
    } catch (error) {
      logger.error(`loopguard: tool_result_persist failed: ${error?.stack ?? error}`);
      return undefined;
    }
  });
  // Whichever instance's service OpenClaw stops (reload or shutdown), the shared connection is
  // flushed; a start after a stop (rollback, restart in the same process) may reopen it.
  api.registerService?.({
    id: "loopguard-kafka",
    start: () => {
      plugin.connection.reopen();
      plugin.attach();
    },
    stop: async () => {
      await plugin.stop({ shutdown: false });
      plugin.dispose();
    },
  });
  logger.info?.(`loopguard: ${config.mode} mode, onWarn ${config.onWarn}, brokers ${config.brokers.join(",")} (${describeSecurity(config.security)})${config.privacy ? ", privacy on" : ""}`);
  // Only where hooks run: discovery and CLI-metadata registrations (inspect, reloads) stay quiet.
  if (api.registrationMode === undefined || api.registrationMode === "full") warnIfShadowed(plugin.stats.gatewayLoopDetection, config, logger);
  return plugin;
}

/**
 * One start-up warning when the gateway's own rolling loop detectors are on: they run before
 * plugin hooks and block first, so LoopGuard never gets to. The post-compaction guard alone
 * (on unless `enabled` is false) aborts at the same call LoopGuard would: a note, not a warning.
 */
function warnIfShadowed({ rolling, postCompaction }, config, logger) {
  if (config.mode !== "gate") return;
  if (rolling) {
    logger.warn("loopguard: the gateway's own loop detection is on (tools.loopDetection.enabled: true): it runs before plugin hooks and blocks first, so LoopGuard's verdicts will be shadowed. Set tools.loopDetection.enabled: false in the gateway's openclaw.json (and in agents.list[].tools.loopDetection) and give the LoopGuard worker its own policy file.");
  } else if (postCompaction) {
    logger.info?.("loopguard: the gateway's post-compaction guard is on (tools.loopDetection.enabled is not false); it aborts compaction loops itself, as LoopGuard does. Set tools.loopDetection.enabled: false to leave them to LoopGuard.");
  }
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
