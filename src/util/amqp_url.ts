/**
 * AMQP URLs (docs/operations.md#values, docs/running.md#rabbitmq-hosts), checked here because the
 * client library's error for a URL it cannot parse quotes the password (D8). A leaf module: the
 * settings refuse with it what the broker layer could not dial.
 *
 * @module
 */
import { redactUrl, UrlError, urlProblem } from "./redact.ts";
import { splitUrlHosts } from "./address.ts";

/** One broker of the URL. */
export interface AmqpHost {
  /** The URL of this broker alone, with the worker's defaults. */
  readonly href: string;
  /** `host:port` of the broker (the `server` of a job, the `host` label of a metric). */
  readonly server: string;
}

/** A checked AMQP URL. */
export interface AmqpUrl extends AmqpHost {
  /** The URL as given, password masked. */
  readonly display: string;
  readonly vhost: string;
  readonly tls: boolean;
  /** Every broker in the URL's order (one for a single host); the first is `href`/`server`. */
  readonly hosts: readonly AmqpHost[];
}

/**
 * Heartbeat (s) when the URL names none, RabbitMQ's default: the client library disables
 * heartbeats otherwise, and a half-open connection would never be noticed.
 */
export const DEFAULT_HEARTBEAT_S = 60;

/** What {@link parseAmqpUrl} finds wrong with a URL (never the password), or null. */
export const amqpUrlProblem = (url: string): string | null => urlProblem(parseAmqpUrl, url);

/**
 * Parse and check an `amqp://` or `amqps://` URL with one host or a comma-separated list.
 *
 * @throws {TypeError} When the URL is malformed; the message masks the password.
 * @example Default vhost
 * ```ts
 * import { parseAmqpUrl } from "./amqp_url.ts";
 * parseAmqpUrl("amqp://u:secret@127.0.0.1:5672/").vhost; // "/"
 * ```
 */
export function parseAmqpUrl(url: string): AmqpUrl {
  const fail = (detail: string): never => {
    throw new UrlError("AMQP", url, detail);
  };
  const defaultPort = /^amqps:/i.test(url) ? 5671 : 5672;
  const split = splitUrlHosts(url, defaultPort);
  const list = split !== undefined && "problem" in split ? fail(split.problem) : split;
  let u: URL;
  try {
    u = new URL(list?.url ?? url);
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
  const path = u.pathname.slice(1);
  const parts = [["user", u.username], ["password", u.password], ["vhost", path]] as const;
  for (const [what, text] of parts) {
    try {
      decodeURIComponent(text);
    } catch {
      fail(`malformed percent-encoding in the ${what}`);
    }
  }
  const vhost = decodeURIComponent(path) || "/";
  const heartbeat = u.searchParams.get("heartbeat");
  if (heartbeat === null) {
    u.searchParams.set("heartbeat", String(DEFAULT_HEARTBEAT_S));
  } else if (!/^\d+$/.test(heartbeat)) {
    fail(`heartbeat "${heartbeat}" is not a whole number of seconds`);
  }
  // WHATWG keeps the brackets of an IPv6 host in `hostname`.
  const first: AmqpHost = { href: u.href, server: `${u.hostname}:${port}` };
  const hosts = list === undefined ? [first] : list.hosts.map(({ hostname, port }) => {
    const one = new URL(u.href);
    one.hostname = hostname.includes(":") ? `[${hostname}]` : hostname;
    one.port = String(port);
    return { href: one.href, server: `${one.hostname}:${port}` };
  });
  return { ...hosts[0] ?? first, display: redactUrl(url), vhost, tls, hosts };
}
