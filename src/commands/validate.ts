/**
 * Validation and re-serialisation of a `POST /commands` body into the envelope the broker module
 * reads from `statusngin_cmd`; pure. The denylist and the default `raw` allowlist live with the
 * settings (src/config/settings.ts).
 *
 * @module
 */
import {
  ALLOW_ALL,
  DEFAULT_ALLOWED_RAW_COMMANDS,
  DENIED_RAW_COMMANDS,
  didYouMean,
} from "../config/mod.ts";

/** The `Command` values the broker module understands (it has no fallback branch). */
export const COMMAND_NAMES = ["check_result", "schedule_check", "delete_downtime", "raw"] as const;
export type CommandName = (typeof COMMAND_NAMES)[number];

/** Each `reason` label value of `statusengine_commands_rejected_total` and its HTTP status. */
export const REJECT_STATUS = {
  auth: 401,
  "too_large": 413,
  malformed: 400,
  "unknown_command": 400,
  denied: 403,
} as const;
export type RejectReason = keyof typeof REJECT_STATUS;
export const REJECT_REASONS = Object.keys(REJECT_STATUS) as RejectReason[];

/** Which `raw` command names pass; the denylist is checked first and always applies. */
export class RawCommandAllowlist {
  readonly all: boolean;
  readonly #names: ReadonlySet<string>;

  /** @param entries Names in any letter case, or `*`; an empty list allows no `raw` command. */
  constructor(entries: readonly string[] = DEFAULT_ALLOWED_RAW_COMMANDS) {
    this.all = entries.includes(ALLOW_ALL);
    this.#names = new Set(entries.map((e) => e.toUpperCase()));
  }

  /** The allowed names, sorted (empty when {@link all}). */
  get names(): string[] {
    return this.all ? [] : [...this.#names].sort();
  }

  /** @param name An upper-case command name. */
  allows(name: string): boolean {
    return this.all || this.#names.has(name);
  }
}

/** The queue (Gearman function, RabbitMQ queue) the broker module reads commands from. */
export const COMMAND_QUEUE = "statusngin_cmd";

export const MAX_BODY_BYTES = 8 * 1024 * 1024;
/** Most commands in one bulk (`messages`). */
export const MAX_BULK_COMMANDS = 1000;
/**
 * Deepest nesting the broker module's JSON parser (json-c) reads: a value below 32 levels (the
 * envelope's object is level 1) makes it drop the whole message without a trace.
 */
export const MAX_JSON_DEPTH = 32;

export interface AcceptedBody {
  readonly ok: true;
  /** The re-serialised envelope (key order `Command`, `Data`, `messages`). */
  readonly body: string;
  /** The command of every message, in order (one for a single command). */
  readonly commands: readonly CommandName[];
}

export interface RejectedBody {
  readonly ok: false;
  readonly reason: Exclude<RejectReason, "auth">;
  /** Text of the `{"error": …}` response, prefixed `messages[i]: ` inside a bulk. */
  readonly error: string;
  /** For `denied`: the upper-cased name of the refused `raw` command. */
  readonly denied?: string;
  /** For `denied`: which list refused it. */
  readonly rule?: "denylist" | "allowlist";
}

export type ValidationResult = AcceptedBody | RejectedBody;

export interface ValidateOptions {
  /** Unix seconds used for a missing `raw` timestamp prefix. */
  readonly nowSeconds: number;
  /** `raw` commands that pass; default {@link DEFAULT_ALLOWED_RAW_COMMANDS}. */
  readonly allow?: RawCommandAllowlist | undefined;
}

/** A `raw` line split the way Naemon reads it. */
export interface RawCommand {
  /** The timestamp digits the caller supplied, or null when the line had no prefix. */
  readonly timestamp: string | null;
  /** The command name, upper-cased. */
  readonly name: string;
  /** Everything from the first `;` on (empty when the line has no arguments). */
  readonly args: string;
}

type JsonObject = { [key: string]: unknown };

type EntryResult =
  | { readonly ok: true; readonly command: CommandName; readonly out: JsonObject }
  | RejectedBody;

const DENIED: ReadonlySet<string> = new Set(DENIED_RAW_COMMANDS);
const KNOWN: ReadonlySet<string> = new Set(COMMAND_NAMES);
const DEFAULT_ALLOWLIST = new RawCommandAllowlist();
// Every C0 control except TAB, DEL and the C1 block (what Go's unicode.IsControl covers).
// deno-lint-ignore no-control-regex -- matching control characters is the point
const CONTROL = /[\u0000-\u0008\u000a-\u001f\u007f-\u009f]/;
// The one grammar both sides read alike. Naemon takes the timestamp with strtoul up to the
// first "]", skips exactly one character, and takes the name up to the first ";": digits
// only, exactly one space and an ASCII name leave no room for the two readings to differ.
// Matched before upper-casing: "ſ".toUpperCase() is "S".
const RAW_LINE = /^(?:\[([0-9]{1,20})\] )?([A-Za-z_]+)(;.*)?$/s;
// JSON's own whitespace; String.prototype.trim would also skip NBSP and friends.
const JSON_SPACE = /^[ \t\n\r]*$/;
// Long enough to recognise a typo, short enough not to echo a megabyte back.
const MAX_ECHO = 64;

/**
 * Validate a body (decoded, at most {@link MAX_BODY_BYTES}) and re-serialise it. The first failure
 * decides; inside a bulk the entries are checked in order.
 *
 * @example Accepting a raw command
 * ```ts
 * import { validateCommandBody } from "./validate.ts";
 * const r = validateCommandBody('{"Command":"raw","Data":"disable_host_check;web01"}', {
 *   nowSeconds: 1700000000,
 * });
 * // r.ok === true; r.body === '{"Command":"raw","Data":"[1700000000] DISABLE_HOST_CHECK;web01"}'
 * ```
 */
export function validateCommandBody(text: string, options: ValidateOptions): ValidationResult {
  const parsed = parseBody(text);
  if (!parsed.ok) return parsed;
  const doc = parsed.value;
  const messages = doc.messages;
  const bulk = Array.isArray(messages) && messages.length > 0;
  if (bulk) {
    // The broker module ignores Command/Data next to messages: accepting the
    // pair would confirm a command that never runs.
    if (doc.Command !== undefined || doc.Data !== undefined) {
      return malformed('"messages" cannot be combined with "Command" or "Data"');
    }
    if (messages.length > MAX_BULK_COMMANDS) {
      const error = `bulk of ${messages.length} commands exceeds the limit of ${MAX_BULK_COMMANDS}`;
      return { ok: false, reason: "too_large", error };
    }
  }
  // A single command is checked as a bulk of one, without the "messages[i]: " prefix.
  const out: JsonObject[] = [];
  const commands: CommandName[] = [];
  for (const [i, entry] of (bulk ? messages : [doc]).entries()) {
    const r = validateEntry(entry, options, bulk);
    if (!r.ok) return bulk ? { ...r, error: `messages[${i}]: ${r.error}` } : r;
    out.push(r.out);
    commands.push(r.command);
  }
  const envelope = bulk ? { messages: out } : out[0];
  // Measured on what is published: fields that are dropped cannot trip the broker.
  if (deeperThan(envelope, MAX_JSON_DEPTH)) {
    return malformed(
      `"Data" is nested deeper than ${MAX_JSON_DEPTH} levels (counted from the envelope); ` +
        "the broker module's JSON parser would drop the message",
    );
  }
  return { ok: true, body: JSON.stringify(envelope), commands };
}

function validateEntry(entry: unknown, options: ValidateOptions, nested: boolean): EntryResult {
  if (!isObject(entry)) return malformed("a command must be a JSON object");
  const messages = entry.messages;
  if (messages !== undefined && messages !== null && !Array.isArray(messages)) {
    return malformed('"messages" must be an array');
  }
  // The module would recurse without limit; producers use one level only.
  if (nested && Array.isArray(messages) && messages.length > 0) {
    return malformed('a bulk cannot contain another bulk ("messages" inside "messages")');
  }
  const command = entry.Command;
  if (command === undefined || command === null || command === "") {
    return malformed('missing "Command"');
  }
  if (typeof command !== "string") return malformed('"Command" must be a string');
  // The name first: an unknown command is reported as such whatever its Data, so a typo in
  // "Command" is not mistaken for a missing "Data".
  if (!KNOWN.has(command)) {
    const error = `unknown command ${JSON.stringify(echo(command))}` +
      `${didYouMean(command, COMMAND_NAMES)}; expected one of ${COMMAND_NAMES.join(", ")}`;
    return { ok: false, reason: "unknown_command", error };
  }
  const data = entry.Data;
  if (isEmpty(data)) return malformed('missing or empty "Data"');
  const name = command as CommandName;
  if (name !== "raw") {
    if (!isObject(data)) return malformed(`"Data" of ${name} must be a JSON object`);
    return { ok: true, command: name, out: { Command: name, Data: data } };
  }
  return validateRaw(data, options);
}

function validateRaw(data: unknown, options: ValidateOptions): EntryResult {
  if (typeof data !== "string") return malformed('"Data" of raw must be a JSON string');
  const parsed = parseRawCommand(data);
  if (!parsed.ok) return malformed(`"Data" of raw ${parsed.error}`);
  const { name, timestamp, args } = parsed.value;
  const rule = DENIED.has(name)
    ? "denylist"
    : (options.allow ?? DEFAULT_ALLOWLIST).allows(name)
    ? undefined
    : "allowlist";
  if (rule !== undefined) {
    // Shortened: a name has no length limit, and it goes into the answer and a WARN line.
    const shown = echo(name);
    const error = rule === "denylist"
      ? `external command ${shown} is not allowed through this API`
      : `external command ${shown} is not in the allowlist of this API (--command-allow)`;
    return { ok: false, reason: "denied", error, denied: shown, rule };
  }
  // Naemon refuses a line without "[<unix seconds>] ", logging that only to naemon.log.
  const line = `[${timestamp ?? Math.floor(options.nowSeconds)}] ${name}${args}`;
  return { ok: true, command: "raw", out: { Command: "raw", Data: line } };
}

/**
 * Split a `raw` line by Naemon's grammar, refusing every line Naemon could read differently:
 * `[<digits>] NAME;args` or `NAME;args`, NAME of ASCII letters and `_`. Spaces and TABs around it
 * are ignored; other control characters are refused anywhere (a line break would also forge a
 * line in naemon.log).
 *
 * @example
 * ```ts
 * import { parseRawCommand } from "./validate.ts";
 * const r = parseRawCommand("[1700000000] schedule_forced_svc_check;web01;HTTP;1700000000");
 * // r.ok && r.value.name === "SCHEDULE_FORCED_SVC_CHECK" && r.value.timestamp === "1700000000"
 * ```
 */
export function parseRawCommand(line: string): { readonly ok: true; readonly value: RawCommand } | {
  readonly ok: false;
  readonly error: string;
} {
  // A lone surrogate would reach the broker as an escape its parser turns into other bytes.
  if (!line.isWellFormed()) return { ok: false, error: "is not valid Unicode" };
  // On the untrimmed string, so a trailing newline counts.
  if (CONTROL.test(line)) {
    return { ok: false, error: "contains a control character (only TAB is allowed)" };
  }
  const text = line.replace(/^[ \t]+|[ \t]+$/g, "");
  if (text === "") return { ok: false, error: "is empty" };
  const m = RAW_LINE.exec(text);
  if (m === null) {
    return {
      ok: false,
      error: text.startsWith("[") && !/^\[[0-9]{1,20}\] /.test(text)
        ? 'must start with "[<unix seconds>] " (digits, "]", exactly one space) or with the ' +
          "command name"
        : 'must be "[<unix seconds>] NAME;arguments" or "NAME;arguments", NAME made of the ' +
          'letters A-Z and "_" up to the first ";"',
    };
  }
  return {
    ok: true,
    value: { timestamp: m[1] ?? null, name: (m[2] as string).toUpperCase(), args: m[3] ?? "" },
  };
}

/**
 * The body as one JSON object. Trailing text, which the broker's parser would ignore, is refused
 * so a client does not believe a second command it appended was sent.
 */
function parseBody(text: string): { readonly ok: true; readonly value: JsonObject } | RejectedBody {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    // Found by scanning, not from the parser's message: its wording is the engine's, not an API.
    const start = text.search(/[^ \t\n\r]/);
    const end = start >= 0 && text[start] === "{" ? endOfValue(text, start) : -1;
    if (end > 0 && !JSON_SPACE.test(text.slice(end)) && isObject(tryParse(text.slice(0, end)))) {
      return malformed("text after the JSON object (send one object per request)");
    }
    return malformed("body is not a JSON object");
  }
  return isObject(value) ? { ok: true, value } : malformed("body is not a JSON object");
}

function tryParse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** Index after the bracket closing the object or array at `start`, or -1 when it never closes. */
function endOfValue(text: string, start: number): number {
  let depth = 0;
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
      continue;
    }
    if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) depth++;
    else if (c === 0x7d || c === 0x5d) {
      depth--;
      if (depth === 0) return i + 1;
    }
  }
  return -1;
}

/** Whether some value sits below level `levels` (`value` is level 1); recursion is bounded. */
function deeperThan(value: unknown, levels: number): boolean {
  if (levels < 1) return true;
  if (typeof value !== "object" || value === null) return false;
  const children = Array.isArray(value) ? value : Object.values(value);
  return children.some((child) => deeperThan(child, levels - 1));
}

function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Absent, null, "", {} or []: nothing the broker module could act on. */
function isEmpty(value: unknown): boolean {
  if (value === undefined || value === null || value === "") return true;
  if (Array.isArray(value)) return value.length === 0;
  return isObject(value) && Object.keys(value).length === 0;
}

function echo(value: string): string {
  return value.length > MAX_ECHO ? `${value.slice(0, MAX_ECHO)}…` : value;
}

function malformed(error: string): RejectedBody {
  return { ok: false, reason: "malformed", error };
}
