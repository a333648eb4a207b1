/**
 * The `dead-letters` command (docs/running.md#dead-letters): `summary` counts the records of
 * the dead-letter file (D7) by table (or queue) and reason; `replay` hands every record to the
 * daemon's pipeline, so a replayed row lands where a redelivered job would have put it.
 *
 * @module
 */
import type { Job } from "../consumer/contract.ts";
import {
  BATCHED_TABLE_NAMES,
  type BatchedTableName,
  isBatchedTableName,
  isQueueName,
  QUEUES,
  type Row,
} from "../events/mod.ts";
import {
  adjustRow,
  connectMysql,
  createWriterPool,
  type DeadLetterRecord,
  type DeadLetterSink,
  describeMysqlConnectFailure,
  endMysql,
  identicalRowsStatement,
  isStatusTable,
  isTableName,
  JobTracker,
  MysqlHosts,
  mysqlOptionsFromUrl,
  poolExecutor,
  runWithRetry,
  type SqlExecutor,
  TABLES,
  waitingCannotFix,
} from "../mysql/mod.ts";
import { Pipeline } from "../pipeline/pipeline.ts";
import { DeadLetterFile, outsideWritablePaths } from "../pipeline/dead_letter.ts";
import { dirname } from "node:path";
import { createJobHandler, type RowWriters } from "../pipeline/handler.ts";
import { errorMessage, getLogger } from "../log.ts";
import { aborted } from "../util/async.ts";
import type { Io } from "./io.ts";
import { redactText, redactUrl } from "../util/redact.ts";
import { INTERRUPTED_EXIT_CODE, readJsonLines, USAGE_EXIT_CODE } from "./publish.ts";

const log = getLogger("cli");

interface DeadLettersOptions {
  readonly action: "summary" | "replay";
  /** The file named on the command line. */
  readonly file?: string | undefined;
  /** What `summary` reads when no file is named; empty when disabled. */
  readonly deadLetterFile: string;
  readonly json: boolean;
  /** The worker's settings the replay writes with: */
  readonly mysqlUrl: string;
  readonly batchSize: number;
  readonly nodeName: string;
  readonly statusMaxAgeSeconds: number;
  readonly perfdataToMysql: boolean;
  /** Between progress lines of a replay; default 2 s. */
  readonly progressIntervalMs?: number;
  /** The clock that names the file of records left over (tests). */
  readonly now?: () => Date;
}

type StoredRecord = DeadLetterRecord & { readonly time?: string };

/** Malformed lines listed by number in the output; the rest are only counted. */
const MALFORMED_SHOWN = 10;

/**
 * The records of a dead-letter file in file order, until `signal` aborts; blank lines are
 * skipped, malformed ones counted in `into` and the first {@link MALFORMED_SHOWN} named.
 */
async function* readRecords(
  path: string,
  into: { malformed: number; readonly malformedLines: string[] },
  signal?: AbortSignal,
): AsyncGenerator<{ readonly line: number; readonly record: StoredRecord }> {
  for await (const item of readJsonLines(path)) {
    if (signal?.aborted) return;
    const problem = "error" in item ? `not JSON: ${item.error}` : recordProblem(item.doc);
    if (problem === undefined && "doc" in item) {
      yield { line: item.number, record: item.doc as StoredRecord };
    } else if (into.malformed++ < MALFORMED_SHOWN) {
      into.malformedLines.push(`line ${item.number}: ${problem}`);
    }
  }
}

function recordProblem(doc: unknown): string | undefined {
  if (typeof doc !== "object" || doc === null || Array.isArray(doc)) return "not a JSON object";
  const r = doc as Record<string, unknown>;
  for (const field of ["queue", "reason"]) {
    if (typeof r[field] !== "string") return `no "${field}" text`;
  }
  const hasRow = typeof r["table"] === "string" && typeof r["row"] === "object" &&
    r["row"] !== null && !Array.isArray(r["row"]);
  if (!hasRow && typeof r["payload"] !== "string") return `neither "table" and "row" nor "payload"`;
  return undefined;
}

/** The records of one table (null: payloads of the queue) and reason. */
interface Group {
  readonly table: string | null;
  readonly queue: string;
  readonly reason: string;
  count: number;
}

/** What `summary` prints (`--json` as is). */
interface Summary {
  readonly file: string;
  records: number;
  oldest: string | null;
  newest: string | null;
  groups: Group[];
  malformed: number;
  readonly malformedLines: string[];
}

async function summarise(path: string): Promise<Summary> {
  const groups = new Map<string, Group>();
  const s: Summary = {
    file: path,
    records: 0,
    oldest: null,
    newest: null,
    groups: [],
    malformed: 0,
    malformedLines: [],
  };
  for await (const { record: r } of readRecords(path, s)) {
    s.records++;
    const table = r.row === undefined ? null : r.table ?? null;
    const key = JSON.stringify([table, r.queue, r.reason]);
    const group = groups.get(key);
    if (group === undefined) groups.set(key, { table, queue: r.queue, reason: r.reason, count: 1 });
    else group.count++;
    // ISO-8601 times in UTC, as the worker writes them, order as text.
    if (typeof r.time === "string") {
      if (s.oldest === null || r.time < s.oldest) s.oldest = r.time;
      if (s.newest === null || r.time > s.newest) s.newest = r.time;
    }
  }
  s.groups = [...groups.values()].sort((a, b) =>
    b.count - a.count || (a.table ?? a.queue).localeCompare(b.table ?? b.queue)
  );
  return s;
}

function printSummary(s: Summary, io: Io): void {
  io.out(`file: ${s.file}`);
  io.out(`records: ${s.records}, malformed lines: ${s.malformed}`);
  if (s.records > 0) io.out(`oldest: ${s.oldest ?? "unknown"}, newest: ${s.newest ?? "unknown"}`);
  if (s.groups.length > 0) {
    const rows = [
      ["table", "reason", "records"] as const,
      ...s.groups.map((g) => [g.table ?? `payload of ${g.queue}`, g.reason, `${g.count}`] as const),
    ];
    const w1 = Math.max(...rows.map((r) => r[0].length));
    const w2 = Math.max(...rows.map((r) => r[1].length));
    for (const [table, reason, n] of rows) {
      io.out(`  ${table.padEnd(w1)}  ${reason.padEnd(w2)}  ${n}`);
    }
  }
  for (const m of s.malformedLines) io.out(`malformed ${m}`);
  if (s.malformed > s.malformedLines.length) {
    io.out(`malformed: ${s.malformed - s.malformedLines.length} more lines`);
  }
}

/** Why a record is not replayed; copied to the file of records left over. */
function notReplayable(r: StoredRecord): string | undefined {
  if (r.row !== undefined) {
    const table = r.table ?? "";
    if (!isTableName(table)) return `unknown table "${table}"`;
    if (isStatusTable(table)) {
      return "a status snapshot: the next one of its object supersedes it, and replaying it " +
        "could bring back the row of an object a core restart removed since";
    }
    if (!isBatchedTableName(table)) {
      return "a downtime statement: the record does not say whether it inserted, updated or " +
        "deleted, and downtimes must be applied in the order the core emitted them";
    }
    return undefined;
  }
  if (!isQueueName(r.queue)) return `unknown queue "${r.queue}"`;
  if (r.bytes !== undefined) return "the record holds only the first KiB of the payload";
  if (QUEUES[r.queue].output === "core_restart") {
    return "a core restart from the past would sweep the current status rows";
  }
  return undefined;
}

/** The counts of a replay (`--json` as is). */
interface ReplayResult {
  readonly file: string;
  /** Where the records left over went; null when there were none. */
  leftOver: string | null;
  records: number;
  /** Records handed to the pipeline (those that failed again included). */
  submitted: number;
  /** Rows of the two keyless tables found in their table already (replayed before). */
  alreadyPresent: number;
  failedAgain: number;
  /** Records copied to the left-over file unreplayed, by why. */
  notReplayable: Record<string, number>;
  malformed: number;
  malformedLines: string[];
  interrupted: boolean;
}

/** How many replayed records may wait for their commit at once (a few batches per table). */
const IN_FLIGHT = 2_000;

/**
 * The pipeline's writers with one filter in front: a row of a keyless table (`insert` write
 * mode) that the table holds already is settled as committed, not written again, and counted in
 * `found`. The k-th copy of a row is written only when the table held fewer than k before this
 * replay: a row the original job produced twice is written twice, and a second replay of the
 * file writes neither. The lookup waits for MySQL as the writers do, until `signal` aborts.
 */
function replayWriters(
  pipeline: Pipeline,
  executor: SqlExecutor,
  found: { alreadyPresent: number },
  signal: AbortSignal,
): RowWriters {
  const seen = new Map<string, { inTable: number; inFile: number }>();
  // Lookups one at a time, so two jobs holding the same row count it once.
  let tail: Promise<unknown> = Promise.resolve();
  const present = (table: BatchedTableName, row: Row): Promise<boolean> => {
    const next = tail.then(async () => {
      const t = TABLES[table];
      const { values } = adjustRow(t, row);
      const key = `${table}\u0000${JSON.stringify(values)}`;
      let entry = seen.get(key);
      if (entry === undefined) {
        const result = await runWithRetry(
          () => executor.run(identicalRowsStatement(t), values),
          { table, availability: pipeline.availability, signal },
        );
        entry = { inTable: Number(result.rows[0]?.["n"] ?? 0), inFile: 0 };
        seen.set(key, entry);
      }
      entry.inFile++;
      return entry.inFile <= entry.inTable;
    });
    tail = next.catch(() => {});
    return next;
  };
  return Object.fromEntries(
    BATCHED_TABLE_NAMES.map((table) => {
      const writer = pipeline.writers[table];
      if (TABLES[table].writeMode !== "insert") return [table, writer];
      return [table, {
        add: async (rows: readonly Row[], owner: JobTracker, signal?: AbortSignal) => {
          const missing: Row[] = [];
          for (const row of rows) {
            if (await present(table, row)) {
              found.alreadyPresent++;
              owner.committed();
            } else {
              missing.push(row);
            }
          }
          if (missing.length > 0) await writer.add(missing, owner, signal);
        },
      }];
    }),
  ) as unknown as RowWriters;
}

/**
 * Why the records left over could not be written beside the replayed file, or undefined when
 * they can: found out before the first record is replayed, never after the work is committed.
 */
async function leftOverProblem(
  file: string,
  target: string,
  deadLetterFile: string,
): Promise<string | undefined> {
  const outside = outsideWritablePaths(target);
  if (outside !== undefined) {
    // The worker's own file lies in the state directory; a replay beside it may write.
    const stateDir = deadLetterFile === "" ? "the state directory" : `"${dirname(deadLetterFile)}"`;
    return `what fails again would be left in "${target}", which this process may not write: ` +
      `${outside}. Move the file aside within ${stateDir} instead (mv "${file}" into it under ` +
      `a name of its own) and replay it there; nothing was replayed`;
  }
  return await Deno.stat(dirname(target)).then(
    () => undefined,
    (err: unknown) =>
      `what fails again would be left in "${target}", but its directory cannot be used: ` +
      `${errorMessage(err)}; nothing was replayed`,
  );
}

async function replay(
  options: DeadLettersOptions & { readonly file: string; readonly target: string },
  io: Io,
  signal: AbortSignal,
): Promise<ReplayResult> {
  const result: ReplayResult = {
    file: options.file,
    leftOver: null,
    records: 0,
    submitted: 0,
    alreadyPresent: 0,
    failedAgain: 0,
    notReplayable: {},
    malformed: 0,
    malformedLines: [],
    interrupted: false,
  };
  const { target } = options;
  // Opened on the first record left over: a replay where everything went in leaves no file.
  const leftOver = new DeadLetterFile(target);
  // A row that fails again waits in its writer until the file takes it: said once, not silent.
  let leftOverFailing = false;
  const leave = async (record: DeadLetterRecord) => {
    await leftOver.write(record).catch((err: unknown) => {
      if (!leftOverFailing) {
        log.error(
          "dead-letters replay: cannot write the file of records left over; a row that failed " +
            "again waits until it can be written (interrupt the replay to stop it)",
          { file: target, error: errorMessage(err) },
        );
      }
      leftOverFailing = true;
      throw err;
    });
    if (leftOverFailing) {
      log.info("dead-letters replay: the file of records left over can be written again", {
        file: target,
      });
    }
    leftOverFailing = false;
    result.leftOver = target;
  };
  const again: DeadLetterSink = {
    write: async (record) => {
      await leave(record);
      result.failedAgain++;
    },
    close: () => Promise.resolve(),
  };
  // Several hosts in the URL: the first that answers, as the daemon (docs/running.md#mysql-hosts),
  // not the first listed, which may be the dead one the daemon left.
  const urlOptions = mysqlOptionsFromUrl(options.mysqlUrl);
  const hosts = new MysqlHosts(urlOptions, { failbackAfterMs: 0 });
  await hosts.check();
  const pool = createWriterPool(urlOptions, 4, hosts);
  const executor = poolExecutor(pool, { onUnavailable: () => hosts.suspect() });
  // What the writers and the handler are told alike, as the daemon tells them.
  const shared = {
    deadLetters: again,
    nodeName: options.nodeName,
    statusMaxAgeSeconds: options.statusMaxAgeSeconds,
    openItcockpit: false,
    perfdataToMysql: options.perfdataToMysql,
  };
  const pipeline = new Pipeline({
    ...shared,
    executor,
    batchSize: options.batchSize,
    statsIntervalMs: 0,
  });
  const writers = replayWriters(pipeline, executor, result, signal);
  // The daemon's handler over the filtered writers: payloads are decoded as a redelivered job.
  const handler = createJobHandler({
    ...shared,
    writers,
    downtimes: pipeline.downtimes,
    statusCleaner: pipeline.statusCleaner,
    leftOverFile: target,
  });
  const pending = new Set<Promise<void>>();
  const stopped = aborted(signal);
  /** Until at most `room` records wait for their commit; false when interrupted. */
  const settle = async (room: number): Promise<boolean> => {
    while (pending.size > room) {
      await Promise.race([...pending, stopped]);
      if (signal.aborted) return false;
    }
    return true;
  };
  // A rejection (a bug, the pool gone) ends the replay once the loop sees it; never unobserved.
  // One after an interrupt is the interrupt (a held downtime statement gives up at once).
  let failure: { readonly error: unknown } | undefined;
  const track = (p: Promise<void>) => {
    const tracked: Promise<void> = p.then(() => {}, (error: unknown) => {
      if (!signal.aborted) failure ??= { error };
    }).finally(() => pending.delete(tracked));
    pending.add(tracked);
  };
  const progressMs = options.progressIntervalMs ?? 2_000;
  let nextProgress = performance.now() + progressMs;
  try {
    for await (const { line, record: r } of readRecords(options.file, result, signal)) {
      result.records++;
      const why = notReplayable(r);
      if (why !== undefined) {
        result.notReplayable[why] = (result.notReplayable[why] ?? 0) + 1;
        await leave(r);
      } else if (r.row !== undefined) {
        const tracker = new JobTracker(r.queue, 1);
        try {
          await writers[r.table as BatchedTableName].add([r.row as Row], tracker, signal);
        } catch (err: unknown) {
          if (signal.aborted) break;
          throw err;
        }
        track(tracker.done);
        result.submitted++;
      } else {
        const job: Job = {
          queue: r.queue,
          server: "replay",
          handle: `line ${line}`,
          unique: "",
          payload: new TextEncoder().encode(r.payload ?? ""),
          receivedAt: Date.now(),
        };
        // Downtime events are applied one at a time in file order, after everything before.
        const inOrder = QUEUES[r.queue as keyof typeof QUEUES].output === "downtimes";
        if (inOrder && !(await settle(0))) break;
        track(handler(job, signal));
        result.submitted++;
        if (inOrder && !(await settle(0))) break;
      }
      if (!(await settle(IN_FLIGHT))) break;
      if (failure !== undefined) throw failure.error;
      const t = performance.now();
      if (t >= nextProgress) {
        nextProgress = t + progressMs;
        // stdout stays one JSON document with --json.
        (options.json ? io.err : io.out)(
          `progress: ${result.records} records read, ${result.submitted} submitted, ` +
            `${result.failedAgain} failed again, ${notReplayableCount(result)} not replayable`,
        );
      }
    }
    await settle(0);
    if (failure !== undefined) throw failure.error;
    result.interrupted = signal.aborted;
  } finally {
    // Everything replayed is committed (or the replay was interrupted: what is held is given up).
    await pipeline.close(signal.aborted ? 0 : 10_000);
    await leftOver.close();
    await hosts.stop();
    await pool.end().catch(() => {});
  }
  return result;
}

function notReplayableCount(r: ReplayResult): number {
  return Object.values(r.notReplayable).reduce((a, b) => a + b, 0);
}

function printReplay(r: ReplayResult, io: Io): void {
  io.out(
    `replay of ${r.file}: ${r.records} records, ${r.submitted} submitted, ` +
      `${r.alreadyPresent} already present, ${r.failedAgain} failed again, ` +
      `${notReplayableCount(r)} not replayable, ${r.malformed} malformed lines` +
      (r.interrupted ? " (interrupted: run it again, replaying twice writes nothing twice)" : ""),
  );
  for (const [why, n] of Object.entries(r.notReplayable)) io.out(`not replayed (${n}): ${why}`);
  for (const m of r.malformedLines) io.out(`malformed ${m}`);
  if (r.leftOver !== null) {
    io.out(`records left over (failed again or not replayable): ${r.leftOver}`);
  }
}

/**
 * Run the `dead-letters` command; exit codes as docs/running.md#dead-letters says: `summary` 0
 * once the file is read, malformed lines included; a replay refused before it starts (the file
 * unreadable, no room for the records left over, another replay of it running) 1.
 */
export async function runDeadLettersCommand(
  options: DeadLettersOptions,
  io: Io,
  signal: AbortSignal,
): Promise<number> {
  if (options.action === "summary") {
    const file = options.file ?? options.deadLetterFile;
    if (file === "") {
      io.err(
        "statusengine-worker: no dead-letter file: --dead-letter-file is empty (disabled); " +
          "name the file: dead-letters summary FILE",
      );
      return USAGE_EXIT_CODE;
    }
    const summary = await summarise(file);
    if (options.json) io.out(JSON.stringify(summary));
    else printSummary(summary, io);
    return 0;
  }
  if (options.file === undefined) {
    io.err(
      "statusengine-worker: dead-letters replay needs the file named: move the worker's file " +
        "aside first (the worker keeps appending to it), then dead-letters replay FILE",
    );
    return USAGE_EXIT_CODE;
  }
  // Stamped with the replay's time, so a second replay never appends to the first one's left-overs.
  const stamp = (options.now ?? (() => new Date()))().toISOString().replace(/[-:]/g, "");
  const target = `${options.file}.replay-${stamp}`;
  const problem = await leftOverProblem(options.file, target, options.deadLetterFile);
  if (problem !== undefined) {
    io.err(`statusengine-worker: dead-letters replay: ${problem}`);
    return 1;
  }
  // Two replays of one file at once would both find a keyless row missing and both write it.
  using lock = await Deno.open(options.file, { read: true });
  if (!(await lock.tryLock(true))) {
    io.err(
      `statusengine-worker: dead-letters replay: another replay of "${options.file}" is ` +
        "running; nothing was replayed",
    );
    return 1;
  }
  // The replay waits for a MySQL that cannot take writes; a refused login or a missing database
  // never passes by waiting, so it is said at once in run's words (docs/running.md#mysql-hosts).
  const server = mysqlOptionsFromUrl(options.mysqlUrl);
  const refused = await connectMysql(server, { timeoutMs: 10_000 })
    .then(({ connection }) => endMysql(connection), (err: unknown) => err);
  if (waitingCannotFix(refused)) {
    const why = describeMysqlConnectFailure(refused, redactUrl(options.mysqlUrl));
    io.err(redactText(`statusengine-worker: dead-letters replay: ${why}`, server.password));
    return 1;
  }
  const result = await replay({ ...options, file: options.file, target }, io, signal);
  if (options.json) io.out(JSON.stringify(result));
  else printReplay(result, io);
  if (result.interrupted) return INTERRUPTED_EXIT_CODE;
  return result.failedAgain + notReplayableCount(result) + result.malformed === 0 ? 0 : 1;
}
