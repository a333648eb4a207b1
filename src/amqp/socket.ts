/**
 * The AMQP client's connection over `Deno.connect` ({@link DenoSocket}) instead of Node's
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
 * @module
 */
import type { Buffer } from "node:buffer";
import type { AMQPClient } from "@cloudamqp/amqp-client";
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
