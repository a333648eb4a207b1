/**
 * Several bulk writers for one table (docs/writers.md#writers-per-table): two connections into
 * one table wrote 1.4–1.5 × the rows of one. A row goes to the writer of a hash of its primary
 * key as MySQL compares it, so the rows of one key keep their hand-off order; a table without a
 * natural key hands each job to the writer holding the fewest rows.
 *
 * @module
 */
import type { Table } from "./catalogue.ts";
import { TableWriter, type TableWriterOptions } from "./writer.ts";
import { truncateToCodePoints } from "./values.ts";
import type { Row } from "../events/mod.ts";
import type { JobTracker } from "./job_tracker.ts";
import { abortable } from "../util/async.ts";

export interface ShardedWriterOptions extends TableWriterOptions {
  /** Writers (statements in flight at once) for the table, 1..8 (validated by the settings). */
  readonly writers: number;
}

/** What a table's writers hold, for the consumer's in-flight window. */
export interface WriterLoad {
  /**
   * Rows of the statements in flight over the batch size, averaged over the writers: 1 = every
   * writer sends full batches back to back; below 1 more rows in flight would fill them better.
   */
  readonly statementFill: number;
  /** Hand-offs (one job's rows for one writer) still waiting for buffer space, all writers. */
  readonly waiting: number;
  readonly writers: number;
  /** How long the oldest statement in flight has been running, ms; 0 when none is. */
  readonly statementAgeMs: number;
  /** The longest of the writers' typical statement durations, ms; 0 before the first. */
  readonly typicalStatementMs: number;
}

interface KeyColumn {
  readonly name: string;
  /** Character limit of a text column; undefined for a number column. */
  readonly limit: number | undefined;
}

export class ShardedWriter {
  readonly table: Table;
  readonly #batchSize: number;
  readonly #shards: readonly TableWriter[];
  /** Per writer: settles when the jobs handed over so far are buffered (FIFO hand-off). */
  readonly #tails: (Promise<void> | undefined)[];
  #waiting = 0;
  /** Columns whose values route a row; empty = the table has no natural key. */
  readonly #key: readonly KeyColumn[];
  #rotate = 0;

  constructor(options: ShardedWriterOptions) {
    this.table = options.table;
    this.#batchSize = options.batchSize;
    const { writers, ...one } = options;
    this.#shards = Array.from(
      { length: writers },
      (_, i) => new TableWriter(writers === 1 ? one : { ...one, shard: `${i + 1}/${writers}` }),
    );
    this.#tails = new Array(writers).fill(undefined);
    this.#key = keyColumns(options.table);
  }

  /** The writers (tests, shutdown summaries). */
  get shards(): readonly TableWriter[] {
    return this.#shards;
  }

  /** {@link TableWriter.buffered} of every writer. */
  get buffered(): number {
    return this.#shards.reduce((n, s) => n + s.buffered, 0);
  }

  /** Rows not yet committed: buffered, and in the statements sent or held for a retry. */
  get held(): number {
    return this.#shards.reduce((n, s) => n + s.buffered + s.statementRows, 0);
  }

  get totalRows(): number {
    return this.#shards.reduce((n, s) => n + s.totalRows, 0);
  }

  get load(): WriterLoad {
    const now = performance.now();
    let rows = 0;
    let age = 0;
    let typical = 0;
    for (const s of this.#shards) {
      rows += s.statementRows;
      const since = s.statementSince;
      if (since !== undefined) age = Math.max(age, now - since);
      typical = Math.max(typical, s.typicalStatementMs);
    }
    return {
      statementFill: rows / (this.#shards.length * this.#batchSize),
      waiting: this.#waiting,
      writers: this.#shards.length,
      statementAgeMs: age,
      typicalStatementMs: typical,
    };
  }

  /** Hand rows of one job to the writers of their keys (see {@link TableWriter.add}). */
  add(rows: readonly Row[], owner: JobTracker, signal?: AbortSignal): Promise<void> {
    const n = this.#shards.length;
    if (n === 1) return this.#handOff(0, rows, owner, signal);
    if (this.#key.length === 0) return this.#handOff(this.#emptiest(), rows, owner, signal);
    const parts: Row[][] = Array.from({ length: n }, () => []);
    for (const row of rows) (parts[this.shardOf(row)] as Row[]).push(row);
    const handed: Promise<void>[] = [];
    for (let i = 0; i < n; i++) {
      const part = parts[i] as Row[];
      if (part.length > 0) handed.push(this.#handOff(i, part, owner, signal));
    }
    return handed.length === 1 ? handed[0] as Promise<void> : Promise.all(handed).then(() => {});
  }

  /** Commit everything buffered before this call, in every writer, within `signal`. */
  async flush(signal?: AbortSignal): Promise<void> {
    await Promise.all(this.#shards.map((s) => s.flush(signal)));
  }

  /** {@link TableWriter.withPaused} for every writer of the table at once. */
  withPaused<T>(fn: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    const pause = (i: number): Promise<T> => {
      const shard = this.#shards[i];
      return shard === undefined ? fn() : shard.withPaused(() => pause(i + 1), signal);
    };
    return pause(0);
  }

  /** {@link TableWriter.close} for every writer at once (docs/writers.md#shutdown-flush). */
  async close(signal: AbortSignal): Promise<void> {
    await Promise.all(this.#shards.map((s) => s.close(signal)));
  }

  /** Log each writer's interval summary (docs/logging.md#summaries). */
  logStats(final = false): void {
    for (const s of this.#shards) s.logStats(final);
  }

  /**
   * Hand rows to writer `i` once the jobs handed to it before are buffered: a job woken for
   * buffer space that found it taken again would queue behind jobs never woken, reordering a key.
   * The caller stops waiting when `signal` aborts; the queue behind it does not.
   */
  #handOff(
    i: number,
    rows: readonly Row[],
    owner: JobTracker,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    const shard = this.#shards[i] as TableWriter;
    const before = this.#tails[i];
    // Nobody waits before this job: hand over at once (and synchronously, like a single writer).
    const run = before === undefined
      ? shard.add(rows, owner, signal)
      : before.then(() => (signal?.aborted ? undefined : shard.add(rows, owner, signal)));
    const tail = run.then(noop, noop);
    this.#tails[i] = tail;
    this.#waiting++;
    void tail.then(() => {
      this.#waiting--;
      if (this.#tails[i] === tail) this.#tails[i] = undefined;
    });
    if (before === undefined || signal === undefined) return run;
    return abortable(run, signal);
  }

  /** The writer (index into {@link shards}) of a row of a table with a natural key. */
  shardOf(row: Row): number {
    let h = 0x811c9dc5;
    for (const column of this.#key) {
      const raw = row[column.name];
      if (column.limit === undefined) {
        // MySQL compares 5, 5.0 and '5' equal in an integer column.
        const n = typeof raw === "number" ? raw : Number(raw ?? 0);
        h = hashNumber(h, Number.isFinite(n) ? Math.round(n) : n);
      } else {
        h = hashText(h, typeof raw === "string" ? raw : String(raw ?? ""), column.limit);
      }
      h ^= 0x1f;
      h = Math.imul(h, 0x01000193);
    }
    return (h >>> 0) % this.#shards.length;
  }

  #emptiest(): number {
    const n = this.#shards.length;
    const start = this.#rotate;
    this.#rotate = (start + 1) % n;
    let best = start;
    let least = Infinity;
    for (let k = 0; k < n; k++) {
      const i = (start + k) % n;
      const s = this.#shards[i] as TableWriter;
      const held = s.buffered + s.statementRows;
      if (held < least) {
        least = held;
        best = i;
      }
    }
    return best;
  }
}

function noop(): void {}

/** FNV-1a step over the UTF-16 units of `text[0, end)`. */
function hashUnits(h: number, text: string, end: number): number {
  for (let i = 0; i < end; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h;
}

/**
 * Hash a text key the way MySQL compares it (case-insensitive, trailing spaces ignored, cut to
 * the column), without building a new string for the common case: ASCII that fits the column.
 */
function hashText(h: number, text: string, limit: number): number {
  let end = text.length;
  let ascii = end <= limit;
  for (let i = 0; ascii && i < end; i++) if (text.charCodeAt(i) >= 0x80) ascii = false;
  if (!ascii) {
    const folded = truncateToCodePoints(text, limit).toLowerCase().trimEnd();
    return hashUnits(h, folded, folded.length);
  }
  // The same as the general case for ASCII: trimEnd's whitespace, A-Z folded to a-z.
  while (end > 0) {
    const c = text.charCodeAt(end - 1);
    if (c !== 0x20 && (c < 0x09 || c > 0x0d)) break;
    end--;
  }
  for (let i = 0; i < end; i++) {
    const c = text.charCodeAt(i);
    h ^= c >= 0x41 && c <= 0x5a ? c + 0x20 : c;
    h = Math.imul(h, 0x01000193);
  }
  return h;
}

/** Hash a number key by its value (no decimal text): equal numbers, equal hash. */
function hashNumber(h: number, n: number): number {
  if (Number.isSafeInteger(n)) {
    // Low and high 32 bits; -0 is 0.
    const low = n | 0;
    const high = Math.floor(n / 0x100000000) | 0;
    h ^= low;
    h = Math.imul(h, 0x01000193);
    h ^= high;
    return Math.imul(h, 0x01000193);
  }
  const text = String(n);
  return hashUnits(h, text, text.length);
}

/** The columns that route a row: the primary key, when the row supplies all of it. */
function keyColumns(table: Table): KeyColumn[] {
  const inserted = new Set(table.insertColumns);
  if (table.primaryKey.length === 0 || !table.primaryKey.every((c) => inserted.has(c))) return [];
  return table.primaryKey.map((name) => ({ name, limit: table.charLimits[name] }));
}
