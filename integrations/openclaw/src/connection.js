// The Kafka connection belongs to the process, not to a plugin instance: the gateway registers
// the plugin more than once (and again on a config reload), and the tool hooks, gateway_stop
// and the services can each land on a different instance. Whichever instance publishes, they
// share one transport; whichever is told to stop, it flushes that transport.

/** One process's Kafka transport, shared by every registered instance of the plugin. */
export class SharedConnection {
  constructor() {
    this.transport = null;
    this.listeners = new Set(); // each instance's control-message handler
    this.isShutDown = false; // gateway_stop: the process is going away, nothing reopens
    this.lost = 0; // events that were never delivered: unsent at close, or sent after shutdown
  }

  /** Accept events again after a shutdown (the gateway started its services again). */
  reopen() {
    this.isShutDown = false;
  }

  /** Receive every control-topic message; returns the function that stops it. */
  listen(onControl) {
    this.listeners.add(onControl);
    return () => this.listeners.delete(onControl);
  }

  /** The running transport, started with `createTransport(onControl)` on first use; null after shutdown. */
  acquire(createTransport) {
    if (this.isShutDown) return null;
    if (this.transport === null) {
      this.transport = createTransport((message) => {
        for (const listener of this.listeners) listener(message);
      });
      this.transport.start();
    }
    return this.transport;
  }

  /**
   * Flush (bounded by `timeoutMs`) and close the transport; a later event opens a new one unless
   * `shutdown`. Returns how many buffered events were lost.
   */
  async close(timeoutMs, { shutdown = false } = {}) {
    if (shutdown) this.isShutDown = true;
    const transport = this.transport;
    this.transport = null;
    if (transport === null) return 0;
    const droppedBefore = transport.stats?.dropped ?? 0;
    await transport.close(timeoutMs);
    const lost = (transport.stats?.dropped ?? 0) - droppedBefore;
    this.lost += lost;
    return lost;
  }
}

const CONNECTION_KEY = Symbol.for("loopguard.openclaw.connection");

/** The process-wide connection (survives plugin reloads and double registration). */
export function processConnection() {
  globalThis[CONNECTION_KEY] ??= new SharedConnection();
  return globalThis[CONNECTION_KEY];
}
