/**
 * `host:port` addresses and multi-host URL lists, shared by layers that must not import each other.
 *
 * @module
 */

/** A server address (`host:port`). */
export interface ServerAddress {
  readonly hostname: string;
  readonly port: number;
}

/**
 * `host:port` for logs, messages and URLs: an IPv6 host in brackets (`[::1]:9105`), since
 * `::1:9105` could also be the address ::1:9105 without a port. A host already in brackets stays.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { joinHostPort } from "./address.ts";
 * assert.equal(joinHostPort("::1", 9105), "[::1]:9105");
 * assert.equal(joinHostPort("127.0.0.1", 9105), "127.0.0.1:9105");
 * ```
 */
export function joinHostPort(host: string, port: number): string {
  return host.includes(":") && !host.startsWith("[") ? `[${host}]:${port}` : `${host}:${port}`;
}

/**
 * Parse `host:port` (IPv6 as `[::1]:4730`); the port defaults to 4730, gearmand's.
 *
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
export function parseServerAddress(addr: string, defaultPort = 4730): ServerAddress {
  const trimmed = addr.trim();
  const m = /^\[([^\]]+)\](?::(\d+))?$/.exec(trimmed) ?? /^([^:]*)(?::(\d+))?$/.exec(trimmed);
  const hostname = m?.[1] ?? "";
  const port = m?.[2] === undefined ? defaultPort : Number(m[2]);
  if (m === null || hostname === "" || !Number.isInteger(port) || port < 1 || port > 65535) {
    throw new TypeError(`Cannot parse job server address "${addr}": expected host:port`);
  }
  return { hostname, port };
}

/**
 * Split the host list of `mysql://user:pw@h1:3306,h2,[::1]:3307/db` (Connector/J and libpq's form),
 * which WHATWG URL does not parse; it follows the last `@`, so an unencoded `@` in a password
 * still parses. `url` is the URL with the first host alone; undefined for one host.
 */
export function splitUrlHosts(
  url: string,
  defaultPort: number,
):
  | { readonly url: string; readonly hosts: readonly ServerAddress[] }
  | { readonly problem: string }
  | undefined {
  const match = /^([a-z][a-z0-9+.-]*:\/\/)([^/?#]*)(.*)$/is.exec(url);
  if (match === null) return undefined;
  const [, scheme = "", authority = "", rest = ""] = match;
  const at = authority.lastIndexOf("@");
  const list = authority.slice(at + 1).split(",");
  if (list.length < 2) return undefined;
  const hosts: ServerAddress[] = [];
  for (const [i, text] of list.entries()) {
    try {
      hosts.push(parseServerAddress(text, defaultPort));
    } catch {
      return {
        problem: `host ${i + 1} of the list, "${text}", is not host[:port] ` +
          "(expected host[:port],host[:port],…; IPv6 in brackets)",
      };
    }
  }
  return { url: `${scheme}${authority.slice(0, at + 1)}${list[0]}${rest}`, hosts };
}
