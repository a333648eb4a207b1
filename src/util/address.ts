/**
 * `host:port` addresses as given on the command line, shared by the Gearman client and the
 * Graphite client so that neither has to import the other.
 *
 * @module
 */

/** A server address (`host:port`). */
export interface ServerAddress {
  readonly hostname: string;
  readonly port: number;
}

/**
 * Parse `host:port` (IPv6 as `[::1]:4730`); the port defaults to 4730, gearmand's.
 *
 * @param addr Address text.
 * @returns Host name and port.
 * @throws {TypeError} When the port is not an integer in 1..65535 or the host is empty.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseServerAddress } from "./address.ts";
 * const { hostname, port } = parseServerAddress("[::1]:4731");
 * assert.ok(hostname === "::1" && port === 4731);
 * ```
 */
export function parseServerAddress(addr: string): ServerAddress {
  const trimmed = addr.trim();
  const m = /^\[([^\]]+)\](?::(\d+))?$/.exec(trimmed) ?? /^([^:]*)(?::(\d+))?$/.exec(trimmed);
  const hostname = m?.[1] ?? "";
  const port = m?.[2] === undefined ? 4730 : Number(m[2]);
  if (m === null || hostname === "" || !Number.isInteger(port) || port < 1 || port > 65535) {
    throw new TypeError(`Cannot parse job server address "${addr}": expected host:port`);
  }
  return { hostname, port };
}
