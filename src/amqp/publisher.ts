/**
 * A small RabbitMQ publisher: declares queues with the consumer's exact flags
 * (docs/consumption.md#rabbitmq-topology) and publishes to them through the default exchange with
 * publisher confirms, so that a resolved publish is enqueued at the broker. Used by the tests; the
 * shape of a future `rabbitmq_publisher` tool (docs/operations.md#publish).
 *
 * @module
 */
import { type AMQPChannel, AMQPClient } from "@cloudamqp/amqp-client";
import { QueueDeclareError, queueDeclareFlags } from "./session.ts";
import { parseAmqpUrl } from "./url.ts";
import { useDenoSocket } from "./socket.ts";
import { ProbeChannel } from "./probe.ts";

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
  readonly #durable: boolean;
  readonly #probe: ProbeChannel;
  #closing: Promise<void> | undefined;

  private constructor(client: AMQPClient, channel: AMQPChannel, durable: boolean) {
    this.#client = client;
    this.#probe = new ProbeChannel(client);
    this.#channel = channel;
    this.#durable = durable;
  }

  /**
   * Connect and open a channel in confirm mode.
   *
   * @param url AMQP URL.
   * @param options `durableQueues`: `--rabbitmq-durable-queues`, as the consumer declares.
   * @returns The publisher; close it (or `await using`).
   * @throws {TypeError} On a malformed URL (password masked).
   * @throws {Error} When the broker cannot be reached or refuses the login.
   */
  static async connect(
    url: string,
    options: { readonly durableQueues: boolean },
  ): Promise<AmqpPublisher> {
    const client = new AMQPClient(parseAmqpUrl(url).href, undefined, null);
    useDenoSocket(client);
    client.onerror = () => {};
    await client.connect();
    try {
      const channel = await client.channel();
      await channel.confirmSelect();
      return new AmqpPublisher(client, channel, options.durableQueues);
    } catch (err: unknown) {
      await client.close().catch(() => {});
      throw err;
    }
  }

  /**
   * Declare a queue with the consumer's flags (idempotent).
   *
   * @param queue Queue name.
   * @throws {QueueDeclareError} When the broker refuses the declaration (naming the setting on
   *   a durability mismatch); the channel is closed by the broker then.
   */
  async declare(queue: string): Promise<void> {
    if (this.#declared.has(queue)) return;
    try {
      await this.#channel.queueDeclare(queue, queueDeclareFlags(this.#durable), {});
    } catch (err: unknown) {
      throw new QueueDeclareError(queue, this.#durable, { cause: err });
    }
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
