/**
 * Start an HTTP listener and learn its bound address: the one piece the
 * metrics, `/ws` and `/commands` servers share (port 0 picks a free port).
 *
 * @module
 */

/** Options of {@link listen}. */
export interface ListenOptions {
  readonly hostname: string;
  /** 0 picks a free port. */
  readonly port: number;
  /** The answer to a request whose handler threw (after logging it). */
  readonly onError: (err: unknown) => Response;
}

/** A listening server and the address it is bound to. */
export interface Listening {
  readonly server: Deno.HttpServer<Deno.NetAddr>;
  readonly addr: Deno.NetAddr;
}

/**
 * Serve `handler` on `hostname:port`.
 *
 * @param options Address and the error answer.
 * @param handler The request handler; `remote` is the peer as `host:port` (`[v6]:port`).
 * @returns Once bound: the server and its address.
 * @throws {Deno.errors.AddrInUse} When the port is taken.
 */
export async function listen(
  options: ListenOptions,
  handler: (req: Request, remote: string) => Response | Promise<Response>,
): Promise<Listening> {
  const { promise: bound, resolve } = Promise.withResolvers<Deno.NetAddr>();
  const server = Deno.serve({
    hostname: options.hostname,
    port: options.port,
    onListen: (addr) => resolve(addr as Deno.NetAddr),
    onError: options.onError,
  }, (req, info) => handler(req, remoteAddress(info.remoteAddr)));
  return { server, addr: await bound };
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
