/**
 * The dead-letter file (D7): NDJSON, one record per undecodable payload or row MySQL rejected
 * deterministically. Every dead letter goes through one {@link DeadLetters}, which counts it once
 * written; a record that cannot be written leaves its job unacknowledged (a full disk stalls the
 * queues that need the file, and `/readyz` says so).
 *
 * @module
 */
import type { DeadLetterRecord, DeadLetterSink } from "../mysql/mod.ts";
import { errorMessage, getLogger } from "../log.ts";
import type { Metrics } from "../metrics/registry.ts";
import { deadline, settledWithin } from "../util/async.ts";

const log = getLogger("pipeline");

const encoder = new TextEncoder();
const NEWLINE = 0x0a;

/**
 * Why `path` lies outside what this process may write, or undefined: the compiled binary writes
 * only below its state directory, which no flag changes. Asked first, so the advice comes alone.
 */
export function outsideWritablePaths(path: string): string | undefined {
  if (Deno.permissions.querySync({ name: "write", path }).state === "granted") return undefined;
  return `this binary may write only below the state directory it was compiled for ` +
    `(docs/operations.md#compiled-permissions)`;
}

/** An error's message without Deno's `--allow-write` advice, which a compiled binary cannot take. */
export function fileErrorMessage(err: unknown): string {
  return errorMessage(err).replace(
    /, (run again with|specify the required permissions during compilation using) .*$/s,
    "",
  );
}

/** Whether the file of `size` bytes ends with a newline. */
async function endsWithNewline(file: Deno.FsFile, size: number): Promise<boolean> {
  await file.seek(size - 1, Deno.SeekMode.Start);
  const last = new Uint8Array(1);
  return (await file.read(last)) !== 1 || last[0] === NEWLINE;
}

/**
 * Appends records to an NDJSON file, serialised. Survives log rotation: a path that no longer names
 * the open file (device, inode) is opened again; O_APPEND copes with `copytruncate`. A write that
 * fails half-way is cut back off, so the file holds only whole records (as many as
 * `statusengine_dead_letters_total`); failing that, the next record starts on a new line, as it
 * does in a file opened with a torn last line (a worker killed mid-record).
 */
export class DeadLetterFile implements DeadLetterSink {
  readonly path: string;
  /** The open file and what it was opened as, to notice a rotation. */
  #open: { readonly file: Deno.FsFile; readonly info: Deno.FileInfo } | undefined;
  /** The file ends in the middle of a line (a write failed half-way). */
  #torn = false;
  #tail: Promise<void> = Promise.resolve();
  /** Records handed to {@link write} whose write has not ended yet. */
  #pending = 0;
  #closed = false;

  constructor(path: string) {
    this.path = path;
  }

  /** Open (create) the file now, so a bad path fails at start-up rather than on the first bad payload. */
  async open(): Promise<void> {
    await this.#current();
  }

  /** Append one record; rejects when the file cannot be (re)opened or written. */
  write(record: DeadLetterRecord): Promise<void> {
    if (this.#closed) return Promise.reject(new Error(`Dead-letter file "${this.path}" is closed`));
    const line = JSON.stringify({ time: new Date().toISOString(), ...record }) + "\n";
    this.#pending++;
    return this.#after(() => this.#append(line)).finally(() => this.#pending--);
  }

  /** After the pending writes, open the path again (SIGHUP); on failure the next write tries again. */
  reopen(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    return this.#after(async () => {
      this.#forget();
      await this.#current();
    });
  }

  /**
   * Finish pending writes and close the file. Idempotent. A write that never returns (a hung
   * mount) holds it only until `signal` aborts: its record is given up, and its job, not
   * acknowledged, comes again.
   */
  async close(signal?: AbortSignal): Promise<void> {
    this.#closed = true;
    if (signal !== undefined && !(await settledWithin(this.#tail, signal))) {
      throw new Error(
        `Dead-letter file "${this.path}" does not answer: ${this.#pending} record(s) given up, ` +
          "their jobs were not acknowledged and are redelivered",
      );
    }
    await this.#tail;
    this.#forget();
  }

  /** Run `step` once everything handed over before it has ended. */
  #after(step: () => Promise<void>): Promise<void> {
    const next = this.#tail.then(step);
    this.#tail = next.catch(() => {});
    return next;
  }

  #forget(): void {
    this.#open?.file.close();
    this.#open = undefined;
  }

  async #append(line: string): Promise<void> {
    try {
      const file = await this.#current();
      const bytes = encoder.encode(this.#torn ? "\n" + line : line);
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
   * Remove what a failed write left, or else remember whether the file ends mid-line. Cut back,
   * the file ends as before the write: `#torn` keeps its value (an earlier uncut torn part stays).
   */
  async #cutBack(file: Deno.FsFile, start: number, endsMidLine: boolean): Promise<void> {
    try {
      await file.truncate(start);
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
    if (this.#open !== undefined) {
      const { file, info } = this.#open;
      const now = await Deno.stat(this.path).catch((err: unknown) => {
        if (err instanceof Deno.errors.NotFound) return undefined;
        throw err;
      });
      if (now?.dev === info.dev && now.ino === info.ino) return file;
      this.#forget();
      log.info("pipeline: dead-letter file was moved or removed, opening the path again", {
        path: this.path,
      });
    }
    // Readable too, to look at its last byte: writes still go to the end (O_APPEND).
    const file = await Deno.open(this.path, { read: true, append: true, create: true });
    try {
      const info = await file.stat();
      // A write to a pipe nobody reads waits for ever: the jobs that need a dead letter would
      // hang without a word, and the shutdown with them. Refused, a write fails and is retried.
      if (info.isFifo) {
        throw new Error("it is a named pipe (FIFO), whose writes wait for a reader; use a file");
      }
      // A worker killed mid-record, or a part that could not be cut back, left a torn last line.
      this.#torn = info.isFile && info.size > 0 && !(await endsWithNewline(file, info.size));
      this.#open = { file, info };
      return file;
    } catch (err: unknown) {
      file.close();
      throw err;
    }
  }
}

/** The counters {@link DeadLetters} keeps. */
export type DeadLetterMetrics = Pick<Metrics, "deadLetters" | "deadLetterWriteErrors">;

const STILL_FAILING_LOG_INTERVAL_MS = 60_000;

/** A write takes milliseconds; one without an answer for this long (a hung mount) counts as failed. */
const WRITE_ANSWER_MS = 5_000;

/**
 * The one path every dead letter takes: written (when a file is configured), then counted. A
 * failed write is counted, logged once per failing period (then every minute), and makes
 * {@link writable} false until a write succeeds.
 */
export class DeadLetters implements DeadLetterSink, AsyncDisposable {
  readonly #file: DeadLetterFile | null;
  readonly #metrics: DeadLetterMetrics | undefined;
  #failingSince: number | undefined;
  #failedAttempts = 0;
  #lastLogAt = 0;

  /** `file` is null when dead letters are only counted and logged. */
  constructor(file: DeadLetterFile | null, metrics?: DeadLetterMetrics) {
    this.#file = file;
    this.#metrics = metrics;
  }

  /** False from a failed write until the next successful one (`/readyz`). */
  get writable(): boolean {
    return this.#failingSince === undefined;
  }

  /** Write and count one record; a rejection means the caller must not acknowledge the job. */
  async write(record: DeadLetterRecord): Promise<void> {
    let reported = false;
    try {
      const written = this.#file?.write(record);
      using limit = deadline(WRITE_ANSWER_MS);
      if (written !== undefined && !(await settledWithin(written, limit.signal))) {
        // Reported as failed, and still waited for: the job must not be acknowledged before its
        // record is on disk, and another attempt would only queue behind this one.
        reported = true;
        this.#failed(record, new Error(`no answer within ${WRITE_ANSWER_MS} ms, still waiting`));
      }
      await written;
    } catch (err: unknown) {
      if (!reported) this.#failed(record, err);
      throw err;
    }
    this.#metrics?.deadLetters.inc({ queue_name: record.queue, reason: record.reason });
    if (this.#failingSince !== undefined) {
      log.info("pipeline: dead-letter file writable again", {
        path: this.#file?.path,
        failing_for_s: Math.round((performance.now() - this.#failingSince) / 1000),
        failed_attempts: this.#failedAttempts,
      });
      this.#failingSince = undefined;
      this.#failedAttempts = 0;
    }
  }

  /** Reopen the file at its path (SIGHUP); null when dead letters go to no file. */
  async reopen(): Promise<string | null> {
    await this.#file?.reopen();
    return this.#file?.path ?? null;
  }

  async close(signal?: AbortSignal): Promise<void> {
    await this.#file?.close(signal);
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  #failed(record: DeadLetterRecord, err: unknown): void {
    this.#metrics?.deadLetterWriteErrors.inc();
    this.#failedAttempts++;
    const now = performance.now();
    const path = this.#file?.path;
    if (this.#failingSince === undefined) {
      this.#failingSince = now;
      this.#lastLogAt = now;
      log.error(
        "pipeline: cannot write the dead-letter file; jobs that need it wait and are retried, " +
          "/readyz fails until a write succeeds",
        { path, queue: record.queue, reason: record.reason, error: errorMessage(err) },
      );
    } else if (now - this.#lastLogAt >= STILL_FAILING_LOG_INTERVAL_MS) {
      this.#lastLogAt = now;
      log.error("pipeline: dead-letter file still cannot be written", {
        path,
        failing_for_s: Math.round((now - this.#failingSince) / 1000),
        failed_attempts: this.#failedAttempts,
        error: errorMessage(err),
      });
    }
  }
}
