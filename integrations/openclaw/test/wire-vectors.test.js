// The shared vectors (tests/data/wire_vectors.json, written by the Python runtime client):
// the plugin's hashes, its RunEvents and its hook handlers produce the same bytes.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { argsHash, normalizeTool, outcomeUnknownToolName, resultHash } from "../src/hashing.js";
import { registerLoopGuard } from "../src/index.js";
import { RunEvents } from "../src/run-events.js";
import { FakeApi, RecordingTransport } from "./fakes.js";

const VECTORS = JSON.parse(readFileSync(new URL("../../../tests/data/wire_vectors.json", import.meta.url), "utf8"));
const TOPIC = { tool_calls: "toolCalls", compactions: "compactions" };
const topics = Object.fromEntries(Object.entries(VECTORS.topics).map(([k, v]) => [TOPIC[k] ?? k, v]));

for (const c of VECTORS.hashes) {
  test(`hash vector: ${c.id}`, () => {
    const channelTools = c.channel_tools ?? ["telegram"];
    assert.deepEqual({
      args_hash: argsHash(c.tool, c.args),
      result_hash: resultHash(normalizeTool(c.tool), c.args, c.outcome, channelTools),
      unknown_tool_name: outcomeUnknownToolName(c.outcome),
    }, c.expected);
  });
}

function outcomeOf(step) {
  if ("exception" in step) return { error: new Error(step.exception) };
  if ("error" in step) return { error: step.error };
  return "result" in step ? { result: step.result } : {};
}

for (const s of VECTORS.runs) {
  test(`RunEvents writes the runtime client's bytes: ${s.id}`, () => {
    const { run_id, agent_id, session_key, privacy } = s.client;
    const run = new RunEvents(run_id, { agentId: agent_id, sessionKey: session_key, privacy });
    const got = s.steps.map((step) => {
      const ev = step.op === "tool_call" ? run.toolCall(step.tool, step.args, step.tool_call_id, step.want_verdict ?? false)
        : step.op === "tool_result" ? run.toolResult(step.tool_call_id, step.tool, step.args, outcomeOf(step))
          : step.op === "compaction" ? run.compaction() : run.end();
      const lifecycle = ev.type === "compaction" || ev.type === "run_end";
      return { topic: lifecycle ? VECTORS.topics.compactions : VECTORS.topics.tool_calls, key: ev.run_id, value: JSON.stringify(ev) };
    });
    assert.deepEqual(got, s.expected);
  });

  test(`the hook handlers publish the same messages: ${s.id}`, async () => {
    const { run_id, agent_id, session_key, privacy } = s.client;
    const isGate = s.steps.some((step) => step.want_verdict);
    const api = new FakeApi({ topics, privacy, mode: isGate ? "gate" : "observe" });
    let transport;
    registerLoopGuard(api, {
      runs: new Map(),
      clock: null,
      createTransport: (onControl) => (transport = new RecordingTransport(onControl, {
        answer: (ev) => (ev.want_verdict ? [{ type: "verdict", run_id: ev.run_id, tool_call_id: ev.tool_call_id, decision: "allow" }] : []),
      })),
    });
    const ctx = { runId: run_id, ...(agent_id ? { agentId: agent_id } : {}), ...(session_key ? { sessionKey: session_key } : {}) };
    for (const step of s.steps) {
      const call = { toolName: step.tool, params: step.args, runId: run_id, ...(step.tool_call_id ? { toolCallId: step.tool_call_id } : {}) };
      if (step.op === "tool_call") assert.equal(await api.emit("before_tool_call", call, { ...ctx, toolName: step.tool }), undefined);
      else if (step.op === "tool_result") {
        const outcome = outcomeOf(step);
        // OpenClaw's after_tool_call carries an error as its message text (and the result too).
        const error = outcome.error instanceof Error ? outcome.error.message : outcome.error;
        await api.emit("after_tool_call", { ...call, ...("error" in outcome ? { error, result: { content: [] } } : { result: outcome.result }), durationMs: 5 }, ctx);
      } else if (step.op === "compaction") await api.emit("after_compaction", { messageCount: 12, compactedCount: 8 }, ctx);
      else await api.emit("agent_end", { runId: run_id, messages: [], success: true }, ctx);
    }
    assert.deepEqual(transport.sent.map(({ topic, key, value }) => ({ topic, key, value })), s.expected);
  });
}
