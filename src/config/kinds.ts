/**
 * Parsing and describing a value by its row's kind: which YAML types each kind accepts, what
 * help shows as the accepted form, and how a value is masked in messages.
 *
 * @module
 */

import type { SettingRow } from "./settings.ts";
import {
  fail,
  formatByteSize,
  formatGoDuration,
  joinHostPort,
  mysqlDsnToUrl,
  parseByteSize,
  type Parsed,
  parseDecimalInteger,
  parseGoBoolean,
  parseGoDuration,
  parseHost,
  parseMysqlUrl,
  parseUrl,
  redactUrl,
  splitHostPort,
  splitList,
} from "./values.ts";

/** Where a raw value comes from: command-line/env text, or a YAML value of any type. */
export type Origin = "text" | "yaml";

/** A YAML value for a type error (`the string "100"`, `a list`), secrets not shown. */
function describeYaml(value: unknown, secret: boolean): string {
  if (Array.isArray(value)) return "a list";
  if (value === null) return "null";
  if (typeof value === "object") return "a mapping";
  const shown = secret ? "" : ` ${JSON.stringify(value)}`;
  if (typeof value === "string") return `the string${shown}`;
  if (typeof value === "number") return `the number${shown}`;
  if (typeof value === "boolean") return `the boolean${shown}`;
  return typeof value;
}

function wrongType<T>(row: SettingRow, expected: string, value: unknown): Parsed<T> {
  const hint = typeof value === "number" && expected.includes("string")
    ? " (quote it in YAML)"
    : "";
  return fail(`expected ${expected}, got ${describeYaml(value, row.secret === true)}${hint}`);
}

function textOf(row: SettingRow, raw: unknown): Parsed<string> {
  return typeof raw === "string" ? { ok: true, value: raw } : wrongType(row, "a string", raw);
}

function listOf(row: SettingRow, raw: unknown, origin: Origin): Parsed<string[]> {
  if (origin === "yaml" && Array.isArray(raw)) {
    const entries: string[] = [];
    for (const entry of raw) {
      if (typeof entry !== "string") {
        return fail(
          `list entries must be strings, got ${
            describeYaml(entry, row.secret === true)
          } (quote it in YAML)`,
        );
      }
      entries.push(...splitList(entry));
    }
    return { ok: true, value: entries };
  }
  if (typeof raw === "string") return { ok: true, value: splitList(raw) };
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
    case "string": {
      const text = textOf(row, raw);
      if (!text.ok) return text;
      const value = text.value;
      if (value === "" && kind.allowEmpty !== true) return fail("must not be empty");
      const forbidden = [...(kind.forbid ?? "")].find((c) => value.includes(c));
      if (forbidden !== undefined) {
        return fail(`${JSON.stringify(value)} contains the character ${JSON.stringify(forbidden)}`);
      }
      if (kind.maxLength !== undefined && [...value].length > kind.maxLength) {
        return fail(`is longer than ${kind.maxLength} characters`);
      }
      const problem = kind.check?.(value) ?? null;
      if (problem !== null) return fail(problem);
      return { ok: true, value };
    }
    case "integer": {
      let value: number;
      if (origin === "yaml") {
        if (typeof raw !== "number" || !Number.isInteger(raw)) {
          return wrongType(row, "an integer", raw);
        }
        if (!Number.isSafeInteger(raw)) return fail(`${raw} is too large`);
        value = raw;
      } else {
        const parsed = parseDecimalInteger(String(raw).trim());
        if (!parsed.ok) return parsed;
        value = parsed.value;
      }
      if (value < kind.min || (kind.max !== undefined && value > kind.max)) {
        return fail(
          kind.max === undefined
            ? `${value} is below ${kind.min}`
            : `${value} is outside ${kind.min}..${kind.max}`,
        );
      }
      return { ok: true, value };
    }
    case "bytes": {
      let parsed: Parsed<number>;
      if (origin === "yaml" && typeof raw === "number") {
        parsed = Number.isSafeInteger(raw) && raw >= 0
          ? { ok: true, value: raw }
          : fail(`${raw} is not a whole number of bytes`);
      } else {
        const text = textOf(row, raw);
        if (!text.ok) return text;
        parsed = parseByteSize(text.value.trim());
      }
      if (!parsed.ok) return parsed;
      if (parsed.value < kind.min) {
        return fail(`${formatByteSize(parsed.value)} is below ${formatByteSize(kind.min)}`);
      }
      return parsed;
    }
    case "boolean": {
      if (origin === "yaml") {
        return typeof raw === "boolean"
          ? { ok: true, value: raw }
          : wrongType(row, "true or false", raw);
      }
      return parseGoBoolean(String(raw).trim());
    }
    case "duration": {
      let parsed: Parsed<number>;
      if (origin === "yaml" && typeof raw === "number") {
        if (raw !== 0) {
          return fail(`the number ${raw} has no unit (write e.g. ${raw}s or ${raw}ms)`);
        }
        parsed = { ok: true, value: 0 };
      } else {
        const text = textOf(row, raw);
        if (!text.ok) return text;
        parsed = parseGoDuration(text.value.trim());
      }
      if (!parsed.ok) return parsed;
      if (parsed.value < 0) return fail(`${JSON.stringify(raw)} is negative`);
      if (parsed.value === 0 && !kind.allowZero) return fail("must be greater than 0");
      if (kind.maxMs !== undefined && parsed.value > kind.maxMs) {
        return fail(`${JSON.stringify(raw)} is longer than ${formatGoDuration(kind.maxMs)}`);
      }
      return parsed;
    }
    case "enum": {
      const text = textOf(row, raw);
      if (!text.ok) return text;
      // Case-insensitive everywhere (docs/operations.md#quirk-enum-case), resolved to the table's.
      const lower = text.value.trim().toLowerCase();
      const match = kind.values.find((v) => v.toLowerCase() === lower);
      return match === undefined
        ? fail(`${JSON.stringify(text.value)} is not one of ${kind.values.join(", ")}`)
        : { ok: true, value: match };
    }
    case "host": {
      const text = textOf(row, raw);
      return text.ok ? parseHost(text.value.trim()) : text;
    }
    case "hostPort": {
      const text = textOf(row, raw);
      if (!text.ok) return text;
      if (kind.emptyDisables === true && text.value.trim() === "") return { ok: true, value: "" };
      const split = splitHostPort(text.value.trim(), { emptyHost: kind.emptyHost });
      return split.ok ? { ok: true, value: joinHostPort(split.value) } : split;
    }
    case "hostPortList": {
      const list = listOf(row, raw, origin);
      if (!list.ok) return list;
      if (list.value.length === 0) return fail("names no server");
      const out: string[] = [];
      for (const entry of list.value) {
        const split = splitHostPort(entry);
        if (!split.ok) return split;
        const joined = joinHostPort(split.value);
        if (out.includes(joined)) return fail(`names ${JSON.stringify(joined)} twice`);
        out.push(joined);
      }
      return { ok: true, value: out };
    }
    case "url": {
      const text = textOf(row, raw);
      return text.ok ? parseUrl(text.value.trim(), kind.schemes, kind.hostList === true) : text;
    }
    case "mysqlUrl": {
      const text = textOf(row, raw);
      if (!text.ok) return text;
      const parsed = parseMysqlUrl(text.value.trim());
      if (!parsed.ok && /@(tcp|tcp6|unix)?\(|^[^:/]*(:[^@]*)?@\//.test(text.value)) {
        return fail(`${parsed.problem}; this looks like a Go DSN, which goes into mysql-dsn`);
      }
      return parsed;
    }
    case "mysqlDsn": {
      const text = textOf(row, raw);
      return text.ok ? mysqlDsnToUrl(text.value.trim()) : text;
    }
    case "keyList": {
      const list = listOf(row, raw, origin);
      if (!list.ok) return list;
      const out: string[] = [];
      for (const entry of list.value) {
        if (kind.pattern !== undefined && !kind.pattern.test(entry)) {
          return fail(`${JSON.stringify(entry)} is not one of the ${kind.patternForm ?? "keys"}`);
        }
        if (!out.includes(entry)) out.push(entry);
      }
      return { ok: true, value: out };
    }
  }
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
      const range = kind.max === undefined
        ? `integer >= ${kind.min}`
        : `integer ${kind.min}..${kind.max}`;
      return row.unit === undefined ? range : `${range} (${row.unit})`;
    }
    case "bytes":
      return `size in bytes or with a unit (512KiB, 64MiB, 1GiB), at least ${
        formatByteSize(kind.min)
      }`;
    case "boolean":
      return "true or false (also 1/0, t/f); flag alone = true, --no-<flag> = false";
    case "duration":
      return `Go duration such as 250ms, 30s, 5m, 1h30m; ${kind.allowZero ? ">= 0" : "> 0"}${
        kind.maxMs === undefined ? "" : `, at most ${formatGoDuration(kind.maxMs)}`
      }`;
    case "enum":
      return `one of ${kind.values.join(", ")}`;
    case "host":
      return "host name or IP address";
    case "hostPort":
      return `${kind.emptyHost ? "host:port (:port = all interfaces)" : "host:port"}${
        kind.emptyDisables === true ? "; empty = off" : ""
      }`;
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

/** Placeholder for the value in usage lines (`--mysql-batch-size N`); `""` for booleans. */
export function metavarOf(row: SettingRow): string {
  const kind = row.kind;
  switch (kind.type) {
    case "string":
      return kind.form?.startsWith("path") === true ? "PATH" : "TEXT";
    case "integer":
      return row.unit === "days" ? "DAYS" : "N";
    case "bytes":
      return "SIZE";
    case "boolean":
      return "";
    case "duration":
      return "DURATION";
    case "enum":
      return kind.values.length <= 4 ? kind.values.join("|") : "NAME";
    case "host":
      return "HOST";
    case "hostPort":
      return "HOST:PORT";
    case "hostPortList":
      return "HOST:PORT[,...]";
    case "url":
    case "mysqlUrl":
      return "URL";
    case "mysqlDsn":
      return "DSN";
    case "keyList":
      return "LIST";
  }
}

function isUrlLike(row: SettingRow): boolean {
  return row.kind.type === "url" || row.kind.type === "mysqlUrl" || row.kind.type === "mysqlDsn";
}

/** A raw value as a message may show it: secrets masked, everything else quoted and shortened. */
export function maskRaw(row: SettingRow, raw: unknown): string {
  if (row.secret === true) {
    return isUrlLike(row) && typeof raw === "string" ? JSON.stringify(redactUrl(raw)) : "(hidden)";
  }
  const text = typeof raw === "string" ? JSON.stringify(raw) : JSON.stringify(raw) ?? String(raw);
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}

/** A resolved value as a log line or help may show it: secrets masked. */
export function displayValue(row: SettingRow, value: unknown): string {
  if (value === undefined) return "(none)";
  if (row.secret === true) {
    if (Array.isArray(value)) return value.length === 0 ? "(none)" : `(${value.length} hidden)`;
    if (value === "") return "(none)";
    // Only a URL or DSN has a public part worth showing; a password or token is all secret.
    return typeof value === "string" && isUrlLike(row) ? redactUrl(value) : "(hidden)";
  }
  if (Array.isArray(value)) return value.length === 0 ? "(none)" : value.join(",");
  return String(value);
}
