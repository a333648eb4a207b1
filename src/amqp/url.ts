/**
 * AMQP URL handling (docs/operations.md#values): `amqp://user:password@host:port/vhost`,
 * percent-encoded; an empty path or a bare `/` is the default vhost `/`.
 *
 * The URL is checked here before the client library sees it, because a URL
 * the library cannot parse fails with a message that quotes it, password
 * included (D8: secrets never appear in logs).
 *
 * @module
 */
import { redactUrl } from "../config/mod.ts";

/** A checked AMQP URL. */
export interface AmqpUrl {
  /** The URL handed to the client library (with the worker's default query parameters). */
  readonly href: string;
  /** The same URL with the password masked as `****`, for log lines and errors. */
  readonly display: string;
  /** `host:port` of the broker (the `server` of a job). */
  readonly server: string;
  /** Decoded virtual host. */
  readonly vhost: string;
  readonly tls: boolean;
}

/**
 * AMQP heartbeat requested when the URL does not name one, in seconds:
 * RabbitMQ's own default. Without it a half-open TCP connection (a peer gone
 * without FIN/RST) is never noticed (docs/consumption.md#rabbitmq-reconnect), because
 * the client library disables heartbeats unless the URL asks for them.
 */
export const DEFAULT_HEARTBEAT_S = 60;

/**
 * Parse and check an AMQP URL.
 *
 * @param url `amqp://` or `amqps://` URL.
 * @returns The checked URL.
 * @throws {TypeError} When the URL does not parse, has another scheme, no
 *   host, a bad port or malformed percent-encoding; the message shows the URL
 *   with its password masked.
 * @example Default vhost
 * ```ts
 * import { parseAmqpUrl } from "./url.ts";
 * parseAmqpUrl("amqp://u:secret@127.0.0.1:5672/").vhost; // "/"
 * ```
 */
export function parseAmqpUrl(url: string): AmqpUrl {
  const fail = (detail: string): never => {
    throw new TypeError(`Cannot parse AMQP URL "${redactUrl(url)}": ${detail}`);
  };
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return fail("not a URL (expected amqp://user:password@host:port/vhost)");
  }
  if (u.protocol !== "amqp:" && u.protocol !== "amqps:") {
    fail(`scheme "${u.protocol.slice(0, -1)}" is not amqp or amqps`);
  }
  if (u.hostname === "") fail("no host");
  const tls = u.protocol === "amqps:";
  const port = u.port === "" ? (tls ? 5671 : 5672) : Number(u.port);
  if (!Number.isInteger(port) || port < 1 || port > 65535) fail(`port "${u.port}" out of range`);
  let vhost = "";
  for (const [what, text] of [["user", u.username], ["password", u.password]] as const) {
    try {
      decodeURIComponent(text);
    } catch {
      fail(`malformed percent-encoding in the ${what}`);
    }
  }
  try {
    vhost = decodeURIComponent(u.pathname.slice(1)) || "/";
  } catch {
    fail("malformed percent-encoding in the vhost");
  }
  const heartbeat = u.searchParams.get("heartbeat");
  if (heartbeat === null) {
    u.searchParams.set("heartbeat", String(DEFAULT_HEARTBEAT_S));
  } else if (!/^\d+$/.test(heartbeat)) {
    fail(`heartbeat "${heartbeat}" is not a whole number of seconds`);
  }
  // WHATWG keeps the brackets of an IPv6 host in `hostname`.
  return { href: u.href, display: redactUrl(url), server: `${u.hostname}:${port}`, vhost, tls };
}
