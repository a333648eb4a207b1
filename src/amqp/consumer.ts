/**
 * The RabbitMQ consumer: one connection with one channel and one consumer
 * per queue (R1, R2), one handler at a time per queue (R3), ack only after
 * the rows are committed (D1), cancel before close on stop (R5), and a
 * supervisor that rebuilds the whole session every reconnect interval after
 * a loss (R6). Same start/stop contract and observer reports as the Gearman
 * consumer, plus the periodic per-queue summary line (L2).
 *
 * @module
 */
import { AmqpSession, type AmqpSessionOptions } from "./session.ts";
import { type AmqpUrl, parseAmqpUrl } from "./url.ts";
import type { ConsumerObserver, JobHandler } from "../consumer/contract.ts";
import { ConsumerStats } from "../consumer/consumer_stats.ts";
import { deadline, delay } from "../util/async.ts";
import { errorMessage, getLogger } from "../log.ts";

const log = getLogger("rabbitmq");

/** Options of {@link RabbitMqConsumer}. */
export interface RabbitMqConsumerOptions {
  /** `amqp://user:password@host:port/vhost`; an empty path or `/` is vhost `/` (operations.md §1.4). */
  readonly url: string;
  /** Queue names; each gets its own channel and consumer. */
  readonly queues: readonly string[];
  /** Declare the queues durable (`--rabbitmq-durable-queues`). */
  readonly durableQueues: boolean;
  /** Unacknowledged deliveries the broker may push per queue (R2), 1..65535. */
  readonly prefetch: number;
  readonly handler: JobHandler;
  readonly observer: ConsumerObserver;
  /** Pause before each attempt to rebuild a lost connection (R6: 2 s). */
  readonly reconnectIntervalMs: number;
  /** Stop waits this long for running and buffered deliveries before abandoning them (D1). */
  readonly drainTimeoutMs: number;
  /** Bound on the cancel-ok replies at stop (R5: 2 s). */
  readonly cancelTimeoutMs?: number;
  /** Bound on one connection attempt, handshake to consume-ok. Default 10 s. */
  readonly connectTimeoutMs?: number;
  /** First retry delay after a transient handler failure. Default 100 ms. */
  readonly retryInitialMs?: number;
  /** Cap of the retry delay. Default 5 s. */
  readonly retryMaxMs?: number;
  /** Connection name shown by the RabbitMQ management console. */
  readonly connectionName?: string;
  /** Interval of the per-queue summary line; default 30 s, 0 disables. */
  readonly statsIntervalMs?: number;
}

/** Raised when start-up cannot build the first session (R6: the process exits). */
export class RabbitMqStartError extends Error {
  /**
   * @param message What failed; the URL in it is masked.
   * @param options `cause`.
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "RabbitMqStartError";
  }
}

/** How long failed reconnect attempts stay quiet after the first warning (pipeline.md Q7). */
const RETRY_LOG_INTERVAL_MS = 30_000;

/** Consumes every queue from one RabbitMQ broker. */
export class RabbitMqConsumer {
  readonly #options: RabbitMqConsumerOptions;
  readonly #stats: ConsumerStats;
  readonly #stop = new AbortController();
  readonly #stopped: Promise<"stop"> = new Promise((resolve) =>
    this.#stop.signal.addEventListener("abort", () => resolve("stop"), { once: true })
  );
  #url: AmqpUrl | undefined;
  #current: AmqpSession | undefined;
  #loop: Promise<void> | undefined;
  #connected = false;
  #statsTimer: ReturnType<typeof setInterval> | undefined;
  #started = false;
  #stopping: Promise<void> | undefined;

  /**
   * @param options URL, queues, prefetch, handler, observer and timings.
   * @throws {RangeError} On an empty queue list or a prefetch outside 1..65535.
   */
  constructor(options: RabbitMqConsumerOptions) {
    if (options.queues.length === 0) {
      throw new RangeError("Cannot create RabbitMQ consumer: no queues to consume");
    }
    // 0 would mean "unlimited" in AMQP and move the whole backlog into memory (R2).
    if (!Number.isInteger(options.prefetch) || options.prefetch < 1 || options.prefetch > 65535) {
      throw new RangeError(
        `Cannot create RabbitMQ consumer: prefetch must be 1..65535, got ${options.prefetch}`,
      );
    }
    this.#options = options;
    this.#stats = new ConsumerStats(options.queues);
  }

  /** Whether every queue is consuming right now (the `queue_connected` gauge). */
  get connected(): boolean {
    return this.#connected;
  }

  /**
   * Connect, declare every queue, apply the prefetch, register the consumers
   * and start consuming. The first connection is made here, synchronously
   * for the caller (R6): start fails rather than retrying.
   *
   * @throws {RabbitMqStartError} On a malformed URL, an unreachable broker, refused
   *   credentials or vhost, a refused queue declaration, or a stop during start-up.
   */
  async start(): Promise<void> {
    if (this.#started) throw new Error("RabbitMqConsumer.start() called twice");
    if (this.#stopping !== undefined) {
      throw new Error("RabbitMqConsumer.start() called after stop()");
    }
    this.#started = true;
    let url: AmqpUrl;
    try {
      url = parseAmqpUrl(this.#options.url);
    } catch (err: unknown) {
      throw new RabbitMqStartError(`Cannot start RabbitMQ consumer: ${errorMessage(err)}`, {
        cause: err,
      });
    }
    this.#url = url;
    let session: AmqpSession;
    try {
      session = await AmqpSession.open(this.#sessionOptions(url), this.#stop.signal);
    } catch (err: unknown) {
      throw new RabbitMqStartError(
        `Cannot start RabbitMQ consumer: broker ${url.display}: ${errorMessage(err)}`,
        { cause: err },
      );
    }
    if (this.#stop.signal.aborted) {
      await session.close();
      throw new RabbitMqStartError("Cannot start RabbitMQ consumer: stopped during start-up");
    }
    this.#install(session);
    this.#loop = this.#watch();
    const o = this.#options;
    log.info("rabbitmq: consumer started", {
      url: url.display,
      vhost: url.vhost,
      queues: o.queues.length,
      prefetch: o.prefetch,
      // R2: the most that can sit in process memory, unacknowledged.
      max_buffered_messages: o.prefetch * o.queues.length,
    });
    const interval = o.statsIntervalMs ?? 30_000;
    if (interval > 0) this.#statsTimer = setInterval(() => this.#logStats(false), interval);
  }

  /**
   * Stop (R5): end the reconnect loop at once (also mid back-off or mid
   * connect), `basic.cancel` every consumer, let the running and already
   * delivered messages finish and be acknowledged within the drain timeout
   * (then abort their handlers; those messages are redelivered), close every
   * channel and the connection. Idempotent; safe before start.
   */
  stop(): Promise<void> {
    this.#stopping ??= this.#doStop();
    return this.#stopping;
  }

  async #doStop(): Promise<void> {
    if (this.#statsTimer !== undefined) clearInterval(this.#statsTimer);
    this.#statsTimer = undefined;
    this.#stop.abort(new DOMException("consumer stopping", "AbortError"));
    await this.#loop;
    const session = this.#current;
    this.#current = undefined;
    if (session !== undefined) {
      await session.cancel(this.#options.cancelTimeoutMs ?? 2_000);
      using drain = deadline(this.#options.drainTimeoutMs);
      await session.settled(drain.signal);
      await session.close();
    }
    this.#setConnected(false);
    if (this.#started) this.#logStats(true);
  }

  #sessionOptions(url: AmqpUrl): AmqpSessionOptions {
    const o = this.#options;
    return {
      url,
      queues: o.queues,
      durableQueues: o.durableQueues,
      prefetch: o.prefetch,
      handler: o.handler,
      observer: this.#stats.wrap(this.#options.observer),
      ...(o.connectTimeoutMs === undefined ? {} : { connectTimeoutMs: o.connectTimeoutMs }),
      ...(o.retryInitialMs === undefined ? {} : { retryInitialMs: o.retryInitialMs }),
      ...(o.retryMaxMs === undefined ? {} : { retryMaxMs: o.retryMaxMs }),
      ...(o.connectionName === undefined ? {} : { connectionName: o.connectionName }),
    };
  }

  #install(session: AmqpSession): void {
    this.#current = session;
    session.start();
    // operations.md §2.5: 1 only now that every channel is open, every queue
    // declared, every qos applied and every consume-ok received.
    this.#setConnected(true);
  }

  #setConnected(up: boolean): void {
    if (this.#connected === up) return;
    this.#connected = up;
    for (const q of this.#options.queues) this.#options.observer.queueConnected(q, up);
  }

  async #watch(): Promise<void> {
    for (;;) {
      const session = this.#current as AmqpSession;
      const reason = await Promise.race([session.lost, this.#stopped]);
      if (reason === "stop" || this.#stop.signal.aborted) return;
      this.#current = undefined;
      this.#setConnected(false);
      log.warn("rabbitmq: connection lost, reconnecting", {
        url: this.#url?.display,
        error: errorMessage(reason),
        retry_interval_ms: this.#options.reconnectIntervalMs,
        in_flight: session.inFlight,
      });
      // R6: the old generation's loops end before a new one starts, so a
      // queue never runs two handlers at once (R3). Their acks cannot reach
      // the broker any more; the wait is bounded and ends with shutdown.
      {
        using limit = deadline(this.#options.drainTimeoutMs, this.#stop.signal);
        await session.settled(limit.signal);
      }
      await session.close();
      if (!(await this.#reconnect())) return;
    }
  }

  /** Returns true once a new session is installed, false when shutdown began. */
  async #reconnect(): Promise<boolean> {
    const url = this.#url as AmqpUrl;
    let attempts = 0;
    let lastWarnAt = -Infinity;
    const since = performance.now();
    for (;;) {
      try {
        await delay(this.#options.reconnectIntervalMs, { signal: this.#stop.signal });
      } catch {
        return false;
      }
      attempts++;
      let session: AmqpSession;
      try {
        session = await AmqpSession.open(this.#sessionOptions(url), this.#stop.signal);
      } catch (err: unknown) {
        if (this.#stop.signal.aborted) return false;
        const now = performance.now();
        if (now - lastWarnAt >= RETRY_LOG_INTERVAL_MS) {
          lastWarnAt = now;
          log.warn("rabbitmq: reconnect failed, still retrying", {
            url: url.display,
            attempts,
            down_for_s: Math.round((now - since) / 1000),
            error: errorMessage(err),
          });
        }
        continue;
      }
      // Deno runs this synchronously after the open resolved: either the new
      // session is installed before stop looks at it, or stop already began
      // and it is closed without handling a single delivery (G8).
      if (this.#stop.signal.aborted) {
        await session.close();
        return false;
      }
      this.#install(session);
      for (const q of this.#options.queues) {
        this.#stats.reconnected(q);
        this.#options.observer.queueReconnected(q);
      }
      log.info("rabbitmq: reconnected", {
        url: url.display,
        attempts,
        down_for_s: Math.round((performance.now() - since) / 1000),
      });
      return true;
    }
  }

  #logStats(final: boolean): void {
    this.#stats.log(
      log,
      final ? "rabbitmq: consumer stopped" : "rabbitmq: consumer stats",
      () => ({ connected: this.#connected ? 1 : 0 }),
    );
  }
}
