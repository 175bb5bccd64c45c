// The plugin's handlers run by OpenClaw 2026.9.6's own hook runner (createHookRunner from the
// openclaw devDependency's dist/): a warning's note lands in the tool result that
// tool_result_persist returns, a block is OpenClaw's block, and a synchronous hook stays one.
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { registerLoopGuard } from "../src/index.js";
import { FakeApi, RecordingTransport } from "./fakes.js";

// The package exports no ./package.json; its dist/ sits next to the resolved plugin-sdk entry.
const distDir = dirname(dirname(fileURLToPath(import.meta.resolve("openclaw/plugin-sdk/plugin-entry"))));
// Several dist chunks are named hooks-*; the runner's is the one that defines createHookRunner.
const runnerChunk = readdirSync(distDir).find((f) => /^hooks-[^-]+\.mjs$/.test(f)
  && readFileSync(join(distDir, f), "utf8").includes("function createHookRunner("));
const { t: createHookRunner } = await import(pathToFileURL(join(distDir, runnerChunk)));

const NOTE = "[System note: Tool-loop warning after 10 repeated calls. Change your approach or stop if you are not making progress.]";
const CTX = { runId: "run-1", agentId: "main", sessionKey: "agent:main:s1", toolName: "read", toolCallId: "c1" };

/** The plugin registered through a recording api, its hooks handed to OpenClaw's runner. */
function runnerWith(answer, pluginConfig = {}) {
  const api = new FakeApi(pluginConfig);
  registerLoopGuard(api, { runs: new Map(), clock: null, createTransport: (onControl) => new RecordingTransport(onControl, { answer }) });
  const typedHooks = [...api.handlers].map(([hookName, { handler }]) => ({ pluginId: "loopguard", hookName, handler, source: "test" }));
  return createHookRunner({ typedHooks, plugins: [{ id: "loopguard", status: "loaded" }] }, { catchErrors: true });
}

const verdict = (ev, decision, extra = {}) => ({ type: "verdict", run_id: ev.run_id, tool_call_id: ev.tool_call_id, decision, trigger_event_id: ev.event_id, seq: ev.seq, ...extra });

test("OpenClaw's hook runner: a warning's note is appended to the tool result tool_result_persist returns", async () => {
  const runner = runnerWith((ev) => (ev.want_verdict ? [verdict(ev, "warn", { detector: "generic_repeat", level: "warning", count: 10, message: "WARNING", note: NOTE })] : []));
  const decided = await runner.runBeforeToolCall({ toolName: "read", params: { path: "/a" }, runId: "run-1", toolCallId: "c1" }, CTX);
  assert.equal(decided?.block, undefined);
  assert.equal(decided?.requireApproval, undefined, "no approval asked: the default is the note");
  const message = { role: "toolResult", toolCallId: "c1", toolName: "read", content: [{ type: "text", text: "raw" }] };
  const persisted = runner.runToolResultPersist({ toolName: "read", toolCallId: "c1", message }, { agentId: "main", sessionKey: CTX.sessionKey, toolName: "read", toolCallId: "c1" });
  assert.deepEqual(persisted.message.content.map((c) => c.text), ["raw", NOTE]);
});

test("OpenClaw's hook runner: a block verdict blocks with LoopGuard's message", async () => {
  const message = "CRITICAL: Called read with identical arguments and identical outcomes 20 times.";
  const runner = runnerWith((ev) => (ev.want_verdict ? [verdict(ev, "block", { detector: "generic_repeat", level: "critical", count: 20, message })] : []));
  const decided = await runner.runBeforeToolCall({ toolName: "read", params: { path: "/a" }, runId: "run-1", toolCallId: "c1" }, CTX);
  assert.equal(decided.block, true);
  assert.equal(decided.blockReason, message);
});

test("OpenClaw's hook runner: requireApproval asks only in a message run; headless it degrades to the note", async () => {
  const answer = (ev) => (ev.want_verdict ? [verdict(ev, "warn", { detector: "generic_repeat", level: "warning", count: 10, message: "WARNING", note: NOTE })] : []);
  const runner = runnerWith(answer, { onWarn: "requireApproval" });
  const call = (id) => ({ toolName: "read", params: { path: "/a" }, runId: "run-1", toolCallId: id });
  const asked = await runner.runBeforeToolCall(call("c1"), { ...CTX, requester: { channel: "telegram", senderId: "42" } });
  assert.equal(asked.requireApproval.title, "LoopGuard: possible generic_repeat loop");
  const headless = await runner.runBeforeToolCall(call("c2"), { ...CTX, toolCallId: "c2" });
  assert.equal(headless?.requireApproval, undefined, "OpenClaw would fail the call: plugin-approval-unavailable");
  const message = { role: "toolResult", toolCallId: "c2", toolName: "read", content: [{ type: "text", text: "raw" }] };
  const persisted = runner.runToolResultPersist({ toolName: "read", toolCallId: "c2", message }, { agentId: "main", sessionKey: CTX.sessionKey, toolName: "read", toolCallId: "c2" });
  assert.deepEqual(persisted.message.content.map((c) => c.text), ["raw", NOTE]);
});
