/**
 * COM_STMT_EXECUTE packets of the bulk INSERTs, encoded in one pass into one buffer.
 *
 * mysql2 encodes every parameter through an object of its own and through Node's Buffer
 * methods, which Deno provides in JavaScript: a 700-row servicestatus INSERT (30,100
 * parameters) took 7 ms to encode, about 1 s of CPU per 100,000 rows, close to half of what
 * the worker spent per row. This encoder writes the same bytes (pinned byte for byte against
 * mysql2's own encoder in execute_packet_test.ts) in a fraction of that.
 *
 * It takes over only the statements the executor hands over ({@link bulkParameters}), on a
 * connection whose character set mysql2 encodes as UTF-8, for a statement whose placeholder
 * descriptions give mysql2 no type hint (MariaDB describes INSERT placeholders as type
 * NULL); everything else, and everything after the packet is written (the answer, errors,
 * timeouts), stays mysql2's. It is hooked into mysql2's execute command, which mysql2 does
 * not export: {@link installBulkExecuteEncoder} finds the command's class by building one
 * without running it, and leaves mysql2 untouched if any part it relies on is missing.
 *
 * @module
 */
import { Buffer } from "node:buffer";
import mysql from "mysql2";
import type { SqlValue } from "../events/types.ts";

/** COM_STMT_EXECUTE. */
const COM_STMT_EXECUTE = 0x17;
/** Cursor flag telling that a parameter count follows (with query attributes). */
const PARAMETER_COUNT_AVAILABLE = 0x08;
/** Client capability: query attributes in COM_STMT_EXECUTE (MySQL 8.0.23+, not MariaDB). */
export const CLIENT_QUERY_ATTRIBUTES = 0x08000000;

const TYPE_DOUBLE = 5;
const TYPE_NULL = 6;
const TYPE_VAR_STRING = 253;

/** Length of a length-encoded integer, with mysql2's thresholds (so the bytes are the same). */
function lengthCodedSize(n: number): number {
  if (n < 0xfb) return 1;
  if (n < 0xffff) return 3;
  if (n < 0xffffff) return 4;
  return 9;
}

function writeLengthCoded(out: Uint8Array, at: number, n: number): number {
  if (n < 0xfb) {
    out[at] = n;
    return at + 1;
  }
  if (n < 0xffff) {
    out[at] = 0xfc;
    out[at + 1] = n & 0xff;
    out[at + 2] = n >>> 8;
    return at + 3;
  }
  if (n < 0xffffff) {
    out[at] = 0xfd;
    out[at + 1] = n & 0xff;
    out[at + 2] = (n >>> 8) & 0xff;
    out[at + 3] = n >>> 16;
    return at + 4;
  }
  out[at] = 0xfe;
  const low = n >>> 0;
  const high = Math.floor(n / 0x100000000);
  for (let i = 0; i < 4; i++) out[at + 1 + i] = (low >>> (8 * i)) & 0xff;
  for (let i = 0; i < 4; i++) out[at + 5 + i] = (high >>> (8 * i)) & 0xff;
  return at + 9;
}

/** UTF-8 length of a string (unpaired surrogates count 3, as U+FFFD, as TextEncoder writes them). */
function utf8Length(s: string): number {
  const n = s.length;
  let bytes = n;
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) {
      bytes += 1;
    } else if (c >= 0xd800 && c <= 0xdbff && i + 1 < n) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        // A pair: 2 UTF-16 units, 4 bytes.
        bytes += 2;
        i++;
      } else {
        bytes += 2;
      }
    } else {
      bytes += 2;
    }
  }
  return bytes;
}

const encoder = new TextEncoder();
/** Strings up to this length that are all ASCII are copied by a loop; longer ones by encodeInto. */
const LOOP_COPY_MAX = 64;

/** Per-call scratch for the byte length of each string parameter (grown, never shrunk). */
let lengths = new Int32Array(1024);

/**
 * Encode one COM_STMT_EXECUTE packet, header included (its sequence byte is left 0).
 *
 * The bytes are mysql2's for the same values without type hints: numbers as DOUBLE, strings as
 * VAR_STRING in UTF-8, null as NULL; with query attributes (`queryAttributes`), the parameter
 * count and an empty name per parameter.
 *
 * @param statementId The prepared statement.
 * @param values One value per placeholder.
 * @param queryAttributes Whether the connection negotiated CLIENT_QUERY_ATTRIBUTES.
 * @returns The packet.
 * @throws {TypeError} For a value that is not a string, a number or null.
 */
export function encodeExecutePacket(
  statementId: number,
  values: readonly SqlValue[],
  queryAttributes: boolean,
): Uint8Array {
  const count = values.length;
  if (lengths.length < count) lengths = new Int32Array(Math.max(count, lengths.length * 2));
  // Header (4), command, statement id (4), cursor flags, iteration count (4).
  let size = 14;
  if (queryAttributes) size += lengthCodedSize(count);
  if (count > 0) {
    size += ((count + 7) >> 3) + 1 + count * 2;
    if (queryAttributes) size += count;
  }
  for (let i = 0; i < count; i++) {
    const v = values[i];
    if (typeof v === "string") {
      const n = utf8Length(v);
      lengths[i] = n;
      size += lengthCodedSize(n) + n;
    } else if (typeof v === "number") {
      size += 8;
    } else if (v !== null) {
      throw new TypeError(`Bind parameter ${i} is ${typeof v}, not a string, number or null`);
    }
  }

  const out = new Uint8Array(size);
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  const payload = size - 4;
  out[0] = payload & 0xff;
  out[1] = (payload >>> 8) & 0xff;
  out[2] = (payload >>> 16) & 0xff;
  out[4] = COM_STMT_EXECUTE;
  view.setUint32(5, statementId, true);
  out[9] = queryAttributes ? PARAMETER_COUNT_AVAILABLE : 0;
  view.setUint32(10, 1, true);
  let at = 14;
  if (queryAttributes) at = writeLengthCoded(out, at, count);
  if (count === 0) return out;

  // NULL bitmap (the array is zero-filled).
  for (let i = 0; i < count; i++) {
    if (values[i] === null) out[at + (i >> 3)] = (out[at + (i >> 3)] as number) | (1 << (i & 7));
  }
  at += (count + 7) >> 3;
  out[at++] = 1; // new-params-bound flag
  for (let i = 0; i < count; i++) {
    const v = values[i];
    out[at] = typeof v === "string"
      ? TYPE_VAR_STRING
      : typeof v === "number"
      ? TYPE_DOUBLE
      : TYPE_NULL;
    // out[at + 1]: unsigned flag 0; with query attributes, out[at + 2]: empty name.
    at += queryAttributes ? 3 : 2;
  }
  for (let i = 0; i < count; i++) {
    const v = values[i];
    if (typeof v === "number") {
      view.setFloat64(at, v, true);
      at += 8;
    } else if (typeof v === "string") {
      const n = lengths[i] as number;
      at = writeLengthCoded(out, at, n);
      if (n === v.length && n <= LOOP_COPY_MAX) {
        for (let k = 0; k < n; k++) out[at + k] = v.charCodeAt(k);
      } else {
        encoder.encodeInto(v, out.subarray(at, at + n));
      }
      at += n;
    }
  }
  if (at !== size) {
    throw new Error(`COM_STMT_EXECUTE: wrote ${at} bytes, computed ${size}`);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The hook into mysql2

/** Stand-ins mysql2 is given for the parameters of a bulk INSERT, and those parameters. */
const BULK = new WeakMap<readonly unknown[], readonly unknown[]>();

/**
 * What to give mysql2 as the parameters of a bulk INSERT for this encoder: an empty stand-in
 * that the hook replaces with `values` when the command starts. mysql2 checks every parameter
 * with a callback before it queues a command (30,100 calls for a 700-row servicestatus
 * INSERT); the encoder checks each value's type anyway.
 *
 * @param values The statement's parameters.
 * @returns The stand-in, or `values` itself when the hook is not installed.
 */
export function bulkParameters(values: readonly unknown[]): readonly unknown[] {
  if (installed !== "yes") return values;
  const standIn: unknown[] = [];
  BULK.set(standIn, values);
  return standIn;
}

/** The parts of mysql2's execute command the hook uses. */
interface ExecuteCommand {
  parameters: unknown;
  statement?: { id: number; parameters?: unknown };
  _executeOptions?: { attributes?: unknown };
  _connection: unknown;
  options: unknown;
  queryTimeout: ReturnType<typeof setTimeout> | null;
  onResult?: (err: unknown) => void;
  emit(event: string, ...args: unknown[]): boolean;
  _setTimeout(): void;
}

interface ExecuteConnection {
  config: { clientFlags: number; charsetNumber: number };
  serverCapabilityFlags?: number;
  writePacket(packet: unknown): void;
}

type Start = (this: ExecuteCommand, packet: unknown, connection: ExecuteConnection) => unknown;

interface ExecutePrototype {
  start: Start;
  resultsetHeader: unknown;
  _setTimeout: unknown;
}

/** What mysql2's `Connection.writePacket` needs of a packet. */
class EncodedPacket {
  readonly _name = "Execute";
  readonly buffer: Buffer;
  constructor(bytes: Uint8Array) {
    this.buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  length(): number {
    return this.buffer.length;
  }
  writeHeader(sequenceId: number): void {
    this.buffer[3] = sequenceId;
  }
}

/** Whether mysql2 would use the statement's placeholder descriptions as type hints. */
function hasHints(parameters: unknown): boolean {
  if (!Array.isArray(parameters)) return false;
  for (const p of parameters) {
    if ((p as { columnType?: unknown } | null)?.columnType !== TYPE_NULL) return true;
  }
  return false;
}

let installed: "yes" | "no" | undefined;
let originalStart: Start | undefined;
let encoded = 0;

/**
 * Statements whose packet this encoder wrote since the process started (tests: the bulk
 * INSERTs really take this path).
 *
 * @returns The count.
 */
export function bulkPacketsEncoded(): number {
  return encoded;
}

/** mysql2's execute command class, found by building one through `Connection.execute` without a connection. */
function findExecutePrototype(): ExecutePrototype | undefined {
  const commands: unknown[] = [];
  const fake = {
    config: {},
    _resolveNamedPlaceholders() {},
    addCommand(command: unknown) {
      commands.push(command);
    },
  };
  try {
    const execute = (mysql.Connection.prototype as unknown as {
      execute: (this: unknown, options: unknown, cb: () => void) => unknown;
    }).execute;
    execute.call(fake, { sql: "SELECT 1", values: [] }, () => {});
  } catch {
    return undefined;
  }
  const command = commands.find((c) =>
    typeof c === "object" && c !== null && (c as { constructor?: { name?: string } })
        .constructor?.name === "Execute"
  );
  if (command === undefined) return undefined;
  const proto = Object.getPrototypeOf(command) as Partial<ExecutePrototype>;
  if (
    typeof proto.start !== "function" || proto.resultsetHeader === undefined ||
    typeof proto._setTimeout !== "function"
  ) {
    return undefined;
  }
  return proto as ExecutePrototype;
}

/**
 * Let this encoder write the marked bulk INSERTs of every mysql2 connection. Idempotent.
 *
 * @returns Whether it is installed (false: mysql2 changed shape; it then encodes everything
 *   itself, as before).
 */
export function installBulkExecuteEncoder(): boolean {
  if (installed !== undefined) return installed === "yes";
  const proto = findExecutePrototype();
  const queryOptions = ((mysql as unknown as { ConnectionConfig?: unknown }).ConnectionConfig as
    | { queryOptions?: (config: unknown, overrides: unknown) => unknown }
    | undefined)?.queryOptions;
  const charsets = mysql.CharsetToEncoding as unknown as readonly string[] | undefined;
  if (proto === undefined || typeof queryOptions !== "function" || !Array.isArray(charsets)) {
    installed = "no";
    return false;
  }
  const original = proto.start;
  originalStart = original;
  const resultsetHeader = proto.resultsetHeader;
  proto.start = function (this: ExecuteCommand, packet, connection) {
    const values = Array.isArray(this.parameters) ? BULK.get(this.parameters) : undefined;
    // mysql2's own encoder, when it has to take over, gets the real values.
    if (values !== undefined) this.parameters = values;
    if (
      values === undefined || this.statement === undefined ||
      hasHints(this.statement.parameters) || this._executeOptions?.attributes !== undefined ||
      charsets[connection.config.charsetNumber] !== "utf8"
    ) {
      return original.call(this, packet, connection);
    }
    // As mysql2's own start: options, timeout, one packet, then its result-set states.
    this._connection = connection;
    this.options = queryOptions(connection.config, this._executeOptions);
    this._setTimeout();
    const clientFlags = connection.config.clientFlags & (connection.serverCapabilityFlags ?? 0);
    try {
      const bytes = encodeExecutePacket(
        this.statement.id,
        values as SqlValue[],
        (clientFlags & CLIENT_QUERY_ATTRIBUTES) !== 0,
      );
      connection.writePacket(new EncodedPacket(bytes));
      encoded++;
    } catch (error: unknown) {
      if (this.queryTimeout !== null) {
        clearTimeout(this.queryTimeout);
        this.queryTimeout = null;
      }
      if (this.onResult !== undefined) this.onResult(error);
      else this.emit("error", error);
      return null;
    }
    return resultsetHeader;
  };
  installed = "yes";
  return true;
}

/**
 * The packet mysql2's own encoder writes for these values (tests compare the two).
 *
 * @param statementId The prepared statement.
 * @param values One value per placeholder.
 * @param queryAttributes Whether CLIENT_QUERY_ATTRIBUTES was negotiated.
 * @returns The packet, header included (sequence byte 1 as mysql2 leaves it before sending).
 */
export function mysql2ExecutePacket(
  statementId: number,
  values: readonly SqlValue[],
  queryAttributes: boolean,
): Uint8Array {
  if (!installBulkExecuteEncoder() || originalStart === undefined) {
    throw new Error("the bulk execute encoder is not installed");
  }
  let written: Uint8Array | undefined;
  const connection: ExecuteConnection = {
    config: {
      clientFlags: queryAttributes ? CLIENT_QUERY_ATTRIBUTES : 0,
      charsetNumber: 224,
    },
    serverCapabilityFlags: queryAttributes ? CLIENT_QUERY_ATTRIBUTES : 0,
    writePacket(packet: unknown) {
      const p = packet as { buffer: Uint8Array; writeHeader(seq: number): void };
      p.writeHeader(0);
      written = new Uint8Array(p.buffer);
    },
  };
  const command = {
    parameters: values,
    statement: { id: statementId },
    _executeOptions: {},
    _connection: undefined,
    options: undefined,
    queryTimeout: null,
    emit: () => false,
    _setTimeout() {},
  } as unknown as ExecuteCommand;
  originalStart.call(command, undefined, connection);
  if (written === undefined) throw new Error("mysql2 wrote no packet");
  return written;
}
