/**
 * A small RabbitMQ publisher: declares queues with the consumer's exact flags
 * (docs/consumption.md#rabbitmq-topology) and publishes to them through the default exchange with
 * publisher confirms, so that a resolved publish is enqueued at the broker. Used by the tests; the
 * shape of a future `rabbitmq_publisher` tool (docs/operations.md#publish).
 *
 * @module
 */
import { type AMQPChannel, AMQPClient } from "@cloudamqp/amqp-client";
import { declareQueue, type QueueDeclareMode } from "./session.ts";
import { parseAmqpUrl } from "./url.ts";
import { ProbeChannel, useDenoSocket } from "./client.ts";
import { errorMessage } from "../log.ts";

/** Counts of a queue as the broker reports them on a passive declaration. */
export interface QueueDepth {
  /** Messages ready for delivery (not counting delivered, unacknowledged ones). */
  readonly ready: number;
  readonly consumers: number;
}

/** How {@link AmqpPublisher} declares its queues: as the consumer does. */
export interface AmqpPublisherOptions {
  /** `--rabbitmq-durable-queues`. */
  readonly durableQueues: boolean;
  /** `--rabbitmq-declare`; default `declare`. */
  readonly declare?: QueueDeclareMode;
}

/** One connection with one confirming channel. */
export class AmqpPublisher implements AsyncDisposable {
  readonly #client: AMQPClient;
  readonly #channel: AMQPChannel;
  readonly #declared = new Set<string>();
  readonly #declaration: AmqpPublisherOptions;
  readonly #probe: ProbeChannel;
  #closing: Promise<void> | undefined;

  private constructor(client: AMQPClient, channel: AMQPChannel, options: AmqpPublisherOptions) {
    this.#client = client;
    this.#probe = new ProbeChannel(client);
    this.#channel = channel;
    this.#declaration = options;
  }

  /** The broker this publisher is connected to (`host:port`). */
  get server(): string {
    return `${this.#client.host}:${this.#client.port}`;
  }

  /**
   * Connect to the first broker of the URL that answers (docs/running.md#rabbitmq-hosts) and
   * open a channel in confirm mode.
   *
   * @param url AMQP URL, one host or several.
   * @param options As the consumer declares: `--rabbitmq-durable-queues`, `--rabbitmq-declare`.
   * @returns The publisher; close it (or `await using`).
   * @throws {TypeError} On a malformed URL (password masked).
   * @throws {Error} When no broker can be reached or one refuses the login; the message names
   *   each broker's failure.
   */
  static async connect(url: string, options: AmqpPublisherOptions): Promise<AmqpPublisher> {
    const failures: string[] = [];
    const { hosts } = parseAmqpUrl(url);
    for (const host of hosts) {
      try {
        return await AmqpPublisher.#connectTo(host.href, options);
      } catch (err: unknown) {
        // A refused login is the same on every broker of a cluster.
        if (hosts.length === 1 || /ACCESS_REFUSED|NOT_ALLOWED/.test(errorMessage(err))) throw err;
        failures.push(`${host.server}: ${errorMessage(err)}`);
      }
    }
    throw new Error(`No broker of the URL answered: ${failures.join("; ")}`);
  }

  static async #connectTo(href: string, options: AmqpPublisherOptions): Promise<AmqpPublisher> {
    const client = new AMQPClient(href, undefined, null);
    useDenoSocket(client);
    client.onerror = () => {};
    await client.connect();
    try {
      const channel = await client.channel();
      await channel.confirmSelect();
      return new AmqpPublisher(client, channel, options);
    } catch (err: unknown) {
      await client.close().catch(() => {});
      throw err;
    }
  }

  /**
   * Declare a queue as the consumer does (idempotent).
   *
   * @param queue Queue name.
   * @throws {WorkerError} (code `queue_declare`) When the broker refuses the declaration (naming the setting on
   *   a durability mismatch or a missing queue); the channel is closed by the broker then.
   */
  async declare(queue: string): Promise<void> {
    if (this.#declared.has(queue)) return;
    await declareQueue(this.#channel, queue, {
      durable: this.#declaration.durableQueues,
      mode: this.#declaration.declare ?? "declare",
    });
    this.#declared.add(queue);
  }

  /**
   * Declare the queue and publish every payload to it, transient (as the
   * broker module does), waiting for the broker's confirms.
   *
   * @param queue Queue name (routing key on the default exchange).
   * @param payloads Message bodies.
   * @param options `contentType` property of every message (none by default, as the broker module sends).
   */
  async publish(
    queue: string,
    payloads: readonly (string | Uint8Array)[],
    options: { contentType?: string } = {},
  ): Promise<void> {
    await this.declare(queue);
    const properties = options.contentType === undefined
      ? {}
      : { contentType: options.contentType };
    await Promise.all(payloads.map((p) => this.#channel.basicPublish("", queue, p, properties)));
  }

  /**
   * Ready messages and consumers of a queue, by a passive declaration on a
   * channel of its own ({@link ProbeChannel}), so that a missing queue does
   * not close the publishing channel.
   *
   * @param queue Queue name.
   * @returns The counts.
   * @throws {Error} When the queue does not exist.
   */
  async depth(queue: string): Promise<QueueDepth> {
    const ok = await this.#probe.declare(queue);
    return { ready: ok.messageCount, consumers: ok.consumerCount };
  }

  /**
   * Delete a queue, whatever it holds.
   *
   * @param queue Queue name.
   */
  async deleteQueue(queue: string): Promise<void> {
    await this.#channel.queueDelete(queue);
    this.#declared.delete(queue);
  }

  /** Close the connection. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      if (!this.#client.closed) await this.#client.close().catch(() => {});
      this.#client.socket?.destroy();
    })();
    return this.#closing;
  }

  /** Same as {@link close}. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}
