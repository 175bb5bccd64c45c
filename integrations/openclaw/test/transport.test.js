// The real Kafka transport with no broker behind its address: nothing blocks, the buffer stays
// bounded (oldest dropped, counted, warned once), and shutdown gives up after its budget.
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { test } from "node:test";
import { KafkaTransport } from "../src/transport.js";

async function deadAddress() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return `127.0.0.1:${port}`; // nothing listens here any more: connections are refused
}

test("an unreachable broker costs nothing but a bounded buffer and warnings", async () => {
  const logs = [];
  const logger = { info: (m) => logs.push(`info ${m}`), warn: (m) => logs.push(`warn ${m}`), error: (m) => logs.push(`error ${m}`) };
  const transport = new KafkaTransport({
    brokers: [await deadAddress()],
    topics: { toolCalls: "t.calls", compactions: "t.compactions", control: "t.control" },
    clientId: "loopguard-test", bufferMaxEvents: 100, logger, onControl: () => {},
  });
  transport.start();
  const started = performance.now();
  for (let i = 0; i < 250; i += 1) transport.send("t.calls", "run-1", JSON.stringify({ seq: i }));
  assert.ok(performance.now() - started < 100, "send never waits for Kafka");
  assert.equal(transport.queue.length, 100);
  assert.equal(transport.stats.dropped, 150);
  assert.equal(JSON.parse(transport.queue[0].value).seq, 150, "the oldest events go first");
  const deadline = performance.now() + 10_000;
  while (transport.isConnected && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  assert.equal(transport.isConnected, false);
  assert.equal(transport.isControlReady, false);

  const closing = performance.now();
  await transport.close(300);
  assert.ok(performance.now() - closing < 2500, "shutdown is bounded");
  assert.equal(transport.stats.dropped, 250);
  assert.equal(logs.filter((l) => l.includes("buffer full")).length, 1);
  assert.ok(logs.some((l) => l.startsWith("warn loopguard: publishing failed") || l.startsWith("warn loopguard: reading the control topic failed")));
  assert.ok(logs.some((l) => l.includes("shutting down with 100 unsent event(s)")));
});
