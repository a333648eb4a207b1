/**
 * One generation of the RabbitMQ link: one connection, one channel per queue
 * carrying exactly one consumer with its own prefetch (R1, R2), one delivery
 * lane per queue whose handler runs one message at a time in delivery order
 * (R3), and an ack only after the handler resolved (D1, R4).
 *
 * Built by the consumer, which is the only code that replaces it (R6): a lost
 * session is never repaired, a new one is opened through the start-up path.
 *
 * @module
 */
import {
  type AMQPChannel,
  AMQPClient,
  type AMQPConsumer,
  type AMQPMessage,
} from "@cloudamqp/amqp-client";
import {
  type ConsumerObserver,
  DiscardJobError,
  type Job,
  type JobHandler,
  type JobResult,
} from "../consumer/contract.ts";
import type { AmqpUrl } from "./url.ts";
import { abortable, aborted, deadline, settledWithin, sleepUnlessAborted } from "../util/async.ts";
import { errorMessage, getLogger } from "../log.ts";

const log = getLogger("rabbitmq");

/**
 * Flags of every queue declaration (R1): durable as configured, not exclusive,
 * not auto-deleted, no arguments. The broker module, the command publisher, the
 * test publisher and the consumer must declare with exactly these, or RabbitMQ
 * answers 406 PRECONDITION_FAILED. The broker module's `DurableQueues` defaults
 * to false (and so did the PHP worker's `durable_queues`), hence
 * `--rabbitmq-durable-queues` defaults to false; RabbitMQ 4.x may refuse
 * non-durable, non-exclusive queues, and then both sides must say true.
 *
 * @param durable `--rabbitmq-durable-queues`.
 * @returns The `queue.declare` flags.
 */
export function queueDeclareFlags(durable: boolean): {
  readonly passive: false;
  readonly durable: boolean;
  readonly exclusive: false;
  readonly autoDelete: false;
} {
  return { passive: false, durable, exclusive: false, autoDelete: false };
}

/**
 * The explicit consumer tag of a queue (R2): `basic.cancel` needs it (R5),
 * and the management console shows which queue a consumer serves.
 *
 * @param queue Queue name.
 * @returns `statusengine-worker.<queue>`.
 */
export function consumerTag(queue: string): string {
  return `statusengine-worker.${queue}`;
}

/** Options of {@link AmqpSession.open}. */
export interface AmqpSessionOptions {
  readonly url: AmqpUrl;
  readonly queues: readonly string[];
  /** Declare the queues durable (`--rabbitmq-durable-queues`). */
  readonly durableQueues: boolean;
  /** `basic.qos` prefetch count per consumer (R2), 1..65535. */
  readonly prefetch: number;
  readonly handler: JobHandler;
  readonly observer: ConsumerObserver;
  /** Bound on dial, handshake, channels, declarations, qos and consume together. Default 10 s. */
  readonly connectTimeoutMs?: number;
  /** First retry delay after a transient handler failure; doubles up to {@link retryMaxMs}. Default 100 ms. */
  readonly retryInitialMs?: number;
  /** Cap of the retry delay. Default 5 s. */
  readonly retryMaxMs?: number;
  /** Connection name shown by the management console. */
  readonly connectionName?: string;
}

/** Raised when a queue cannot be declared (R1 asks the message to name the likely cause). */
export class QueueDeclareError extends Error {
  readonly queue: string;
  /** Durability this side declared with. */
  readonly durable: boolean;
  /**
   * @param queue The queue.
   * @param durable Durability this side declared with.
   * @param options `cause`: the broker's answer.
   */
  constructor(queue: string, durable: boolean, options: ErrorOptions & { cause: unknown }) {
    const detail = errorMessage(options.cause);
    const hint = /PRECONDITION_FAILED|\(406\)/.test(detail)
      ? `: the queue exists with other flags; the likely cause is a durability mismatch: it ` +
        `was declared ${durable ? "durable" : "non-durable"} because --rabbitmq-durable-queues ` +
        `(STATUSENGINE_RABBITMQ_DURABLE_QUEUES, rabbitmq_durable_queues, legacy ` +
        `rabbitmq.durable_queues) is ${durable}; set it to match the broker module's ` +
        "DurableQueues, or delete the queue once with core and worker stopped"
      : "";
    super(`Cannot declare queue "${queue}": ${detail}${hint}`, options);
    this.name = "QueueDeclareError";
    this.queue = queue;
    this.durable = durable;
  }
}

const CLOSE_TIMEOUT_MS = 2_000;
const SOCKET_CLOSE_GRACE_MS = 1_000;

/** The deliveries of one queue, handled one at a time (R3). */
class Lane {
  readonly queue: string;
  channel: AMQPChannel | undefined;
  consumer: AMQPConsumer | undefined;
  // Bounded by the prefetch count: the broker pushes no more unacked deliveries (R2).
  readonly #buffer: AMQPMessage[] = [];
  #wake: (() => void) | undefined;
  #accepting = true;
  #ending: "no" | "after-buffer" | "now" = "no";

  constructor(queue: string) {
    this.queue = queue;
  }

  push(msg: AMQPMessage): void {
    // Not started, not answered: closing the channel hands it back to the broker.
    if (!this.#accepting) return;
    this.#buffer.push(msg);
    this.#wakeUp();
  }

  /** The next delivery, or undefined once the lane has ended. */
  async next(): Promise<AMQPMessage | undefined> {
    for (;;) {
      if (this.#ending === "now") return undefined;
      const msg = this.#buffer.shift();
      if (msg !== undefined) return msg;
      if (this.#ending === "after-buffer") return undefined;
      await new Promise<void>((resolve) => (this.#wake = resolve));
    }
  }

  /** Take nothing new; handle what was delivered before the cancel (R5 step 3). */
  finishBuffered(): void {
    this.#accepting = false;
    if (this.#ending === "no") this.#ending = "after-buffer";
    this.#wakeUp();
  }

  /** Take nothing more; deliveries not started yet are left to the broker. */
  endNow(): void {
    this.#accepting = false;
    this.#ending = "now";
    this.#buffer.length = 0;
    this.#wakeUp();
  }

  #wakeUp(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }
}

/** One connection with one consuming channel per queue. */
export class AmqpSession {
  readonly #options: AmqpSessionOptions;
  readonly #client: AMQPClient;
  readonly #lanes: Lane[];
  readonly #lost = Promise.withResolvers<Error>();
  #lostReason: Error | undefined;
  #draining = false;
  #closing: Promise<void> | undefined;
  #socketClosed: Promise<void> | undefined;
  readonly #loops: Promise<void>[] = [];
  readonly #handlerAbort = new AbortController();
  // Wakes retry back-offs when the session drains, is lost or closes.
  readonly #stopRetries = new AbortController();
  #inFlight = 0;

  private constructor(options: AmqpSessionOptions) {
    this.#options = options;
    // Null logger: the library's own lines would bypass our format and policy.
    this.#client = new AMQPClient(options.url.href, undefined, null);
    if (options.connectionName !== undefined) this.#client.name = options.connectionName;
    this.#client.onerror = (err) => log.debug("rabbitmq: connection error", { error: err.message });
    this.#lanes = options.queues.map((q) => new Lane(q));
  }

  /**
   * Connect, and per queue open a channel, declare the queue, apply the
   * prefetch and register the consumer (R1, R2). Deliveries that arrive
   * before {@link start} wait in their lane. A failed or aborted attempt
   * closes whatever it opened and leaves nothing behind (R6).
   *
   * @param options URL, queues, prefetch, handler, observer.
   * @param signal Aborts the attempt (shutdown).
   * @returns A session ready to {@link start}.
   * @throws {QueueDeclareError} When a queue declaration is refused.
   * @throws {Error} When the broker is unreachable, refuses the login or the vhost, or does not answer within the connect timeout.
   */
  static async open(options: AmqpSessionOptions, signal: AbortSignal): Promise<AmqpSession> {
    const session = new AmqpSession(options);
    const timeoutMs = options.connectTimeoutMs ?? 10_000;
    using limit = deadline(timeoutMs, signal);
    try {
      await abortable(session.#setUp(), limit.signal);
    } catch (err: unknown) {
      await session.close();
      if (signal.aborted) throw signal.reason;
      if (limit.signal.aborted) {
        throw new Error(`No answer from the broker within ${timeoutMs} ms`, { cause: err });
      }
      throw err;
    }
    return session;
  }

  async #setUp(): Promise<void> {
    const client = this.#client;
    const connecting = client.connect();
    const socket = client.socket;
    if (socket !== undefined) {
      this.#socketClosed = new Promise((resolve) => socket.once("close", () => resolve()));
    }
    await connecting;
    client.ondisconnect = (err) => this.#markLost(err ?? new Error("connection closed"));
    await Promise.all(this.#lanes.map((lane) => this.#openLane(lane)));
  }

  async #openLane(lane: Lane): Promise<void> {
    const o = this.#options;
    const channel = await this.#client.channel();
    lane.channel = channel;
    try {
      await channel.queueDeclare(lane.queue, queueDeclareFlags(o.durableQueues), {});
    } catch (err: unknown) {
      throw new QueueDeclareError(lane.queue, o.durableQueues, { cause: err });
    }
    // global=false: the limit applies to the one consumer of this channel (R2).
    await channel.basicQos(o.prefetch, 0, false);
    const consumer = await channel.basicConsume(
      lane.queue,
      { tag: consumerTag(lane.queue), noAck: false, exclusive: false },
      (msg) => lane.push(msg),
    );
    lane.consumer = consumer;
    // Settles when the consumer ends: resolves after our own cancel or close,
    // rejects when the broker cancelled it or closed its channel or connection.
    consumer.wait().then(
      () => {},
      (err: unknown) =>
        this.#markLost(
          new Error(`consumer of queue "${lane.queue}" ended: ${errorMessage(err)}`, {
            cause: err,
          }),
        ),
    );
  }

  /** Settles with the reason once the connection, a channel or a consumer is lost (never after {@link close}). */
  get lost(): Promise<Error> {
    return this.#lost.promise;
  }

  /** Handlers of this session still running. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** Start one delivery loop per queue. */
  start(): void {
    for (const lane of this.#lanes) this.#loops.push(this.#runLane(lane));
  }

  /**
   * Stop consuming (R5 step 2): `basic.cancel` every consumer in parallel,
   * waiting at most `timeoutMs` for the replies. Deliveries already pushed
   * are still handled (wait with {@link settled}); transient handler failures
   * are no longer retried.
   *
   * @param timeoutMs Bound on the cancel-ok replies.
   */
  async cancel(timeoutMs: number): Promise<void> {
    this.#draining = true;
    this.#stopRetries.abort();
    using limit = deadline(timeoutMs);
    await Promise.all(this.#lanes.map(async (lane) => {
      const consumer = lane.consumer;
      if (consumer !== undefined && this.#lostReason === undefined) {
        const outcome = await Promise.race([
          consumer.cancel().then(() => "ok", (err: unknown) => errorMessage(err)),
          aborted(limit.signal).then(() => `no cancel-ok within ${timeoutMs} ms`),
        ]);
        if (outcome !== "ok") {
          log.debug("rabbitmq: basic.cancel failed", { queue: lane.queue, error: outcome });
        }
      }
      // Also after a failed cancel: a delivery arriving now is not started;
      // the channel close hands it back.
      lane.finishBuffered();
    }));
  }

  /**
   * Wait until every delivery loop ended; when `signal` aborts first, abort
   * the running handlers (their messages stay unacknowledged and are
   * redelivered) and give them a moment to settle.
   *
   * @param signal Deadline (drain timeout).
   */
  async settled(signal: AbortSignal): Promise<void> {
    const all = Promise.allSettled(this.#loops);
    if (await settledWithin(all, signal)) return;
    this.#handlerAbort.abort(new DOMException("drain deadline reached", "TimeoutError"));
    using grace = deadline(1_000);
    await settledWithin(all, grace.signal);
  }

  /**
   * Close every channel, then the connection (R5 step 4), each bounded; a
   * close that fails because the link is already gone is not an error.
   * Unacknowledged messages go back to their queues. Idempotent.
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    for (const lane of this.#lanes) lane.endNow();
    this.#stopRetries.abort();
    const client = this.#client;
    if (!client.closed) {
      using limit = deadline(CLOSE_TIMEOUT_MS);
      const channels = this.#lanes.flatMap((lane) =>
        lane.channel !== undefined && !lane.channel.closed ? [lane.channel.close()] : []
      );
      await settledWithin(Promise.allSettled(channels), limit.signal);
      if (!client.closed) {
        const closed = await settledWithin(client.close(), limit.signal);
        if (!closed) log.debug("rabbitmq: no close-ok from the broker, dropping the socket");
      }
    }
    // Still there when the close-ok never came, or the attempt was aborted
    // mid-handshake (the error also settles a pending connect()).
    client.socket?.destroy(new Error("connection closed by the worker"));
    if (this.#socketClosed !== undefined) {
      using grace = deadline(SOCKET_CLOSE_GRACE_MS);
      if (!(await settledWithin(this.#socketClosed, grace.signal))) {
        log.warn("rabbitmq: connection did not close", { url: this.#options.url.display });
      }
    }
  }

  #markLost(reason: Error): void {
    if (this.#lostReason !== undefined || this.#closing !== undefined) return;
    this.#lostReason = reason;
    this.#stopRetries.abort();
    for (const lane of this.#lanes) lane.endNow();
    this.#lost.resolve(reason);
  }

  async #runLane(lane: Lane): Promise<void> {
    try {
      for (;;) {
        const msg = await lane.next();
        if (msg === undefined) return;
        if (await this.#handle(lane.queue, msg) === "abandoned") {
          // The message goes back to the broker; handling its successors
          // first would reorder the queue (statusngin_downtimes, G3).
          lane.endNow();
          return;
        }
      }
    } finally {
      if (!this.#draining && this.#closing === undefined && this.#lostReason === undefined) {
        // A queue that stopped consuming while the link looks healthy must not
        // go unnoticed: rebuild the session.
        this.#markLost(new Error(`delivery loop of queue "${lane.queue}" ended`));
      }
    }
  }

  async #handle(queue: string, msg: AMQPMessage): Promise<JobResult> {
    const o = this.#options;
    const started = performance.now();
    this.#inFlight++;
    o.observer.jobReceived(queue);
    o.observer.inFlight(queue, 1);
    const job: Job = {
      queue,
      server: o.url.server,
      handle: String(msg.deliveryTag),
      unique: msg.properties.messageId ?? "",
      // Raw bytes, as delivered: UTF-8 repair is the pipeline's job (P1).
      payload: msg.body ?? new Uint8Array(0),
      receivedAt: Date.now(),
    };
    let result: JobResult = "abandoned";
    let delayMs = o.retryInitialMs ?? 100;
    const retryMaxMs = o.retryMaxMs ?? 5_000;
    try {
      for (;;) {
        try {
          // A handler that ignores the abort must not hold the lane (and
          // shutdown) hostage: once aborted, stop waiting for it.
          await abortable(o.handler(job, this.#handlerAbort.signal), this.#handlerAbort.signal);
          result = "completed";
          break;
        } catch (err: unknown) {
          if (err instanceof DiscardJobError) {
            result = "failed";
            log.error("rabbitmq: dropping unprocessable message", {
              queue,
              bytes: job.payload.length,
              error: errorMessage(err),
            });
            break;
          }
          if (this.#stopRetries.signal.aborted || this.#handlerAbort.signal.aborted) break;
          o.observer.jobRetried(queue);
          log.warn("rabbitmq: handler failed, retrying message", {
            queue,
            delivery_tag: job.handle,
            retry_in_ms: delayMs,
            error: errorMessage(err),
          });
          if (!(await this.#sleep(delayMs))) break;
          delayMs = Math.min(delayMs * 2, retryMaxMs);
        }
      }
    } finally {
      this.#inFlight--;
      o.observer.inFlight(queue, -1);
    }
    if (result !== "abandoned") {
      try {
        // On the channel that received it, the only one where the tag is valid.
        if (result === "completed") await msg.ack();
        else await msg.nack(false);
      } catch (err: unknown) {
        result = "abandoned";
        log.warn("rabbitmq: acknowledgement failed, the message will be redelivered", {
          queue,
          delivery_tag: job.handle,
          error: errorMessage(err),
        });
      }
    }
    o.observer.jobDone(queue, result, (performance.now() - started) / 1000);
    return result;
  }

  /** Sleep unless retries are stopped or handlers aborted; false when interrupted. */
  #sleep(ms: number): Promise<boolean> {
    return sleepUnlessAborted(
      ms,
      AbortSignal.any([this.#handlerAbort.signal, this.#stopRetries.signal]),
    );
  }
}
