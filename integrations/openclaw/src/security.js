// Kafka TLS and SASL for the plugin, the same choices as the worker's LOOPGUARD_SECURITY_*
// settings (docs/security.md): a gateway logs in as the `agent-runtime` principal, which may
// write the input topics and read the control topic, nothing else. The password is read from
// the gateway's environment (`passwordEnv`), never from openclaw.json.
import { readFileSync } from "node:fs";
import { ConfigError } from "./config.js";

/**
 * @platformatic/kafka connection options (`tls`, `sasl`) for the resolved `security` block;
 * throws ConfigError listing every problem (missing user or password, unreadable files).
 */
export function connectionOptions(security, env = process.env) {
  const issues = [];
  const problem = (key, message) => issues.push({ path: ["security", key], message });
  const { protocol } = security;
  const isTls = protocol === "SSL" || protocol === "SASL_SSL";
  const isSasl = protocol === "SASL_PLAINTEXT" || protocol === "SASL_SSL";
  const options = {};
  if (isSasl) {
    if (!security.username) problem("username", `is required with protocol ${protocol}`);
    const password = env[security.passwordEnv];
    if (!password) problem("passwordEnv", `environment variable ${security.passwordEnv} is not set`);
    options.sasl = { mechanism: security.saslMechanism, username: security.username, password };
  }
  const files = ["caFile", "certFile", "keyFile"].filter((key) => security[key] !== undefined);
  if (!isTls && files.length) problem(files[0], `${files.join(", ")} need protocol SSL or SASL_SSL, not ${protocol}`);
  if ((security.certFile === undefined) !== (security.keyFile === undefined)) {
    problem(security.certFile === undefined ? "certFile" : "keyFile", "mutual TLS needs both certFile and keyFile");
  }
  if (isTls) {
    const read = (key) => {
      try {
        return readFileSync(security[key]);
      } catch (error) {
        problem(key, `cannot read ${security[key]}: ${error.code ?? error.message}`);
        return undefined;
      }
    };
    // The chain is always verified; only the name check can be turned off (checkHostname).
    const tls = { rejectUnauthorized: true };
    if (security.caFile !== undefined) tls.ca = read("caFile");
    if (security.certFile !== undefined) tls.cert = read("certFile");
    if (security.keyFile !== undefined) tls.key = read("keyFile");
    if (!security.checkHostname) tls.checkServerIdentity = () => undefined;
    options.tls = tls;
  }
  if (issues.length) throw new ConfigError(issues);
  return options;
}

/** One line for logs: protocol, mechanism and user; never the password. */
export function describeSecurity(security) {
  const isSasl = security.protocol.startsWith("SASL_");
  return isSasl ? `${security.protocol} ${security.saslMechanism} as ${security.username}` : security.protocol;
}
