/**
 * Parsers for the value formats of docs/operations.md#values, and parsing, describing and masking
 * a value by its row's kind. Parsers return a {@linkcode Parsed} result instead of throwing, so
 * the loader can name the setting and its source in the {@linkcode ConfigError}.
 *
 * @module
 */

import { joinHostPort, splitUrlHosts } from "../util/address.ts";
import { mysqlUrlProblem } from "../util/mysql_url.ts";
import { redactUrl } from "../util/redact.ts";
import { type CommandName, defaultOf, type Kind, type SettingRow } from "./settings.ts";

/** Outcome of parsing one value: the value (plus notes worth a warning) or a problem text. */
export type Parsed<T> =
  | { readonly ok: true; readonly value: T; readonly notes?: readonly string[] }
  | { readonly ok: false; readonly problem: string };

function ok<T>(value: T): Parsed<T> {
  return { ok: true, value };
}

function fail<T>(problem: string): Parsed<T> {
  return { ok: false, problem };
}

// Nanoseconds per unit, exactly the units Go's time.ParseDuration knows (µ as U+00B5 and
// U+03BC both appear in real files).
const DURATION_UNITS_NS: Readonly<Record<string, number>> = {
  ns: 1,
  us: 1e3,
  "\u00b5s": 1e3,
  "\u03bcs": 1e3,
  ms: 1e6,
  s: 1e9,
  m: 60e9,
  h: 3600e9,
};

// Go durations are int64 nanoseconds; anything beyond is "invalid duration" there.
const MAX_DURATION_NS = 9223372036854775807;

/**
 * A Go duration (`250ms`, `1h30m`, `.5s`, `-2s`, bare `0`) in milliseconds, possibly fractional
 * or negative; a problem for anything Go rejects, including a number without a unit (`300`).
 */
export function parseGoDuration(text: string): Parsed<number> {
  const quoted = JSON.stringify(text);
  const negative = text.startsWith("-");
  let rest = negative || text.startsWith("+") ? text.slice(1) : text;
  if (rest === "0") return ok(0);
  if (rest === "") return fail(`${quoted} is not a duration`);
  let totalNs = 0;
  while (rest !== "") {
    const [number = "", whole = "", fraction = ""] = /^([0-9]*)(?:\.([0-9]*))?/.exec(rest) ?? [];
    if (whole === "" && fraction === "") return fail(`${quoted} is not a duration`);
    rest = rest.slice(number.length);
    const unit = /^[^0-9.]+/.exec(rest)?.[0];
    if (unit === undefined) return fail(`${quoted} has a number without a unit`);
    const unitNs = DURATION_UNITS_NS[unit];
    if (unitNs === undefined) return fail(`${quoted} has the unknown unit ${JSON.stringify(unit)}`);
    rest = rest.slice(unit.length);
    // Number("") and Number("0.") are 0.
    totalNs += (Number(whole) + Number(`0.${fraction}`)) * unitNs;
  }
  if (totalNs > MAX_DURATION_NS) return fail(`${quoted} is too long a duration`);
  const ms = totalNs / 1e6;
  return ok(negative ? -ms : ms);
}

/** Milliseconds in the shortest exact Go duration spelling (`1h30m`, `250ms`, `0s`). */
export function formatGoDuration(ms: number): string {
  if (ms === 0) return "0s";
  if (ms < 0) return `-${formatGoDuration(-ms)}`;
  let rest = ms;
  let out = "";
  for (const [unit, size] of [["h", 3_600_000], ["m", 60_000], ["s", 1000]] as const) {
    if (rest >= size) {
      const count = Math.floor(rest / size);
      out += `${count}${unit}`;
      rest -= count * size;
    }
  }
  if (rest > 0) out += Number.isInteger(rest) ? `${rest}ms` : `${Math.round(rest * 1e6)}ns`;
  return out;
}

const GO_TRUE = new Set(["1", "t", "T", "TRUE", "true", "True"]);
const GO_FALSE = new Set(["0", "f", "F", "FALSE", "false", "False"]);

/** A boolean in Go's `strconv.ParseBool` spellings; `on`, `yes`, … are problems. */
export function parseGoBoolean(text: string): Parsed<boolean> {
  if (GO_TRUE.has(text)) return ok(true);
  if (GO_FALSE.has(text)) return ok(false);
  return fail(`${JSON.stringify(text)} is not a boolean`);
}

const BINARY_UNITS = [["GiB", 1024 ** 3], ["MiB", 1024 ** 2], ["KiB", 1024]] as const;

/**
 * A size in bytes: whole bytes, or a whole number with a binary unit (`512KiB`, `64MiB`,
 * `1GiB`). Decimal units (`MB`) are refused rather than guessed.
 */
function parseByteSize(text: string): Parsed<number> {
  const m = /^([0-9]+)\s*([A-Za-z]*)$/.exec(text);
  const unit = m?.[2]?.toLowerCase();
  const factor = unit === "" || unit === "b"
    ? 1
    : BINARY_UNITS.find(([name]) => name.toLowerCase() === unit)?.[1];
  if (m === null || factor === undefined) {
    return fail(`${JSON.stringify(text)} is not a size (bytes, or e.g. 512KiB, 64MiB, 1GiB)`);
  }
  const value = Number(m[1]) * factor;
  if (!Number.isSafeInteger(value)) return fail(`${JSON.stringify(text)} is too large`);
  return ok(value);
}

/** A size the way {@link parseByteSize} reads it, in the largest exact unit (`1536KiB`). */
export function formatByteSize(bytes: number): string {
  for (const [unit, factor] of BINARY_UNITS) {
    if (bytes >= factor && bytes % factor === 0) return `${bytes / factor}${unit}`;
  }
  return String(bytes);
}

const HOST_NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]*$/;
const IPV6 = /^[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*(%[A-Za-z0-9_.-]+)?$/;

/**
 * Split `host:port`, `[v6]:port`, or with `emptyHost` (listen addresses) `:port`; `host` is IPv6
 * without brackets, `""` for all interfaces.
 */
export function splitHostPort(
  addr: string,
  emptyHost = false,
): Parsed<{ readonly host: string; readonly port: number }> {
  const quoted = JSON.stringify(addr);
  let host: string;
  let portText: string;
  if (addr.startsWith("[")) {
    const close = addr.indexOf("]");
    if (close < 0 || addr[close + 1] !== ":") return fail(`${quoted} is not host:port`);
    host = addr.slice(1, close);
    portText = addr.slice(close + 2);
    if (!IPV6.test(host)) return fail(`${quoted} has an invalid IPv6 address`);
  } else {
    const colon = addr.lastIndexOf(":");
    if (colon < 0) return fail(`${quoted} has no port (write host:port)`);
    host = addr.slice(0, colon);
    portText = addr.slice(colon + 1);
    if (host.includes(":")) {
      return fail(`${quoted} needs brackets around the IPv6 address ([::1]:port)`);
    }
    if (host !== "" && !HOST_NAME.test(host)) return fail(`${quoted} has an invalid host`);
  }
  if (host === "" && !emptyHost) return fail(`${quoted} has no host`);
  if (!/^[0-9]{1,5}$/.test(portText)) return fail(`${quoted} has an invalid port`);
  const port = Number(portText);
  if (port < 1 || port > 65535) return fail(`${quoted} has a port outside 1..65535`);
  return ok({ host, port });
}

/** The entries of a comma-separated list, trimmed, empty ones dropped. */
function splitList(text: string): string[] {
  return text.split(",").map((entry) => entry.trim()).filter((entry) => entry !== "");
}

function decodes(part: string): boolean {
  try {
    decodeURIComponent(part);
    return true;
  } catch {
    return false;
  }
}

/**
 * Validate a URL of the given schemes (`amqp`, `http`), unchanged; with `hostList` several hosts
 * may be given (`amqp://u:p@h1:5672,h2/vhost`). A problem never contains the password.
 */
function parseUrl(text: string, schemes: readonly string[], hostList = false): Parsed<string> {
  // The list's ports are checked here (any default port does), the rest with the first host.
  const list = hostList ? splitUrlHosts(text, 1) : undefined;
  if (list !== undefined && "problem" in list) return fail(list.problem);
  if (list !== undefined) {
    const first = parseUrl(list.url, schemes);
    return first.ok ? ok(text) : first;
  }
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(text)?.[1]?.toLowerCase();
  if (scheme === undefined || !schemes.includes(scheme)) {
    return fail(`must start with ${schemes.map((s) => `${s}://`).join(" or ")}`);
  }
  const url = URL.parse(text);
  if (url === null) {
    return fail("is not a valid URL (percent-encode special characters in user and password)");
  }
  if (url.hostname === "") return fail("names no host");
  if (!decodes(url.username) || !decodes(url.password) || !decodes(url.pathname)) {
    return fail("has a malformed percent-encoding");
  }
  if (url.hash !== "") return fail("has a #fragment (percent-encode # in the password as %23)");
  return ok(text);
}

/**
 * Validate a MySQL URL (D8), `mysql://user:password@host:port/database[?option=value]`, or with
 * a host list (`@h1:3306,h2:3306/database`); the query options are those the MySQL layer knows.
 */
export function parseMysqlUrl(text: string): Parsed<string> {
  const list = splitUrlHosts(text, 3306);
  if (list !== undefined && "problem" in list) return fail(list.problem);
  const single = list?.url ?? text;
  const base = parseUrl(single, ["mysql"]);
  if (!base.ok) return base;
  const url = new URL(single);
  const database = url.pathname.slice(1);
  if (database === "") return fail("names no database (mysql://user:password@host:port/database)");
  if (database.includes("/")) return fail("has a database name containing /");
  // The rest (query options, port, user) as the MySQL layer reads it: a URL accepted here must
  // not fail only once run opens it, without the setting's source.
  const problem = mysqlUrlProblem(text);
  return problem === null ? ok(text) : fail(problem);
}

// DSN parameters that mean nothing for the MySQL client or describe what it does anyway; accepted and
// dropped without a word (the Go driver accepts and ignores them, docs/operations.md#values).
const DSN_PARAMS_IGNORED_QUIETLY = new Set(
  ("parseTime loc interpolateParams allowNativePasswords clientFoundRows maxAllowedPacket " +
    "checkConnLiveness columnsWithAlias rejectReadOnly multiStatements readTimeout writeTimeout")
    .split(" "),
);

/**
 * Convert a go-sql-driver DSN into the internal MySQL URL, plus notes on ignored parameters
 * (docs/operations.md#values). Split exactly as the Go driver does: the last `/` ends the
 * address, the last `@` before it the credentials, the first `:` separates user from password,
 * so passwords may contain `@`, `:` and `/`.
 */
export function mysqlDsnToUrl(dsn: string): Parsed<string> {
  const slash = dsn.lastIndexOf("/");
  if (slash < 0) return fail("has no /database part (user:password@tcp(host:3306)/database)");
  const left = dsn.slice(0, slash);
  const at = left.lastIndexOf("@");
  const [user = "", ...passwordParts] = at < 0 ? [] : left.slice(0, at).split(":");
  const password = passwordParts.join(":");
  const address = /^([^(]*)(?:\((.*)\))?$/.exec(left.slice(at + 1));
  if (address === null) return fail("has an unterminated (address)");
  const [, net = "", addr = ""] = address;
  const [rawDatabase = "", ...paramParts] = dsn.slice(slash + 1).split("?");
  const rawParams = paramParts.join("?");
  if (!decodes(rawDatabase)) return fail("has a malformed percent-encoding in the database name");
  const database = decodeURIComponent(rawDatabase);
  if (database === "") return fail("names no database (user:password@tcp(host:3306)/database)");
  // The Go driver would log in as the anonymous user; the MySQL layer wants a user name.
  if (user === "") return fail("names no user (user:password@tcp(host:3306)/database)");

  const query = new URLSearchParams();
  let host: string;
  if (net === "" || net === "tcp" || net === "tcp4" || net === "tcp6") {
    const split = splitHostPort(withDefaultPort(addr === "" ? "127.0.0.1" : addr, 3306));
    if (!split.ok) return fail(`has an invalid tcp address: ${split.problem}`);
    host = joinHostPort(split.value.host, split.value.port);
  } else if (net === "unix") {
    host = "localhost";
    query.set("socketPath", addr === "" ? "/tmp/mysql.sock" : addr);
  } else {
    return fail(`has the unsupported protocol ${JSON.stringify(net)} (use tcp or unix)`);
  }

  const notes: string[] = [];
  const ignored: string[] = [];
  for (const pair of rawParams === "" ? [] : rawParams.split("&")) {
    const eq = pair.indexOf("=");
    if (eq < 0) return fail(`has the parameter ${JSON.stringify(pair)} without a value`);
    const name = pair.slice(0, eq);
    const rawValue = pair.slice(eq + 1);
    if (!decodes(rawValue)) return fail(`has a malformed value for parameter ${name}`);
    const value = decodeURIComponent(rawValue);
    if (name === "timeout") {
      const timeout = parseGoDuration(value);
      if (!timeout.ok || timeout.value <= 0) {
        return fail(`has an invalid timeout ${JSON.stringify(value)} (a Go duration like 5s)`);
      }
      query.set("connectTimeout", String(Math.ceil(timeout.value)));
    } else if (name === "tls") {
      if (value === "true") query.set("ssl", "{}");
      else if (value === "skip-verify") query.set("ssl", '{"rejectUnauthorized":false}');
      else if (value === "preferred") ignored.push("tls=preferred (no opportunistic TLS)");
      else if (value !== "false") {
        return fail(
          `has an unsupported tls value ${JSON.stringify(value)} (true, skip-verify, false)`,
        );
      }
    } else if (name === "charset" || name === "collation") {
      if (!value.toLowerCase().startsWith("utf8mb4")) {
        notes.push(`${name}=${value} is ignored: the connection always uses utf8mb4`);
      }
    } else if (!DSN_PARAMS_IGNORED_QUIETLY.has(name)) {
      ignored.push(name);
    }
  }
  if (ignored.length > 0) {
    notes.push(`DSN parameter(s) ${ignored.join(", ")} have no effect and are ignored`);
  }

  const credentials = user === ""
    ? ""
    : `${encodeURIComponent(user)}${password === "" ? "" : `:${encodeURIComponent(password)}`}@`;
  const search = query.size === 0 ? "" : `?${query.toString()}`;
  const url = `mysql://${credentials}${host}/${encodeURIComponent(database)}${search}`;
  const checked = parseMysqlUrl(url);
  if (!checked.ok) return checked;
  return notes.length === 0 ? ok(url) : { ok: true, value: url, notes };
}

// Go's normalizeAddr: add the default port when the address has none; a bare IPv6 address
// (two or more colons, no brackets) gets brackets.
function withDefaultPort(addr: string, port: number): string {
  if (addr.startsWith("[")) return addr.includes("]:") ? addr : `${addr}:${port}`;
  const colons = addr.split(":").length - 1;
  if (colons === 0) return `${addr}:${port}`;
  return colons === 1 ? addr : `[${addr}]:${port}`;
}

// ---- values by the kind of their setting row ----------------------------------------------

/** Where a raw value comes from: command-line/env text, or a YAML value of any type. */
export type Origin = "text" | "yaml";

/** A YAML value for a type error (`the string "100"`, `a list`), secrets not shown. */
function describeYaml(value: unknown, secret: boolean): string {
  if (Array.isArray(value)) return "a list";
  if (value === null) return "null";
  if (typeof value === "object") return "a mapping";
  const shown = secret ? "" : ` ${JSON.stringify(value)}`;
  const type = typeof value;
  return type === "string" || type === "number" || type === "boolean"
    ? `the ${type}${shown}`
    : type;
}

function wrongType<T>(row: SettingRow, expected: string, value: unknown): Parsed<T> {
  const hint = typeof value === "number" && expected.includes("string")
    ? " (quote it in YAML)"
    : "";
  return fail(`expected ${expected}, got ${describeYaml(value, row.secret === true)}${hint}`);
}

function textOf(row: SettingRow, raw: unknown): Parsed<string> {
  return typeof raw === "string" ? ok(raw) : wrongType(row, "a string", raw);
}

/** `parse` applied to a text value, trimmed. */
function parseText<T>(row: SettingRow, raw: unknown, parse: (text: string) => Parsed<T>) {
  const text = textOf(row, raw);
  return text.ok ? parse(text.value.trim()) : fail<T>(text.problem);
}

function listOf(row: SettingRow, raw: unknown, origin: Origin): Parsed<string[]> {
  if (origin === "yaml" && Array.isArray(raw)) {
    const bad = raw.findIndex((entry) => typeof entry !== "string");
    if (bad < 0) return ok(raw.flatMap((entry: string) => splitList(entry)));
    const got = describeYaml(raw[bad], row.secret === true);
    return fail(`list entries must be strings, got ${got} (quote it in YAML)`);
  }
  if (typeof raw === "string") return ok(splitList(raw));
  return wrongType(row, "a list of strings or a comma-separated string", raw);
}

/**
 * Parse one raw value for a row into its resolved value, or a secret-free problem. Text (flag,
 * env) uses the Go syntaxes (docs/operations.md#values); YAML values must have the matching YAML
 * type, except that a duration may be the number `0` and lists may be a sequence or a
 * comma-separated string.
 */
export function parseValue(row: SettingRow, raw: unknown, origin: Origin): Parsed<unknown> {
  const kind = row.kind;
  switch (kind.type) {
    case "integer": {
      if (origin === "yaml" && (typeof raw !== "number" || !Number.isInteger(raw))) {
        return wrongType(row, "an integer", raw);
      }
      // Text: optional sign and digits only. A YAML number shows as itself, a text quoted.
      const given = origin === "yaml" ? raw : String(raw).trim();
      if (typeof given === "string" && !/^[+-]?[0-9]+$/.test(given)) {
        return fail(`${JSON.stringify(given)} is not an integer`);
      }
      const value = Number(given);
      if (!Number.isSafeInteger(value)) return fail(`${JSON.stringify(given)} is too large`);
      if (value < kind.min && kind.max === undefined) return fail(`${value} is below ${kind.min}`);
      if (value < kind.min || value > (kind.max ?? Infinity)) {
        return fail(`${value} is outside ${kind.min}..${kind.max}`);
      }
      return ok(value);
    }
    case "bytes": {
      const parsed = origin !== "yaml" || typeof raw !== "number"
        ? parseText(row, raw, parseByteSize)
        : Number.isSafeInteger(raw) && raw >= 0
        ? ok(raw)
        : fail<number>(`${raw} is not a whole number of bytes`);
      if (parsed.ok && parsed.value < kind.min) {
        return fail(`${formatByteSize(parsed.value)} is below ${formatByteSize(kind.min)}`);
      }
      return parsed;
    }
    case "boolean": {
      if (origin === "yaml") {
        return typeof raw === "boolean" ? ok(raw) : wrongType(row, "true or false", raw);
      }
      return parseGoBoolean(String(raw).trim());
    }
    case "duration": {
      const yamlNumber = origin === "yaml" && typeof raw === "number";
      if (yamlNumber && raw !== 0) {
        return fail(`the number ${raw} has no unit (write e.g. ${raw}s or ${raw}ms)`);
      }
      const parsed = yamlNumber ? ok(0) : parseText(row, raw, parseGoDuration);
      if (!parsed.ok) return parsed;
      if (parsed.value < 0) return fail(`${JSON.stringify(raw)} is negative`);
      if (parsed.value === 0 && !kind.allowZero) return fail("must be greater than 0");
      if (kind.maxMs !== undefined && parsed.value > kind.maxMs) {
        return fail(`${JSON.stringify(raw)} is longer than ${formatGoDuration(kind.maxMs)}`);
      }
      return parsed;
    }
    case "hostPortList": {
      const list = listOf(row, raw, origin);
      if (!list.ok) return list;
      if (list.value.length === 0) return fail("names no server");
      const out: string[] = [];
      for (const entry of list.value) {
        const split = splitHostPort(entry);
        if (!split.ok) return split;
        const joined = joinHostPort(split.value.host, split.value.port);
        if (out.includes(joined)) return fail(`names ${JSON.stringify(joined)} twice`);
        out.push(joined);
      }
      return ok(out);
    }
    case "keyList": {
      const list = listOf(row, raw, origin);
      if (!list.ok) return list;
      const bad = list.value.find((entry) => kind.pattern?.test(entry) === false);
      if (bad === undefined) return ok([...new Set(list.value)]);
      return fail(`${JSON.stringify(bad)} is not one of the ${kind.patternForm ?? "keys"}`);
    }
  }
  // Every other kind is a string in every source.
  const text = textOf(row, raw);
  if (!text.ok) return text;
  const value = text.value;
  switch (kind.type) {
    case "string": {
      if (value === "" && kind.allowEmpty !== true) return fail("must not be empty");
      const forbidden = [...(kind.forbid ?? "")].find((c) => value.includes(c));
      if (forbidden !== undefined) {
        return fail(`${JSON.stringify(value)} contains the character ${JSON.stringify(forbidden)}`);
      }
      if (kind.maxLength !== undefined && [...value].length > kind.maxLength) {
        return fail(`is longer than ${kind.maxLength} characters`);
      }
      const problem = kind.check?.(value) ?? null;
      return problem === null ? ok(value) : fail(problem);
    }
    case "enum": {
      // Case-insensitive everywhere (docs/operations.md#quirk-enum-case), resolved to the table's.
      const lower = value.trim().toLowerCase();
      const match = kind.values.find((v) => v.toLowerCase() === lower);
      return match === undefined
        ? fail(`${JSON.stringify(value)} is not one of ${kind.values.join(", ")}`)
        : ok(match);
    }
    case "host": {
      // A host name, IPv4 address or bare IPv6 address (no brackets); "" = every interface.
      const host = value.trim();
      if (host === "" || HOST_NAME.test(host) || IPV6.test(host)) return ok(host);
      return fail(`${JSON.stringify(host)} is not a host name or IP address`);
    }
    case "hostPort": {
      if (kind.emptyDisables === true && value.trim() === "") return ok("");
      const split = splitHostPort(value.trim(), kind.emptyHost);
      return split.ok ? ok(joinHostPort(split.value.host, split.value.port)) : split;
    }
    case "url": {
      const parsed = parseUrl(value.trim(), kind.schemes, kind.hostList === true);
      const problem = parsed.ok ? kind.check?.(parsed.value) ?? null : null;
      return problem === null ? parsed : fail(problem);
    }
    case "mysqlUrl": {
      const parsed = parseMysqlUrl(value.trim());
      if (!parsed.ok && /@(tcp|tcp6|unix)?\(|^[^:/]*(:[^@]*)?@\//.test(value)) {
        return fail(`${parsed.problem}; this looks like a Go DSN, which goes into mysql-dsn`);
      }
      return parsed;
    }
    case "mysqlDsn":
      return mysqlDsnToUrl(value.trim());
  }
}

/** The built-in default of a row for a command, parsed; `undefined` when it has none. */
export function defaultValue(row: SettingRow, command: CommandName): unknown {
  const fallback = defaultOf(row, command);
  if (fallback === undefined) return undefined;
  const parsed = parseValue(row, fallback, "text");
  if (!parsed.ok) throw new Error(`Default of ${row.flag} does not parse: ${parsed.problem}`);
  return parsed.value;
}

/** Accepted form of a row's values for help and errors (`integer 1..700`). */
export function acceptedForm(row: SettingRow): string {
  const kind = row.kind;
  switch (kind.type) {
    case "string":
      return `${kind.form ?? "text"}${
        kind.maxLength === undefined ? "" : `, at most ${kind.maxLength} characters`
      }`;
    case "integer": {
      const range = kind.max === undefined ? `>= ${kind.min}` : `${kind.min}..${kind.max}`;
      return row.unit === undefined ? `integer ${range}` : `integer ${range} (${row.unit})`;
    }
    case "bytes":
      return "size in bytes or with a unit (512KiB, 64MiB, 1GiB), at least " +
        formatByteSize(kind.min);
    case "boolean":
      return "true or false (also 1/0, t/f); flag alone = true, --no-<flag> = false";
    case "duration":
      return `Go duration such as 250ms, 30s, 5m, 1h30m; ${kind.allowZero ? ">= 0" : "> 0"}${
        kind.maxMs === undefined ? "" : `, at most ${formatGoDuration(kind.maxMs)}`
      }`;
    case "enum":
      return `one of ${kind.values.join(", ")}`;
    case "host":
      return "host name or IP address; empty = every interface, IPv4 and IPv6";
    case "hostPort":
      return `${
        kind.emptyHost ? "host:port (:port = every interface, IPv4 and IPv6)" : "host:port"
      }${kind.emptyDisables === true ? "; empty = off" : ""}`;
    case "hostPortList":
      return "comma-separated host:port list (YAML: a list or a string)";
    case "url":
      return kind.form;
    case "mysqlUrl":
      return "mysql://user:password@host:port/database";
    case "mysqlDsn":
      return "user:password@tcp(host:port)/database?params or user:password@unix(/path)/database";
    case "keyList":
      return kind.pattern === undefined
        ? "comma-separated list (YAML: a list of strings)"
        : `comma-separated ${kind.patternForm ?? "list"}`;
  }
}

const FIXED_METAVARS: Record<Exclude<Kind["type"], "string" | "integer" | "enum">, string> = {
  bytes: "SIZE",
  boolean: "",
  duration: "DURATION",
  host: "HOST",
  hostPort: "HOST:PORT",
  hostPortList: "HOST:PORT[,...]",
  url: "URL",
  mysqlUrl: "URL",
  mysqlDsn: "DSN",
  keyList: "LIST",
};

/** Placeholder for the value in usage lines (`--mysql-batch-size N`); `""` for booleans. */
export function metavarOf(row: SettingRow): string {
  const kind = row.kind;
  if (kind.type === "string") return kind.form?.startsWith("path") === true ? "PATH" : "TEXT";
  if (kind.type === "integer") return row.unit === "days" ? "DAYS" : "N";
  if (kind.type === "enum") return kind.values.length <= 4 ? kind.values.join("|") : "NAME";
  return FIXED_METAVARS[kind.type];
}

/** A URL or DSN setting: its secret is the password, the rest may be shown. */
export function isUrlLike(row: SettingRow): boolean {
  return row.kind.type === "url" || row.kind.type === "mysqlUrl" || row.kind.type === "mysqlDsn";
}

/** A raw value as a message may show it: secrets masked, everything else quoted and shortened. */
export function maskRaw(row: SettingRow, raw: unknown): string {
  if (row.secret === true) {
    return isUrlLike(row) && typeof raw === "string" ? JSON.stringify(redactUrl(raw)) : "(hidden)";
  }
  const text = JSON.stringify(raw) ?? String(raw);
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}

/**
 * A setting could not be accepted: refuse to start (exit status 1). The message names the
 * setting, the source (`env STATUSENGINE_MYSQL_BATCH_SIZE`, `file /etc/x.yml key …`) and the
 * accepted form; the caller has masked every secret in it and in `rawValue`. A class, not a
 * `WorkerError` code: the commands catch it by class, and tests read what it carries.
 */
export class ConfigError extends Error {
  /** Flag name of the setting (`mysql-batch-size`), or `config` for the file itself. */
  readonly setting: string;
  readonly source: string;
  /** The offending value, secrets masked. */
  readonly rawValue: string | undefined;
  readonly exitCode: 1 = 1;

  constructor(
    message: string,
    details: { setting: string; source: string; rawValue?: string; cause?: unknown },
  ) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = "ConfigError";
    this.setting = details.setting;
    this.source = details.source;
    this.rawValue = details.rawValue;
  }
}
