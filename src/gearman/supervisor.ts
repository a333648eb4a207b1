/**
 * Owns one (queue, server) link and is the only code that rebuilds it
 * (G6/G7). A lost connection is closed, its running handlers are left to
 * finish (bounded by the drain timeout; their slots keep counting, G2), and a
 * fresh connection is built every reconnect interval (with jitter) through
 * the same code path as start-up, until it succeeds or shutdown begins.
 *
 * @module
 */
import { QueueWorker, type QueueWorkerOptions } from "./worker.ts";
import { deadline, delay } from "../util/async.ts";
import { errorMessage, getLogger } from "../log.ts";

const log = getLogger("gearman");

/** Options of a {@link Supervisor}. */
export interface SupervisorOptions extends QueueWorkerOptions {
  /** Delay between reconnect attempts (±20 % jitter). */
  readonly reconnectIntervalMs: number;
  /** Bound on how long handlers of a lost connection may keep running. */
  readonly drainTimeoutMs: number;
  /** Connection state changes of this link (true = connected and registered). */
  readonly onState: (up: boolean) => void;
  /** A reconnect succeeded (not called for the first connection). */
  readonly onReconnected: () => void;
}

/** How long failed reconnect attempts stay quiet after the first warning (pipeline.md Q7). */
const RETRY_LOG_INTERVAL_MS = 30_000;

/** Supervises one (queue, server) pair. */
export class Supervisor {
  readonly queue: string;
  readonly server: string;
  readonly #options: SupervisorOptions;
  readonly #stop = new AbortController();
  readonly #stopped: Promise<"stop"> = new Promise((resolve) =>
    this.#stop.signal.addEventListener("abort", () => resolve("stop"), { once: true })
  );
  #current: QueueWorker | undefined;
  #loop: Promise<void> | undefined;
  readonly #retired = new Set<Promise<void>>();
  #stopping: Promise<void> | undefined;

  /** @param options Worker options plus reconnect settings and state callbacks. */
  constructor(options: SupervisorOptions) {
    this.queue = options.queue;
    this.server = options.server;
    this.#options = options;
  }

  /** The current generation (tests). */
  get current(): QueueWorker | undefined {
    return this.#current;
  }

  /**
   * Connect, register and start grabbing.
   *
   * @throws {ConnectionClosedError} When the first connection fails; the caller decides whether to retry ({@link startDisconnected}).
   */
  async start(): Promise<void> {
    const worker = await this.#connect();
    this.#install(worker);
    this.#loop = this.#watch();
  }

  /** Start in the reconnect loop (the first connection failed but the process carries on). */
  startDisconnected(): void {
    this.#loop = (async () => {
      if (await this.#reconnect(false)) await this.#watch();
    })();
  }

  /**
   * Stop: end the reconnect loop at once (also mid back-off or mid connect),
   * then drain the current connection within `signal` (G9).
   * Idempotent: every call returns the same promise.
   *
   * @param signal Drain deadline.
   */
  stop(signal: AbortSignal): Promise<void> {
    this.#stopping ??= this.#doStop(signal);
    return this.#stopping;
  }

  async #doStop(signal: AbortSignal): Promise<void> {
    this.#stop.abort(new DOMException("consumer stopping", "AbortError"));
    await this.#loop;
    const current = this.#current;
    if (current !== undefined) await current.drain(signal);
    await Promise.allSettled([...this.#retired]);
    this.#options.onState(false);
  }

  #connect(): Promise<QueueWorker> {
    return QueueWorker.connect({
      ...this.#options,
      connect: { ...this.#options.connect, signal: this.#stop.signal },
    });
  }

  #install(worker: QueueWorker): void {
    this.#current = worker;
    worker.start();
    this.#options.onState(true);
  }

  async #watch(): Promise<void> {
    for (;;) {
      const worker = this.#current as QueueWorker;
      const reason = await Promise.race([worker.closed, this.#stopped]);
      if (reason === "stop" || this.#stop.signal.aborted) return;
      this.#options.onState(false);
      log.warn("gearman: connection lost, reconnecting", {
        queue: this.queue,
        server: this.server,
        error: reason === undefined ? "closed" : errorMessage(reason),
        retry_interval_ms: this.#options.reconnectIntervalMs,
        in_flight: worker.inFlight,
      });
      this.#retire(worker);
      if (!(await this.#reconnect(true))) return;
    }
  }

  /** Let a dead generation's handlers finish, bounded by the drain timeout (G7 step 2). */
  #retire(worker: QueueWorker): void {
    const done = (async () => {
      using limit = deadline(this.#options.drainTimeoutMs, this.#stop.signal);
      await worker.settled(limit.signal);
    })();
    this.#retired.add(done);
    void done.finally(() => this.#retired.delete(done));
  }

  /** Returns true once a new generation is installed, false when shutdown began. */
  async #reconnect(countAsReconnect: boolean): Promise<boolean> {
    let attempts = 0;
    let lastWarnAt = -Infinity;
    const since = performance.now();
    for (;;) {
      const jitter = 0.8 + Math.random() * 0.4;
      try {
        await delay(this.#options.reconnectIntervalMs * jitter, { signal: this.#stop.signal });
      } catch {
        return false;
      }
      attempts++;
      let worker: QueueWorker;
      try {
        worker = await this.#connect();
      } catch (err: unknown) {
        if (this.#stop.signal.aborted) return false;
        const now = performance.now();
        if (now - lastWarnAt >= RETRY_LOG_INTERVAL_MS) {
          lastWarnAt = now;
          log.warn("gearman: reconnect failed, still retrying", {
            queue: this.queue,
            server: this.server,
            attempts,
            down_for_s: Math.round((now - since) / 1000),
            error: errorMessage(err),
          });
        }
        continue;
      }
      // Deno runs this synchronously after the connect resolved: either the
      // new generation is installed before stop looks at it, or stop already
      // began and it is closed without a single grab (G8).
      if (this.#stop.signal.aborted) {
        await worker.abort();
        return false;
      }
      this.#install(worker);
      if (countAsReconnect) this.#options.onReconnected();
      log.info(countAsReconnect ? "gearman: reconnected" : "gearman: connected", {
        queue: this.queue,
        server: this.server,
        attempts,
        down_for_s: Math.round((performance.now() - since) / 1000),
      });
      return true;
    }
  }
}
