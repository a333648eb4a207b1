/**
 * What the writers need of the dead-letter file (D7), declared below them so that they depend on
 * nothing above; the pipeline's dead-letter file implements it.
 *
 * @module
 */

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

export interface DeadLetterSink {
  /**
   * Resolves once the record is on disk, before the job it belongs to is acknowledged.
   *
   * @throws When the file cannot be written; the caller must not acknowledge the job.
   */
  write(record: DeadLetterRecord): Promise<void>;
  /**
   * Finish the pending writes and close. When `signal` aborts first, stop waiting for them.
   *
   * @throws When `signal` aborted first, naming the records given up.
   */
  close(signal?: AbortSignal): Promise<void>;
}
