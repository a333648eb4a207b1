/**
 * How the worker drives the AMQP client's connection, shared by the session and the publisher.
 *
 * The connection goes over `Deno.connect` ({@link DenoSocket}) instead of Node's
 * `net.Socket`: the worker acknowledges every message with one write, and a write through
 * Deno's `net.Socket` cost several times the CPU of one through `Deno.Conn` (about 6 % of a
 * RabbitMQ drain's CPU went to acknowledgements alone).
 *
 * amqp-client opens its socket in a method it does not export in its types
 * (`connectSocket`: connect, send the protocol header once connected, feed every read to
 * `onRead`). {@link useDenoSocket} replaces that method on one client object with the same
 * steps over a {@link DenoSocket}; everything else (framing, heartbeats, the `close` and
 * `error` handling) stays the library's. When the library's shape is not what this expects,
 * or the URL asks for TLS, the client keeps its own socket.
 *
 * Passive queue declarations (how many messages wait, how many consumers read) go
 * on a channel kept apart from the channels that consume or publish: a
 * declaration of a missing queue makes the broker close the channel it was
 * asked on, and those channels must survive that.
 *
 * @module
 */
import type { Buffer } from "node:buffer";
import type { AMQPChannel, AMQPClient, QueueParams } from "@cloudamqp/amqp-client";
import { DenoSocket } from "../util/deno_socket.ts";

/** AMQP 0-9-1's protocol header, the first bytes a client sends. */
const PROTOCOL_HEADER = new Uint8Array([65, 77, 81, 80, 0, 0, 9, 1]);

/** The library's private members this replaces and uses. */
interface SocketInternals {
  connectSocket?: unknown;
  onRead?: unknown;
}

/**
 * Let `client` connect over `Deno.connect`.
 *
 * @param client A client not yet connected.
 * @returns Whether it will (false: TLS, or the library changed shape and keeps its own socket).
 */
export function useDenoSocket(client: AMQPClient): boolean {
  const internals = client as unknown as SocketInternals;
  if (
    client.tls || typeof internals.connectSocket !== "function" ||
    typeof internals.onRead !== "function"
  ) {
    return false;
  }
  const onRead = (internals.onRead as (buf: Buffer) => unknown).bind(client);
  internals.connectSocket = () => {
    const socket = new DenoSocket({ host: client.host, port: client.port });
    // A failed write destroys the socket, which the library hears as error and close.
    socket.once("connect", () => void client.send(PROTOCOL_HEADER).catch(() => {}));
    socket.on("data", onRead);
    return socket;
  };
  return true;
}

/** The counts of a passive declaration. */
export interface QueueCounts {
  /** Messages ready for delivery. */
  readonly messageCount: number;
  /** Consumers registered on the queue. */
  readonly consumerCount: number;
}

/**
 * One channel for passive declarations, opened on first use, kept between
 * calls (opening and closing a channel costs the broker about 0.75 ms of CPU,
 * which a drain polled every 25 ms paid for) and reopened once the broker has
 * closed it. Calls made while it opens share the one channel.
 */
export class ProbeChannel {
  readonly #client: AMQPClient;
  #channel: AMQPChannel | undefined;
  #opening: Promise<AMQPChannel> | undefined;

  /** @param client The connection to open the channel on. */
  constructor(client: AMQPClient) {
    this.#client = client;
  }

  /**
   * Declare `queue` passively.
   *
   * @param queue Queue name.
   * @param flags The queue's declaration flags; `passive` is set here.
   * @returns The queue's counts.
   * @throws {Error} When the queue does not exist (the broker then closes the channel, and the
   *   next call opens another) or the connection is gone.
   */
  async declare(queue: string, flags: QueueParams = {}): Promise<QueueCounts> {
    const open = this.#channel;
    const channel = open !== undefined && !open.closed ? open : await this.#open();
    return await channel.queueDeclare(queue, { ...flags, passive: true });
  }

  /**
   * Close the channel if it is open; never rejects.
   *
   * @returns Settles once the broker answered, or the close failed.
   */
  close(): Promise<void> {
    const channel = this.#channel;
    this.#channel = undefined;
    return channel === undefined || channel.closed
      ? Promise.resolve()
      : channel.close().catch(() => {});
  }

  #open(): Promise<AMQPChannel> {
    this.#opening ??= this.#client.channel()
      .then((channel) => (this.#channel = channel))
      .finally(() => (this.#opening = undefined));
    return this.#opening;
  }
}
