// Test doubles: a recording fake of OpenClaw's plugin api and a transport that records what
// would go to Kafka and lets a test play the worker's control messages back.
export class FakeApi {
  /** Records api.on registrations and log lines; `emit` calls handlers as OpenClaw would. */
  constructor(pluginConfig = {}, config = undefined) {
    this.pluginConfig = pluginConfig;
    this.config = config; // the gateway's openclaw.json (api.config)
    this.handlers = new Map();
    this.services = [];
    this.logs = [];
    const log = (level) => (message) => this.logs.push({ level, message });
    this.logger = { debug: log("debug"), info: log("info"), warn: log("warn"), error: log("error") };
  }

  registerService(service) {
    this.services.push(service);
  }

  on(name, handler, opts) {
    if (this.handlers.has(name)) throw new Error(`${name} registered twice`);
    this.handlers.set(name, { handler, opts });
  }

  emit(name, event, ctx) {
    return this.handlers.get(name).handler(event, ctx);
  }
}

export class RecordingTransport {
  /** `answer(event)` returns control messages to deliver when an event is sent (a fake worker). */
  constructor(onControl, { answer = () => [], isConnected = true } = {}) {
    this.onControl = onControl;
    this.answer = answer;
    this.sent = [];
    this.isConnected = isConnected;
    this.isControlReady = true;
    this.controlReady = Promise.resolve();
    this.started = false;
    this.closedWith = null;
    this.stats = { dropped: 0 };
    this.downListeners = new Set();
  }

  /** Like KafkaTransport.onDown: `goDown()` calls the listeners. */
  onDown(listener) {
    this.downListeners.add(listener);
    return () => this.downListeners.delete(listener);
  }

  goDown() {
    this.isConnected = false;
    for (const listener of [...this.downListeners]) listener();
  }

  start() {
    this.started = true;
  }

  send(topic, key, value) {
    this.sent.push({ topic, key, value });
    for (const message of this.answer(JSON.parse(value))) queueMicrotask(() => this.onControl(message));
  }

  async close(timeoutMs) {
    this.closedWith = timeoutMs;
  }

  events() {
    return this.sent.map((m) => JSON.parse(m.value));
  }
}
