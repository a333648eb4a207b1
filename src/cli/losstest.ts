/**
 * The `losstest` subcommand (docs/operations.md#losstest): proves that stopping the worker under
 * load loses nothing (D1). `publish` leaves numbered host-check events at the broker, `verify`
 * finds every sequence number that never reached `statusengine_hostchecks`, `cleanup` removes
 * the run. The pure pieces are exported for the fault-injection tests.
 *
 * @module
 */
import {
  countLosstestMarkers,
  deleteLosstestBatch,
  endMysql,
  LOSSTEST_TABLE,
  type MysqlConnection,
  selectLosstestRunSizes,
} from "../mysql/mod.ts";
import { adminStatus } from "../gearman/admin.ts";
import { AmqpPublisher } from "../amqp/publisher.ts";
import { abortable, deadline } from "../util/async.ts";
import { errorMessage } from "../log.ts";
import { jobsFor, type SyntheticEvent } from "../synthetic/mod.ts";
import { type Io, openDatabase } from "./io.ts";
import {
  counted,
  INTERRUPTED_EXIT_CODE,
  type PublishItem,
  publishToTarget,
  type Target,
  targetLabel,
  USAGE_EXIT_CODE,
} from "./publish.ts";

/** Options of the `losstest` command; `verify` asks the target for the backlog too. */
interface LosstestCommandOptions extends Target {
  readonly mode: "publish" | "verify" | "cleanup";
  /** The same in all three modes; see {@linkcode runIdProblem}. */
  readonly runId: string;
  /** Events published, and expected by `verify` (sequence numbers 0 … count − 1). */
  readonly count: number;
  /**
   * `--count` was given, not defaulted: `verify` then checks it against the count the run's
   * events carry; without it `verify` uses theirs. Default true.
   */
  readonly countGiven?: boolean;
  /** The worker's database (`verify`, `cleanup`). */
  readonly mysqlUrl: string;
}

export const LOSSTEST_QUEUE = "statusngin_hostchecks";
const EVENTS_PER_JOB = 100;
const MAX_PRINTED_RANGES = 20;
const CLEANUP_BATCH = 5_000;

const VERIFY_LIMIT_MS = 5 * 60_000;
const CLEANUP_LIMIT_MS = 10 * 60_000;
const PAGE_SIZE = 10_000;
const PROGRESS_MS = 2_000;
/** The RabbitMQ backlog read's connect bound, shared by the brokers of the URL (as `publish`). */
const BROKER_CONNECT_TIMEOUT_MS = 5_000;
/** The bound on the broker's answer to the depth check once connected (status's 2 s). */
const BROKER_ANSWER_TIMEOUT_MS = 2_000;
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
 */
export function runIdProblem(runId: string): string | undefined {
  if (runId === "") return "run id must not be empty";
  const bad = /[%_\\']/.exec(runId);
  if (bad !== null) {
    const why = "%, _, \\ and ' are refused because the id becomes part of a LIKE pattern";
    return `run id "${runId}" contains "${bad[0]}"; ${why}`;
  }
  if ([...runId].some((c) => c.charCodeAt(0) < 0x20 || c.charCodeAt(0) === 0x7f)) {
    return `run id ${JSON.stringify(runId)} contains a control character`;
  }
  if ([...runId].length > MAX_RUN_ID_CHARS) {
    return `run id is longer than ${MAX_RUN_ID_CHARS} characters`;
  }
  return undefined;
}

/** The text every marker of a run starts with: `lt-<runId>-`. */
export function markerPrefix(runId: string): string {
  return `lt-${runId}-`;
}

/**
 * The marker of one event, `lt-<runId>-<seq>`: its `host_name`, hence the first column of the
 * row's key, so no two events of a run can merge and a missing number is a lost event.
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
 * one (another run whose id extends this one, `lt-r1-x-5` for run `r1`, or `007`). The prefix
 * is matched ignoring case and accents, as MySQL's LIKE found the rows (`lt-R1-5` for `r1`).
 */
export function parseLossMarker(runId: string, hostname: string): number | undefined {
  const prefix = markerPrefix(runId);
  const head = hostname.slice(0, prefix.length);
  if (head.localeCompare(prefix, "en", { sensitivity: "base" }) !== 0) return undefined;
  const rest = hostname.slice(prefix.length);
  if (!/^(?:0|[1-9][0-9]{0,14})$/.test(rest)) return undefined;
  return Number(rest);
}

/** The text every `output` of a run starts with; the run id cannot contain LIKE wildcards. */
function runOutputPrefix(runId: string): string {
  return `losstest run ${runId}: `;
}

/** Text after which an event's `output` gives the run's size. */
const RUN_SIZE_SEPARATOR = " of ";

type SeqRange = readonly [first: number, last: number];

/**
 * Compress ascending numbers into closed ranges (`0,1,2,5` → `[0,2],[5,5]`). Duplicates are
 * tolerated; descending input throws a RangeError.
 */
export function compressRanges(ascending: Iterable<number>): SeqRange[] {
  const out: [number, number][] = [];
  for (const n of ascending) {
    const range = out.at(-1);
    if (range !== undefined && n < range[1]) {
      throw new RangeError(`Cannot compress ranges: ${n} follows ${range[1]}; input must ascend`);
    }
    if (range !== undefined && n <= range[1] + 1) range[1] = n;
    else out.push([n, n]);
  }
  return out;
}

/**
 * Print ranges as `0-99, 250, 4000-4099`; after `max` ranges, `... (N more ranges)`.
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

/**
 * What `verify` found: `rows` counts every marker row, `distinct` the sequence numbers in
 * 0 … count − 1; `duplicates` are rows beyond the first of a number (impossible with upserts,
 * D1), `outOfRange` rows ≥ count (a larger earlier run with the same id).
 */
interface LossReport {
  readonly count: number;
  readonly rows: number;
  readonly distinct: number;
  readonly missing: number;
  readonly duplicates: number;
  readonly outOfRange: number;
  readonly missingRanges: SeqRange[];
}

/**
 * Accumulates marker rows in constant memory per expected event (one byte each), so a
 * million-event run is verified without holding its rows.
 */
export class LossTally {
  /** One byte per expected sequence number: 1 once a row of it was seen. */
  readonly #seen: Uint8Array;
  #rows = 0;
  #distinct = 0;
  #duplicates = 0;
  #outOfRange = 0;

  constructor(count: number) {
    if (!Number.isSafeInteger(count) || count < 1) {
      throw new RangeError(`Cannot tally a loss test: count must be ≥ 1, got ${count}`);
    }
    this.#seen = new Uint8Array(count);
  }

  add(seq: number, rows = 1): void {
    this.#rows += rows;
    if (!Number.isInteger(seq) || seq < 0 || seq >= this.#seen.length) {
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

  report(): LossReport {
    const seen = this.#seen;
    return {
      count: seen.length,
      rows: this.#rows,
      distinct: this.#distinct,
      missing: seen.length - this.#distinct,
      duplicates: this.#duplicates,
      outOfRange: this.#outOfRange,
      missingRanges: compressRanges(seen.keys().filter((seq) => seen[seq] === 0)),
    };
  }
}

/**
 * Tally the sequence numbers of marker rows (one per row, any order) against the expected count.
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
 * `lt-<run>-<seq>`, each at its own microsecond (`count` µs ending at `now`, epoch ms),
 * {@linkcode EVENTS_PER_JOB} per bulk job. Lazy, so memory stays bounded for any count.
 */
export function* losstestJobs(
  runId: string,
  count: number,
  options: { readonly now?: number } = {},
): Generator<PublishItem> {
  const baseUs = Math.floor(options.now ?? Date.now()) * 1000 - count;
  const check = HOSTCHECK_TEMPLATE["hostcheck"] as SyntheticEvent;
  const checkSeconds = Number(check["end_time"]) - Number(check["start_time"]);
  function* events(): Generator<SyntheticEvent> {
    for (let seq = 0; seq < count; seq++) {
      const us = baseUs + seq;
      const ts = Math.floor(us / 1_000_000);
      yield {
        ...HOSTCHECK_TEMPLATE,
        "timestamp": ts,
        "timestamp_usec": us % 1_000_000,
        "hostcheck": {
          ...check,
          "host_name": lossMarker(runId, seq),
          // The run's size, so that `verify` checks every event published without being told.
          "output": `${runOutputPrefix(runId)}event ${seq}${RUN_SIZE_SEPARATOR}${count}`,
          "start_time": ts - checkSeconds,
          "end_time": ts,
        },
      };
    }
  }
  const jobs = jobsFor(LOSSTEST_QUEUE, events(), { form: "bulk", eventsPerJob: EVENTS_PER_JOB });
  yield* counted(jobs, count, EVENTS_PER_JOB);
}

/**
 * Run the `losstest` command. Exit codes: 0 success (`verify`: nothing missing); 1 `verify`
 * found missing events, or a service failed; 2 usage error; 130 interrupted.
 */
export async function runLosstestCommand(
  options: LosstestCommandOptions,
  io: Io,
  signal?: AbortSignal,
): Promise<number> {
  const { mode, runId } = options;
  const problem = runIdProblem(runId);
  if (problem !== undefined) {
    io.err(`Cannot run losstest ${mode}: ${problem}`);
    return USAGE_EXIT_CODE;
  }
  // The settings accept only these three modes.
  const run = { publish: publishRun, verify: verifyRun, cleanup: cleanupRun }[mode];
  return await run(options, io, signal);
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
  const jobs = Math.ceil(count / EVENTS_PER_JOB);
  io.out(
    `losstest publish: run "${runId}", ${count} events in ${jobs} jobs to ${LOSSTEST_QUEUE} (markers ${
      lossMarker(runId, 0)
    } … ${lossMarker(runId, count - 1)})`,
  );
  try {
    return await publishToTarget(
      LOSSTEST_QUEUE,
      losstestJobs(runId, count),
      options,
      { totalJobs: jobs, totalEvents: count },
      io,
      signal,
    );
  } catch (err: unknown) {
    // As publish: the signal's own reason is the connect it stopped.
    if (signal?.aborted && err === signal.reason) {
      io.err("Cannot run losstest publish: interrupted before it started");
      return INTERRUPTED_EXIT_CODE;
    }
    io.err(`Cannot run losstest publish on ${targetLabel(options)}: ${errorMessage(err)}`);
    return signal?.aborted ? INTERRUPTED_EXIT_CODE : 1;
  }
}

/**
 * Open the worker's database under the mode's time limit (or print why not: exit 1), run
 * `body` and close. `remaining()` bounds each statement by what is left of the limit;
 * `stop(detail)` says why the limit (exit 1) or the signal (130) struck and returns the code.
 */
async function onDatabase(
  options: LosstestCommandOptions,
  limitMs: number,
  io: Io,
  signal: AbortSignal | undefined,
  body: (conn: MysqlConnection, limit: {
    readonly signal: AbortSignal;
    readonly remaining: () => number;
    readonly stop: (detail?: string) => number;
  }) => Promise<number>,
): Promise<number> {
  const { mode } = options;
  using limit = deadline(limitMs, signal);
  const opened = await openDatabase(options.mysqlUrl, `losstest ${mode}`, io);
  if (opened === undefined) return 1;
  const { conn } = opened;
  try {
    return await body(conn, {
      signal: limit.signal,
      remaining: () => Math.max(1, Math.floor(limit.remainingMs())),
      stop: (detail = "") => {
        const reason: unknown = limit.signal.reason;
        const timedOut = reason instanceof DOMException && reason.name === "TimeoutError";
        io.err(
          `Cannot finish losstest ${mode}: ${mode} ${
            timedOut ? `exceeded its ${limitMs / 60_000}-minute limit` : "was interrupted"
          }${detail}`,
        );
        return timedOut ? 1 : INTERRUPTED_EXIT_CODE;
      },
    });
  } finally {
    await endMysql(conn);
  }
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

function verifyRun(
  options: LosstestCommandOptions,
  io: Io,
  signal: AbortSignal | undefined,
): Promise<number> {
  const { runId } = options;
  const prefix = markerPrefix(runId);
  return onDatabase(options, VERIFY_LIMIT_MS, io, signal, async (conn, limit) => {
    let count: number;
    let tally: LossTally;
    let reading = "size";
    try {
      const sizes = await selectLosstestRunSizes(
        conn,
        RUN_SIZE_SEPARATOR,
        prefix,
        runOutputPrefix(runId),
        limit.remaining(),
      );
      const recorded = sizes
        .filter((c) => /^[1-9][0-9]{0,14}$/.test(c))
        .map(Number)
        .sort((a, b) => a - b);
      const given = options.countGiven === false ? undefined : options.count;
      const expected = expectedCount(runId, recorded, given);
      if ("problem" in expected) {
        io.err(`Cannot run losstest verify: ${expected.problem}`);
        return expected.code;
      }
      count = expected.count;
      io.out(
        `losstest verify: run "${runId}", expecting ${count} events ${expected.note} (${
          lossMarker(runId, 0)
        } … ${lossMarker(runId, count - 1)}) in ${LOSSTEST_TABLE}`,
      );
      tally = new LossTally(count);
      reading = "markers";
      let after = "";
      for (;;) {
        if (limit.signal.aborted) return limit.stop();
        const page = await countLosstestMarkers(conn, prefix, after, PAGE_SIZE, limit.remaining());
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
      const why = errorMessage(err);
      io.err(`Cannot read the ${reading} of run "${runId}" from ${LOSSTEST_TABLE}: ${why}`);
      return 1;
    }

    const report = tally.report();
    io.out(`rows: ${report.rows}`);
    io.out(`distinct events: ${report.distinct}`);
    io.out(`missing: ${report.missing}`);
    if (report.duplicates > 0) io.out(`duplicate rows: ${report.duplicates}`);
    if (report.outOfRange > 0) {
      io.out(`rows outside 0-${count - 1}: ${report.outOfRange} (an earlier, larger run?)`);
    }
    if (report.missing > 0) {
      io.out(`missing sequence numbers: ${formatRanges(report.missingRanges)}`);
    }
    const queued = await printBacklog(options, io, limit.signal);
    if (limit.signal.aborted) return limit.stop();
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
  });
}

/** Jobs still at the broker are a backlog, not a loss: print them (null: not known). */
async function printBacklog(
  options: LosstestCommandOptions,
  io: Io,
  signal: AbortSignal,
): Promise<number | null> {
  if (options.rabbitmqUrl !== undefined) {
    const label = `messages still queued at ${targetLabel(options)} for ${LOSSTEST_QUEUE}`;
    try {
      // Passive declaration only: the durability flag is not sent. Bounded by the limit and the
      // signal, as a broker that accepts and never answers would otherwise hold verify forever;
      // the brokers of the URL share a bound of their own, so a silent first one leaves time for
      // the next.
      const connecting = AmqpPublisher.connect(options.rabbitmqUrl, { durableQueues: false }, {
        timeoutMs: BROKER_CONNECT_TIMEOUT_MS,
        signal,
      });
      const publisher = await abortable(connecting, signal).catch((err: unknown) => {
        connecting.then((p) => p.close(), () => {});
        throw err;
      });
      // Ready messages only: ones delivered to a live worker are not yet committed, but are not
      // lost either (they return to the queue if that worker dies). The close is not awaited: a
      // silent broker never answers it, nor perhaps the depth check, which has a bound of its own.
      using answer = deadline(BROKER_ANSWER_TIMEOUT_MS, signal);
      const depth = await abortable(publisher.depth(LOSSTEST_QUEUE), answer.signal)
        .catch((err: unknown) => {
          // No queue holds nothing: a transient one is gone after a broker restart, with its
          // messages, and a queue's deletion cancels its consumers.
          if (/NOT_FOUND|\(404\)/.test(errorMessage(err))) return undefined;
          if (signal.aborted || !answer.signal.aborted) throw err;
          throw new Error(`no answer within ${BROKER_ANSWER_TIMEOUT_MS} ms`);
        })
        .finally(() => void publisher.close());
      if (depth === undefined) {
        io.out(`${label}: 0 (the queue does not exist: no message can be queued or held)`);
        return 0;
      }
      const { ready, consumers } = depth;
      const events = `about ${ready * EVENTS_PER_JOB} events; not loss`;
      io.out(`${label}: ${ready} ready (${events}), ${consumers} consumers attached`);
      if (ready > 0 || consumers === 0) return ready;
      // AMQP does not tell how many messages the consumers hold unacknowledged: they may hold
      // every missing event, so nothing queued is not known (gearmand counts its running jobs).
      io.out("messages held unacknowledged by the consumers: unknown over AMQP");
      return null;
    } catch (err: unknown) {
      io.out(`${label}: unknown (${errorMessage(err)})`);
      return null;
    }
  }
  const label = `jobs still queued at gearmand for ${LOSSTEST_QUEUE}`;
  if (options.gearmanAddr.length === 0) {
    io.out(`${label}: not checked (no job server given)`);
    return null;
  }
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
  const unknown = failures.length > 0 ? `; unknown for ${failures.join("; ")}` : "";
  io.out(`${label}: ${total} (about ${total * EVENTS_PER_JOB} events; not loss)${unknown}`);
  return failures.length > 0 ? null : total;
}

function cleanupRun(
  options: LosstestCommandOptions,
  io: Io,
  signal: AbortSignal | undefined,
): Promise<number> {
  const { runId } = options;
  const prefix = markerPrefix(runId);
  return onDatabase(options, CLEANUP_LIMIT_MS, io, signal, async (conn, limit) => {
    // A job still queued may hold events of the run: the worker would write them back.
    const queued = await printBacklog(options, io, limit.signal);
    let deleted = 0;
    const started = performance.now();
    let nextProgress = started + PROGRESS_MS;
    try {
      for (;;) {
        if (limit.signal.aborted) {
          return limit.stop(` after deleting ${deleted} rows of run "${runId}"`);
        }
        const affected = await deleteLosstestBatch(conn, prefix, CLEANUP_BATCH, limit.remaining());
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
    }
    io.out(
      `losstest cleanup: deleted ${deleted} rows of run "${runId}" from ${LOSSTEST_TABLE} in ${
        ((performance.now() - started) / 1000).toFixed(2)
      } s`,
    );
    if (queued !== 0) {
      io.err(
        `warning: ${queued ?? "an unknown number of"} job(s) still queued for ${LOSSTEST_QUEUE}: ` +
          `the worker may write rows of run "${runId}" after this cleanup; run cleanup again ` +
          "once the queue is drained",
      );
    }
    return 0;
  });
}
