/**
 * The RabbitMQ backend of the consumer core: one link target — the broker —
 * whose links are {@link AmqpSession}s with one channel and one consumer per
 * queue (docs/consumption.md#rabbitmq-topology). Budgets (an in-order queue one message at a
 * time, the others an adaptive window within the prefetch), delivery, reconnects
 * (docs/consumption.md#rabbitmq-reconnect), stall detection, stop (cancel before close,
 * through the session's drain) and the summary line
 * are the core's, the same as for Gearman.
 *
 * @module
 */
import { AmqpSession, type QueueDeclareMode } from "./session.ts";
import { type AmqpUrl, parseAmqpUrl } from "./url.ts";
import {
  type BackendOptions,
  Consumer,
  type LinkContext,
  MAX_JOB_SIZE,
} from "../consumer/consumer.ts";
import type { QueueConsumer } from "../consumer/contract.ts";
import { errorMessage, getLogger } from "../log.ts";
import { hasCode, WorkerError } from "../util/errors.ts";

const log = getLogger("rabbitmq");

/** Options of {@link RabbitMqConsumer}. */
export interface RabbitMqConsumerOptions extends BackendOptions {
  /** `amqp://user:password@host:port/vhost`; an empty path or `/` is vhost `/`. */
  readonly url: string;
  /** Declare the queues durable (`--rabbitmq-durable-queues`). */
  readonly durableQueues: boolean;
  /** `--rabbitmq-declare`; default `declare`. */
  readonly declare?: QueueDeclareMode;
  /**
   * Told the broker (`host:port`) each new session connected to, and every broker of the URL
   * (the `statusengine_rabbitmq_host_in_use` gauge).
   */
  readonly onHostInUse?: (host: string, hosts: readonly string[]) => void;
  /**
   * Unacknowledged deliveries the broker may push per queue
   * (docs/consumption.md#rabbitmq-channels), 1..65535; also the most messages of a queue handled at
   * once (an in-order queue: one at a time: the downtime queue is handled strictly in order).
   */
  readonly prefetch: number;
  /** A message above this many bytes is dead-lettered (`too_large`); default 64 MiB. */
  readonly maxJobSize?: number;
  /** Bound on one connection attempt, handshake to consume-ok. Default 10 s. */
  readonly connectTimeoutMs?: number;
  /** Connection name shown by the RabbitMQ management console. */
  readonly connectionName?: string;
}

/** Refused credentials or vhost and a refused queue declaration are not cured by waiting. */
function waitable(err: unknown): boolean {
  return !hasCode(err, "queue_declare") &&
    !/ACCESS_REFUSED|NOT_ALLOWED|PRECONDITION_FAILED/.test(errorMessage(err));
}

/** Consumes every queue from one RabbitMQ broker. */
export class RabbitMqConsumer implements QueueConsumer {
  readonly #options: RabbitMqConsumerOptions;
  #url: AmqpUrl | undefined;
  #core: Consumer | undefined;
  #stopping: Promise<void> | undefined;
  #started = false;

  /**
   * @param options URL, queues, prefetch, handler, observer and timings.
   * @throws {RangeError} On an empty queue list or a prefetch outside 1..65535.
   */
  constructor(options: RabbitMqConsumerOptions) {
    if (options.queues.length === 0) {
      throw new RangeError("Cannot create RabbitMQ consumer: no queues to consume");
    }
    // 0 would mean "unlimited" in AMQP and move the whole backlog into memory
    // (docs/consumption.md#rabbitmq-channels).
    if (!Number.isInteger(options.prefetch) || options.prefetch < 1 || options.prefetch > 65535) {
      throw new RangeError(
        `Cannot create RabbitMQ consumer: prefetch must be 1..65535, got ${options.prefetch}`,
      );
    }
    this.#options = options;
  }

  /** Whether every queue is consuming right now (the `queue_connected` gauge). */
  get connected(): boolean {
    const core = this.#core;
    return core !== undefined && this.#options.queues.every((q) => core.connected(q.name));
  }

  /** Whether `queue` has messages ready that it does not receive. */
  stalled(queue: string): boolean {
    return this.#core?.stalled(queue) ?? false;
  }

  /**
   * Connect, declare every queue, apply the prefetch, register the consumers and start consuming.
   * The first connection is made here (docs/consumption.md#rabbitmq-reconnect): start fails rather
   * than retrying.
   *
   * @throws {WorkerError} (code `rabbitmq_start`) On a malformed URL, an unreachable broker, refused
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
      throw new WorkerError(
        "rabbitmq_start",
        `Cannot start RabbitMQ consumer: ${errorMessage(err)}`,
        {
          cause: err,
        },
      );
    }
    this.#url = url;
    const core = this.#buildCore(url);
    this.#core = core;
    try {
      await core.start();
    } catch (err: unknown) {
      await core.stop();
      // The core's error names the broker again; keep only what went wrong.
      const cause = err instanceof Error && err.cause !== undefined ? err.cause : err;
      throw new WorkerError(
        "rabbitmq_start",
        `Cannot start RabbitMQ consumer: broker ${url.display}: ${errorMessage(cause)}`,
        { cause },
      );
    }
  }

  #buildCore(url: AmqpUrl): Consumer {
    const o = this.#options;
    const names = o.queues.map((q) => q.name);
    let current: AmqpSession | undefined;
    // The broker the next session tries first: the one after the broker of the last session,
    // so that a lost broker is not dialled again while others may answer
    // (docs/running.md#rabbitmq-hosts).
    let next = 0;
    let inUse: number | undefined;
    const servers = url.hosts.map((h) => h.server);
    const openOn = (index: number, context: LinkContext, signal: AbortSignal) =>
      AmqpSession.open({
        url: { ...url, ...url.hosts[index] ?? url },
        queues: names,
        durableQueues: o.durableQueues,
        ...(o.declare === undefined ? {} : { declare: o.declare }),
        prefetch: o.prefetch,
        engine: context.engine,
        budget: context.budget,
        maxJobSize: o.maxJobSize ?? MAX_JOB_SIZE,
        ...(o.connectTimeoutMs === undefined ? {} : { connectTimeoutMs: o.connectTimeoutMs }),
        ...(o.connectionName === undefined ? {} : { connectionName: o.connectionName }),
      }, signal);
    return new Consumer({
      ...o,
      name: "rabbitmq",
      log,
      waitable,
      // In-order queues get one slot; the others never hold more than the prefetch anyway.
      maxJobsPerQueue: o.prefetch,
      describe: {
        url: url.display,
        vhost: url.vhost,
        prefetch: o.prefetch,
        // The most that can sit in process memory, unacknowledged.
        max_buffered_messages: o.prefetch * o.queues.length,
      },
      targets: (context) => [{
        queues: names,
        server: url.display,
        async open(signal) {
          const failures: string[] = [];
          let refused: unknown;
          for (let k = 0; k < servers.length; k++) {
            const index = (next + k) % servers.length;
            try {
              current = await openOn(index, context, signal);
            } catch (err: unknown) {
              if (signal.aborted || servers.length === 1) throw err;
              // A refusal (login, vhost, declaration) is kept whole, so that start-up can tell
              // it from a broker that is down; the other brokers are still tried.
              if (!waitable(err)) refused ??= err;
              failures.push(`${servers[index]}: ${errorMessage(err)}`);
              continue;
            }
            next = (index + 1) % servers.length;
            if (index !== inUse && inUse !== undefined) {
              log.info("rabbitmq: moved to another broker of the URL", {
                from: servers[inUse],
                to: servers[index],
              });
            }
            inUse = index;
            o.onHostInUse?.(servers[index] ?? "", servers);
            return current;
          }
          throw refused ?? new Error(`no broker of the URL answered: ${failures.join("; ")}`);
        },
        backlog(queue) {
          return current === undefined ? Promise.resolve(undefined) : current.backlog(queue);
        },
        consumers(queue) {
          return current === undefined ? Promise.resolve(undefined) : current.consumers(queue);
        },
      }],
    });
  }

  /**
   * Stop (docs/consumption.md#cancel-before-close): end the reconnect loop at once (also mid
   * back-off or mid connect), `basic.cancel` every consumer, let the running and already delivered
   * messages finish and be acknowledged within the drain timeout (then abort their handlers; those
   * messages are redelivered), close every channel and the connection. Idempotent; safe before
   * start.
   */
  stop(): Promise<void> {
    this.#stopping ??= this.#core?.stop() ?? Promise.resolve();
    return this.#stopping;
  }

  /** The broker URL without its password (after start). */
  get display(): string | undefined {
    return this.#url?.display;
  }
}
