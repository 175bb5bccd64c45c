// Kafka side of the plugin (@platformatic/kafka, pure JavaScript): one ordered sender with a
// bounded buffer, and a group-less reader of the control topic (every partition, from its end
// at start-up), as the Python runtime client reads it. Nothing here ever throws into OpenClaw:
// an unreachable broker is a warning, a growing buffer and, past its bound, dropped events.
import { Consumer, Producer, compatibilityPartitioner } from "@platformatic/kafka";

const BATCH_MAX = 500;
const FETCH_MAX_WAIT_MS = 100;
const BACKOFF_MIN_MS = 100;
const BACKOFF_MAX_MS = 5000;

const sleep = (ms, signal) => new Promise((resolve) => {
  const timer = setTimeout(resolve, ms);
  signal?.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
});

export class KafkaTransport {
  /** `onControl(message)` receives every decoded control-topic message. */
  constructor({ brokers, topics, clientId, bufferMaxEvents, logger, onControl, connection = {}, kafka = {} }) {
    this.brokers = brokers;
    this.connection = connection; // tls / sasl (src/security.js)
    this.topics = topics;
    this.clientId = clientId;
    this.bufferMaxEvents = bufferMaxEvents;
    this.logger = logger;
    this.onControl = onControl;
    this.kafka = { Producer, Consumer, ...kafka };
    this.queue = [];
    this.stats = { sent: 0, dropped: 0, sendErrors: 0, controlErrors: 0, controlMessages: 0 };
    this.isSending = false;
    this.sendDown = false; // the last delivery attempt failed
    this.readDown = false; // the last control-topic read failed
    this.downListeners = new Set(); // one per call waiting on Kafka, removed when it stops waiting
    this.abort = new AbortController();
    this.wake = null;
    this.idleWaiters = [];
    let markReady;
    this.controlReady = new Promise((resolve) => { markReady = resolve; });
    this.markControlReady = markReady;
    this.isControlReady = false;
    this.loops = [];
  }

  /** Start the sender and the control reader in the background; returns at once. */
  start() {
    const common = { clientId: this.clientId, bootstrapBrokers: this.brokers, autocreateTopics: false, retries: 0, timeout: 5000, ...this.connection };
    this.producer = new this.kafka.Producer({ ...common, acks: -1, partitioner: compatibilityPartitioner });
    this.consumer = new this.kafka.Consumer({ ...common, groupId: `${this.clientId}-unused` });
    this.loops = [this.#sendLoop(), this.#readLoop()];
  }

  /** Queue one message (topic, key, JSON text); the oldest is dropped past the bound. */
  send(topic, key, value) {
    this.queue.push({ topic, key: Buffer.from(key), value: Buffer.from(value) });
    if (this.queue.length > this.bufferMaxEvents) {
      this.queue.shift();
      this.stats.dropped += 1;
      if (this.stats.dropped === 1 || this.stats.dropped % 1000 === 0) {
        this.logger.warn(`loopguard: event buffer full (${this.bufferMaxEvents}); ${this.stats.dropped} event(s) dropped so far`);
      }
    }
    this.wake?.();
  }

  /** True while the last delivery and the last control read succeeded (or none was tried yet). */
  get isConnected() {
    return !this.sendDown && !this.readDown;
  }

  /** Call `listener` when Kafka next becomes unreachable; returns the function that cancels it. */
  onDown(listener) {
    this.downListeners.add(listener);
    return () => this.downListeners.delete(listener);
  }

  #outage(kind, error) {
    if (this.isConnected) {
      this.logger.warn(`loopguard: ${kind} failed, LoopGuard fails open until Kafka answers: ${error?.message ?? error}`);
    }
    if (kind === "publishing") this.sendDown = true;
    else this.readDown = true;
    for (const listener of [...this.downListeners]) listener();
  }

  #recovered(kind) {
    const wasDown = !this.isConnected;
    if (kind === "publishing") this.sendDown = false;
    else this.readDown = false;
    if (wasDown && this.isConnected) this.logger.info("loopguard: Kafka reachable again");
  }

  async #sendLoop() {
    let backoff = BACKOFF_MIN_MS;
    while (!this.abort.signal.aborted || this.queue.length) {
      if (!this.queue.length) {
        for (const resolve of this.idleWaiters.splice(0)) resolve();
        if (this.abort.signal.aborted) break;
        await new Promise((resolve) => { this.wake = resolve; });
        this.wake = null;
        continue;
      }
      const batch = this.queue.slice(0, BATCH_MAX);
      this.isSending = true;
      try {
        await this.producer.send({ messages: batch });
        // Only now leave the queue: a failed batch is sent again, in the same order.
        const sent = new Set(batch); // some may have been dropped from the head meanwhile
        while (this.queue.length && sent.has(this.queue[0])) this.queue.shift();
        this.stats.sent += batch.length;
        this.#recovered("publishing");
        backoff = BACKOFF_MIN_MS;
      } catch (error) {
        this.stats.sendErrors += 1;
        this.#outage("publishing", error);
        if (this.closing) break; // close() gave up waiting: the rest is counted as dropped
        await sleep(backoff, this.abort.signal);
        backoff = Math.min(BACKOFF_MAX_MS, backoff * 2);
      } finally {
        this.isSending = false;
      }
    }
    for (const resolve of this.idleWaiters.splice(0)) resolve();
  }

  async #readLoop() {
    const signal = this.abort.signal;
    let positions = null; // Map partition → next offset (bigint)
    let backoff = BACKOFF_MIN_MS;
    while (!signal.aborted) {
      try {
        const metadata = await this.consumer.metadata({ topics: [this.topics.control], autocreateTopics: false, forceUpdate: positions === null });
        const topic = metadata.topics.get(this.topics.control);
        if (positions === null) {
          const ends = (await this.consumer.listOffsets({ topics: [this.topics.control] })).get(this.topics.control);
          positions = new Map(ends.map((offset, partition) => [partition, offset]));
          this.isControlReady = true;
          this.markControlReady();
        }
        const byLeader = new Map();
        for (const [partition, offset] of positions) {
          const leader = topic.partitions[partition].leader;
          if (!byLeader.has(leader)) byLeader.set(leader, []);
          byLeader.get(leader).push({ partition, currentLeaderEpoch: -1, fetchOffset: offset, lastFetchedEpoch: -1, partitionMaxBytes: 1 << 20 });
        }
        const responses = await Promise.all([...byLeader].map(([node, partitions]) => this.consumer.fetch({
          node, topics: [{ topicId: topic.id, partitions }], maxWaitTime: FETCH_MAX_WAIT_MS, minBytes: 1, maxBytes: 4 << 20,
        })));
        for (const response of responses) {
          for (const part of response.responses.flatMap((t) => t.partitions)) {
            if (part.errorCode !== 0) throw new Error(`control topic fetch error ${part.errorCode} on partition ${part.partitionIndex}`);
            for (const batch of part.records ?? []) {
              for (const record of batch.records) {
                const offset = batch.firstOffset + BigInt(record.offsetDelta);
                if (offset < positions.get(part.partitionIndex)) continue;
                positions.set(part.partitionIndex, offset + 1n);
                this.#dispatch(record.value);
              }
            }
          }
        }
        this.#recovered("reading the control topic");
        backoff = BACKOFF_MIN_MS;
      } catch (error) {
        if (signal.aborted) break;
        this.stats.controlErrors += 1;
        this.#outage("reading the control topic", error);
        await sleep(backoff, signal);
        backoff = Math.min(BACKOFF_MAX_MS, backoff * 2);
      }
    }
  }

  #dispatch(raw) {
    let message;
    try {
      message = JSON.parse(raw?.toString("utf8") ?? "");
    } catch {
      return; // not ours to judge: the control topic only carries LoopGuard's JSON
    }
    if (message === null || typeof message !== "object") return;
    this.stats.controlMessages += 1;
    this.onControl(message);
  }

  /** Wait until the buffer is empty (or `timeoutMs` passed); true if everything was sent. */
  async flush(timeoutMs) {
    if (!this.queue.length && !this.isSending) return true;
    const idle = new Promise((resolve) => this.idleWaiters.push(resolve));
    let timer;
    const late = new Promise((resolve) => { timer = setTimeout(resolve, timeoutMs); });
    await Promise.race([idle, late]);
    clearTimeout(timer);
    return this.queue.length === 0;
  }

  /** Flush for up to `timeoutMs`, then stop both loops and close the clients. */
  async close(timeoutMs) {
    const flushed = await this.flush(timeoutMs);
    if (!flushed) {
      this.stats.dropped += this.queue.length;
      this.logger.warn(`loopguard: shutting down with ${this.queue.length} unsent event(s)`);
    }
    this.closing = true;
    this.queue.length = 0;
    this.abort.abort();
    this.wake?.();
    const stopped = new AbortController(); // so the 1 s bound does not keep the process alive
    await Promise.race([Promise.allSettled(this.loops), sleep(1000, stopped.signal)]);
    stopped.abort();
    await Promise.allSettled([this.producer?.close(true), this.consumer?.close(true)]);
  }
}
