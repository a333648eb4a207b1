/**
 * `--mysql-url` parsing and redaction (D8: MySQL is given as a URL; secrets never appear in
 * logs, errors or help output). A leaf module: the settings validate a URL with it, so that a
 * value they accept is one the MySQL layer can open, and the MySQL layer parses it.
 *
 * @module
 */
import { joinHostPort, splitUrlHosts } from "./address.ts";
import { UrlError, urlProblem } from "./redact.ts";

/** mysql2 connection options derived from a `mysql://` URL (assignable to `ConnectionOptions`). */
export interface MysqlUrlOptions {
  /** Absent (as is `port`) when `socketPath` is used. */
  readonly host?: string;
  readonly port?: number;
  readonly socketPath?: string;
  readonly user: string;
  readonly password?: string;
  readonly database?: string;
  /** A 3-byte connection fails on every 4-byte character (docs/tables.md#utf8mb4). */
  readonly charset: "utf8mb4";
  readonly connectTimeout?: number;
  /** From `ssl=true` or a JSON object of mysql2's `ssl` options. */
  readonly ssl?: Readonly<Record<string, unknown>>;
  /** Every host of a multi-host URL, in order; never passed to mysql2 ({@link driverOptions}). */
  readonly hosts?: readonly MysqlHost[];
}

export interface MysqlHost {
  readonly host: string;
  readonly port: number;
}

/** `host:port` as a URL writes it (`[::1]:3306`), for logs, `/readyz` and metric labels. */
export function hostLabel(h: MysqlHost): string {
  return joinHostPort(h.host, h.port);
}

/** The list of a multi-host URL, else the one host; none for a unix socket. */
export function mysqlHosts(options: MysqlUrlOptions): readonly MysqlHost[] {
  if (options.hosts !== undefined) return options.hosts;
  return options.host === undefined ? [] : [{ host: options.host, port: options.port ?? 3306 }];
}

/** What a connection to host `h` of the list alone is opened with. */
export function onHost(options: MysqlUrlOptions, h: MysqlHost): MysqlUrlOptions {
  return { ...driverOptions(options), host: h.host, port: h.port };
}

/** Without the host list, which mysql2 would warn about as an unknown option. */
export function driverOptions(options: MysqlUrlOptions): Omit<MysqlUrlOptions, "hosts"> {
  const { hosts: _list, ...single } = options;
  return single;
}

const SCHEMES: readonly string[] = ["mysql:", "mariadb:"];
// `socketPath` is what the Go DSN conversion (src/config) writes; `socket` is a short alias.
const QUERY_PARAMETERS: readonly string[] = ["socket", "socketPath", "connectTimeout", "ssl"];
const STAND_IN_HOST = "localhost";

/**
 * Parse, accepting an empty host (`mysql://user@/db?socket=…`), which WHATWG URL rejects when
 * credentials are present; the host is irrelevant with a socket. Such a URL is parsed with a
 * stand-in host, and `emptyHost` says so.
 */
function parseLoosely(url: string): { url: URL; emptyHost: boolean } | undefined {
  if (URL.canParse(url)) return { url: new URL(url), emptyHost: false };
  const prefix = /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*@(?=[/?#]|$)/i.exec(url)?.[0];
  if (prefix !== undefined) {
    const patched = `${prefix}${STAND_IN_HOST}${url.slice(prefix.length)}`;
    if (URL.canParse(patched)) return { url: new URL(patched), emptyHost: true };
  }
  return undefined;
}

/** What {@link mysqlOptionsFromUrl} finds wrong with a URL (never the password), or null. */
export const mysqlUrlProblem = (url: string): string | null => urlProblem(mysqlOptionsFromUrl, url);

/**
 * mysql2 connection options from `mysql://user:pass@host:3306/db` or `…@h1:3306,h2,h3/db`
 * (docs/running.md#mysql-hosts). An unknown query parameter is refused rather than ignored (D8).
 *
 * @throws {TypeError} If the URL is malformed; the message masks the password.
 */
export function mysqlOptionsFromUrl(url: string): MysqlUrlOptions {
  const fail = (detail: string, cause?: unknown): never => {
    throw new UrlError("MySQL", url, detail, cause);
  };
  const decode = (value: string, what: string): string => {
    try {
      return decodeURIComponent(value);
    } catch (err: unknown) {
      return fail(`malformed percent-encoding in the ${what}`, err);
    }
  };
  const expectedForm = "mysql://user[:password]@host[:port]/database";
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(url)) fail(`not a valid URL (expected ${expectedForm})`);
  const split = splitUrlHosts(url, 3306);
  const list = split !== undefined && "problem" in split ? fail(split.problem) : split;
  const loose = parseLoosely(list?.url ?? url) ??
    fail(`not a valid URL (expected ${expectedForm})`);
  const parsed = loose.url;
  if (!SCHEMES.includes(parsed.protocol)) {
    fail(`scheme must be "mysql:" or "mariadb:", got "${parsed.protocol}"`);
  }
  if (parsed.hash !== "") fail("a fragment (#…) is not allowed");
  const seen = new Set<string>();
  for (const name of parsed.searchParams.keys()) {
    if (!QUERY_PARAMETERS.includes(name)) {
      // Not quoted unless a name: it may be the rest of a value cut at a `&` (a passphrase).
      const which = /^[\w.-]+$/.test(name) ? `"${name}"` : "(a & inside a value is written %26)";
      fail(
        `unknown query parameter ${which} (accepted: ${
          QUERY_PARAMETERS.map((p) => `"${p}"`).join(", ")
        })`,
      );
    }
    if (seen.has(name)) fail(`query parameter "${name}" is given more than once`);
    seen.add(name);
  }
  const user = decode(parsed.username, "user name");
  if (user === "") fail(`missing user name (expected ${expectedForm})`);
  const password = decode(parsed.password, "password");
  const path = parsed.pathname.replace(/^\//, "");
  if (path.includes("/")) fail(`the path must name one database, got "/${path}"`);
  const database = decode(path, "database name");

  if (parsed.searchParams.has("socket") && parsed.searchParams.has("socketPath")) {
    fail(`give either "socket" or "socketPath", not both`);
  }
  const socket = parsed.searchParams.get("socketPath") ?? parsed.searchParams.get("socket");
  if (socket === "") fail(`query parameter "socketPath" is empty`);
  const host = loose.emptyHost ? "" : parsed.hostname.replace(/^\[(.*)\]$/, "$1");
  if (socket === null && host === "") fail("missing host");
  if (socket !== null && list !== undefined) fail("a host list cannot be combined with a socket");
  const port = parsed.port === "" ? 3306 : Number(parsed.port);
  if (port < 1) fail(`port must be 1–65535, got "${parsed.port}"`);
  const timeoutText = parsed.searchParams.get("connectTimeout");
  let connectTimeout: number | undefined;
  if (timeoutText !== null) {
    connectTimeout = /^\d+$/.test(timeoutText) ? Number(timeoutText) : Number.NaN;
    if (!(connectTimeout >= 1 && Number.isSafeInteger(connectTimeout))) {
      fail(
        `query parameter "connectTimeout" must be a positive integer (milliseconds), got "${timeoutText}"`,
      );
    }
  }

  const sslText = parsed.searchParams.get("ssl");
  let ssl: Record<string, unknown> | undefined;
  if (sslText === "true") ssl = {};
  else if (sslText !== null) {
    try {
      const value: unknown = JSON.parse(sslText);
      if (typeof value !== "object" || value === null || Array.isArray(value)) throw new Error();
      ssl = value as Record<string, unknown>;
    } catch {
      fail(`query parameter "ssl" must be "true" or a JSON object of mysql2 TLS options`);
    }
  }

  return {
    ...(socket === null ? { host, port } : { socketPath: socket }),
    user,
    ...(password === "" ? {} : { password }),
    ...(database === "" ? {} : { database }),
    charset: "utf8mb4",
    ...(connectTimeout === undefined ? {} : { connectTimeout }),
    ...(ssl === undefined ? {} : { ssl }),
    ...(list === undefined
      ? {}
      : { hosts: list.hosts.map(({ hostname, port }) => ({ host: hostname, port })) }),
  };
}
