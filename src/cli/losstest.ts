/**
 * The `losstest` subcommand (docs/operations.md#losstest): proves that stopping the worker under load
 * loses nothing (D1). `publish` leaves a backlog of numbered host-check events at gearmand,
 * the operator stops and restarts the worker while it drains, and `verify` finds every
 * sequence number that never reached `statusengine_hostchecks`; `cleanup` removes the run.
 *
 * The pure pieces (marker format, run-id check, tallying and range compression) are exported
 * for the unit tests and for fault-injection tests that drive a worker themselves.
 *
 * @module
 */
import {
  connectMysql,
  countLosstestMarkers,
  deleteLosstestBatch,
  endMysql,
  type MysqlConnection,
  mysqlOptionsFromUrl,
  redactUrl,
  selectLosstestRunSizes,
} from "../mysql/mod.ts";
import { adminStatus } from "../gearman/admin.ts";
import { AmqpPublisher } from "../amqp/publisher.ts";
import type { QueueDeclareMode } from "../amqp/session.ts";
import { deadline } from "../util/async.ts";
import { redactText } from "../util/redact.ts";
import { errorMessage } from "../log.ts";
import { encodeEvent, type SyntheticEvent } from "../synthetic/mod.ts";
import { type Io, positiveIntegerProblem } from "./io.ts";
import {
  brokerTarget,
  INTERRUPTED_EXIT_CODE,
  type PublishItem,
  publishJobs,
  summaryLine,
  targetLabel,
  USAGE_EXIT_CODE,
} from "./publish.ts";

/** The three modes of the command. */
export type LosstestMode = "publish" | "verify" | "cleanup";

/** Options of the `losstest` command. */
export interface LosstestCommandOptions {
  /** What to do. */
  readonly mode: LosstestMode;
  /** Run id, the same in all three modes; see {@linkcode runIdProblem}. */
  readonly runId: string;
  /** Events published, and expected by `verify` (sequence numbers 0 … count − 1). */
  readonly count: number;
  /**
   * `count` was chosen by the caller (`--count`), not the default. `verify` then checks
   * it against the count the run's events carry; without it `verify` uses theirs, and
   * refuses when no event of the run has arrived. Default true.
   */
  readonly countGiven?: boolean;
  /** Job servers: `publish` submits to them round-robin, `verify` asks them for the backlog. */
  readonly gearmanAddr: readonly string[];
  /** Publish to, and report the backlog of, this RabbitMQ broker instead (`--consumer rabbitmq`). */
  readonly rabbitmqUrl?: string;
  /** Declare the RabbitMQ queue durable (`--rabbitmq-durable-queues`); default false. */
  readonly rabbitmqDurableQueues?: boolean;
  /** `--rabbitmq-declare`; default `declare`. */
  readonly rabbitmqDeclare?: QueueDeclareMode;
  /** MySQL URL of the worker's database (`verify`, `cleanup`). */
  readonly mysqlUrl: string;
  /** Events per job; default {@linkcode LOSSTEST_EVENTS_PER_JOB}. */
  readonly eventsPerJob?: number;
}

/** The queue the test publishes to. */
export const LOSSTEST_QUEUE = "statusngin_hostchecks";
/** The table the markers land in (`hostname`, the first primary-key column). */
export const LOSSTEST_TABLE = "statusengine_hostchecks";
/** Events per job unless told otherwise (docs/operations.md#losstest). */
const LOSSTEST_EVENTS_PER_JOB = 100;
/** At most this many missing ranges are printed. */
const MAX_PRINTED_RANGES = 20;
/** Rows deleted per statement by `cleanup`. */
const CLEANUP_BATCH = 5_000;

const VERIFY_LIMIT_MS = 5 * 60_000;
const CLEANUP_LIMIT_MS = 10 * 60_000;
const PAGE_SIZE = 10_000;
const CONNECT_TIMEOUT_MS = 10_000;
const PROGRESS_MS = 2_000;
/** Markers must fit `hostname` varchar(255) with room for the sequence number. */
const MAX_RUN_ID_CHARS = 200;

/**
 * The first message of the `statusngin_hostchecks` fixture; every event of a run is a copy of
 * it with its own marker and times. Pinned against the fixture by "losstest: the template is
 * the fixture's first message".
 */
export const HOSTCHECK_TEMPLATE: SyntheticEvent = Object.freeze({
  "type": 801,
  "flags": 0,
  "attr": 0,
  "timestamp": 1785470668,
  "timestamp_usec": 701779,
  "hostcheck": Object.freeze({
    "host_name": "localhost",
    "command_line": "$USER1$/check_ping -H $HOSTADDRESS$ -w 3000.0,80% -c 5000.0,100% -p 5",
    "command_name": "check-host-alive",
    "output": "PING OK - Packet loss = 0%, RTA = 0.08 ms",
    "long_output": "",
    "perf_data": "rta=0.078000ms;3000.000000;5000.000000;0.000000 pl=0%;80;100;0",
    "check_type": 0,
    "current_attempt": 1,
    "max_attempts": 10,
    "state_type": 1,
    "state": 0,
    "timeout": 30,
    "start_time": 1785470664,
    "end_time": 1785470668,
    "early_timeout": 0,
    "execution_time": 4.0977930000000002,
    "latency": 0.60372000932693481,
    "return_code": 0,
  }),
});

/**
 * Why a run id cannot be used, or `undefined` when it can. The id becomes part of a `LIKE`
 * pattern, so `%`, `_` and `\` are refused, and `'` too (docs/operations.md#losstest).
 *
 * @param runId Candidate id.
 * @returns A message naming the problem, or `undefined`.
 */
export function runIdProblem(runId: string): string | undefined {
  if (runId === "") return "run id must not be empty";
  const bad = /[%_\\']/.exec(runId);
  if (bad !== null) {
    return `run id "${runId}" contains "${
      bad[0]
    }"; %, _, \\ and ' are refused because the id becomes part of a LIKE pattern`;
  }
  if ([...runId].some((c) => c.charCodeAt(0) < 0x20 || c.charCodeAt(0) === 0x7f)) {
    return `run id ${JSON.stringify(runId)} contains a control character`;
  }
  if ([...runId].length > MAX_RUN_ID_CHARS) {
    return `run id is longer than ${MAX_RUN_ID_CHARS} characters`;
  }
  return undefined;
}

/**
 * The text every marker of a run starts with.
 *
 * @param runId A valid run id.
 * @returns `lt-<runId>-`.
 */
export function markerPrefix(runId: string): string {
  return `lt-${runId}-`;
}

/**
 * The marker of one event: its `host_name`, hence the first column of the row's key, so no
 * two events of a run can merge and a missing number is a lost event.
 *
 * @param runId A valid run id.
 * @param seq Sequence number, 0 … count − 1.
 * @returns `lt-<runId>-<seq>`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { lossMarker } from "./losstest.ts";
 * assert.ok(lossMarker("r1", 42) === "lt-r1-42");
 * ```
 */
export function lossMarker(runId: string, seq: number): string {
  return `${markerPrefix(runId)}${seq}`;
}

/**
 * The sequence number of a marker of this run, or `undefined` for a host name that is not
 * one (another run whose id extends this one, `lt-r1-x-5` for run `r1`, or a non-canonical
 * number such as `007`).
 *
 * @param runId A valid run id.
 * @param hostname A host name.
 * @returns The sequence number, or `undefined`.
 */
export function parseLossMarker(runId: string, hostname: string): number | undefined {
  const prefix = markerPrefix(runId);
  if (!hostname.startsWith(prefix)) return undefined;
  const rest = hostname.slice(prefix.length);
  if (!/^(?:0|[1-9][0-9]{0,14})$/.test(rest)) return undefined;
  return Number(rest);
}

/**
 * The `output` of a run's event: it records how many events the run published, so that
 * `verify` checks them all without being told (a default count once passed a run of
 * 200,000 after looking at 10,000).
 *
 * @param runId Run id.
 * @param seq Sequence number.
 * @param count Events in the run.
 * @returns E.g. `losstest run r1: event 5 of 200000`.
 */
function runSizeOutput(runId: string, seq: number, count: number): string {
  return `losstest run ${runId}: event ${seq} of ${count}`;
}

/** Text after which {@link runSizeOutput} puts the count. */
const RUN_SIZE_SEPARATOR = " of ";

/** A closed range of sequence numbers, `[first, last]`. */
export type SeqRange = readonly [first: number, last: number];

/**
 * Compress ascending numbers into closed ranges (`0,1,2,5` → `[0,2],[5,5]`). Duplicates are
 * tolerated.
 *
 * @param ascending Numbers in ascending order.
 * @returns The ranges, in order.
 * @throws {RangeError} When the input is not ascending.
 */
export function compressRanges(ascending: Iterable<number>): SeqRange[] {
  const out: SeqRange[] = [];
  let first = -1;
  let last = -1;
  let open = false;
  for (const n of ascending) {
    if (open && n < last) {
      throw new RangeError(`Cannot compress ranges: ${n} follows ${last}; input must ascend`);
    }
    if (open && n <= last + 1) {
      last = Math.max(last, n);
      continue;
    }
    if (open) out.push([first, last]);
    first = n;
    last = n;
    open = true;
  }
  if (open) out.push([first, last]);
  return out;
}

/**
 * Print ranges as `0-99, 250, 4000-4099`; after `max` ranges, `... (N more ranges)`.
 *
 * @param ranges Ranges as from {@linkcode compressRanges}.
 * @param max Ranges to print at most; default {@linkcode MAX_PRINTED_RANGES}.
 * @returns The text (empty for no range).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { formatRanges } from "./losstest.ts";
 * assert.ok(formatRanges([[0, 99], [250, 250]]) === "0-99, 250");
 * ```
 */
export function formatRanges(ranges: readonly SeqRange[], max = MAX_PRINTED_RANGES): string {
  const shown = ranges.slice(0, max).map(([a, b]) => (a === b ? String(a) : `${a}-${b}`));
  const more = ranges.length - shown.length;
  if (more > 0) shown.push(`... (${more} more range${more === 1 ? "" : "s"})`);
  return shown.join(", ");
}

/** What `verify` found. */
export interface LossReport {
  /** Events expected (sequence numbers 0 … count − 1). */
  readonly count: number;
  /** Marker rows found, including duplicates and rows outside 0 … count − 1. */
  readonly rows: number;
  /** Distinct sequence numbers in 0 … count − 1 that were found. */
  readonly distinct: number;
  /** `count − distinct`. */
  readonly missing: number;
  /** Rows beyond the first for a sequence number (should be impossible, D1 with upserts). */
  readonly duplicates: number;
  /** Rows whose sequence number is ≥ count (a larger earlier run with the same id). */
  readonly outOfRange: number;
  /** Missing sequence numbers as ranges. */
  readonly missingRanges: SeqRange[];
}

/**
 * Accumulates marker rows in constant memory per expected event (one byte each), so a
 * million-event run is verified without holding its rows.
 */
export class LossTally {
  readonly #count: number;
  readonly #seen: Uint8Array;
  #rows = 0;
  #distinct = 0;
  #duplicates = 0;
  #outOfRange = 0;

  /**
   * @param count Events expected.
   * @throws {RangeError} When `count` is not a positive integer.
   */
  constructor(count: number) {
    if (!Number.isSafeInteger(count) || count < 1) {
      throw new RangeError(`Cannot tally a loss test: count must be ≥ 1, got ${count}`);
    }
    this.#count = count;
    this.#seen = new Uint8Array(count);
  }

  /**
   * Record `rows` rows carrying sequence number `seq`.
   *
   * @param seq Sequence number.
   * @param rows Rows with that number (≥ 1).
   */
  add(seq: number, rows = 1): void {
    this.#rows += rows;
    if (!Number.isInteger(seq) || seq < 0 || seq >= this.#count) {
      this.#outOfRange += rows;
      return;
    }
    if (this.#seen[seq] === 0) {
      this.#seen[seq] = 1;
      this.#distinct++;
      this.#duplicates += rows - 1;
    } else {
      this.#duplicates += rows;
    }
  }

  /**
   * The report so far.
   *
   * @returns Counts and missing ranges.
   */
  report(): LossReport {
    const seen = this.#seen;
    function* missing(): Generator<number> {
      for (let i = 0; i < seen.length; i++) if (seen[i] === 0) yield i;
    }
    return {
      count: this.#count,
      rows: this.#rows,
      distinct: this.#distinct,
      missing: this.#count - this.#distinct,
      duplicates: this.#duplicates,
      outOfRange: this.#outOfRange,
      missingRanges: compressRanges(missing()),
    };
  }
}

/**
 * Tally the sequence numbers of the marker rows found (one element per row) against the
 * expected count.
 *
 * @param seqs One sequence number per row, in any order.
 * @param count Events expected.
 * @returns Rows, distinct, missing (with ranges), duplicates, out-of-range rows.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { verifyRows } from "./losstest.ts";
 * const r = verifyRows([0, 1, 3, 3], 5);
 * assert.ok(r.missing === 2 && r.duplicates === 1 && r.missingRanges.length === 2);
 * ```
 */
export function verifyRows(seqs: Iterable<number>, count: number): LossReport {
  const tally = new LossTally(count);
  for (const seq of seqs) tally.add(seq);
  return tally.report();
}

/**
 * The jobs of a run: copies of {@linkcode HOSTCHECK_TEMPLATE} with host name
 * `lt-<run>-<seq>`, each at its own microsecond (`count` µs ending at `now`), `eventsPerJob`
 * per bulk job. Lazy, so memory stays bounded for any count.
 *
 * @param runId A valid run id.
 * @param count Events, ≥ 1.
 * @param options Events per job and "now" (epoch ms; default `Date.now()`).
 * @returns The jobs with their event counts.
 */
export function* losstestJobs(
  runId: string,
  count: number,
  options: { readonly eventsPerJob?: number; readonly now?: number } = {},
): Generator<PublishItem> {
  const perJob = options.eventsPerJob ?? LOSSTEST_EVENTS_PER_JOB;
  const baseUs = Math.floor(options.now ?? Date.now()) * 1000 - count;
  const check = HOSTCHECK_TEMPLATE["hostcheck"] as SyntheticEvent;
  const checkSeconds = Number(check["end_time"]) - Number(check["start_time"]);
  let parts: string[] = [];
  for (let seq = 0; seq < count; seq++) {
    const us = baseUs + seq;
    const ts = Math.floor(us / 1_000_000);
    parts.push(encodeEvent({
      ...HOSTCHECK_TEMPLATE,
      "timestamp": ts,
      "timestamp_usec": us % 1_000_000,
      "hostcheck": {
        ...check,
        "host_name": lossMarker(runId, seq),
        // Every event carries the run's size, so `verify` knows what was published.
        "output": runSizeOutput(runId, seq, count),
        "start_time": ts - checkSeconds,
        "end_time": ts,
      },
    }));
    if (parts.length >= perJob || seq === count - 1) {
      yield { payload: `{"messages":[${parts.join(",")}],"format":"none"}`, events: parts.length };
      parts = [];
    }
  }
}

/**
 * Run the `losstest` command.
 *
 * Exit codes: 0 success (`verify`: nothing missing); 1 `verify` found missing events, or a
 * service failed; 2 usage error (bad mode, run id or number); 130 interrupted.
 *
 * @param options Mode, run id, count, job servers, MySQL URL.
 * @param io Output sinks.
 * @param signal Stops the command (SIGINT/SIGTERM).
 * @returns The process exit code.
 */
export async function runLosstestCommand(
  options: LosstestCommandOptions,
  io: Io,
  signal?: AbortSignal,
): Promise<number> {
  const { mode, runId, count } = options;
  if (mode !== "publish" && mode !== "verify" && mode !== "cleanup") {
    io.err(`Cannot run losstest: unknown mode "${mode}"; expected publish, verify or cleanup`);
    return USAGE_EXIT_CODE;
  }
  const problem = runIdProblem(runId) ?? positiveIntegerProblem("count", count) ??
    positiveIntegerProblem("events per job", options.eventsPerJob ?? LOSSTEST_EVENTS_PER_JOB);
  if (problem !== undefined) {
    io.err(`Cannot run losstest ${mode}: ${problem}`);
    return USAGE_EXIT_CODE;
  }
  switch (mode) {
    case "publish":
      return await publishRun(options, io, signal);
    case "verify":
      return await verifyRun(options, io, signal);
    case "cleanup":
      return await cleanupRun(options, io, signal);
  }
}

async function publishRun(
  options: LosstestCommandOptions,
  io: Io,
  signal: AbortSignal | undefined,
): Promise<number> {
  const { runId, count, gearmanAddr } = options;
  if (gearmanAddr.length === 0 && options.rabbitmqUrl === undefined) {
    io.err("Cannot run losstest publish: no job server given");
    return USAGE_EXIT_CODE;
  }
  const perJob = options.eventsPerJob ?? LOSSTEST_EVENTS_PER_JOB;
  const jobs = Math.ceil(count / perJob);
  io.out(
    `losstest publish: run "${runId}", ${count} events in ${jobs} jobs to ${LOSSTEST_QUEUE} (markers ${
      lossMarker(runId, 0)
    } … ${lossMarker(runId, count - 1)})`,
  );
  try {
    const result = await publishJobs(
      LOSSTEST_QUEUE,
      losstestJobs(runId, count, { eventsPerJob: perJob }),
      {
        servers: gearmanAddr,
        ...brokerTarget(options),
        io,
        totalJobs: jobs,
        totalEvents: count,
        ...(signal === undefined ? {} : { signal }),
      },
    );
    io.out(
      summaryLine(
        LOSSTEST_QUEUE,
        result,
        options.rabbitmqUrl === undefined ? gearmanAddr.length : targetLabel(options),
      ),
    );
    return result.interrupted ? INTERRUPTED_EXIT_CODE : 0;
  } catch (err: unknown) {
    io.err(`Cannot run losstest publish on ${targetLabel(options)}: ${errorMessage(err)}`);
    return 1;
  }
}

/** Open the worker's database, or print why not and return undefined. */
async function connect(
  url: string,
  mode: LosstestMode,
  io: Io,
): Promise<MysqlConnection | undefined> {
  let opts: ReturnType<typeof mysqlOptionsFromUrl>;
  try {
    opts = mysqlOptionsFromUrl(url);
  } catch (err: unknown) {
    io.err(`Cannot run losstest ${mode}: ${errorMessage(err)}`);
    return undefined;
  }
  if (opts.database === undefined) {
    io.err(`Cannot run losstest ${mode}: the MySQL URL "${redactUrl(url)}" names no database`);
    return undefined;
  }
  try {
    return (await connectMysql(opts, { timeoutMs: CONNECT_TIMEOUT_MS })).connection;
  } catch (err: unknown) {
    const text = errorMessage(err);
    const safe = redactText(text, opts.password);
    io.err(`Cannot run losstest ${mode}: cannot connect to MySQL at "${redactUrl(url)}": ${safe}`);
    return undefined;
  }
}

/** Message and exit code for a run stopped by its time limit (1) or by the signal (130). */
function stopped(signal: AbortSignal, what: string, limitMs: number): [string, number] {
  const reason: unknown = signal.reason;
  return reason instanceof DOMException && reason.name === "TimeoutError"
    ? [`${what} exceeded its ${limitMs / 60_000}-minute limit`, 1]
    : [`${what} was interrupted`, INTERRUPTED_EXIT_CODE];
}

/**
 * The count `verify` checks: the one the run's events carry, or the caller's when they carry
 * none; a message and exit code when neither can be trusted.
 */
export function expectedCount(
  runId: string,
  recorded: readonly number[],
  given: number | undefined,
): { count: number; note: string } | { problem: string; code: number } {
  if (recorded.length > 1) {
    return {
      problem: `run "${runId}" was published more than once with different counts (${
        recorded.join(", ")
      }): remove it with "losstest cleanup" and publish a new run id`,
      code: 1,
    };
  }
  const [published] = recorded;
  if (published !== undefined) {
    if (given !== undefined && given !== published) {
      return {
        problem: `run "${runId}" published ${published} events, --count ${given} disagrees: ` +
          `leave --count out to check all of them`,
        code: USAGE_EXIT_CODE,
      };
    }
    return { count: published, note: "as published (recorded in the run's events)" };
  }
  if (given !== undefined) return { count: given, note: "as given by --count" };
  return {
    problem: `no event of run "${runId}" has arrived in ${LOSSTEST_TABLE} yet, so how many ` +
      `were published is unknown: run verify again once the worker consumes, or pass --count`,
    code: 1,
  };
}

async function verifyRun(
  options: LosstestCommandOptions,
  io: Io,
  signal: AbortSignal | undefined,
): Promise<number> {
  const { runId } = options;
  const prefix = markerPrefix(runId);
  using limit = deadline(VERIFY_LIMIT_MS, signal);
  const conn = await connect(options.mysqlUrl, "verify", io);
  if (conn === undefined) return 1;
  let count: number;
  try {
    const sizes = await selectLosstestRunSizes(
      conn,
      LOSSTEST_TABLE,
      RUN_SIZE_SEPARATOR,
      prefix,
      Math.max(1, Math.floor(limit.remainingMs())),
    );
    const recorded = sizes
      .filter((c) => /^[1-9][0-9]{0,14}$/.test(c))
      .map(Number)
      .sort((a, b) => a - b);
    const expected = expectedCount(
      runId,
      recorded,
      options.countGiven === false ? undefined : options.count,
    );
    if ("problem" in expected) {
      io.err(`Cannot run losstest verify: ${expected.problem}`);
      await endMysql(conn);
      return expected.code;
    }
    count = expected.count;
    io.out(
      `losstest verify: run "${runId}", expecting ${count} events ${expected.note} (${
        lossMarker(runId, 0)
      } … ${lossMarker(runId, count - 1)}) in ${LOSSTEST_TABLE}`,
    );
  } catch (err: unknown) {
    await endMysql(conn);
    io.err(`Cannot read the size of run "${runId}" from ${LOSSTEST_TABLE}: ${errorMessage(err)}`);
    return 1;
  }
  const tally = new LossTally(count);
  try {
    let after = "";
    for (;;) {
      if (limit.signal.aborted) {
        const [why, code] = stopped(limit.signal, "verify", VERIFY_LIMIT_MS);
        io.err(`Cannot finish losstest verify: ${why}`);
        return code;
      }
      const page = await countLosstestMarkers(
        conn,
        LOSSTEST_TABLE,
        prefix,
        after,
        PAGE_SIZE,
        Math.max(1, Math.floor(limit.remainingMs())),
      );
      for (const row of page) {
        const seq = parseLossMarker(runId, row.hostname);
        // A host name of another run whose id extends ours (`lt-r1-x-5` for `r1`) is skipped.
        if (seq !== undefined) tally.add(seq, row.n);
      }
      const last = page.at(-1);
      if (last === undefined || page.length < PAGE_SIZE) break;
      after = last.hostname;
    }
  } catch (err: unknown) {
    io.err(
      `Cannot read the markers of run "${runId}" from ${LOSSTEST_TABLE}: ${errorMessage(err)}`,
    );
    return 1;
  } finally {
    await endMysql(conn);
  }

  const report = tally.report();
  io.out(`rows: ${report.rows}`);
  io.out(`distinct events: ${report.distinct}`);
  io.out(`missing: ${report.missing}`);
  if (report.duplicates > 0) io.out(`duplicate rows: ${report.duplicates}`);
  if (report.outOfRange > 0) {
    io.out(`rows outside 0-${count - 1}: ${report.outOfRange} (an earlier, larger run?)`);
  }
  if (report.missing > 0) io.out(`missing sequence numbers: ${formatRanges(report.missingRanges)}`);
  const queued = await printBacklog(options, io, limit.signal);
  if (report.missing > 0 && queued !== 0) {
    // Jobs still at the broker may hold the missing events: no verdict yet.
    io.out(
      `NOT FINISHED: ${report.missing} of ${count} events not in MySQL yet and ${
        queued ?? "an unknown number of"
      } job(s) still queued; run verify again once the queue is drained`,
    );
    return 1;
  }
  if (report.missing > 0) {
    io.out(`FAIL: ${report.missing} of ${count} events missing`);
    return 1;
  }
  // Every event the run published is in MySQL, so none of its jobs can still be queued
  // (a redelivered duplicate at most, which the upsert absorbs).
  io.out(`PASS: all ${count} events present`);
  return 0;
}

/**
 * Jobs still at the broker are a backlog, not a loss: print them so nobody mistakes one.
 *
 * @returns Jobs (messages) still queued, or null when not known.
 */
async function printBacklog(
  options: LosstestCommandOptions,
  io: Io,
  signal: AbortSignal,
): Promise<number | null> {
  if (options.rabbitmqUrl !== undefined) {
    return await printRabbitMqBacklog(options.rabbitmqUrl, options, io);
  }
  const label = `jobs still queued at gearmand for ${LOSSTEST_QUEUE}`;
  if (options.gearmanAddr.length === 0) {
    io.out(`${label}: not checked (no job server given)`);
    return null;
  }
  const perJob = options.eventsPerJob ?? LOSSTEST_EVENTS_PER_JOB;
  let total = 0;
  const failures: string[] = [];
  for (const server of options.gearmanAddr) {
    try {
      const status = await adminStatus(server, { signal });
      total += status.find((s) => s.function === LOSSTEST_QUEUE)?.total ?? 0;
    } catch (err: unknown) {
      failures.push(`${server}: ${errorMessage(err)}`);
    }
  }
  io.out(
    `${label}: ${total} (about ${total * perJob} events; not loss)${
      failures.length > 0 ? `; unknown for ${failures.join("; ")}` : ""
    }`,
  );
  return failures.length > 0 ? null : total;
}

async function printRabbitMqBacklog(
  url: string,
  options: LosstestCommandOptions,
  io: Io,
): Promise<number | null> {
  const label = `messages still queued at ${
    targetLabel({ gearmanAddr: [], rabbitmqUrl: url })
  } for ${LOSSTEST_QUEUE}`;
  const perJob = options.eventsPerJob ?? LOSSTEST_EVENTS_PER_JOB;
  try {
    // Passive declaration only: the durability flag is not sent.
    await using publisher = await AmqpPublisher.connect(url, { durableQueues: false });
    // Ready messages only: ones delivered to a live worker are not yet committed, but are not
    // lost either (they return to the queue if that worker dies).
    const { ready, consumers } = await publisher.depth(LOSSTEST_QUEUE);
    io.out(
      `${label}: ${ready} ready (about ${
        ready * perJob
      } events; not loss), ${consumers} consumers attached`,
    );
    return ready;
  } catch (err: unknown) {
    io.out(`${label}: unknown (${errorMessage(err)})`);
    return null;
  }
}

async function cleanupRun(
  options: LosstestCommandOptions,
  io: Io,
  signal: AbortSignal | undefined,
): Promise<number> {
  const { runId } = options;
  const prefix = markerPrefix(runId);
  using limit = deadline(CLEANUP_LIMIT_MS, signal);
  const conn = await connect(options.mysqlUrl, "cleanup", io);
  if (conn === undefined) return 1;
  let deleted = 0;
  const started = performance.now();
  let nextProgress = started + PROGRESS_MS;
  try {
    for (;;) {
      if (limit.signal.aborted) {
        const [why, code] = stopped(limit.signal, "cleanup", CLEANUP_LIMIT_MS);
        io.err(
          `Cannot finish losstest cleanup: ${why} after deleting ${deleted} rows of run "${runId}"`,
        );
        return code;
      }
      const affected = await deleteLosstestBatch(
        conn,
        LOSSTEST_TABLE,
        prefix,
        CLEANUP_BATCH,
        Math.max(1, Math.floor(limit.remainingMs())),
      );
      deleted += affected;
      if (affected < CLEANUP_BATCH) break;
      if (performance.now() >= nextProgress) {
        nextProgress = performance.now() + PROGRESS_MS;
        io.out(`progress: deleted ${deleted} rows`);
      }
    }
  } catch (err: unknown) {
    io.err(
      `Cannot delete the rows of run "${runId}" from ${LOSSTEST_TABLE} after ${deleted} rows: ${
        errorMessage(err)
      }`,
    );
    return 1;
  } finally {
    await endMysql(conn);
  }
  io.out(
    `losstest cleanup: deleted ${deleted} rows of run "${runId}" from ${LOSSTEST_TABLE} in ${
      ((performance.now() - started) / 1000).toFixed(2)
    } s`,
  );
  return 0;
}
