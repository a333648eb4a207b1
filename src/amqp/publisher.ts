/**
 * A small RabbitMQ publisher: declares queues with the consumer's exact flags and publishes through
 * the default exchange with confirms, so a resolved publish is enqueued (docs/operations.md#publish).
 *
 * @module
 */
import { type AMQPChannel, AMQPClient } from "@cloudamqp/amqp-client";
import { declareQueue, ProbeChannel, type QueueDeclaration, useDenoSocket } from "./session.ts";
import { parseAmqpUrl } from "./url.ts";
import { errorMessage } from "../log.ts";

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
  #closing: Promise<void> | undefined;

  private constructor(client: AMQPClient, channel: AMQPChannel, options: QueueDeclaration) {
    this.#client = client;
    this.#probe = new ProbeChannel(client);
    this.#channel = channel;
    this.#declaration = options;
  }

  /**
   * Connect to the first broker of the URL that answers (docs/running.md#rabbitmq-hosts), in
   * confirm mode.
   *
   * @throws {TypeError} On a malformed URL (password masked).
   * @throws {Error} When no broker can be reached or one refuses the login.
   */
  static async connect(url: string, options: QueueDeclaration): Promise<AmqpPublisher> {
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

  static async #connectTo(href: string, options: QueueDeclaration): Promise<AmqpPublisher> {
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

  /** Declare a queue as the consumer does (idempotent); see {@link declareQueue}. */
  async declare(queue: string): Promise<void> {
    if (this.#declared.has(queue)) return;
    await declareQueue(this.#channel, queue, this.#declaration);
    this.#declared.add(queue);
  }

  /**
   * Declare the queue and publish every payload, transient as the broker module does, waiting for
   * the confirms. No `contentType` by default, as the broker module sends.
   */
  async publish(
    queue: string,
    payloads: readonly (string | Uint8Array)[],
    options: { contentType?: string } = {},
  ): Promise<void> {
    await this.declare(queue);
    // amqp-client sends no content-type property when it is undefined.
    await Promise.all(payloads.map((p) => this.#channel.basicPublish("", queue, p, options)));
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
      if (!this.#client.closed) await this.#client.close().catch(() => {});
      this.#client.socket?.destroy();
    })();
    return this.#closing;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}
