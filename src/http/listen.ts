/**
 * The HTTP listener the metrics, `/ws` and `/commands` servers share: it owns
 * the accept loop, so it can do what `Deno.serve` cannot:
 *
 * - cap the connections open at once (`--http-max-connections`, default 512
 *   per listener); one more is closed as soon as it is accepted and counted;
 * - close a connection whose request head does not arrive within 10 s
 *   (`Deno.serve` has no header timeout: a client that never finishes its
 *   headers holds its connection forever);
 * - close a connection whose response is not taken within 30 s.
 *
 * A connection carries one request: every response says `Connection: close`,
 * so an idle keep-alive socket never occupies a place under the cap, and the
 * connection is closed only after the server side has sent the response
 * (closing it earlier would cut the response, which is still being written
 * when `respondWith` resolves).
 *
 * Each accepted connection is handed to Deno's per-connection HTTP/1.1 server
 * (`Deno.serveHttp`), which parses the requests and supports
 * `Deno.upgradeWebSocket`. It is no longer in Deno 2's type declarations but
 * still shipped; bench/http_listen.ts compares it with `Deno.serve`.
 *
 * @module
 */
import type { Metrics } from "../metrics/registry.ts";
import { errorMessage, getLogger } from "../log.ts";

const log = getLogger("http");

/** The `listener` label values, one per HTTP server. */
export const LISTENERS = ["metrics", "websocket", "commands"] as const;
/** One of {@link LISTENERS}. */
export type ListenerName = (typeof LISTENERS)[number];

/** Default cap on connections open at once, per listener. */
export const MAX_CONNECTIONS = 512;
/** Time a connection gets for its complete request head. */
export const HEADER_TIMEOUT_MS = 10_000;
/** Time a client gets to take a whole response. */
export const RESPONSE_TIMEOUT_MS = 30_000;
/** Pause after a failed accept (e.g. out of file descriptors) before the next one. */
const ACCEPT_RETRY_MS = 100;

/** The metric handles a listener updates. */
export type ListenerMetrics = Pick<
  Metrics,
  "httpConnectionsOpen" | "httpConnectionsRefused" | "httpHeaderTimeouts"
>;

/** Connection limits of a listener; each has a default. */
export interface HttpLimits {
  /** Default {@link MAX_CONNECTIONS}. */
  readonly maxConnections?: number;
  /** Default {@link HEADER_TIMEOUT_MS}. */
  readonly headerTimeoutMs?: number;
  /** Default {@link RESPONSE_TIMEOUT_MS}. */
  readonly responseTimeoutMs?: number;
}

/** Options of {@link listen}. */
export interface ListenOptions extends HttpLimits {
  /** Which server this is: the `listener` label and log lines. */
  readonly name: ListenerName;
  readonly hostname: string;
  /** 0 picks a free port. */
  readonly port: number;
  /** The answer to a request whose handler threw (after logging it). */
  readonly onError: (err: unknown) => Response;
  readonly metrics?: ListenerMetrics;
}

/** What a handler learns about its request besides the request itself. */
export interface RequestInfo {
  /** The peer as `host:port` (`[v6]:port`). */
  readonly remote: string;
  /**
   * Keep the connection counted against the cap until `closed` settles: for a
   * response that hands the connection over, such as a WebSocket upgrade.
   */
  hold(closed: Promise<unknown>): void;
}

/** A request handler. */
export type Handler = (req: Request, info: RequestInfo) => Response | Promise<Response>;

/** A listening server and the address it is bound to. */
export interface Listening {
  readonly addr: Deno.NetAddr;
  /** Connections open now. */
  readonly connections: number;
  /**
   * Stop accepting and close idle connections; requests in progress finish
   * and held connections are waited for. Idempotent.
   */
  shutdown(): Promise<void>;
}

/** `Deno.serveHttp`'s connection, as far as it is used here. */
interface HttpConn {
  nextRequest(): Promise<RequestEvent | null>;
  close(): void;
}

interface RequestEvent {
  readonly request: Request;
  respondWith(response: Response): Promise<void>;
}

type ServeHttp = (conn: Deno.Conn) => HttpConn;

const TIMEOUT = Symbol("timeout");
const STOP = Symbol("stop");

/**
 * Serve `handler` on `hostname:port`.
 *
 * @param options Address, limits, metrics and the error answer.
 * @param handler The request handler.
 * @returns Once bound: the server and its address.
 * @throws {Deno.errors.AddrInUse} When the port is taken.
 * @throws {Error} When this Deno has no per-connection HTTP server.
 */
// deno-lint-ignore require-await -- async so that a taken port rejects instead of throwing
export async function listen(options: ListenOptions, handler: Handler): Promise<Listening> {
  const serveHttp = (Deno as unknown as { serveHttp?: ServeHttp }).serveHttp;
  if (typeof serveHttp !== "function") {
    throw new Error("This Deno has no Deno.serveHttp, which the HTTP listeners are built on");
  }
  const max = options.maxConnections ?? MAX_CONNECTIONS;
  const headerTimeoutMs = options.headerTimeoutMs ?? HEADER_TIMEOUT_MS;
  const responseTimeoutMs = options.responseTimeoutMs ?? RESPONSE_TIMEOUT_MS;
  const labels = { listener: options.name };
  const metrics = options.metrics;
  const listener = Deno.listen({
    hostname: options.hostname,
    port: options.port,
    transport: "tcp",
  });
  const stop = new AbortController();
  let stopping = false;
  const running = new Set<Promise<void>>();

  const serveConnection = async (conn: Deno.TcpConn): Promise<void> => {
    const remote = remoteAddress(conn.remoteAddr);
    let http: HttpConn | undefined;
    try {
      // Small responses go out at once instead of waiting for Nagle.
      conn.setNoDelay(true);
      http = serveHttp(conn);
      const next = http.nextRequest();
      // Abandoned on timeout or stop: it rejects once the connection is closed.
      next.catch(() => {});
      const event = await within(next, headerTimeoutMs, stop.signal);
      if (event === TIMEOUT) {
        metrics?.httpHeaderTimeouts.inc(labels);
        log.debug("http: request head not received in time, closing", {
          listener: options.name,
          remote,
          timeout_ms: headerTimeoutMs,
        });
        return;
      }
      if (event === STOP || event === null) return;
      let held: Promise<unknown> | undefined;
      let response: Response;
      try {
        response = await handler(event.request, { remote, hold: (closed) => held = closed });
      } catch (err: unknown) {
        response = options.onError(err);
      }
      if (held !== undefined) {
        // The connection now belongs to the upgraded protocol. A failed hand-over never
        // opens the socket, so there is nothing to wait for then.
        if (await event.respondWith(response).then(() => true, () => false)) {
          await held.catch(() => {});
        }
        return;
      }
      await event.respondWith(lastOnConnection(response));
      // The peer's end of the connection (null) comes once the response is out.
      const end = http.nextRequest();
      end.catch(() => {});
      if (await within(end, responseTimeoutMs) === TIMEOUT) {
        log.debug("http: response not taken in time, closing", {
          listener: options.name,
          remote,
          timeout_ms: responseTimeoutMs,
        });
      }
    } catch (err: unknown) {
      // The peer went away mid-request, or sent something that is not HTTP.
      log.debug("http: connection failed", {
        listener: options.name,
        remote,
        error: errorMessage(err),
      });
    } finally {
      try {
        if (http === undefined) conn.close();
        else http.close();
      } catch {
        // Already closed by the peer or by an upgrade.
      }
    }
  };

  const accepting = (async () => {
    for (;;) {
      let conn: Deno.TcpConn;
      try {
        conn = await listener.accept();
      } catch (err: unknown) {
        if (stopping || err instanceof Deno.errors.BadResource) return;
        log.warn("http: accepting a connection failed", {
          listener: options.name,
          error: errorMessage(err),
        });
        await new Promise((r) => setTimeout(r, ACCEPT_RETRY_MS));
        continue;
      }
      if (running.size >= max) {
        metrics?.httpConnectionsRefused.inc(labels);
        try {
          conn.close();
        } catch {
          // Gone already.
        }
        continue;
      }
      metrics?.httpConnectionsOpen.inc(labels);
      const task = serveConnection(conn).finally(() => {
        running.delete(task);
        metrics?.httpConnectionsOpen.dec(labels);
      });
      running.add(task);
    }
  })();

  let stopped: Promise<void> | undefined;
  return {
    addr: listener.addr,
    get connections() {
      return running.size;
    },
    shutdown() {
      stopped ??= (async () => {
        stopping = true;
        stop.abort();
        try {
          listener.close();
        } catch {
          // Already closed.
        }
        await accepting;
        await Promise.all([...running]);
      })();
      return stopped;
    },
  };
}

/** The response with `Connection: close`, so the server closes after sending it. */
function lastOnConnection(response: Response): Response {
  try {
    response.headers.set("connection", "close");
    return response;
  } catch {
    // Immutable headers (Response.error(), Response.redirect()): copy them.
    const headers = new Headers(response.headers);
    headers.set("connection", "close");
    return new Response(response.body, {
      status: response.status,
      statusText: response.statusText,
      headers,
    });
  }
}

/**
 * `promise`, or {@link TIMEOUT} after `ms`, or {@link STOP} once `stop` aborts,
 * whichever comes first. The abort listener is removed again: one shared
 * promise raced by every connection would keep a reaction per connection
 * alive for the whole run.
 */
async function within<T>(
  promise: Promise<T>,
  ms: number,
  stop?: AbortSignal,
): Promise<T | typeof TIMEOUT | typeof STOP> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let onStop: (() => void) | undefined;
  const limit = new Promise<typeof TIMEOUT | typeof STOP>((resolve) => {
    timer = setTimeout(() => resolve(TIMEOUT), ms);
    if (stop === undefined) return;
    if (stop.aborted) resolve(STOP);
    onStop = () => resolve(STOP);
    stop.addEventListener("abort", onStop, { once: true });
  });
  try {
    return await Promise.race([promise, limit]);
  } finally {
    clearTimeout(timer);
    if (onStop !== undefined) stop?.removeEventListener("abort", onStop);
  }
}

/**
 * A peer address for log lines.
 *
 * @param addr The remote address of a request.
 * @returns `host:port`, `[v6]:port`, or the transport name for a Unix socket.
 */
export function remoteAddress(addr: Deno.Addr): string {
  if (addr.transport !== "tcp" && addr.transport !== "udp") return addr.transport;
  return addr.hostname.includes(":")
    ? `[${addr.hostname}]:${addr.port}`
    : `${addr.hostname}:${addr.port}`;
}
