/**
 * How the worker drives the AMQP client's connection, shared by the session and the publisher.
 *
 * The connection goes over `Deno.connect` ({@link DenoSocket}) instead of Node's `net.Socket`:
 * every ack is one write, and a write through Deno's `net.Socket` cost several times the CPU
 * (about 6 % of a RabbitMQ drain's CPU went to acks alone). Measured; keep.
 *
 * @module
 */
import type { Buffer } from "node:buffer";
import type { AMQPChannel, AMQPClient, QueueParams } from "@cloudamqp/amqp-client";
import { DenoSocket } from "../util/deno_socket.ts";

/** AMQP 0-9-1's protocol header. */
const PROTOCOL_HEADER = new Uint8Array([65, 77, 81, 80, 0, 0, 9, 1]);

/** The library's private members this replaces and uses. */
interface SocketInternals {
  connectSocket?: unknown;
  onRead?: unknown;
}

/**
 * Let `client` (not yet connected) connect over `Deno.connect`, by replacing amqp-client's untyped
 * `connectSocket` with the same steps over a {@link DenoSocket}; framing, heartbeats and errors
 * stay the library's. Returns false (the library's own socket) for TLS or an unexpected shape.
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
  readonly messageCount: number;
  readonly consumerCount: number;
}

/**
 * One channel for passive declarations, apart from the consuming and publishing channels: a
 * declaration of a missing queue makes the broker close the channel it was asked on. Kept between
 * calls (opening one costs the broker about 0.75 ms of CPU, paid by a drain polling every 25 ms)
 * and reopened once the broker closed it.
 */
export class ProbeChannel {
  readonly #client: AMQPClient;
  #channel: AMQPChannel | undefined;
  #opening: Promise<AMQPChannel> | undefined;

  constructor(client: AMQPClient) {
    this.#client = client;
  }

  /** Declare `queue` passively; throws when it does not exist or the connection is gone. */
  async declare(queue: string, flags: QueueParams = {}): Promise<QueueCounts> {
    const open = this.#channel;
    const channel = open !== undefined && !open.closed ? open : await this.#open();
    return await channel.queueDeclare(queue, { ...flags, passive: true });
  }

  /** Close the channel if it is open; never rejects. */
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
