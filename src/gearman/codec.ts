/**
 * Gearman binary protocol codec, bytes ↔ packets, no I/O (framing: docs/gearman-protocol.md#packets).
 * The last argument may contain NULs, so a body is split on its first n−1 NULs only.
 *
 * @module
 */
import { WorkerError } from "../util/errors.ts";

/** `REQ`: client/worker → server; `RES`: server → client. */
export type Magic = "REQ" | "RES";

/** One row of the packet table: the single source of truth for encoder and decoder. */
export interface PacketSpec {
  readonly code: number;
  readonly name: string;
  readonly args: number;
  /** WORK_* travel in both directions. */
  readonly magic: readonly Magic[];
}

const REQ: readonly Magic[] = ["REQ"];
const RES: readonly Magic[] = ["RES"];
const BOTH: readonly Magic[] = ["REQ", "RES"];

/** The packet table (gearmand 1.1.20; docs/gearman-protocol.md#packet-types). */
export const PACKETS = [
  { code: 1, name: "CAN_DO", args: 1, magic: REQ },
  { code: 2, name: "CANT_DO", args: 1, magic: REQ },
  { code: 3, name: "RESET_ABILITIES", args: 0, magic: REQ },
  { code: 4, name: "PRE_SLEEP", args: 0, magic: REQ },
  { code: 6, name: "NOOP", args: 0, magic: RES },
  { code: 7, name: "SUBMIT_JOB", args: 3, magic: REQ },
  { code: 8, name: "JOB_CREATED", args: 1, magic: RES },
  { code: 9, name: "GRAB_JOB", args: 0, magic: REQ },
  { code: 10, name: "NO_JOB", args: 0, magic: RES },
  { code: 11, name: "JOB_ASSIGN", args: 3, magic: RES },
  { code: 12, name: "WORK_STATUS", args: 3, magic: BOTH },
  { code: 13, name: "WORK_COMPLETE", args: 2, magic: BOTH },
  { code: 14, name: "WORK_FAIL", args: 1, magic: BOTH },
  { code: 15, name: "GET_STATUS", args: 1, magic: REQ },
  { code: 16, name: "ECHO_REQ", args: 1, magic: REQ },
  { code: 17, name: "ECHO_RES", args: 1, magic: RES },
  { code: 18, name: "SUBMIT_JOB_BG", args: 3, magic: REQ },
  { code: 19, name: "ERROR", args: 2, magic: RES },
  { code: 20, name: "STATUS_RES", args: 5, magic: RES },
  { code: 21, name: "SUBMIT_JOB_HIGH", args: 3, magic: REQ },
  { code: 22, name: "SET_CLIENT_ID", args: 1, magic: REQ },
  { code: 23, name: "CAN_DO_TIMEOUT", args: 2, magic: REQ },
  { code: 24, name: "ALL_YOURS", args: 0, magic: REQ },
  { code: 25, name: "WORK_EXCEPTION", args: 2, magic: BOTH },
  { code: 26, name: "OPTION_REQ", args: 1, magic: REQ },
  { code: 27, name: "OPTION_RES", args: 1, magic: RES },
  { code: 28, name: "WORK_DATA", args: 2, magic: BOTH },
  { code: 29, name: "WORK_WARNING", args: 2, magic: BOTH },
  { code: 30, name: "GRAB_JOB_UNIQ", args: 0, magic: REQ },
  { code: 31, name: "JOB_ASSIGN_UNIQ", args: 4, magic: RES },
  { code: 32, name: "SUBMIT_JOB_HIGH_BG", args: 3, magic: REQ },
  { code: 33, name: "SUBMIT_JOB_LOW", args: 3, magic: REQ },
  { code: 34, name: "SUBMIT_JOB_LOW_BG", args: 3, magic: REQ },
  { code: 35, name: "SUBMIT_JOB_SCHED", args: 8, magic: REQ },
  { code: 36, name: "SUBMIT_JOB_EPOCH", args: 4, magic: REQ },
  { code: 37, name: "SUBMIT_REDUCE_JOB", args: 5, magic: REQ },
  { code: 38, name: "SUBMIT_REDUCE_JOB_BACKGROUND", args: 5, magic: REQ },
  { code: 39, name: "GRAB_JOB_ALL", args: 0, magic: REQ },
  { code: 40, name: "JOB_ASSIGN_ALL", args: 5, magic: RES },
  { code: 41, name: "GET_STATUS_UNIQUE", args: 1, magic: REQ },
  { code: 42, name: "STATUS_RES_UNIQUE", args: 6, magic: RES },
] as const satisfies readonly PacketSpec[];

export const PACKET = Object.freeze(Object.fromEntries(PACKETS.map((p) => [p.name, p.code]))) as {
  readonly [P in (typeof PACKETS)[number] as P["name"]]: P["code"];
};

const SPEC_BY_CODE: ReadonlyMap<number, PacketSpec> = new Map(
  PACKETS.map((p): [number, PacketSpec] => [p.code, p]),
);

/** Name of a packet code for logs (`UNKNOWN(99)` outside the table). */
export function packetName(code: number): string {
  return SPEC_BY_CODE.get(code)?.name ?? `UNKNOWN(${code})`;
}

const HEADER_SIZE = 12;
/** Default ceiling for an announced body size: above it the stream is desynchronised. */
const DEFAULT_MAX_BODY_SIZE = 64 * 1024 * 1024;

const MAGIC_BYTES: Readonly<Record<Magic, readonly number[]>> = {
  REQ: [0x00, 0x52, 0x45, 0x51],
  RES: [0x00, 0x52, 0x45, 0x53],
};

function protocolError(message: string): WorkerError {
  return new WorkerError("gearman_protocol", message);
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** One decoded binary packet. `args` are views into the received bytes (no copy). */
export interface Packet {
  readonly magic: Magic;
  readonly type: number;
  readonly args: readonly Uint8Array[];
  /**
   * The real workload size of a job assignment above the parser's limit; the workload argument
   * then holds only its first {@link TRUNCATED_WORKLOAD_BYTES} bytes.
   */
  readonly truncatedFrom?: number;
  /**
   * The arguments view a buffer holding this body alone, which the parser does not keep: the
   * receiver may release it. Always set from {@link DIRECT_BODY_BYTES} on.
   */
  readonly exclusive?: true;
}

/**
 * Bodies from this size on that have not fully arrived are read straight into one buffer of their
 * size, not joined from reads: every byte copied and held once, not twice (a 20 MiB job would hold
 * 40 MiB), and no garbage per read (a 126 KB job in 64 KiB reads parses in 18 µs, not 66 µs).
 */
const DIRECT_BODY_BYTES = 1024;

/** Workload bytes kept of a job assignment above the size limit (for the dead-letter record). */
const TRUNCATED_WORKLOAD_BYTES = 1024;

/** Body bytes read of an oversize job assignment: handle, function, unique id, kept prefix. */
const TRUNCATED_PREFIX_BYTES = 8 * 1024;

/** The only packets whose oversize body is skipped instead of fatal. */
const JOB_ASSIGN_TYPES: ReadonlySet<number> = new Set([
  PACKET.JOB_ASSIGN,
  PACKET.JOB_ASSIGN_UNIQ,
  PACKET.JOB_ASSIGN_ALL,
]);

/** Text is encoded as UTF-8, bytes are sent unchanged. */
export type PacketArg = string | Uint8Array;

/**
 * Encode one packet with exactly n−1 separators: gearmand waits forever (and later desynchronises)
 * on a request missing one.
 *
 * @throws {WorkerError} (code `gearman_protocol`) On an unknown code, a wrong argument count, or a NUL inside a non-final argument.
 *
 * @example Encode a CAN_DO registration
 * ```ts
 * import { encodePacket, PACKET } from "./codec.ts";
 * const bytes = encodePacket("REQ", PACKET.CAN_DO, ["fn"]);
 * // 00 52 45 51 00 00 00 01 00 00 00 02 66 6e
 * ```
 */
export function encodePacket(magic: Magic, type: number, args: readonly PacketArg[]): Uint8Array {
  const spec = SPEC_BY_CODE.get(type);
  if (spec === undefined) {
    throw protocolError(`Cannot encode packet: unknown type ${type}`);
  }
  if (args.length !== spec.args) {
    throw protocolError(
      `Cannot encode ${spec.name}: expected ${spec.args} argument(s), got ${args.length}`,
    );
  }
  const parts = args.map((a) => typeof a === "string" ? encoder.encode(a) : a);
  let size = parts.length > 0 ? parts.length - 1 : 0;
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i] as Uint8Array;
    if (i < parts.length - 1 && part.indexOf(0) !== -1) {
      throw protocolError(`Cannot encode ${spec.name}: argument ${i + 1} contains a NUL byte`);
    }
    size += part.length;
  }
  const out = new Uint8Array(HEADER_SIZE + size);
  out.set(MAGIC_BYTES[magic], 0);
  const view = new DataView(out.buffer);
  view.setUint32(4, type);
  view.setUint32(8, size);
  let offset = HEADER_SIZE;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
    // Only the last argument ends at the end of the packet.
    if (offset < out.length) out[offset++] = 0;
  }
  return out;
}

export function argText(arg: Uint8Array | undefined): string {
  return arg === undefined ? "" : decoder.decode(arg);
}

export interface PacketParserOptions {
  readonly expect: Magic;
  readonly maxBodySize?: number | undefined;
  /**
   * Return a job assignment above `maxBodySize` with {@link Packet.truncatedFrom} set instead of
   * failing: a job that can never be taken would be handed out again on every reconnect.
   */
  readonly truncateOversizeJobs?: boolean;
}

/**
 * Incremental parser: feed it reads, get every packet completed so far. Chunks are kept as a list
 * and joined once per packet. After a protocol error it refuses further input.
 *
 * @example Parse a NOOP split over two reads
 * ```ts
 * import { PacketParser } from "./codec.ts";
 * const parser = new PacketParser({ expect: "RES" });
 * parser.push(new Uint8Array([0, 0x52, 0x45, 0x53, 0, 0]));          // []
 * const packets = parser.push(new Uint8Array([0, 6, 0, 0, 0, 0]));   // [{ type: 6, … }]
 * ```
 */
export class PacketParser {
  readonly #expect: Magic;
  readonly #maxBodySize: number;
  readonly #truncateOversizeJobs: boolean;
  #chunks: Uint8Array[] = [];
  #buffered = 0;
  #failed: WorkerError | undefined;
  // Header of the packet being assembled, once its 12 bytes are known.
  #type = -1;
  #size = -1;
  // An oversize job being skipped: its kept prefix and the bytes still to discard.
  #truncating = false;
  #prefix: Uint8Array | undefined;
  #skip = 0;
  // A large body being read straight into its final buffer.
  #body: Uint8Array | undefined;
  #bodyFilled = 0;

  constructor(options: PacketParserOptions) {
    this.#expect = options.expect;
    this.#maxBodySize = options.maxBodySize ?? DEFAULT_MAX_BODY_SIZE;
    this.#truncateOversizeJobs = options.truncateOversizeJobs ?? false;
  }

  /** Bytes received but not yet part of a returned packet. */
  get buffered(): number {
    return this.#buffered + this.#bodyFilled;
  }

  /**
   * Add received bytes and return every packet they complete. `transient`: the caller reuses
   * `chunk`'s buffer, so the parser copies what it keeps.
   *
   * @throws {WorkerError} (code `gearman_protocol`) On bad magic, an unknown packet type, a size above the ceiling, or a body with too few arguments.
   */
  push(chunk: Uint8Array, options: { readonly transient?: boolean } = {}): Packet[] {
    if (this.#failed !== undefined) throw this.#failed;
    const out: Packet[] = [];
    let input = chunk;
    if (this.#body !== undefined) {
      input = this.#fillBody(input, out);
      if (this.#body !== undefined) return out;
    }
    if (input.length > 0) {
      this.#chunks.push(options.transient === true ? input.slice() : input);
      this.#buffered += input.length;
    }
    for (;;) {
      if (this.#type < 0) {
        if (this.#buffered < HEADER_SIZE) break;
        const header = this.#take(HEADER_SIZE);
        this.#parseHeader(header);
      }
      if (this.#truncating) {
        const packet = this.#skipOversize();
        if (packet === undefined) break;
        out.push(packet);
        continue;
      }
      if (this.#buffered < this.#size) {
        if (this.#size >= DIRECT_BODY_BYTES) {
          const head = this.#take(this.#buffered);
          this.#body = new Uint8Array(this.#size);
          this.#body.set(head, 0);
          this.#bodyFilled = head.length;
        }
        break;
      }
      let body = this.#take(this.#size);
      const exclusive = this.#size >= DIRECT_BODY_BYTES;
      // A large body within one read is a view shared with the packets around it: its own copy
      // can be released when its job is done, and the read is garbage at once, not with the job.
      if (exclusive && body.byteLength !== body.buffer.byteLength) body = body.slice();
      this.#complete(body, out, exclusive);
    }
    return out;
  }

  #fail(message: string): never {
    this.#failed = protocolError(message);
    this.#chunks = [];
    this.#buffered = 0;
    this.#body = undefined;
    this.#bodyFilled = 0;
    throw this.#failed;
  }

  #parseHeader(header: Uint8Array): void {
    const magic = header[1] === 0x52 && header[2] === 0x45 && header[0] === 0
      ? header[3] === 0x53 ? "RES" : header[3] === 0x51 ? "REQ" : undefined
      : undefined;
    if (magic !== this.#expect) {
      const shown = Array.from(header.subarray(0, 4), (b) => b.toString(16).padStart(2, "0"))
        .join(" ");
      this.#fail(`Invalid packet magic: expected "\\0${this.#expect}", got bytes ${shown}`);
    }
    const view = new DataView(header.buffer, header.byteOffset, HEADER_SIZE);
    const type = view.getUint32(4);
    const size = view.getUint32(8);
    const spec = SPEC_BY_CODE.get(type);
    if (spec === undefined) this.#fail(`Unknown packet type ${type}`);
    if (!spec.magic.includes(magic)) {
      this.#fail(`Packet ${spec.name} cannot carry magic "\\0${magic}"`);
    }
    if (size > this.#maxBodySize && this.#truncateOversizeJobs && JOB_ASSIGN_TYPES.has(type)) {
      this.#truncating = true;
    } else if (size > this.#maxBodySize) {
      this.#fail(
        `Packet ${spec.name} announces ${size} body bytes, above the limit of ${this.#maxBodySize}`,
      );
    }
    this.#type = type;
    this.#size = size;
  }

  /** Copy bytes into the large body being read; returns what is left of `input` after it. */
  #fillBody(input: Uint8Array, out: Packet[]): Uint8Array {
    const body = this.#body as Uint8Array;
    const n = Math.min(this.#size - this.#bodyFilled, input.length);
    body.set(input.subarray(0, n), this.#bodyFilled);
    this.#bodyFilled += n;
    if (this.#bodyFilled === this.#size) {
      this.#body = undefined;
      this.#bodyFilled = 0;
      this.#complete(body, out, true);
    }
    return input.subarray(n);
  }

  #complete(body: Uint8Array, out: Packet[], exclusive = false): void {
    out.push(this.#parseBody(body, exclusive));
    this.#type = -1;
    this.#size = -1;
  }

  /** Keep the prefix, discard what has arrived of the rest; the packet once all of it was read. */
  #skipOversize(): Packet | undefined {
    if (this.#prefix === undefined) {
      const want = Math.min(this.#size, TRUNCATED_PREFIX_BYTES);
      if (this.#buffered < want) return undefined;
      this.#prefix = this.#take(want).slice();
      this.#skip = this.#size - want;
    }
    // About one read at most: a copy, when the bytes span chunks, is small (oversize jobs are rare).
    const n = Math.min(this.#skip, this.#buffered);
    this.#take(n);
    this.#skip -= n;
    if (this.#skip > 0) return undefined;
    const parsed = this.#parseBody(this.#prefix);
    const args = [...parsed.args];
    const last = args.length - 1;
    const workload = args[last] as Uint8Array;
    args[last] = workload.subarray(0, TRUNCATED_WORKLOAD_BYTES);
    const workloadSize = this.#size - (this.#prefix.length - workload.length);
    const packet: Packet = { ...parsed, args, truncatedFrom: workloadSize };
    this.#type = -1;
    this.#size = -1;
    this.#truncating = false;
    this.#prefix = undefined;
    return packet;
  }

  #parseBody(body: Uint8Array, exclusive = false): Packet {
    const spec = SPEC_BY_CODE.get(this.#type) as PacketSpec;
    const args: Uint8Array[] = [];
    let start = 0;
    for (let i = 0; i < spec.args - 1; i++) {
      const nul = body.indexOf(0, start);
      if (nul === -1) {
        this.#fail(
          `Packet ${spec.name} has ${i + 1} argument(s) where ${spec.args} are required`,
        );
      }
      args.push(body.subarray(start, nul));
      start = nul + 1;
    }
    if (spec.args > 0) args.push(body.subarray(start));
    else if (body.length > 0) {
      this.#fail(`Packet ${spec.name} takes no arguments but has a body`);
    }
    const magic = this.#expect;
    const type = this.#type;
    return exclusive ? { magic, type, args, exclusive: true } : { magic, type, args };
  }

  /** Remove exactly n buffered bytes; copies only when they span several chunks. */
  #take(n: number): Uint8Array {
    this.#buffered -= n;
    const first = this.#chunks[0];
    if (n === 0) return new Uint8Array(0);
    if (first !== undefined && first.length >= n) {
      if (first.length === n) this.#chunks.shift();
      else this.#chunks[0] = first.subarray(n);
      return first.subarray(0, n);
    }
    const out = new Uint8Array(n);
    let filled = 0;
    while (filled < n) {
      const chunk = this.#chunks[0] as Uint8Array;
      const need = n - filled;
      if (chunk.length <= need) {
        out.set(chunk, filled);
        filled += chunk.length;
        this.#chunks.shift();
      } else {
        out.set(chunk.subarray(0, need), filled);
        this.#chunks[0] = chunk.subarray(need);
        filled += need;
      }
    }
    return out;
  }
}

// Admin (text) protocol (docs/gearman-protocol.md#admin).

/** One line of the admin `status` reply. */
export interface FunctionStatus {
  readonly function: string;
  /** Queued + running. */
  readonly total: number;
  readonly running: number;
  /** Connected workers that registered the function. */
  readonly workers: number;
}

export function encodeAdminCommand(command: string): Uint8Array {
  if (/[\r\n]/.test(command)) {
    throw protocolError(`Cannot encode admin command: newline in ${JSON.stringify(command)}`);
  }
  return encoder.encode(`${command}\n`);
}

/** Whether an admin command answers with a multi-line block ending in a `.` line. */
export function isMultiLineAdminCommand(command: string): boolean {
  // The first two words: "show unique jobs" is "show unique".
  const words = command.trim().split(/\s+/, 2).join(" ");
  return ["status", "workers", "prioritystatus", "show jobs", "show unique"].includes(words);
}

/** Incremental reader of an admin reply. */
export class AdminReplyParser {
  readonly #multiLine: boolean;
  #text = "";
  readonly #decoder = new TextDecoder();

  constructor(multiLine: boolean) {
    this.#multiLine = multiLine;
  }

  /**
   * Add bytes; the reply lines once complete (`\r` and the final `.` stripped), else undefined.
   *
   * @throws {WorkerError} (code `gearman_protocol`) When a multi-line command is answered with an `ERR` line.
   */
  push(chunk: Uint8Array): string[] | undefined {
    this.#text += this.#decoder.decode(chunk, { stream: true });
    if (!this.#text.includes("\n")) return undefined;
    const lines = this.#text.split("\n").map((l) => l.replace(/\r$/, ""));
    if (!this.#multiLine) return [lines[0] as string];
    if ((lines[0] ?? "").startsWith("ERR ")) {
      throw protocolError(`Admin command failed: ${lines[0]}`);
    }
    // Only complete lines: a read may end right after the dot of a function name like ".x".
    const end = lines.indexOf(".");
    if (end === -1 || end === lines.length - 1) return undefined;
    return lines.slice(0, end);
  }
}

/**
 * Parse the lines of an admin `status` reply.
 *
 * @throws {WorkerError} (code `gearman_protocol`) On a line that is not `FUNCTION\tTOTAL\tRUNNING\tWORKERS`.
 *
 * @example
 * ```ts
 * import { parseStatusReply } from "./codec.ts";
 * parseStatusReply(["statusngin_hoststatus\t3\t1\t1"]);
 * // [{ function: "statusngin_hoststatus", total: 3, running: 1, workers: 1 }]
 * ```
 */
export function parseStatusReply(lines: readonly string[]): FunctionStatus[] {
  return lines.filter((l) => l !== "").map((line) => {
    const [name = "", ...counts] = line.split("\t");
    const [total, running, workers] = counts.map(Number);
    if (counts.length !== 3 || !counts.every((c) => /^\d+$/.test(c))) {
      throw protocolError(`Malformed admin status line ${JSON.stringify(line)}`);
    }
    return { function: name, total, running, workers } as FunctionStatus;
  });
}

/**
 * Jobs waiting per function asked: total − running (never below 0). A function the reply does not
 * list has had no job and no worker yet: 0, not unknown.
 *
 * @example
 * ```ts
 * import { waitingJobs } from "./codec.ts";
 * waitingJobs([{ function: "q", total: 5, running: 2, workers: 1 }], ["q", "other"]);
 * // Map { "q" => 3, "other" => 0 }
 * ```
 */
export function waitingJobs(
  rows: readonly FunctionStatus[],
  functions: readonly string[],
): Map<string, number> {
  const byName = new Map(rows.map((r) => [r.function, r]));
  return new Map(functions.map((name) => {
    const row = byName.get(name);
    return [name, row === undefined ? 0 : Math.max(0, row.total - row.running)];
  }));
}
