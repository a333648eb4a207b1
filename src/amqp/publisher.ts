/**
 * A small RabbitMQ publisher: declares queues with the consumer's exact flags and publishes through
 * the default exchange with confirms, so a resolved publish is enqueued (docs/operations.md#publish).
 *
 * @module
 */
import { Buffer } from "node:buffer";
import { type AMQPChannel, AMQPClient, type AMQPMessage } from "@cloudamqp/amqp-client";
import { declareQueue, ProbeChannel, type QueueDeclaration, useDenoSocket } from "./session.ts";
import { type AmqpHost, parseAmqpUrl } from "../util/amqp_url.ts";
import { errorMessage, getLogger } from "../log.ts";
import { WorkerError } from "../util/errors.ts";
import { abortable, deadline, settledWithin } from "../util/async.ts";

const log = getLogger("rabbitmq");

/**
 * How long close() waits for the broker's close-ok before dropping the socket: a silent broker
 * would otherwise hold it until the heartbeat gives up (60 s), past systemd's stop timeout.
 */
const CLOSE_TIMEOUT_MS = 2_000;

/** Counts of a queue as the broker reports them on a passive declaration. */
export interface QueueDepth {
  /** Messages ready for delivery (not counting delivered, unacknowledged ones). */
  readonly ready: number;
  readonly consumers: number;
}

/** One connection with one confirming channel. */
export class AmqpPublisher implements AsyncDisposable {
  readonly #client: AMQPClient;
  readonly #channel: AMQPChannel;
  readonly #declared = new Set<string>();
  readonly #declaration: QueueDeclaration;
  readonly #probe: ProbeChannel;
  /** Messages the broker returned (`basic.return`, no queue to route to), not yet matched. */
  readonly #returned: AMQPMessage[] = [];
  #closing: Promise<void> | undefined;

  private constructor(client: AMQPClient, channel: AMQPChannel, options: QueueDeclaration) {
    this.#client = client;
    this.#probe = new ProbeChannel(client);
    this.#channel = channel;
    this.#declaration = options;
    channel.onReturn = (msg) => void this.#returned.push(msg);
  }

  /**
   * Connect to the first broker of the URL that answers (docs/running.md#rabbitmq-hosts), in
   * confirm mode. With `timeoutMs`, each broker gets an equal share of the time left, so a silent
   * one (accepts, never answers the handshake) leaves time to try the next.
   *
   * @throws {TypeError} On a malformed URL (password masked).
   * @throws {Error} When no broker can be reached or one refuses the login.
   */
  static async connect(
    url: string,
    options: QueueDeclaration,
    bound: { readonly timeoutMs?: number; readonly signal?: AbortSignal } = {},
  ): Promise<AmqpPublisher> {
    const failures: string[] = [];
    const { hosts } = parseAmqpUrl(url);
    const end = performance.now() + (bound.timeoutMs ?? 0);
    for (const [i, host] of hosts.entries()) {
      using limit = bound.timeoutMs === undefined
        ? undefined
        : deadline((end - performance.now()) / (hosts.length - i), bound.signal);
      try {
        return await AmqpPublisher.#connectTo(host, options, limit?.signal ?? bound.signal);
      } catch (err: unknown) {
        // A refused login is the same on every broker of a cluster.
        if (hosts.length === 1 || /ACCESS_REFUSED|NOT_ALLOWED/.test(errorMessage(err))) throw err;
        if (bound.signal?.aborted) throw bound.signal.reason;
        failures.push(`${host.server}: ${errorMessage(err)}`);
      }
    }
    throw new Error(`No broker of the URL answered: ${failures.join("; ")}`);
  }

  static async #connectTo(
    { href, server }: AmqpHost,
    options: QueueDeclaration,
    signal: AbortSignal | undefined,
  ): Promise<AmqpPublisher> {
    const client = new AMQPClient(href, undefined, null);
    useDenoSocket(client);
    client.onerror = () => {};
    // A memory or disk alarm: the broker stops reading at the next publish and confirms nothing
    // until the alarm clears, without an error; unsaid, a publish just hangs or times out.
    client.onblocked = (reason) =>
      log.warn("rabbitmq: the broker blocked publishing (a resource alarm) until it clears", {
        broker: server,
        reason,
      });
    const opening = (async () => {
      await client.connect();
      try {
        const channel = await client.channel();
        await channel.confirmSelect();
        return new AmqpPublisher(client, channel, options);
      } catch (err: unknown) {
        await client.close().catch(() => {});
        throw err;
      }
    })();
    if (signal === undefined) return await opening;
    try {
      return await abortable(opening, signal);
    } catch (err: unknown) {
      // The client has no abort of its own: drop the socket, close whatever still arrives.
      client.socket?.destroy();
      void opening.then((late) => late.close(), () => {});
      throw err;
    }
  }

  /** Whether the connection or the channel is known to be closed (a publish would be refused). */
  get closed(): boolean {
    return this.#client.closed || this.#channel.closed;
  }

  /** Declare a queue as the consumer does (idempotent); see {@link declareQueue}. */
  async declare(queue: string): Promise<void> {
    if (this.#declared.has(queue)) return;
    await declareQueue(this.#channel, queue, this.#declaration);
    this.#declared.add(queue);
  }

  /**
   * Declare the queue and publish every payload, transient as the broker module does, waiting for
   * the confirms. No `contentType` by default, as the broker module sends.
   *
   * @throws {Error} When the broker dropped a message because the queue no longer exists (deleted
   *   since it was declared): the default exchange confirms such a message all the same, so each
   *   is published mandatory and a returned one fails the call; the next call declares again.
   * @throws {WorkerError} (code `not_queued`) When the broker nacked a message (not queued).
   */
  async publish(
    queue: string,
    payloads: readonly (string | Uint8Array)[],
    options: { contentType?: string } = {},
  ): Promise<void> {
    await this.declare(queue);
    const encoder = new TextEncoder();
    await Promise.all(payloads.map(async (p) => {
      const body = typeof p === "string" ? encoder.encode(p) : p;
      // amqp-client sends no content-type property when it is undefined.
      await this.#channel.basicPublish("", queue, body, options, true).catch((err: unknown) => {
        // amqp-client's word for a basic.nack: the broker did not queue it (a full queue whose
        // overflow is reject-publish), unlike a lost confirm, which leaves it unknown.
        if (!(err instanceof Error) || err.message !== "Message rejected") throw err;
        throw new WorkerError(
          "not_queued",
          `The broker refused a message for queue "${queue}" (basic.nack): it was not queued; ` +
            "the likely cause is a length limit with overflow reject-publish",
          { cause: err },
        );
      });
      // The broker sends basic.return before the confirm of the same message.
      const returned = this.#returned.findIndex((m) =>
        m.routingKey === queue && m.body !== null && Buffer.compare(m.body, body) === 0
      );
      if (returned !== -1) {
        this.#returned.splice(returned, 1);
        this.#declared.delete(queue);
        throw new WorkerError(
          "returned",
          `The broker dropped a message for queue "${queue}": the queue no longer exists`,
        );
      }
    }));
  }

  /** Ready messages and consumers of a queue ({@link ProbeChannel}); throws when it is missing. */
  async depth(queue: string): Promise<QueueDepth> {
    const ok = await this.#probe.declare(queue);
    return { ready: ok.messageCount, consumers: ok.consumerCount };
  }

  /** Delete a queue, whatever it holds. */
  async deleteQueue(queue: string): Promise<void> {
    await this.#channel.queueDelete(queue);
    this.#declared.delete(queue);
  }

  /** Close the connection. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      if (!this.#client.closed) {
        using limit = deadline(CLOSE_TIMEOUT_MS);
        await settledWithin(this.#client.close(), limit.signal);
      }
      this.#client.socket?.destroy();
    })();
    return this.#closing;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}
