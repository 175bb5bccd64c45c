// The plugin with its real Kafka transport and no broker behind the address: a gated call
// never waits for a verdict nobody can give. (The recording transport of test/fakes.js is
// always connected, so only the real one can show this.)
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { test } from "node:test";
import { registerLoopGuard } from "../src/index.js";
import { FakeApi } from "./fakes.js";

export async function deadAddress() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return `127.0.0.1:${port}`; // nothing listens here any more: connections are refused
}

const CTX = { runId: "run-1", agentId: "main", sessionKey: "agent:main:s1" };

test("a broker that is down fails every gated call open without waiting for its verdict", async () => {
  const api = new FakeApi({ brokers: [await deadAddress()], verdictTimeoutMs: 10_000, flushTimeoutMs: 100 });
  const guard = registerLoopGuard(api, { runs: new Map(), connection: null });
  const started = performance.now();
  for (const id of ["c1", "c2", "c3"]) {
    const call = { toolName: "read", params: { path: "/a" }, runId: "run-1", toolCallId: id };
    assert.equal(await api.emit("before_tool_call", call, CTX), undefined);
  }
  // Waiting for the control reader or the verdict costs verdictTimeoutMs (10 s) per call.
  assert.ok(performance.now() - started < 10_000, "no call waited for its verdict timeout");
  assert.equal(guard.stats.verdictTimeouts, 0);
  assert.equal(guard.stats.failOpenDisconnected, 3);
  await api.emit("gateway_stop", { reason: "shutdown" }, {});
  assert.equal(guard.stats.lostAtShutdown, 3, "the buffered calls are counted as lost");
  assert.ok(api.logs.some((l) => l.level === "warn" && /shutting down with 3 unsent event\(s\)/.test(l.message)));
});
