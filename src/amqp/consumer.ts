/**
 * The RabbitMQ backend of the consumer core: one link target, the broker, whose links are
 * {@link AmqpSession}s (docs/consumption.md#rabbitmq-topology).
 *
 * @module
 */
import { AmqpSession, type AmqpSessionOptions, type QueueDeclaration } from "./session.ts";
import { type AmqpUrl, parseAmqpUrl } from "../util/amqp_url.ts";
import { type BackendOptions, Consumer, MAX_JOB_SIZE } from "../consumer/consumer.ts";
import type { QueueConsumer } from "../consumer/contract.ts";
import { errorMessage, getLogger } from "../log.ts";
import { hasCode, WorkerError } from "../util/errors.ts";

const log = getLogger("rabbitmq");

/** Options of {@link RabbitMqConsumer}; the prefetch is also the most handled at once per queue. */
export interface RabbitMqConsumerOptions
  extends
    BackendOptions,
    QueueDeclaration,
    Pick<AmqpSessionOptions, "prefetch" | "connectTimeoutMs" | "connectionName"> {
  readonly url: string;
  /** Told the broker each new session connected to (`statusengine_rabbitmq_host_in_use`). */
  readonly onHostInUse?: (host: string, hosts: readonly string[]) => void;
}

/** Refused credentials or vhost and a refused queue declaration are not cured by waiting. */
function waitable(err: unknown): boolean {
  return !hasCode(err, "queue_declare") &&
    !/ACCESS_REFUSED|NOT_ALLOWED|PRECONDITION_FAILED/.test(errorMessage(err));
}

/** Consumes every queue from one RabbitMQ broker. */
export class RabbitMqConsumer implements QueueConsumer {
  readonly #options: RabbitMqConsumerOptions;

  #core: Consumer | undefined;
  #stopping: Promise<void> | undefined;
  #started = false;

  /** @throws {RangeError} On an empty queue list or a prefetch outside 1..65535. */
  constructor(options: RabbitMqConsumerOptions) {
    if (options.queues.length === 0) {
      throw new RangeError("Cannot create RabbitMQ consumer: no queues to consume");
    }
    // 0 would mean "unlimited" in AMQP and move the whole backlog into memory.
    if (!Number.isInteger(options.prefetch) || options.prefetch < 1 || options.prefetch > 65535) {
      throw new RangeError(
        `Cannot create RabbitMQ consumer: prefetch must be 1..65535, got ${options.prefetch}`,
      );
    }
    this.#options = options;
  }

  /**
   * Connect and start consuming; a refusal fails the start, an unreachable broker is waited for
   * with `waitAtStart` (docs/consumption.md#rabbitmq-reconnect).
   *
   * @throws {WorkerError} (code `rabbitmq_start`) On a bad URL, an unreachable broker (without
   *   `waitAtStart`), a refusal, or a stop during start-up.
   */
  async start(): Promise<void> {
    if (this.#started) throw new Error("RabbitMqConsumer.start() called twice");
    if (this.#stopping !== undefined) {
      throw new Error("RabbitMqConsumer.start() called after stop()");
    }
    this.#started = true;
    const fail = (detail: string, cause: unknown) =>
      new WorkerError("rabbitmq_start", `Cannot start RabbitMQ consumer: ${detail}`, { cause });
    let url: AmqpUrl;
    try {
      url = parseAmqpUrl(this.#options.url);
    } catch (cause: unknown) {
      throw fail(errorMessage(cause), cause);
    }
    const core = this.#buildCore(url);
    this.#core = core;
    try {
      await core.start();
    } catch (err: unknown) {
      await core.stop();
      // The core's error names the broker again; keep only what went wrong.
      const cause = err instanceof Error && err.cause !== undefined ? err.cause : err;
      throw fail(`broker ${url.display}: ${errorMessage(cause)}`, cause);
    }
  }

  #buildCore(url: AmqpUrl): Consumer {
    const o = this.#options;
    const names = o.queues.map((q) => q.name);
    let current: AmqpSession | undefined;
    // Start after the last session's broker: a lost broker is not dialled first again.
    let next = 0;
    let inUse: number | undefined;
    const servers = url.hosts.map((h) => h.server);
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
              current = await AmqpSession.open({
                ...o,
                url: { ...url, ...url.hosts[index] ?? url },
                ...context,
                queues: names,
                maxJobSize: o.maxJobSize ?? MAX_JOB_SIZE,
              }, signal);
            } catch (err: unknown) {
              if (signal.aborted || servers.length === 1) throw err;
              // Kept whole, so that start-up can tell a refusal from a broker that is down.
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
        backlog: async (queue) => (await current?.probe.declare(queue))?.messageCount,
        consumers: async (queue) => (await current?.probe.declare(queue))?.consumerCount,
      }],
    });
  }

  /** Stop (docs/consumption.md#cancel-before-close). Idempotent; safe before start. */
  stop(): Promise<void> {
    this.#stopping ??= this.#core?.stop() ?? Promise.resolve();
    return this.#stopping;
  }
}
