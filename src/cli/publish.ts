/**
 * The `publish` subcommand: submit synthetic (or recorded) jobs for one queue to the job
 * servers or RabbitMQ (docs/operations.md#publish, our `gearman_publisher`), in bounded memory
 * whatever the count.
 *
 * @module
 */
import { GearmanClient } from "../gearman/client.ts";
import { AmqpPublisher } from "../amqp/publisher.ts";
import type { QueueDeclareMode } from "../amqp/session.ts";
import { redactUrl as redactAmqpUrl } from "../util/redact.ts";
import { isQueueName, QUEUE_NAMES, type QueueName } from "../events/mod.ts";
import {
  defaultForm,
  type JobForm,
  jobsFor,
  randomSeed,
  syntheticEvents,
} from "../synthetic/mod.ts";
import type { Io } from "./io.ts";
import { errorMessage } from "../log.ts";
import { concatBytes } from "../util/bytes.ts";
import { deadline, settledWithin } from "../util/async.ts";

/**
 * Where a command publishes: the job servers (`host:port`, jobs spread round-robin), or with
 * `rabbitmqUrl` this RabbitMQ broker instead (`--consumer rabbitmq`): declared like the worker
 * declares (docs/consumption.md#rabbitmq-topology), default exchange, transient unless
 * `--rabbitmq-durable-queues`, each message confirmed by the broker.
 */
export interface Target {
  readonly gearmanAddr: readonly string[];
  readonly rabbitmqUrl?: string | undefined;
  readonly rabbitmqDurableQueues?: boolean | undefined;
  readonly rabbitmqDeclare?: QueueDeclareMode | undefined;
}

/** Options of the `publish` command (docs/operations.md#publish). */
interface PublishCommandOptions extends Target {
  readonly queue: string;
  /** Synthetic events to publish (ignored with `fromFile`), ≥ 1. */
  readonly count: number;
  /** Events per bulk job (ignored for the single form and with `fromFile`), ≥ 1. */
  readonly eventsPerJob: number;
  /** Default bulk for the eight batched queues, single for the other four. */
  readonly form?: JobForm | undefined;
  /** Publish recorded payloads instead: NDJSON, one job per line, blank lines skipped. */
  readonly fromFile?: string | undefined;
  /** PRNG seed of the synthetic events; default random (printed, so a run can be repeated). */
  readonly seed?: number;
}

/** One job to submit and the number of events it carries. */
export interface PublishItem {
  readonly payload: string | Uint8Array;
  readonly events: number;
}

/** What the broker confirmed; `durationMs` from the first submission to the last confirmation. */
interface PublishResult {
  readonly jobs: number;
  readonly events: number;
  readonly durationMs: number;
  /** The signal stopped publishing early. */
  readonly interrupted: boolean;
  /** Jobs written with no answer within {@link ANSWER_GRACE_MS} of the signal: outcome unknown. */
  readonly unconfirmed: number;
}

/** Progress lines (with the totals when known) go to `io.out`. */
interface PublishJobsOptions extends Target {
  readonly io: Io;
  readonly totalJobs?: number;
  readonly totalEvents?: number;
  readonly signal?: AbortSignal | undefined;
}

export const USAGE_EXIT_CODE = 2;
/** 128 + SIGINT. */
export const INTERRUPTED_EXIT_CODE = 130;

/** Submissions awaiting JOB_CREATED per job server (the client's pipelining window). */
const WINDOW = 256;
const CONNECT_TIMEOUT_MS = 5_000;
const PROGRESS_MS = 2_000;
/** How long answers in flight are awaited once the signal aborted (a frozen server sends none). */
const ANSWER_GRACE_MS = 5_000;

function rate(n: number, ms: number): string {
  return ms <= 0 ? "-" : String(Math.round(n / (ms / 1000)));
}

/**
 * Submit jobs as normal-priority background jobs with an empty unique id, job `i` to job server
 * `i mod n`, pipelined: at most one window of submissions per server waits for its JOB_CREATED.
 * Reads `jobs` lazily, so an unbounded generator is fine; `signal` stops submitting, what is in
 * flight is still awaited. Throws when a server cannot be reached, or (saying how many jobs were
 * confirmed) when a job is refused or lost.
 */
export async function publishJobs(
  queue: string,
  jobs: Iterable<PublishItem> | AsyncIterable<PublishItem>,
  options: PublishJobsOptions,
): Promise<PublishResult> {
  const { io } = options;
  // One that never aborts stands in for no signal, so that every wait below has one.
  const signal = options.signal ?? new AbortController().signal;
  const lanes = await openLanes(queue, { ...options, signal });
  try {
    const inFlight = lanes.submit.map((submit) => ({ submit, answers: [] as Promise<void>[] }));
    let failure: unknown;
    let confirmedJobs = 0;
    let confirmedEvents = 0;
    let submitted = 0;
    let answered = 0;
    const started = performance.now();
    let nextProgress = started + PROGRESS_MS;
    const of = (n: number, total: number | undefined) =>
      total === undefined ? String(n) : `${n}/${total}`;

    for await (const item of jobs) {
      if (signal.aborted || failure !== undefined) break;
      const lane = inFlight[submitted % inFlight.length];
      if (lane === undefined) break;
      // Backpressure: wait for the oldest answer of this lane before exceeding the window; answers
      // arrive in submission order (docs/gearman-protocol.md#submitting, AMQP confirms). The
      // signal ends the wait: a frozen server never answers.
      while (lane.answers.length >= WINDOW && !signal.aborted) {
        await settledWithin(lane.answers[0] ?? Promise.resolve(), signal);
        if (!signal.aborted) lane.answers.shift();
      }
      if (signal.aborted || failure !== undefined) break;
      const n = item.events;
      // A rejection handler at once: an unobserved rejection would crash the process.
      lane.answers.push(
        lane.submit(item.payload).then(
          () => {
            answered++;
            confirmedJobs++;
            confirmedEvents += n;
          },
          (err: unknown) => {
            answered++;
            failure ??= err;
          },
        ),
      );
      submitted++;
      const t = performance.now();
      if (t >= nextProgress) {
        nextProgress = t + PROGRESS_MS;
        io.out(
          `progress: ${of(confirmedJobs, options.totalJobs)} jobs, ${
            of(confirmedEvents, options.totalEvents)
          } events, ${rate(confirmedEvents, t - started)} events/s`,
        );
      }
    }
    // Every answer in flight, or after the signal those within the grace.
    const answers = Promise.all(inFlight.flatMap((lane) => lane.answers));
    if (!(await settledWithin(answers, signal))) {
      using grace = deadline(ANSWER_GRACE_MS);
      await settledWithin(answers, grace.signal);
    }
    const unconfirmed = submitted - answered;
    if (failure !== undefined) {
      // Jobs written before a connection loss have an unknown outcome
      // (docs/gearman-protocol.md#submitting); the confirmed ones certainly arrived.
      const confirmed = `${confirmedJobs} jobs with ${confirmedEvents} events confirmed`;
      throw new Error(`${errorMessage(failure)} (${confirmed} before the failure)`, {
        cause: failure,
      });
    }
    return {
      jobs: confirmedJobs,
      events: confirmedEvents,
      durationMs: performance.now() - started,
      interrupted: signal.aborted,
      unconfirmed,
    };
  } finally {
    await lanes.close();
  }
}

/** One lane per job server, or one RabbitMQ channel. */
interface Lanes {
  readonly submit: readonly ((payload: string | Uint8Array) => Promise<unknown>)[];
  close(): Promise<void>;
}

async function openLanes(queue: string, options: Target & { signal: AbortSignal }): Promise<Lanes> {
  const { gearmanAddr: servers, signal } = options;
  if (options.rabbitmqUrl !== undefined) {
    // A broker that never answers the handshake would hold on.
    const publisher = await AmqpPublisher.connect(options.rabbitmqUrl, {
      durableQueues: options.rabbitmqDurableQueues ?? false,
      ...(options.rabbitmqDeclare === undefined ? {} : { declare: options.rabbitmqDeclare }),
    }, { timeoutMs: CONNECT_TIMEOUT_MS, signal });
    await publisher.declare(queue).catch(async (err: unknown) => {
      await publisher.close();
      throw err;
    });
    return {
      submit: [(payload) => publisher.publish(queue, [payload])],
      close: () => publisher.close(),
    };
  }
  if (servers.length === 0) throw new RangeError("Cannot publish: no job server given");
  const clients: GearmanClient[] = [];
  const close = () => Promise.all(clients.map((c) => c.close())).then(() => {});
  try {
    for (const server of servers) {
      clients.push(
        await GearmanClient.connect(server, {
          window: WINDOW,
          connectTimeoutMs: CONNECT_TIMEOUT_MS,
          signal,
        }),
      );
    }
  } catch (err: unknown) {
    await close();
    throw err;
  }
  return {
    submit: clients.map((client) => (payload) => client.submitBackground(queue, payload)),
    close,
  };
}

/** Publish to a command's target and print the summary line; 0, or 130 when interrupted. */
export async function publishToTarget(
  queue: string,
  items: Iterable<PublishItem> | AsyncIterable<PublishItem>,
  target: Target,
  totals: { readonly totalJobs: number; readonly totalEvents: number },
  io: Io,
  signal: AbortSignal | undefined,
): Promise<number> {
  const result = await publishJobs(queue, items, { ...target, io, ...totals, signal });
  const where = target.rabbitmqUrl === undefined ? target.gearmanAddr.length : targetLabel(target);
  io.out(summaryLine(queue, result, where));
  return result.interrupted ? INTERRUPTED_EXIT_CODE : 0;
}

/** The job servers, or `RabbitMQ <url>` with the password masked. */
export function targetLabel(options: Target): string {
  return options.rabbitmqUrl === undefined
    ? options.gearmanAddr.join(", ")
    : `RabbitMQ ${redactAmqpUrl(options.rabbitmqUrl)}`;
}

/** `published 3 jobs (250 events) to statusngin_x on 1 job server in 0.12 s: …`. */
export function summaryLine(
  queue: string,
  result: PublishResult,
  servers: number | string,
): string {
  const s = result.durationMs / 1000;
  const unknown = result.unconfirmed > 0
    ? ` and ${result.unconfirmed} more with no answer (outcome unknown)`
    : "";
  return `${
    result.interrupted ? "interrupted after publishing" : "published"
  } ${result.jobs} jobs (${result.events} events)${unknown} to ${queue} on ${
    typeof servers === "string" ? servers : `${servers} job server${servers === 1 ? "" : "s"}`
  } in ${s.toFixed(2)} s: ${rate(result.events, result.durationMs)} events/s, ${
    rate(result.jobs, result.durationMs)
  } jobs/s`;
}

/** Jobs with the events each carries: full bulk jobs of `perJob`, then the remainder. */
export function* counted(
  payloads: Iterable<string>,
  total: number,
  perJob: number,
): Generator<PublishItem> {
  let left = total;
  for (const payload of payloads) {
    const events = Math.min(perJob, left);
    left -= events;
    yield { payload, events };
  }
}

/** One line of a file (`number` 1-based), without its line break and a trailing CR. */
interface FileLine {
  readonly number: number;
  readonly bytes: Uint8Array;
}

/**
 * The lines of a file as raw bytes, streamed: recorded payloads may hold bytes that are not
 * valid UTF-8 (docs/tables.md#invalid-utf8), which must reach the worker unchanged.
 */
async function* readLines(path: string): AsyncGenerator<FileLine> {
  // The stream closes the file at its end, or when the loop is left early.
  const file = await Deno.open(path, { read: true });
  // A line's chunks, joined once at its end: a record of many MiB is copied twice, not once per
  // chunk. Each line is a copy, so that it does not hold on to the whole chunk.
  let pending: Uint8Array[] = [];
  let number = 0;
  for await (const chunk of file.readable) {
    let start = 0;
    for (let end = chunk.indexOf(0x0a); end >= 0; end = chunk.indexOf(0x0a, start)) {
      const part = chunk.subarray(start, end);
      const line = pending.length === 0 ? part.slice() : concatBytes([...pending, part]);
      pending = [];
      yield { number: ++number, bytes: stripCr(line) };
      start = end + 1;
    }
    if (start < chunk.length) pending.push(chunk.subarray(start));
  }
  if (pending.length > 0) yield { number: ++number, bytes: stripCr(concatBytes(pending)) };
}

function stripCr(line: Uint8Array): Uint8Array {
  return line.length > 0 && line[line.length - 1] === 0x0d ? line.subarray(0, -1) : line;
}

const LENIENT_UTF8 = new TextDecoder();

/**
 * The non-blank lines of a JSON-lines file, each with what it parses to or why it does not.
 * Invalid UTF-8 becomes U+FFFD for the parse, which cannot break JSON syntax; `bytes` keep the
 * original, which the worker repairs (docs/tables.md#invalid-utf8).
 */
export async function* readJsonLines(
  path: string,
): AsyncGenerator<FileLine & ({ readonly doc: unknown } | { readonly error: string })> {
  for await (const line of readLines(path)) {
    if (line.bytes.every((b) => b === 0x20 || b === 0x09 || b === 0x0d)) continue;
    try {
      yield { ...line, doc: JSON.parse(LENIENT_UTF8.decode(line.bytes)) };
    } catch (err: unknown) {
      yield { ...line, error: errorMessage(err) };
    }
  }
}

/** Events of one recorded job: the length of `messages` for a bulk job, else 1. */
function eventsOf(doc: unknown): number {
  // Only an object has `messages`: arrays and other values parsed from JSON lack the key.
  const messages = (doc as { readonly messages?: unknown } | null)?.messages;
  return Array.isArray(messages) ? messages.length : 1;
}

/** A first pass, so that a bad line (or no line) stops the run before anything is published. */
async function scanRecording(
  path: string,
): Promise<{ jobs: number; events: number } | { error: string }> {
  let jobs = 0;
  let events = 0;
  for await (const line of readJsonLines(path)) {
    if ("error" in line) return { error: `line ${line.number} is not valid JSON: ${line.error}` };
    jobs++;
    events += eventsOf(line.doc);
  }
  return jobs === 0 ? { error: "the file holds no payload" } : { jobs, events };
}

async function* recordedJobs(path: string): AsyncGenerator<PublishItem> {
  for await (const line of readJsonLines(path)) {
    if ("error" in line) throw new SyntaxError(line.error);
    yield { payload: line.bytes, events: eventsOf(line.doc) };
  }
}

/**
 * Run the `publish` command: prints the seed (synthetic events), progress lines every 2 s, and
 * a final line with jobs, events, duration and rate. Exit 0 published; 1 a job server failed
 * or the file is unusable; 2 usage error; 130 interrupted by the signal.
 */
export async function runPublishCommand(
  options: PublishCommandOptions,
  io: Io,
  signal?: AbortSignal,
): Promise<number> {
  const { queue, gearmanAddr } = options;
  if (!isQueueName(queue)) {
    io.err(`Cannot publish: unknown queue "${queue}"; expected one of: ${QUEUE_NAMES.join(", ")}`);
    return USAGE_EXIT_CODE;
  }
  if (gearmanAddr.length === 0 && options.rabbitmqUrl === undefined) {
    io.err("Cannot publish: no job server given (--gearman-addr host:port[,host:port…])");
    return USAGE_EXIT_CODE;
  }

  let items: Iterable<PublishItem> | AsyncIterable<PublishItem>;
  let totalJobs: number;
  let totalEvents: number;
  if (options.fromFile !== undefined) {
    const path = options.fromFile;
    const scan = await scanRecording(path).catch((err: unknown) => ({ error: errorMessage(err) }));
    if ("error" in scan) {
      io.err(`Cannot publish from "${path}": ${scan.error}; nothing was published`);
      return 1;
    }
    io.out(`publishing ${scan.jobs} recorded jobs (${scan.events} events) from ${path}`);
    items = recordedJobs(path);
    totalJobs = scan.jobs;
    totalEvents = scan.events;
  } else {
    if (options.seed !== undefined && !Number.isSafeInteger(options.seed)) {
      io.err(`Cannot publish: seed must be an integer, got ${options.seed}`);
      return USAGE_EXIT_CODE;
    }
    const form = options.form ?? defaultForm(queue as QueueName);
    const perJob = form === "single" ? 1 : options.eventsPerJob;
    const seed = options.seed ?? randomSeed();
    totalEvents = options.count;
    totalJobs = Math.ceil(totalEvents / perJob);
    io.out(
      `publishing ${totalEvents} synthetic events to ${queue} as ${totalJobs} ${form} jobs (seed ${seed})`,
    );
    const events = syntheticEvents(queue, totalEvents, { seed });
    items = counted(jobsFor(queue, events, { form, eventsPerJob: perJob }), totalEvents, perJob);
  }

  try {
    return await publishToTarget(queue, items, options, { totalJobs, totalEvents }, io, signal);
  } catch (err: unknown) {
    // The connect stopped by the signal throws its reason; a failure after the start says how
    // many jobs were confirmed before it, interrupted or not.
    if (signal?.aborted && err === signal.reason) {
      io.err(`Publishing to ${queue} was interrupted before it started`);
      return INTERRUPTED_EXIT_CODE;
    }
    io.err(`Cannot publish to ${queue} on ${targetLabel(options)}: ${errorMessage(err)}`);
    return signal?.aborted ? INTERRUPTED_EXIT_CODE : 1;
  }
}
