/**
 * Publishing command envelopes to `statusngin_cmd` as a Gearman background job or a transient
 * AMQP message. One lazy connection, reused; publishes run one at a time; an attempt that queued
 * nothing is retried once on a fresh connection (a broker that dropped an idle one); one budget
 * per request. A message once written is never sent again: its confirm may be lost with the
 * connection after the broker queued it, and a retry would queue the command twice.
 *
 * @module
 */
import { GearmanClient } from "../gearman/client.ts";
import { AmqpPublisher } from "../amqp/publisher.ts";
import type { QueueDeclaration } from "../amqp/session.ts";
import { parseAmqpUrl } from "../util/amqp_url.ts";
import { abortable, deadline } from "../util/async.ts";
import { errorMessage } from "../log.ts";
import { COMMAND_QUEUE } from "./validate.ts";
import { hasCode, WorkerError } from "../util/errors.ts";

/** The worker's `consumer`. */
export type CommandBackend = "gearman" | "rabbitmq";

/** Per-request publish budget: both attempts share it. */
const PUBLISH_BUDGET_MS = 5_000;

/** A failure of {@link PublishLink.send} that queued nothing: the only kind worth a retry. */
function notQueued(message: string): WorkerError {
  return new WorkerError("not_queued", message);
}

export interface CommandPublisher extends AsyncDisposable {
  readonly backend: CommandBackend;
  /** Where it publishes, for the start-up log line (passwords masked). */
  readonly target: string;
  /**
   * Publish one envelope as one broker message; `signal` aborts the wait (the budget applies
   * regardless).
   *
   * @throws {WorkerError} (code `command_publish`) When nothing was queued: both attempts failed
   *   before the message was written or were refused, or the budget ran out before it was written.
   * @throws {WorkerError} (code `command_unconfirmed`) When the message was written but its confirm
   *   never came (connection lost, budget ran out): it may have been queued.
   */
  publish(body: string, options?: { signal?: AbortSignal }): Promise<void>;
  /** Close the connection; publishes waiting in line and later ones fail. Idempotent. */
  close(): Promise<void>;
}

/** One open connection of a transport. */
export interface PublishLink {
  /**
   * Resolves once the broker took the message (JOB_CREATED, publisher confirm). Rejects with
   * a `not_queued` {@link WorkerError} when the message is known not to be queued (the only kind
   * worth a retry); any other rejection leaves its fate unknown.
   */
  send(body: string, signal: AbortSignal): Promise<void>;
  close(): Promise<void>;
}

/** Opens a {@link PublishLink}; must give up when `signal` aborts. */
export type Dial = (signal: AbortSignal) => Promise<PublishLink>;

export interface RetryingPublisherOptions extends Pick<CommandPublisher, "backend" | "target"> {
  readonly dial: Dial;
  /** Default {@link PUBLISH_BUDGET_MS}. */
  readonly budgetMs?: number | undefined;
}

/** The connection policy of the module header, shared by both transports. */
export class RetryingPublisher implements CommandPublisher {
  readonly backend: CommandBackend;
  readonly target: string;
  readonly #dial: Dial;
  readonly #budgetMs: number;
  #link: PublishLink | undefined;
  // Tail of the publish chain: each publish starts after the previous settled.
  #tail: Promise<void> = Promise.resolve();
  #closing: Promise<void> | undefined;
  readonly #closeAbort = new AbortController();

  constructor(options: RetryingPublisherOptions) {
    this.backend = options.backend;
    this.target = options.target;
    this.#dial = options.dial;
    this.#budgetMs = options.budgetMs ?? PUBLISH_BUDGET_MS;
  }

  /** See {@link CommandPublisher.publish}; waiting behind earlier publishes uses the budget. */
  async publish(body: string, options: { signal?: AbortSignal } = {}): Promise<void> {
    const parent = options.signal === undefined
      ? this.#closeAbort.signal
      : AbortSignal.any([options.signal, this.#closeAbort.signal]);
    using limit = deadline(this.#budgetMs, parent);
    const state = { written: false };
    const run = this.#tail.then(() => this.#attempts(body, limit.signal, state));
    this.#tail = run.catch(() => {});
    try {
      await abortable(run, limit.signal);
    } catch (err: unknown) {
      if (hasCode(err, "command_publish", "command_unconfirmed")) throw err;
      // The budget ran out: while the message was on its way, the broker may still take it.
      throw state.written ? this.#unconfirmed(limit.signal, err) : this.#failure(limit.signal, err);
    }
  }

  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.#closeAbort.abort(new Error("command publisher closed"));
      await this.#tail;
      await this.#drop();
    })();
    return this.#closing;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  async #attempts(body: string, signal: AbortSignal, state: { written: boolean }): Promise<void> {
    let last: unknown;
    for (let attempt = 1; attempt <= 2; attempt++) {
      if (signal.aborted || this.#closeAbort.signal.aborted) break;
      try {
        this.#link ??= await this.#dial(signal);
        // A dial that finished as the budget ran out: the request is answered already.
        signal.throwIfAborted();
        state.written = true;
        await abortable(this.#link.send(body, signal), signal);
        return;
      } catch (err: unknown) {
        last = err;
        // A failed link is not reused (the retry and the next request dial afresh); its close is
        // not awaited: a silent broker never answers it, and later publishes wait behind this one.
        void this.#drop();
        if (hasCode(err, "not_queued")) state.written = false;
        // Sent again, a message the broker took before the connection broke would run twice.
        if (state.written) throw this.#unconfirmed(signal, err);
      }
    }
    throw this.#failure(signal, last);
  }

  #unconfirmed(signal: AbortSignal, cause: unknown): WorkerError {
    const why = this.#closeAbort.signal.aborted
      ? "the publisher was closed"
      : signal.aborted && cause === signal.reason
      ? `the ${this.#budgetMs} ms budget ran out`
      : errorMessage(cause);
    return new WorkerError(
      "command_unconfirmed",
      `No confirm from ${COMMAND_QUEUE} via ${this.backend} ${this.target} for a command ` +
        `already sent (${why}); it may have been queued, so it is not sent again`,
      { cause },
    );
  }

  #failure(signal: AbortSignal, cause: unknown): WorkerError {
    const lastError = cause === undefined || cause === signal.reason
      ? ""
      : `; last error: ${errorMessage(cause)}`;
    const detail = this.#closeAbort.signal.aborted
      ? "the publisher is closed"
      : signal.aborted
      ? `gave up after the ${this.#budgetMs} ms budget${lastError}`
      : errorMessage(cause);
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

/** Background jobs (`SUBMIT_JOB_BG`) to the first of `servers` (`--gearman-addr`) that connects. */
export function gearmanCommandPublisher(
  servers: readonly string[],
  options: { budgetMs?: number } = {},
): RetryingPublisher {
  return new RetryingPublisher({
    backend: "gearman",
    target: servers.join(","),
    budgetMs: options.budgetMs,
    dial: async (signal) => {
      let last: unknown = new Error("no job server configured");
      for (const server of servers) {
        try {
          const client = await GearmanClient.connect(server, { signal, window: 1 });
          return {
            send: async (body) => {
              // Seen closed (a job server that dropped the idle connection): nothing written.
              if (client.isClosed) throw notQueued(`${server}: connection is closed`);
              await client.submitBackground(COMMAND_QUEUE, body).catch((err: unknown) => {
                throw hasCode(err, "submit_refused") ? notQueued(errorMessage(err)) : err;
              });
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
 * Transient `application/json` messages to the default exchange, routing key `statusngin_cmd`,
 * the queue declared with the consumer's flags; resolved on the broker's confirm.
 *
 * @throws {TypeError} On a malformed URL (password masked).
 */
export function rabbitMqCommandPublisher(
  url: string,
  options: QueueDeclaration,
): RetryingPublisher {
  return new RetryingPublisher({
    backend: "rabbitmq",
    target: parseAmqpUrl(url).display,
    dial: async (signal) => {
      // A share of the budget per broker: a silent first one leaves time for the next.
      const bound = { timeoutMs: PUBLISH_BUDGET_MS, signal };
      const publisher = await AmqpPublisher.connect(url, options, bound);
      // Part of the dial, so that a broker silent or refusing here is known to hold nothing;
      // a failed link is never reused, so every link has declared the queue.
      await abortable(publisher.declare(COMMAND_QUEUE), signal).catch((err: unknown) => {
        // Not awaited: a silent broker never answers the close.
        void publisher.close();
        throw err;
      });
      return {
        send: async (body) => {
          // Before the message is written: a connection seen closed.
          if (publisher.closed) throw notQueued("the broker closed the connection");
          const properties = { contentType: "application/json" };
          await publisher.publish(COMMAND_QUEUE, [body], properties).catch((err: unknown) => {
            // Returned: the broker dropped it (the queue was deleted); the retry declares it.
            throw hasCode(err, "returned") ? notQueued(err.message) : err;
          });
        },
        close: () => publisher.close(),
      };
    },
  });
}
