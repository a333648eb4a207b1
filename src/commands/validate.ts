/**
 * Validation and re-serialisation of a `POST /commands` body (operations.md
 * §4.2, queues-and-tables.md Part F). Pure: no I/O, the clock is a parameter.
 *
 * The command names, the reject reasons and the denylist are declared here
 * once; the HTTP server, the metric pre-creation and the README consistency
 * test derive from them.
 *
 * @module
 */

/** The `Command` values the broker module understands (it has no fallback branch). */
export const COMMAND_NAMES = ["check_result", "schedule_check", "delete_downtime", "raw"] as const;
/** One of {@link COMMAND_NAMES}. */
export type CommandName = (typeof COMMAND_NAMES)[number];

/** `reason` label values of `statusengine_commands_rejected_total` (operations.md §4.2). */
export const REJECT_REASONS = [
  "auth",
  "too_large",
  "malformed",
  "unknown_command",
  "denied",
] as const;
/** One of {@link REJECT_REASONS}. */
export type RejectReason = (typeof REJECT_REASONS)[number];

/** HTTP status of each reject reason. */
export const REJECT_STATUS: Readonly<Record<RejectReason, 400 | 401 | 403 | 413>> = {
  auth: 401,
  "too_large": 413,
  malformed: 400,
  "unknown_command": 400,
  denied: 403,
};

/**
 * `raw` commands refused with 403. Both spellings of shutdown and restart,
 * because Naemon maps them to the same handler; `PROCESS_FILE` makes Naemon
 * execute commands read from a file and would bypass the rest. The list guards
 * against accidents, not intent.
 */
export const DENIED_RAW_COMMANDS = [
  "SHUTDOWN_PROGRAM",
  "SHUTDOWN_PROCESS",
  "RESTART_PROGRAM",
  "RESTART_PROCESS",
  "PROCESS_FILE",
] as const;

/** The queue (Gearman function, RabbitMQ queue) the broker module reads commands from. */
export const COMMAND_QUEUE = "statusngin_cmd";

/** Largest accepted request body: 8 MiB, enforced while reading. */
export const MAX_BODY_BYTES = 8 * 1024 * 1024;

/** Most commands in one bulk (`messages`). */
export const MAX_BULK_COMMANDS = 1000;

/** A body that passed every rule, ready for the broker. */
export interface AcceptedBody {
  readonly ok: true;
  /** The re-serialised envelope (key order `Command`, `Data`, `messages`). */
  readonly body: string;
  /** The command of every message, in order (one for a single command). */
  readonly commands: readonly CommandName[];
}

/** A refused body. */
export interface RejectedBody {
  readonly ok: false;
  readonly reason: Exclude<RejectReason, "auth">;
  /** Text of the `{"error": …}` response, prefixed `messages[i]: ` inside a bulk. */
  readonly error: string;
  /** For `denied`: the upper-cased command name that matched the denylist. */
  readonly denied?: string;
}

/** Result of {@link validateCommandBody}. */
export type ValidationResult = AcceptedBody | RejectedBody;

/** Options of {@link validateCommandBody}. */
export interface ValidateOptions {
  /** Unix seconds used for a missing `raw` timestamp prefix. */
  readonly nowSeconds: number;
}

type JsonObject = { [key: string]: unknown };

type EntryResult =
  | { readonly ok: true; readonly command: CommandName; readonly out: JsonObject }
  | RejectedBody;

const DENIED: ReadonlySet<string> = new Set(DENIED_RAW_COMMANDS);
const KNOWN: ReadonlySet<string> = new Set(COMMAND_NAMES);
// Every C0 control except TAB, DEL and the C1 block (what Go's unicode.IsControl covers).
// deno-lint-ignore no-control-regex -- matching control characters is the point
const CONTROL = /[\u0000-\u0008\u000a-\u001f\u007f-\u009f]/;
// Long enough to recognise a typo, short enough not to echo a megabyte back.
const MAX_ECHO = 64;

/**
 * Validate a request body (steps 4–6 of operations.md §4.2) and re-serialise it.
 * The first failure decides; inside a bulk the entries are checked in order.
 *
 * @param text The body, already decoded as UTF-8 and at most {@link MAX_BODY_BYTES}.
 * @param options The clock for the `raw` timestamp prefix.
 * @returns The envelope to publish and its commands, or the reason and message of the refusal.
 *
 * @example Accepting a raw command
 * ```ts
 * import { validateCommandBody } from "./validate.ts";
 * const r = validateCommandBody('{"Command":"raw","Data":"DISABLE_NOTIFICATIONS"}', {
 *   nowSeconds: 1700000000,
 * });
 * // r.ok === true; r.body === '{"Command":"raw","Data":"[1700000000] DISABLE_NOTIFICATIONS"}'
 * ```
 */
export function validateCommandBody(text: string, options: ValidateOptions): ValidationResult {
  const doc = parseFirstObject(text);
  if (doc === undefined) return malformed("body is not a JSON object");
  const messages = doc.messages;
  if (messages !== undefined && messages !== null && !Array.isArray(messages)) {
    return malformed('"messages" must be an array');
  }
  if (Array.isArray(messages) && messages.length > 0) {
    // The broker module ignores Command/Data next to messages: accepting the
    // pair would confirm a command that never runs.
    if (doc.Command !== undefined || doc.Data !== undefined) {
      return malformed('"messages" cannot be combined with "Command" or "Data"');
    }
    if (messages.length > MAX_BULK_COMMANDS) {
      return {
        ok: false,
        reason: "too_large",
        error: `bulk of ${messages.length} commands exceeds the limit of ${MAX_BULK_COMMANDS}`,
      };
    }
    const out: JsonObject[] = [];
    const commands: CommandName[] = [];
    for (const [i, entry] of messages.entries()) {
      const r = validateEntry(entry, options, true);
      if (!r.ok) return { ...r, error: `messages[${i}]: ${r.error}` };
      out.push(r.out);
      commands.push(r.command);
    }
    return { ok: true, body: JSON.stringify({ messages: out }), commands };
  }
  const r = validateEntry(doc, options, false);
  if (!r.ok) return r;
  return { ok: true, body: JSON.stringify(r.out), commands: [r.command] };
}

function validateEntry(entry: unknown, options: ValidateOptions, nested: boolean): EntryResult {
  if (!isObject(entry)) return malformed("a command must be a JSON object");
  if (nested && entry.messages !== undefined && entry.messages !== null) {
    if (!Array.isArray(entry.messages)) return malformed('"messages" must be an array');
    // The module would recurse without limit; producers use one level only (Part F).
    if (entry.messages.length > 0) {
      return malformed('a bulk cannot contain another bulk ("messages" inside "messages")');
    }
  }
  const command = entry.Command;
  if (command === undefined || command === null || command === "") {
    return malformed('missing "Command"');
  }
  if (typeof command !== "string") return malformed('"Command" must be a string');
  const data = entry.Data;
  if (isEmpty(data)) return malformed('missing or empty "Data"');
  if (!KNOWN.has(command)) {
    return {
      ok: false,
      reason: "unknown_command",
      error: `unknown command ${JSON.stringify(echo(command))}; expected one of ${
        COMMAND_NAMES.join(", ")
      }`,
    };
  }
  const name = command as CommandName;
  if (name !== "raw") {
    if (!isObject(data)) return malformed(`"Data" of ${name} must be a JSON object`);
    return { ok: true, command: name, out: { Command: name, Data: data } };
  }
  const raw = validateRaw(data, options.nowSeconds);
  if (!raw.ok) return raw;
  return { ok: true, command: name, out: { Command: name, Data: raw.line } };
}

function validateRaw(
  data: unknown,
  nowSeconds: number,
): { readonly ok: true; readonly line: string } | RejectedBody {
  if (typeof data !== "string") return malformed('"Data" of raw must be a JSON string');
  const line = data.trim();
  if (line === "") return malformed('"Data" of raw is empty');
  // On the untrimmed string, so a trailing newline counts: it would forge a
  // line break in naemon.log, which is itself an ingested source.
  if (CONTROL.test(data)) {
    return malformed('"Data" of raw contains a control character (only TAB is allowed)');
  }
  const name = rawCommandName(line);
  if (DENIED.has(name)) {
    return {
      ok: false,
      reason: "denied",
      error: `external command ${name} is not allowed through this API`,
      denied: name,
    };
  }
  // Naemon rejects a line without "[<unix seconds>] ", logging only to naemon.log.
  const prefixed = line.startsWith("[") && line.includes("]");
  return { ok: true, line: prefixed ? line : `[${Math.floor(nowSeconds)}] ${line}` };
}

/**
 * The command name of a raw external command line, as the denylist compares
 * it: a leading `[…]` timestamp removed, the text before the first `;`,
 * trimmed, upper-cased.
 *
 * @param line The command line.
 * @returns The upper-cased name, e.g. `SHUTDOWN_PROCESS` for `[1700000000] shutdown_process`.
 */
export function rawCommandName(line: string): string {
  let rest = line.trim();
  // Naemon itself skips up to the first "]" before reading the name.
  if (rest.startsWith("[")) {
    const close = rest.indexOf("]");
    if (close >= 0) rest = rest.slice(close + 1);
  }
  const semicolon = rest.indexOf(";");
  return (semicolon < 0 ? rest : rest.slice(0, semicolon)).trim().toUpperCase();
}

/**
 * Parse the first JSON value of `text` when it is an object; anything after it
 * is ignored (operations.md §4.2 step 4, like a streaming decoder that reads
 * one value).
 */
function parseFirstObject(text: string): JsonObject | undefined {
  const start = text.search(/\S/);
  if (start < 0 || text[start] !== "{") return undefined;
  const end = endOfObject(text, start);
  if (end < 0) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text.slice(start, end));
  } catch {
    return undefined;
  }
  return isObject(value) ? value : undefined;
}

/** Index after the bracket closing the object at `start`, or -1 when it never closes. */
function endOfObject(text: string, start: number): number {
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
