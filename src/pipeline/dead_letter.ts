/**
 * The dead-letter file (D7): NDJSON, one record per undecodable payload or
 * per row MySQL rejected deterministically, with queue, time and reason, so
 * nothing is dropped silently and an operator can inspect or replay it.
 *
 * Every dead letter goes through one {@link DeadLetters}: it counts a record
 * in `statusengine_dead_letters_total` only once it is written, counts failed
 * writes in `statusengine_dead_letter_write_errors_total`, and reports
 * {@link DeadLetters.writable} for `/readyz`. A record that cannot be written
 * makes its caller wait and retry (the job is not acknowledged), so a full
 * disk stalls the queues that need the file; readiness says so.
 *
 * @module
 */
import type { DeadLetterRecord, DeadLetterSink } from "../mysql/mod.ts";
import { errorMessage, getLogger } from "../log.ts";
import type { Metrics } from "../metrics/registry.ts";

const log = getLogger("pipeline");

const encoder = new TextEncoder();
const NEWLINE = 0x0a;

/**
 * Why a path lies outside what this process may write, or undefined when it may: the compiled
 * binary writes only below the state directory it was built for, which no flag changes at run
 * time. Asked before any work, so the advice comes first and alone.
 *
 * @param path A file this process is about to write.
 * @returns The explanation for an error message, or undefined.
 */
export function outsideWritablePaths(path: string): string | undefined {
  if (Deno.permissions.querySync({ name: "write", path }).state === "granted") return undefined;
  return `this binary may write only below the state directory it was compiled for ` +
    `(docs/operations.md#compiled-permissions)`;
}

/**
 * An error's message without Deno's advice to run again with `--allow-write`: a compiled binary
 * cannot be given that flag, so the advice would send the operator the wrong way.
 *
 * @param err A file system error.
 * @returns Its message, for a message of our own.
 */
export function fileErrorMessage(err: unknown): string {
  return errorMessage(err).replace(
    /, (run again with|specify the required permissions during compilation using) .*$/s,
    "",
  );
}

/**
 * Appends records to an NDJSON file; writes are serialised.
 *
 * Survives log rotation: before each write the path is compared with the
 * open file (device and inode), and a file that was renamed or removed
 * (logrotate `create`) is closed and the path opened again. The file is
 * opened with O_APPEND, so after a `copytruncate` the next record lands at
 * the new end instead of leaving a hole of NUL bytes.
 *
 * A write that fails half-way (disk full, file size limit) is cut back off:
 * the file is truncated to its length before the record, so it holds only
 * whole records, and the caller's retry does not add a second copy next to
 * a torn one (the count of records in the file stays equal to
 * `statusengine_dead_letters_total`). Only if that truncation fails too is
 * the torn line left; the next record then starts on a new line, so only
 * that one line is unreadable.
 */
export class DeadLetterFile implements DeadLetterSink {
  readonly path: string;
  #file: Deno.FsFile | undefined;
  #identity: { readonly dev: number; readonly ino: number | null } | undefined;
  /** The file ends in the middle of a line (a write failed half-way). */
  #torn = false;
  #tail: Promise<void> = Promise.resolve();
  #closed = false;

  /** @param path File to append to (created if missing). */
  constructor(path: string) {
    this.path = path;
  }

  /**
   * Open (create) the file now, so a missing directory or permission fails at
   * start-up rather than on the first bad payload.
   *
   * @throws When the file cannot be opened for appending.
   */
  async open(): Promise<void> {
    await this.#current();
  }

  /**
   * Append one record (serialised with earlier writes).
   *
   * @param record What to record.
   * @throws When the file cannot be (re)opened or written.
   */
  write(record: DeadLetterRecord): Promise<void> {
    if (this.#closed) return Promise.reject(new Error(`Dead-letter file "${this.path}" is closed`));
    const line = encoder.encode(
      JSON.stringify({ time: new Date().toISOString(), ...record }) + "\n",
    );
    const next = this.#tail.then(() => this.#append(line));
    this.#tail = next.catch(() => {});
    return next;
  }

  /**
   * Close the file after the pending writes and open the path again (SIGHUP, after logrotate
   * moved it): records from here on go to whatever file the path names now.
   *
   * @throws When the path cannot be opened; the next write tries again.
   */
  reopen(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    const next = this.#tail.then(async () => {
      this.#file?.close();
      this.#file = undefined;
      this.#identity = undefined;
      await this.#current();
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

  async #append(line: Uint8Array): Promise<void> {
    let bytes = line;
    try {
      const file = await this.#current();
      if (this.#torn) {
        bytes = new Uint8Array(line.length + 1);
        bytes[0] = NEWLINE;
        bytes.set(line, 1);
      }
      // Where this record starts (O_APPEND writes at the end), to cut a torn one back off.
      const start = (await file.stat()).size;
      let off = 0;
      try {
        while (off < bytes.length) off += await file.write(bytes.subarray(off));
      } catch (err: unknown) {
        if (off > 0) await this.#cutBack(file, start, bytes[off - 1] !== NEWLINE);
        throw err;
      }
      this.#torn = false;
    } catch (err: unknown) {
      throw new Error(`Cannot write dead-letter file "${this.path}": ${fileErrorMessage(err)}`, {
        cause: err,
      });
    }
  }

  /**
   * Remove the part of a record a failed write left behind; when even that fails, remember
   * whether the file now ends mid-line so the next record starts on a line of its own.
   */
  async #cutBack(file: Deno.FsFile, start: number, endsMidLine: boolean): Promise<void> {
    try {
      await file.truncate(start);
      this.#torn = false;
    } catch (err: unknown) {
      this.#torn = endsMidLine;
      log.warn("pipeline: a dead-letter record was written only in part and cannot be removed", {
        path: this.path,
        error: errorMessage(err),
        hint: "that line of the file is unreadable; the record is written again in full",
      });
    }
  }

  /** The open file, reopened when the path no longer names it (rotated or removed). */
  async #current(): Promise<Deno.FsFile> {
    if (this.#file !== undefined && this.#identity !== undefined) {
      let moved: boolean;
      try {
        const now = await Deno.stat(this.path);
        moved = now.dev !== this.#identity.dev || now.ino !== this.#identity.ino;
      } catch (err: unknown) {
        if (!(err instanceof Deno.errors.NotFound)) throw err;
        moved = true;
      }
      if (!moved) return this.#file;
      this.#file.close();
      this.#file = undefined;
      this.#identity = undefined;
      log.info("pipeline: dead-letter file was moved or removed, opening the path again", {
        path: this.path,
      });
    }
    const file = await Deno.open(this.path, { append: true, create: true });
    try {
      const info = await file.stat();
      this.#identity = { dev: info.dev, ino: info.ino };
    } catch (err: unknown) {
      file.close();
      throw err;
    }
    this.#file = file;
    this.#torn = false;
    return file;
  }
}

/**
 * The counters {@link DeadLetters} keeps: `statusengine_dead_letters_total{queue_name, reason}`
 * and `statusengine_dead_letter_write_errors_total`.
 */
export type DeadLetterMetrics = Pick<Metrics, "deadLetters" | "deadLetterWriteErrors">;

const STILL_FAILING_LOG_INTERVAL_MS = 60_000;

/**
 * The one path every dead letter takes: written to the file (when one is
 * configured), then counted; a failed write is counted as such, logged once
 * per failing period (and every minute while it lasts), and makes
 * {@link writable} false until a write succeeds again.
 */
export class DeadLetters implements DeadLetterSink {
  readonly #file: DeadLetterSink | null;
  readonly #where: string;
  readonly #metrics: DeadLetterMetrics | undefined;
  #failingSince: number | undefined;
  #failedAttempts = 0;
  #lastLogAt = 0;

  /**
   * @param file The file, or null when dead letters are only counted and
   *   logged (disabled by an explicit empty path).
   * @param metrics Counters (optional in tests).
   */
  constructor(file: DeadLetterSink | null, metrics?: DeadLetterMetrics) {
    this.#file = file;
    this.#where = file instanceof DeadLetterFile ? file.path : "";
    this.#metrics = metrics;
  }

  /** False from a failed write until the next successful one (`/readyz`). */
  get writable(): boolean {
    return this.#failingSince === undefined;
  }

  /**
   * Write and count one record.
   *
   * @param record What to record.
   * @throws When the file cannot take it; the caller must not acknowledge the job.
   */
  async write(record: DeadLetterRecord): Promise<void> {
    try {
      await this.#file?.write(record);
    } catch (err: unknown) {
      this.#failed(record, err);
      throw err;
    }
    this.#metrics?.deadLetters.inc({ queue_name: record.queue, reason: record.reason });
    if (this.#failingSince !== undefined) {
      log.info("pipeline: dead-letter file writable again", {
        path: this.#where,
        failing_for_s: Math.round((performance.now() - this.#failingSince) / 1000),
        failed_attempts: this.#failedAttempts,
      });
      this.#failingSince = undefined;
      this.#failedAttempts = 0;
    }
  }

  /**
   * Reopen the file at its path (SIGHUP).
   *
   * @returns The path reopened, or null when dead letters go to no file.
   * @throws When the path cannot be opened.
   */
  async reopen(): Promise<string | null> {
    if (!(this.#file instanceof DeadLetterFile)) return null;
    await this.#file.reopen();
    return this.#file.path;
  }

  /** Close the file. */
  async close(): Promise<void> {
    await this.#file?.close();
  }

  #failed(record: DeadLetterRecord, err: unknown): void {
    this.#metrics?.deadLetterWriteErrors.inc();
    this.#failedAttempts++;
    const now = performance.now();
    if (this.#failingSince === undefined) {
      this.#failingSince = now;
      this.#lastLogAt = now;
      log.error(
        "pipeline: cannot write the dead-letter file; jobs that need it wait and are retried, " +
          "/readyz fails until a write succeeds",
        { path: this.#where, queue: record.queue, reason: record.reason, error: errorMessage(err) },
      );
    } else if (now - this.#lastLogAt >= STILL_FAILING_LOG_INTERVAL_MS) {
      this.#lastLogAt = now;
      log.error("pipeline: dead-letter file still cannot be written", {
        path: this.#where,
        failing_for_s: Math.round((now - this.#failingSince) / 1000),
        failed_attempts: this.#failedAttempts,
        error: errorMessage(err),
      });
    }
  }
}
