/**
 * The dead-letter file (D7): NDJSON, one record per undecodable payload or
 * per row MySQL rejected deterministically, with queue, time and reason, so
 * nothing is dropped silently and an operator can inspect or replay it.
 *
 * @module
 */
import { errorMessage, getLogger } from "../log.ts";

const log = getLogger("pipeline");

/** One dead-letter record. */
export interface DeadLetterRecord {
  readonly queue: string;
  /** Decode failure reason (`not_json`, …) or `sql_rejected`. */
  readonly reason: string;
  /** Human-readable detail (decode message, MySQL error). */
  readonly error: string;
  /** The repaired payload text, for undecodable payloads (only its first KiB for `too_large`). */
  readonly payload?: string;
  /** Size of the whole payload in bytes, when the record does not hold all of it (`too_large`). */
  readonly bytes?: number;
  /** Table and row, for rows MySQL rejected. */
  readonly table?: string;
  readonly row?: Readonly<Record<string, unknown>>;
}

/** Where dead letters go. */
export interface DeadLetterSink {
  /**
   * Append one record. Resolves once it is written (durably enough to be on disk
   * before the job it belongs to is acknowledged).
   *
   * @throws When the file cannot be written; the caller must not acknowledge the job.
   */
  write(record: DeadLetterRecord): Promise<void>;
  close(): Promise<void>;
}

/** A sink that keeps nothing (dead-letter file disabled by an explicit empty path). */
export const DISCARDING_SINK: DeadLetterSink = {
  write: () => Promise.resolve(),
  close: () => Promise.resolve(),
};

const encoder = new TextEncoder();

/** Appends records to an NDJSON file; writes are serialised. */
export class DeadLetterFile implements DeadLetterSink {
  readonly path: string;
  #file: Deno.FsFile | undefined;
  #tail: Promise<void> = Promise.resolve();
  #closed = false;

  /** @param path File to append to (created if missing). */
  constructor(path: string) {
    this.path = path;
  }

  /**
   * Open (create) the file now, so a missing directory or permission fails at
   * start-up rather than on the first bad payload (operations.md §6.6).
   *
   * @throws When the file cannot be opened for appending.
   */
  async open(): Promise<void> {
    this.#file ??= await Deno.open(this.path, { append: true, create: true });
  }

  /**
   * Append one record (serialised with earlier writes).
   *
   * @param record What to record.
   */
  write(record: DeadLetterRecord): Promise<void> {
    if (this.#closed) return Promise.reject(new Error(`Dead-letter file "${this.path}" is closed`));
    const line = encoder.encode(
      JSON.stringify({ time: new Date().toISOString(), ...record }) + "\n",
    );
    const next = this.#tail.then(async () => {
      try {
        this.#file ??= await Deno.open(this.path, { append: true, create: true });
        let off = 0;
        while (off < line.length) off += await this.#file.write(line.subarray(off));
      } catch (err: unknown) {
        log.error("pipeline: cannot write dead-letter file", {
          path: this.path,
          queue: record.queue,
          error: errorMessage(err),
        });
        throw new Error(`Cannot write dead-letter file "${this.path}": ${errorMessage(err)}`, {
          cause: err,
        });
      }
    });
    this.#tail = next.catch(() => {});
    return next;
  }

  /** Finish pending writes and close the file. Idempotent. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#tail;
    this.#file?.close();
    this.#file = undefined;
  }
}
