/**
 * The HTTP listener the metrics, `/ws` and `/commands` servers share, on `node:http` because it
 * hands over each connection before any byte is parsed, which `Deno.serve` does not: so it can cap
 * connections and time out heads and responses (docs/http-listeners.md). Every response says
 * `Connection: close`, so an idle keep-alive socket never holds a place under the cap.
 *
 * @module
 */
import { createServer, type IncomingMessage, type ServerResponse, STATUS_CODES } from "node:http";
import type { Buffer } from "node:buffer";
import type { AddressInfo, Socket } from "node:net";
import { Readable } from "node:stream";
// @ts-types="@types/ws"
import { type WebSocket as ServerWebSocket, WebSocketServer } from "ws";
import type { Metrics } from "../metrics/registry.ts";
import { errorMessage, getLogger } from "../log.ts";
import { joinHostPort } from "../util/address.ts";

const log = getLogger("http");

/** The `listener` label values, one per HTTP server. */
export const LISTENERS = ["metrics", "websocket", "commands"] as const;
export type ListenerName = (typeof LISTENERS)[number];

/**
 * Connections open at once per listener: far above what Prometheus, `/ws` clients and `/commands`
 * callers open, low enough that a flood cannot use up the file descriptors. Not a setting.
 */
export const MAX_CONNECTIONS = 512;
export const HEADER_TIMEOUT_MS = 10_000;
const RESPONSE_TIMEOUT_MS = 30_000;
/** Largest message a `/ws` client may send; enforced while reading (1009, as in Go). */
export const MAX_WEBSOCKET_MESSAGE_BYTES = 8192;

export type ListenerMetrics = Pick<
  Metrics,
  "httpConnectionsOpen" | "httpConnectionsRefused" | "httpHeaderTimeouts"
>;

/** Connection limits of a listener; defaults are the constants above. */
export interface HttpLimits {
  readonly maxConnections?: number;
  readonly headerTimeoutMs?: number;
  readonly responseTimeoutMs?: number;
}

/** Where a server listens: what the metrics, `/ws` and `/commands` servers' options share. */
export interface ListenAddress {
  /** "" = every interface, IPv4 and IPv6 (what Go's `:port` binds). */
  readonly hostname: string;
  /** 0 picks a free port. */
  readonly port: number;
  readonly limits?: HttpLimits | undefined;
}

export interface ListenOptions extends ListenAddress {
  /** Which server this is: the `listener` label and log lines. */
  readonly name: ListenerName;
  /** The answer to a request whose handler threw. */
  readonly onError: (err: unknown) => Response;
  readonly metrics?: ListenerMetrics | undefined;
}

/** What a handler returns to accept a WebSocket handshake. */
export interface WebSocketAccept {
  /** Called with the open socket once the handshake answer went out. */
  readonly onOpen: (socket: ServerWebSocket) => void;
}

/** What a handler learns about its request besides the request itself. */
export interface RequestInfo {
  /** The peer as `host:port` (`[v6]:port`). */
  readonly remote: string;
  /** A WebSocket handshake, which the handler may accept (it then counts against the cap). */
  readonly webSocket: boolean;
}

export type Handler = (
  req: Request,
  info: RequestInfo,
) => Response | WebSocketAccept | Promise<Response | WebSocketAccept>;

/** A listening server, as the metrics, `/ws` and `/commands` servers hand it to the daemon. */
export interface HttpServer extends AsyncDisposable {
  readonly hostname: string;
  /** The bound port (the one picked for port 0). */
  readonly port: number;
  /**
   * Stop accepting and close connections whose request has not arrived; requests in progress
   * finish and accepted WebSockets are waited for. Idempotent.
   */
  shutdown(): Promise<void>;
}

/**
 * Serve `handler` on `hostname:port`; resolves once bound.
 *
 * @throws {Deno.errors.AddrInUse} When the port is taken.
 */
export async function listen(options: ListenOptions, handler: Handler): Promise<HttpServer> {
  const max = options.limits?.maxConnections ?? MAX_CONNECTIONS;
  const headerTimeoutMs = options.limits?.headerTimeoutMs ?? HEADER_TIMEOUT_MS;
  const responseTimeoutMs = options.limits?.responseTimeoutMs ?? RESPONSE_TIMEOUT_MS;
  const listener = options.name;
  const labels = { listener };
  const metrics = options.metrics;
  // Each open connection with its header timer, which is undefined once the request head arrived.
  const open = new Map<Socket, ReturnType<typeof setTimeout> | undefined>();
  let stopping = false;

  // node's own request timeouts answer 408 on a timer of their own; the header timeout here
  // closes without an answer and is counted, so those are switched off.
  const server = createServer({ requestTimeout: 0, headersTimeout: 0, keepAlive: false });
  const webSockets = new WebSocketServer({
    noServer: true,
    maxPayload: MAX_WEBSOCKET_MESSAGE_BYTES,
  });

  server.on("connection", (socket: Socket) => {
    if (stopping || open.size >= max) {
      if (!stopping) metrics?.httpConnectionsRefused.inc(labels);
      socket.destroy();
      return;
    }
    metrics?.httpConnectionsOpen.inc(labels);
    // Small responses go out at once instead of waiting for Nagle.
    socket.setNoDelay(true);
    const headTimer = setTimeout(() => {
      open.set(socket, undefined);
      metrics?.httpHeaderTimeouts.inc(labels);
      log.debug("http: request head not received in time, closing", {
        listener,
        remote: remoteOf(socket),
        timeout_ms: headerTimeoutMs,
      });
      socket.destroy();
    }, headerTimeoutMs);
    open.set(socket, headTimer);
    socket.once("close", () => {
      clearTimeout(open.get(socket));
      open.delete(socket);
      metrics?.httpConnectionsOpen.dec(labels);
    });
  });

  const headReceived = (socket: Socket): void => {
    if (!open.has(socket)) return;
    clearTimeout(open.get(socket));
    open.set(socket, undefined);
  };

  const answer = (req: Request, remote: string, webSocket: boolean) =>
    Promise.try(() => handler(req, { remote, webSocket })).catch(options.onError);

  // A connection that failed has nobody left to answer: noted at debug level (it is the peer's
  // doing, not the worker's) and closed.
  const dropConnection = (socket: Socket, remote: string, err: unknown): void => {
    log.debug("http: connection failed", { listener, remote, error: errorMessage(err) });
    socket.destroy();
  };

  // The peer went while the handler ran: nobody takes the answer, so its body is not read (a
  // scrape's can be a megabyte) and no response timer is armed that the past close never clears.
  const gone = (socket: Socket, response: Response | WebSocketAccept): boolean => {
    if (!socket.destroyed) return false;
    if (response instanceof Response) void response.body?.cancel().catch(() => {});
    return true;
  };

  // A peer that does not take its answer is closed: it would hold its place under the cap.
  const closeUntaken = (socket: Socket, remote: string): void => {
    const timer = setTimeout(() => {
      log.debug("http: response not taken in time, closing", {
        listener,
        remote,
        timeout_ms: responseTimeoutMs,
      });
      socket.destroy();
    }, responseTimeoutMs);
    socket.once("close", () => clearTimeout(timer));
  };

  server.on("request", async (message: IncomingMessage, res: ServerResponse) => {
    const socket = message.socket;
    headReceived(socket);
    const remote = remoteOf(socket);
    try {
      let response = await answer(toRequest(message, true), remote, false);
      if (gone(socket, response)) return;
      if (!(response instanceof Response)) {
        // Only a handshake can be accepted; a handler that does so otherwise is a bug.
        response = options.onError(new Error("WebSocket accepted on a plain request"));
      }
      closeUntaken(socket, remote);
      await writeResponse(res, response);
    } catch (err: unknown) {
      // The peer went away mid-request.
      dropConnection(socket, remote, err);
    }
  });

  server.on("upgrade", async (message: IncomingMessage, socket: Socket, head: Buffer) => {
    headReceived(socket);
    const remote = remoteOf(socket);
    // node hands an upgrade's socket over without its own error listener: a reset while the
    // handler awaits would be an uncaught error that ends the process.
    const failed = (err: unknown) => dropConnection(socket, remote, err);
    socket.on("error", failed);
    try {
      const isWebSocket = message.headers.upgrade?.toLowerCase() === "websocket";
      const response = await answer(toRequest(message, false), remote, isWebSocket);
      if (gone(socket, response)) return;
      if (response instanceof Response) {
        closeUntaken(socket, remote);
        await writeRawResponse(socket, response);
      }
      if (response instanceof Response || !isWebSocket || stopping) {
        socket.destroy();
        return;
      }
      // On a handshake it rejects (no key, wrong version), ws answers 400 and closes. It listens
      // for errors itself, and the open socket's are the WebSocket's.
      socket.off("error", failed);
      webSockets.handleUpgrade(message, socket, head, (ws) => response.onOpen(ws));
    } catch (err: unknown) {
      // A head the web Request refuses, or the peer went away mid-answer.
      dropConnection(socket, remote, err);
    }
  });

  server.on("clientError", (err: Error, socket: Socket) => {
    // Not HTTP, or the peer went away mid-head: nothing to answer.
    dropConnection(socket, remoteOf(socket), err);
  });

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    // Without a host node binds `::` dual-stack, or 0.0.0.0 where the host has no IPv6.
    const at = options.hostname === "" ? {} : { host: options.hostname };
    server.listen({ ...at, port: options.port }, () => {
      server.off("error", reject);
      resolve();
    });
  }).catch((err: unknown) => {
    throw (err as { code?: unknown }).code === "EADDRINUSE"
      ? new Deno.errors.AddrInUse(
        `${joinHostPort(options.hostname, options.port)}: ${errorMessage(err)}`,
      )
      : err;
  });
  server.on("error", (err: Error) => {
    log.warn("http: accepting a connection failed", { listener, error: errorMessage(err) });
  });
  const bound = server.address() as AddressInfo;

  let stopped: Promise<void> | undefined;
  const shutdown = () =>
    stopped ??= (async () => {
      stopping = true;
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      const closing = [...open.keys()].map((socket) =>
        new Promise((resolve) => socket.once("close", resolve))
      );
      for (const [socket, headTimer] of open) if (headTimer !== undefined) socket.destroy();
      await Promise.all(closing);
      await closed;
      webSockets.close();
    })();
  return { hostname: bound.address, port: bound.port, shutdown, [Symbol.asyncDispose]: shutdown };
}

/** The web `Request` for a node request; the body streams from the connection. */
function toRequest(message: IncomingMessage, withBody: boolean): Request {
  const headers = new Headers();
  const raw = message.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    try {
      headers.append(raw[i] as string, raw[i + 1] as string);
    } catch {
      // A header the web API refuses (invalid characters) is dropped.
    }
  }
  const method = message.method ?? "GET";
  const hasBody = withBody && method !== "GET" && method !== "HEAD";
  return new Request(`http://${headers.get("host") ?? "localhost"}${message.url ?? "/"}`, {
    method,
    headers,
    ...(hasBody
      ? { body: Readable.toWeb(message) as ReadableStream<Uint8Array>, duplex: "half" }
      : {}),
  });
}

/** Send `response` with `Connection: close`; resolves once it was handed to the connection. */
async function writeResponse(res: ServerResponse, response: Response): Promise<void> {
  const body = response.body === null ? null : new Uint8Array(await response.arrayBuffer());
  const headers: Record<string, string> = {};
  response.headers.forEach((value, name) => headers[name] = value);
  headers["connection"] = "close";
  if (body !== null) headers["content-length"] = String(body.byteLength);
  res.writeHead(response.status, response.statusText || undefined, headers);
  await new Promise<void>((resolve, reject) => {
    res.once("error", reject);
    res.end(body ?? undefined, () => resolve());
  });
}

/** Answer a refused upgrade request on the raw connection (node has no response object there). */
async function writeRawResponse(socket: Socket, response: Response): Promise<void> {
  const body = new Uint8Array(await response.arrayBuffer());
  const lines = [
    `HTTP/1.1 ${response.status} ${response.statusText || STATUS_CODES[response.status] || ""}`,
  ];
  response.headers.forEach((value, name) => lines.push(`${name}: ${value}`));
  lines.push(`content-length: ${body.byteLength}`, "connection: close", "", "");
  await new Promise<void>((resolve, reject) => {
    socket.write(lines.join("\r\n"));
    socket.end(body, () => resolve());
    socket.once("error", reject);
  });
}

/** The peer of a connection for log lines: `host:port` or `[v6]:port`. */
function remoteOf(socket: Socket): string {
  return joinHostPort(socket.remoteAddress ?? "unknown", socket.remotePort ?? 0);
}
