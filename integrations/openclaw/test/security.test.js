// Kafka TLS/SASL options of the plugin: validated at registration with every problem listed,
// turned into @platformatic/kafka's `tls` and `sasl`, the password only from the environment.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { ConfigError, resolveConfig } from "../src/config.js";
import { registerLoopGuard } from "../src/index.js";
import { connectionOptions, describeSecurity } from "../src/security.js";
import { FakeApi, RecordingTransport } from "./fakes.js";

const PASSWORD = "s3cr3t-Plugin-Pw";
const security = (block) => resolveConfig({ security: block }).security;

test("without a security block the plugin connects in plaintext, as before", () => {
  assert.deepEqual(resolveConfig({}).security, {
    protocol: "PLAINTEXT", saslMechanism: "SCRAM-SHA-512", passwordEnv: "LOOPGUARD_SASL_PASSWORD", checkHostname: true,
  });
  assert.deepEqual(connectionOptions(resolveConfig({}).security, {}), {});
});

test("SASL_SSL gives sasl with the password from the environment and a verifying tls", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "loopguard-ca-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, "ca.pem"), "CA PEM\n");
  const opts = connectionOptions(
    security({ protocol: "SASL_SSL", username: "agent-runtime", caFile: join(dir, "ca.pem"), passwordEnv: "GW_KAFKA_PW" }),
    { GW_KAFKA_PW: PASSWORD },
  );
  assert.deepEqual(opts.sasl, { mechanism: "SCRAM-SHA-512", username: "agent-runtime", password: PASSWORD });
  assert.deepEqual(opts.tls, { rejectUnauthorized: true, ca: Buffer.from("CA PEM\n") });
});

test("hostname verification is off only on request; the chain is still verified", () => {
  const opts = connectionOptions(security({ protocol: "SSL", checkHostname: false }), {});
  assert.equal(opts.tls.rejectUnauthorized, true);
  assert.equal(opts.tls.checkServerIdentity("kafka-1", {}), undefined);
  assert.equal(connectionOptions(security({ protocol: "SSL" }), {}).tls.checkServerIdentity, undefined);
});

test("every security problem is listed at registration, without the password", () => {
  const block = { protocol: "SASL_PLAINTEXT", caFile: "/no/such/ca.pem", certFile: "/c.pem" };
  assert.throws(() => connectionOptions(security(block), {}), (error) => {
    assert.ok(error instanceof ConfigError);
    assert.deepEqual(error.issues.map((i) => i.path.join(".")), ["security.username", "security.passwordEnv", "security.caFile", "security.keyFile"]);
    assert.match(error.message, /environment variable LOOPGUARD_SASL_PASSWORD is not set/);
    return true;
  });
  assert.throws(() => connectionOptions(security({ protocol: "SSL", caFile: "/no/such/ca.pem" }), {}), /cannot read \/no\/such\/ca\.pem: ENOENT/);
  assert.throws(() => resolveConfig({ security: { protocol: "TLS", password: PASSWORD } }), (error) => {
    assert.deepEqual(error.issues.map((i) => i.path.join(".")), ["security.password", "security.protocol"]);
    return true;
  });
  assert.equal(describeSecurity(security({ protocol: "SASL_SSL", username: "agent-runtime" })), "SASL_SSL SCRAM-SHA-512 as agent-runtime");
});

test("the transport gets the connection options; the log line names the user, not the password", () => {
  process.env.LOOPGUARD_SASL_PASSWORD = PASSWORD;
  try {
    const api = new FakeApi({ security: { protocol: "SASL_PLAINTEXT", saslMechanism: "PLAIN", username: "agent-runtime" } });
    registerLoopGuard(api, { runs: new Map(), clock: null, createTransport: (onControl) => new RecordingTransport(onControl) });
    const logged = JSON.stringify(api.logs);
    assert.match(logged, /SASL_PLAINTEXT PLAIN as agent-runtime/);
    assert.doesNotMatch(logged, new RegExp(PASSWORD));
  } finally {
    delete process.env.LOOPGUARD_SASL_PASSWORD;
  }
});
