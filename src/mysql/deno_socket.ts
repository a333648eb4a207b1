/**
 * mysql2's connections over `Deno.connect` ({@link DenoSocket}) instead of Node's `net.Socket`:
 * a bulk INSERT is one write and one read, and a write through Deno's `net.Socket` cost several
 * times the CPU (docs/writers.md). TLS stays with `net.Socket`, which mysql2 upgrades.
 *
 * @module
 */
import { DenoSocket, type DenoSocketTarget } from "../util/deno_socket.ts";

/** mysql2's `stream` option: a {@link DenoSocket} per new connection. */
export function denoSocketStream(opts: { readonly config: DenoSocketTarget }): DenoSocket {
  return new DenoSocket({
    ...(opts.config.host === undefined ? {} : { host: opts.config.host }),
    port: opts.config.port ?? 3306,
    ...(opts.config.socketPath === undefined ? {} : { socketPath: opts.config.socketPath }),
  });
}
