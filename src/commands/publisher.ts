/**
 * Publishing validated command envelopes to `statusngin_cmd`: one connection,
 * opened on the first request and reused;
 * publishes run one at a time; a failed attempt closes the connection and is
 * retried once on a fresh one (a broker that dropped an idle connection);
 * every request has one publish budget, after which it fails.
 *
 * Two transports behind one interface: a Gearman background job
 * (`SUBMIT_JOB_BG`, normal priority) and a transient AMQP message on the
 * default exchange.
 *
 * @module
 */
import { GearmanClient } from "../gearman/client.ts";
import { AmqpPublisher, type AmqpPublisherOptions } from "../amqp/publisher.ts";
import { parseAmqpUrl } from "../amqp/url.ts";
import { abortable, deadline } from "../util/async.ts";
import { errorMessage } from "../log.ts";
import { COMMAND_QUEUE } from "./validate.ts";
import { hasCode, WorkerError } from "../util/errors.ts";

/** Which broker a {@link CommandPublisher} writes to (the worker's `consumer`). */
export type CommandBackend = "gearman" | "rabbitmq";

/** Per-request publish budget: both attempts share it. */
const PUBLISH_BUDGET_MS = 5_000;

/** Publishes command envelopes; what the HTTP server is given. */
export interface CommandPublisher extends AsyncDisposable {
  readonly backend: CommandBackend;
  /** Where it publishes, for the start-up log line (passwords masked). */
  readonly target: string;
  /**
   * Publish one envelope as one broker message.
   *
   * @param body The re-serialised envelope.
   * @param options `signal` aborts the wait (the budget applies regardless).
   * @throws {WorkerError} (code `command_publish`) When both attempts failed or the budget ran out.
   */
  publish(body: string, options?: { signal?: AbortSignal }): Promise<void>;
  /** Close the connection; later publishes fail. Idempotent. */
  close(): Promise<void>;
}

/** One open connection of a transport. */
export interface PublishLink {
  /** Resolves once the broker took the message (JOB_CREATED, publisher confirm). */
  send(body: string, signal: AbortSignal): Promise<void>;
  close(): Promise<void>;
}

/** Opens a {@link PublishLink}; must give up when `signal` aborts. */
export type Dial = (signal: AbortSignal) => Promise<PublishLink>;

/** Options of {@link RetryingPublisher}. */
export interface RetryingPublisherOptions {
  readonly backend: CommandBackend;
  readonly target: string;
  readonly dial: Dial;
  /** Default {@link PUBLISH_BUDGET_MS}. */
  readonly budgetMs?: number;
}

/**
 * The connection policy shared by both transports: lazy, reused, serialised,
 * one retry on a fresh connection, one budget per request.
 */
export class RetryingPublisher implements CommandPublisher {
  readonly backend: CommandBackend;
  readonly target: string;
  readonly #dial: Dial;
  readonly #budgetMs: number;
  #link: PublishLink | undefined;
  // Tail of the publish chain: each publish starts after the previous settled.
  #tail: Promise<void> = Promise.resolve();
  #closed = false;
  #closing: Promise<void> | undefined;
  readonly #closeAbort = new AbortController();

  /** @param options Backend, display target, dialer and budget. */
  constructor(options: RetryingPublisherOptions) {
    this.backend = options.backend;
    this.target = options.target;
    this.#dial = options.dial;
    this.#budgetMs = options.budgetMs ?? PUBLISH_BUDGET_MS;
  }

  /**
   * Publish one envelope (see {@link CommandPublisher.publish}). Time spent
   * waiting behind earlier publishes counts against the budget.
   *
   * @param body The envelope.
   * @param options `signal` aborts the wait.
   * @throws {WorkerError} (code `command_publish`) When both attempts failed or the budget ran out.
   */
  async publish(body: string, options: { signal?: AbortSignal } = {}): Promise<void> {
    const parent = options.signal === undefined
      ? this.#closeAbort.signal
      : AbortSignal.any([options.signal, this.#closeAbort.signal]);
    using limit = deadline(this.#budgetMs, parent);
    const run = this.#tail.then(() => this.#attempts(body, limit.signal));
    this.#tail = run.catch(() => {});
    try {
      await abortable(run, limit.signal);
    } catch (err: unknown) {
      if (hasCode(err, "command_publish")) throw err;
      throw this.#failure(limit.signal, err);
    }
  }

  /** Close the connection (idempotent); publishes waiting in line fail. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.#closed = true;
      this.#closeAbort.abort(new Error("command publisher closed"));
      await this.#tail;
      await this.#drop();
    })();
    return this.#closing;
  }

  /** Same as {@link close}. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  async #attempts(body: string, signal: AbortSignal): Promise<void> {
    let last: unknown;
    for (let attempt = 1; attempt <= 2; attempt++) {
      if (signal.aborted || this.#closed) break;
      try {
        this.#link ??= await this.#dial(signal);
        await abortable(this.#link.send(body, signal), signal);
        return;
      } catch (err: unknown) {
        last = err;
        // A link that failed once is not trusted again: the retry, and the
        // next request, get a fresh connection.
        await this.#drop();
      }
    }
    throw this.#failure(signal, last);
  }

  #failure(signal: AbortSignal, cause: unknown): WorkerError {
    const lastError = cause === undefined || cause === signal.reason
      ? ""
      : `; last error: ${errorMessage(cause)}`;
    const detail = this.#closed
      ? "the publisher is closed"
      : signal.aborted
      ? `gave up after the ${this.#budgetMs} ms budget${lastError}`
      : errorMessage(cause);
    // The broker could not take the message; nothing is known to be queued.
    return new WorkerError(
      "command_publish",
      `Cannot publish to ${COMMAND_QUEUE} via ${this.backend} ${this.target}: ${detail}`,
      { cause },
    );
  }

  async #drop(): Promise<void> {
    const link = this.#link;
    this.#link = undefined;
    await link?.close().catch(() => {});
  }
}

/**
 * A publisher submitting background jobs to the first job server in `servers`
 * that accepts a connection.
 *
 * @param servers `host:port` list, tried in order (`--gearman-addr`).
 * @param options Budget per request.
 * @returns The publisher (connects on first use).
 */
export function gearmanCommandPublisher(
  servers: readonly string[],
  options: { budgetMs?: number } = {},
): RetryingPublisher {
  return new RetryingPublisher({
    backend: "gearman",
    target: servers.join(","),
    ...(options.budgetMs === undefined ? {} : { budgetMs: options.budgetMs }),
    dial: async (signal) => {
      let last: unknown = new Error("no job server configured");
      for (const server of servers) {
        try {
          const client = await GearmanClient.connect(server, { signal, window: 1 });
          return {
            send: async (body) => {
              await client.submitBackground(COMMAND_QUEUE, body, { priority: "normal" });
            },
            close: () => client.close(),
          };
        } catch (err: unknown) {
          last = err;
          if (signal.aborted) break;
        }
      }
      throw last;
    },
  });
}

/**
 * A publisher sending transient `application/json` messages to the default
 * exchange with routing key `statusngin_cmd`, after declaring the queue with
 * the consumer's flags; resolved on the broker's confirm.
 *
 * @param url AMQP URL (`--rabbitmq-url`).
 * @param options `durableQueues` and `declare` (`--rabbitmq-durable-queues`,
 *   `--rabbitmq-declare`, as the consumer declares) and the budget per request.
 * @returns The publisher (connects on first use).
 * @throws {TypeError} On a malformed URL (password masked).
 */
export function rabbitMqCommandPublisher(
  url: string,
  options: AmqpPublisherOptions & { readonly budgetMs?: number },
): RetryingPublisher {
  const display = parseAmqpUrl(url).display;
  return new RetryingPublisher({
    backend: "rabbitmq",
    target: display,
    ...(options.budgetMs === undefined ? {} : { budgetMs: options.budgetMs }),
    dial: async (signal) => {
      const connecting = AmqpPublisher.connect(url, options);
      let publisher: AmqpPublisher;
      try {
        publisher = await abortable(connecting, signal);
      } catch (err: unknown) {
        // The client has no abort of its own: close whatever still arrives.
        void connecting.then((late) => late.close(), () => {});
        throw err;
      }
      return {
        send: (body) =>
          publisher.publish(COMMAND_QUEUE, [body], { contentType: "application/json" }),
        close: () => publisher.close(),
      };
    },
  });
}
