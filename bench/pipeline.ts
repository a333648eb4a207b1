/**
 * Drain time of a queued backlog, end to end, side by side with what MySQL
 * can take: per table and batch size, one round runs
 *
 * - ceiling, 1 connection: the same rows as prepared multi-row upserts of the
 *   batch size, back to back on one connection (decoded in advance, no queue),
 *   measured twice: in this process, and as a plain loop in a process of its own
 *   (`_plain_ceiling.ts`) whose heap holds nothing else; the faster of the two
 *   in the round is the ceiling. Both send what the worker's writers send, the
 *   way they send it (its packet encoder, `Deno.connect` sockets), with every
 *   statement's values built and its statement prepared before the timer;
 * - ceiling, 2 connections: the same, the rows shared out over two
 *   connections writing at once;
 * - the worker as a process (`main.ts run`, default settings but the batch
 *   size) draining the backlog from gearmand;
 * - the same from RabbitMQ.
 *
 * A worker's time runs from its first job taken to its last job
 * acknowledged, which is after the job's last row was committed (D1); a second
 * rate counts from its process start (the spawn) instead, and the start-up to
 * the first job is printed too. The order of the steps rotates from round to round
 * (whichever runs later pays for InnoDB's purge and page flushing left by the
 * one before). Ratios are taken within each round, then the median and the
 * range over the rounds are printed, because other work on a shared machine
 * moves single figures by ±20 %.
 *
 *   deno run -A bench/pipeline.ts [--rounds 5] [--jobs 1000] [--events-per-job 100]
 *     [--batches 100,700] [--tables statusengine_hostchecks,statusengine_servicestatus]
 *     [--gearman-only] [--worker-args "--mysql-writers-per-table 1"] [--baseline DIR]
 *     [--variant "--mysql-writers-per-table 1"] [--worker-v8-flags --prof,--logfile=/tmp/v8.log]
 *     [--unfixed-ceiling] [--updates]
 *
 * `--updates` fills the table before every step with the same rows one minute older, so that
 * each row written is an update of its key (a status table's steady state: one row per object,
 * overwritten by each newer snapshot) instead of an insert into an empty table.
 * `--variant ARGS` adds a column: our worker with these extra arguments, draining from gearmand in
 * the same rounds (how `--mysql-writers-per-table` got its default).
 * `--baseline DIR` adds columns: the worker of another checkout (e.g. `git archive <commit>`
 * unpacked into DIR) draining the same backlog from gearmand with its own default settings and
 * V8 flags, so two versions are compared in one run, with our worker's rate and CPU per event
 * against the baseline's paired round by round.
 *
 * `--unfixed-ceiling` adds the in-process ceiling in the form this bench used before issue 26
 * (mysql2's own packet encoder over Node's `net.Socket`, a stack trace per call, the values
 * sliced and flattened inside the timer), as a ratio of the ceiling.
 *
 * `--worker-v8-flags` adds V8 flags to our worker's and the baseline's (e.g. `--prof` for a tick
 * profile of each, to compare two versions function by function on the same drain).
 * Each drain also reports the worker's CPU time (user + system, from `/proc`) per 100,000
 * events, counted from its readiness to its last acknowledgement.
 *
 * Targets (issue 14): Gearman ≥ 90 % of the 1-connection ceiling at batch 100
 * and 700, ≥ 1.3 × at batch 700; RabbitMQ ≥ 85 % of Gearman; peak RSS < 200 MB.
 */
import process from "node:process";
import mysql from "mysql2/promise";
import { startGearmand } from "../tests/helpers/gearmand.ts";
import { createScratchDatabase } from "../tests/helpers/mysql.ts";
import { createScratchVhost } from "../tests/helpers/rabbitmq.ts";
import { createSchema, TEST_QUEUE_DURABILITY } from "../tests/helpers/worker.ts";
import { seriesValue, startWorkerProcess } from "../tests/helpers/worker_process.ts";
import { adminStatus } from "../src/gearman/admin.ts";
import { AmqpPublisher } from "../src/amqp/publisher.ts";
import { insertStatement } from "../src/mysql/sql.ts";
import type { SqlValue } from "../src/events/types.ts";
import { type TableName, TABLES } from "../src/mysql/catalogue.ts";
import { mysqlOptionsFromUrl } from "../src/util/mysql_url.ts";
import { denoSocketStream } from "../src/mysql/failover.ts";
import { bulkParameters, installBulkExecuteEncoder } from "../src/mysql/mysql2_internals.ts";
import {
  ALL_CASES,
  type Case,
  jobsOf as jobsOfCase,
  rowsOf as rowsOfCase,
} from "./_pipeline_rows.ts";
import { V8_FLAGS } from "../tools/compile.ts";
import {
  arg,
  cpuSeconds,
  fmt,
  formatMachine,
  machineInfo,
  median,
  peakRssMb,
  report,
  submitMany,
} from "./_util.ts";

const ROUNDS = arg("--rounds", 5);
const JOBS = arg("--jobs", 1000);
const PER_JOB = arg("--events-per-job", 100);
const BATCHES = list("--batches", "100,700").map(Number);
const TABLE_FILTER = list("--tables", "statusengine_hostchecks,statusengine_servicestatus");
const WITH_RABBITMQ = !Deno.args.includes("--gearman-only");
const WORKER_ARGS = list("--worker-args", "", " ");
const BASELINE = list("--baseline", "")[0];
const VARIANT = list("--variant", "", " ");
const EXTRA_V8_FLAGS = list("--worker-v8-flags", "");
const UNFIXED_CEILING = Deno.args.includes("--unfixed-ceiling");
const UPDATES = Deno.args.includes("--updates");
/** With `--updates`: the rows every step starts from, by table. */
const prefill = new Map<string, readonly SqlValue[][]>();
const BASELINE_V8_FLAGS: readonly string[] | undefined = BASELINE === undefined
  ? undefined
  : (await import(new URL("tools/compile.ts", `file://${BASELINE.replace(/\/?$/, "/")}`).href))
    .V8_FLAGS;
/**
 * How often the drain's progress is read near its start and end, and in between. Every read
 * costs the broker (an AMQP `queue.declare` or a gearmand admin connection): at 5 ms throughout,
 * RabbitMQ spent 0.07 s more CPU per 100,000 events than at 25 ms. A RabbitMQ drain's end is
 * read from the worker's `/metrics` (AMQP does not tell unacknowledged messages), once the
 * broker has no message ready, which is while up to `--rabbitmq-prefetch` messages are still in
 * the worker: scraped every 5 ms, that cost the worker as much CPU as the rest of its drain
 * took more than Gearman's (hostchecks, batch 100: 1.59 against 1.27 s per 100,000 events,
 * then 1.42 against 1.41 at 25 ms). So it is read every 25 ms; the end it finds is up to 25 ms
 * late, against RabbitMQ.
 */
const POLL_MS = 5;
const POLL_MIDWAY_MS = 25;
/** Jobs still open at gearmand from which the end is watched closely. */
const NEAR_END_JOBS = 50;

const nowSeconds = Math.floor(Date.now() / 1000);

function list(name: string, fallback: string, separator = ","): string[] {
  const i = Deno.args.indexOf(name);
  const text = i === -1 ? fallback : (Deno.args[i + 1] ?? "");
  return text.split(separator).filter((s) => s !== "");
}

const CASES = ALL_CASES.filter((c) => TABLE_FILTER.includes(c.table));
const jobsOf = (c: Case) => jobsOfCase(c, JOBS, PER_JOB, nowSeconds);
const rowsOf = (c: Case, payloads: readonly string[]) => rowsOfCase(c, payloads, nowSeconds);

/**
 * The MySQL server's process, when it runs on this machine (its pid file is
 * readable): its CPU time shows how a drain shares the machine's cores.
 */
async function serverPidOf(url: string): Promise<number | undefined> {
  const conn = await mysql.createConnection(mysqlOptionsFromUrl(url));
  try {
    const [rows] = await conn.query("SELECT @@pid_file AS f");
    const file = String((rows as { f: string }[])[0]?.f ?? "");
    const pid = Number((await Deno.readTextFile(file)).trim());
    cpuSeconds(pid);
    return pid;
  } catch {
    return undefined;
  } finally {
    await conn.end();
  }
}

/** CPU seconds of the MySQL server so far (NaN when it is not on this machine). */
function serverCpuSeconds(): number {
  return cpuSecondsOr(SERVER_PID);
}

/** The RabbitMQ node's OS process on this machine, asked of `rabbitmqctl` (undefined: unknown). */
async function rabbitmqPid(): Promise<number | undefined> {
  try {
    const out = await new Deno.Command("rabbitmqctl", {
      args: ["eval", "os:getpid()."],
      stdout: "piped",
      stderr: "null",
    }).output();
    const pid = Number(/"(\d+)"/.exec(new TextDecoder().decode(out.stdout))?.[1]);
    if (!out.success || !Number.isInteger(pid)) return undefined;
    cpuSeconds(pid);
    return pid;
  } catch {
    return undefined;
  }
}

/** CPU seconds of a process, NaN when it is unknown. */
function cpuSecondsOr(pid: number | undefined): number {
  return pid === undefined ? NaN : cpuSeconds(pid);
}

/** This process's own CPU seconds so far (the ceilings' client side). */
function ownCpuSeconds(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
}

async function truncate(url: string, table: string): Promise<void> {
  const conn = await mysql.createConnection(mysqlOptionsFromUrl(url));
  try {
    await conn.query(`TRUNCATE TABLE \`${table}\``);
    const rows = prefill.get(table) ?? [];
    for (let i = 0; i < rows.length; i += 500) {
      const chunk = rows.slice(i, i + 500);
      await conn.query(insertStatement(table as TableName, chunk.length), chunk.flat());
    }
    if (rows.length > 0) {
      await conn.query(
        `UPDATE \`${table}\` SET \`status_update_time\` = \`status_update_time\` - 60`,
      );
    }
  } finally {
    await conn.end();
  }
}

/** A ceiling's rate and the CPU seconds per 100,000 events of its two sides. */
interface Ceiling {
  readonly eventsPerSecond: number;
  /** The bench's own process, encoding and sending the statements. */
  readonly clientCpuPer100k: number;
  readonly serverCpuPer100k: number;
}

/**
 * How the in-process ceiling talks to MySQL. `worker`: as the worker's writers do (its
 * COM_STMT_EXECUTE encoder, `Deno.connect` sockets, no stack trace per call), every
 * statement's values flattened and its statement prepared before the timer. `mysql2`: the
 * form this bench used before (mysql2's own encoder over Node's `net.Socket`, a stack trace
 * per call, the values sliced and flattened inside the timer), kept with `--unfixed-ceiling`
 * to show what it cost.
 */
type CeilingForm = "worker" | "mysql2";

/**
 * Events/s writing `rows` over `connections` connections at once, each
 * sending prepared statements of `batch` rows back to back (the way the
 * writers write, src/mysql/executor.ts).
 */
async function ceiling(
  url: string,
  c: Case,
  rows: readonly SqlValue[][],
  batch: number,
  connections: number,
  form: CeilingForm = "worker",
): Promise<Ceiling> {
  await truncate(url, c.table);
  const table = TABLES[c.table];
  const shares: SqlValue[][][] = Array.from({ length: connections }, () => []);
  rows.forEach((r, i) => shares[i % connections]?.push(r));
  if (form === "worker") installBulkExecuteEncoder();
  const conns = await Promise.all(
    shares.map(() =>
      mysql.createConnection({
        ...mysqlOptionsFromUrl(url),
        ...(form === "worker" ? { trace: false, stream: denoSocketStream } : {}),
      } as mysql.ConnectionOptions)
    ),
  );
  const statements = shares.map((share) => {
    const out: SqlValue[][] = [];
    for (let i = 0; i < share.length; i += batch) out.push(share.slice(i, i + batch).flat());
    return out;
  });
  const sqlOf = (values: readonly SqlValue[]) =>
    insertStatement(table, values.length / table.columns.length);
  try {
    if (form === "worker") {
      await Promise.all(conns.map(async (conn, k) => {
        const sizes = new Set((statements[k] ?? []).map((v) => v.length));
        for (const size of sizes) await conn.prepare(sqlOf(new Array(size)));
      }));
    }
    const t0 = performance.now();
    const client0 = ownCpuSeconds();
    const server0 = serverCpuSeconds();
    await Promise.all(conns.map(async (conn, k) => {
      if (form === "worker") {
        for (const values of statements[k] ?? []) {
          await conn.execute(sqlOf(values), bulkParameters(values) as mysql.ExecuteValues);
        }
        return;
      }
      const share = shares[k] ?? [];
      for (let i = 0; i < share.length; i += batch) {
        const chunk = share.slice(i, i + batch);
        await conn.execute(insertStatement(table, chunk.length), chunk.flat());
      }
    }));
    const seconds = (performance.now() - t0) / 1000;
    return {
      eventsPerSecond: rows.length / seconds,
      clientCpuPer100k: (ownCpuSeconds() - client0) / rows.length * 100_000,
      serverCpuPer100k: (serverCpuSeconds() - server0) / rows.length * 100_000,
    };
  } finally {
    await Promise.all(conns.map((conn) => conn.end()));
  }
}

/**
 * The same rows written by `_plain_ceiling.ts`, a process of its own whose heap holds only
 * them: the plain loop against which the in-process ceiling is checked.
 */
async function plainCeiling(url: string, c: Case, batch: number, connections: number) {
  await truncate(url, c.table);
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-all",
      new URL("_plain_ceiling.ts", import.meta.url).pathname,
      ...["--url", url, "--table", c.table, "--batch", String(batch)],
      ...["--connections", String(connections), "--jobs", String(JOBS)],
      ...["--events-per-job", String(PER_JOB), "--now", String(nowSeconds)],
      ...(SERVER_PID === undefined ? [] : ["--server-pid", String(SERVER_PID)]),
    ],
    stdout: "piped",
    stderr: "inherit",
  }).output();
  if (!out.success) throw new Error(`_plain_ceiling.ts failed (${out.code})`);
  const r = JSON.parse(new TextDecoder().decode(out.stdout).trim().split("\n").pop() ?? "");
  return {
    eventsPerSecond: r.eventsPerSecond,
    clientCpuPer100k: r.clientCpuPer100k,
    serverCpuPer100k: r.serverCpuPer100k ?? NaN,
  } as Ceiling;
}

/** The faster of two ceilings measured in the same round. */
const faster = (a: Ceiling, b: Ceiling) => a.eventsPerSecond >= b.eventsPerSecond ? a : b;

/** Where the backlog waits, and the worker of which checkout drains it. */
type Backend =
  | {
    readonly kind: "gearman";
    readonly addr: string;
    readonly pid: number;
    readonly baseline?: string;
    readonly args?: readonly string[];
  }
  | { readonly kind: "rabbitmq"; readonly url: string; readonly pid: number | undefined };

interface Drain {
  /** From the first job taken to the last job acknowledged. */
  readonly eventsPerSecond: number;
  /** From the worker's process start (spawn) to the last job acknowledged. */
  readonly eventsPerSecondFromStart: number;
  /** From the spawn to the first job taken. */
  readonly startupSeconds: number;
  readonly peakRssMb: number;
  /** Statements retried after a deadlock (1213) or lock wait timeout, and statements sent. */
  readonly lockRetries: number;
  readonly statements: number;
  /** The worker's CPU seconds (user + system) per 100,000 events. */
  readonly cpuPer100k: number;
  /** The MySQL server's, in the same time. */
  readonly serverCpuPer100k: number;
  /** The job server's or broker's, in the same time. */
  readonly brokerCpuPer100k: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function drain(
  url: string,
  backend: Backend,
  c: Case,
  payloads: readonly string[],
  batch: number,
): Promise<Drain> {
  await truncate(url, c.table);
  const total = payloads.length;
  let publisher: AmqpPublisher | undefined;
  if (backend.kind === "gearman") {
    await submitMany(backend.addr, c.queue, total, (i) => payloads[i] as string);
  } else {
    publisher = await AmqpPublisher.connect(backend.url, TEST_QUEUE_DURABILITY);
    for (let i = 0; i < total; i += 200) {
      await publisher.publish(c.queue, payloads.slice(i, i + 200));
    }
  }
  try {
    // Jobs at the broker not yet taken, and jobs not yet acknowledged (undefined: unknown).
    const progress = async (): Promise<{ waiting: number; open: number | undefined }> => {
      if (backend.kind === "gearman") {
        const row = (await adminStatus(backend.addr)).find((r) => r.function === c.queue);
        return { waiting: (row?.total ?? 0) - (row?.running ?? 0), open: row?.total ?? 0 };
      }
      return {
        waiting: (await (publisher as AmqpPublisher).depth(c.queue)).ready,
        open: undefined,
      };
    };
    // Watched from the spawn on: the worker starts taking jobs before its readiness is seen.
    let t0: number | undefined;
    const started = (async () => {
      for (;;) {
        const p = await progress();
        if (p.waiting < total || p.open === 0) return (t0 = performance.now());
        await sleep(POLL_MS);
      }
    })();
    const baseline = backend.kind === "gearman" ? backend.baseline : undefined;
    const spawned = performance.now();
    await using worker = await startWorkerProcess({
      gearmanAddr: backend.kind === "gearman" ? backend.addr : "",
      mysqlUrl: url,
      args: [
        "--mysql-batch-size",
        String(batch),
        ...(backend.kind === "rabbitmq"
          ? ["--consumer", "rabbitmq", "--rabbitmq-url", backend.url]
          : []),
        ...(baseline === undefined ? WORKER_ARGS : []),
        ...(backend.kind === "gearman" ? backend.args ?? [] : []),
      ],
      ...(baseline === undefined
        ? (EXTRA_V8_FLAGS.length === 0 ? {} : { v8Flags: [...V8_FLAGS, ...EXTRA_V8_FLAGS] })
        : {
          main: `${baseline.replace(/\/?$/, "/")}main.ts`,
          v8Flags: [...(BASELINE_V8_FLAGS ?? []), ...EXTRA_V8_FLAGS],
        }),
    });
    const cpuAtStart = cpuSeconds(worker.pid);
    const serverAtStart = serverCpuSeconds();
    const brokerAtStart = cpuSecondsOr(backend.pid);
    await started;
    for (;;) {
      const p = await progress();
      if (p.open === 0) break;
      if (p.open === undefined && p.waiting === 0) {
        // RabbitMQ does not tell unacknowledged messages over AMQP: ask the worker.
        const done = seriesValue(await worker.metrics(), "statusengine_queue_jobs_total", {
          queue_name: c.queue,
          result: "completed",
        });
        if (done >= total) break;
      }
      // A RabbitMQ queue's last messages are watched through the worker's `/metrics`, whose
      // every scrape costs the worker CPU; they are read at the midway pace.
      const nearEnd = p.open !== undefined && p.open <= NEAR_END_JOBS;
      await sleep(nearEnd ? POLL_MS : POLL_MIDWAY_MS);
    }
    const end = performance.now();
    const seconds = (end - (t0 as number)) / 1000;
    const rss = peakRssMb(worker.pid);
    const cpu = cpuSeconds(worker.pid) - cpuAtStart;
    const metrics = await worker.metrics();
    return {
      eventsPerSecond: (total * PER_JOB) / seconds,
      eventsPerSecondFromStart: (total * PER_JOB) / ((end - spawned) / 1000),
      startupSeconds: ((t0 as number) - spawned) / 1000,
      peakRssMb: rss,
      lockRetries: seriesValue(metrics, "statusengine_db_batch_retries_total"),
      statements: seriesValue(metrics, "statusengine_db_flushes_total", { table: c.table }),
      cpuPer100k: cpu / (total * PER_JOB) * 100_000,
      serverCpuPer100k: (serverCpuSeconds() - serverAtStart) / (total * PER_JOB) * 100_000,
      brokerCpuPer100k: (cpuSecondsOr(backend.pid) - brokerAtStart) / (total * PER_JOB) *
        100_000,
    };
  } finally {
    await publisher?.close();
  }
}

interface Round {
  /** The ceilings: the faster of the in-process one and the plain loop, per round. */
  c1: Ceiling;
  c2: Ceiling;
  inProcess1: Ceiling;
  inProcess2: Ceiling;
  plain1: Ceiling;
  plain2: Ceiling;
  /** The in-process ceiling in its earlier form (`--unfixed-ceiling`). */
  unfixed1?: Ceiling;
  gearman: Drain;
  rabbitmq?: Drain;
  baseline?: Drain;
  variant?: Drain;
}

/** Client and server CPU seconds per 100,000 events. */
const cpuText = (client: number, server: number) =>
  `${client.toFixed(2)} + ${Number.isNaN(server) ? "?" : server.toFixed(2)} CPU s/100k`;
const ceilingText = (x: Ceiling | undefined) =>
  x === undefined
    ? "-"
    : `${fmt(x.eventsPerSecond)} (${cpuText(x.clientCpuPer100k, x.serverCpuPer100k)})`;
/** Medians of the CPU figures of each process, `a + b [+ c]`; `-` without rounds, `?` where unknown. */
function cpuSum(parts: readonly (readonly number[])[]): string {
  if ((parts[0]?.length ?? 0) === 0) return "-";
  return parts.map((xs) => {
    const m = median(xs);
    return Number.isNaN(m) ? "?" : m.toFixed(2);
  }).join(" + ");
}

const pct = (x: number) => `${(x * 100).toFixed(0)} %`;
const times = (x: number) => `${x.toFixed(2)}×`;

/** `median [min–max]` of a list of figures. */
function spread(values: readonly number[], show: (x: number) => string): string {
  if (values.length === 0) return "-";
  return `${show(median(values))} [${show(Math.min(...values))}–${show(Math.max(...values))}]`;
}

report(formatMachine(await machineInfo()));
report(
  `pipeline: drain of ${fmt(JOBS)} queued jobs × ${PER_JOB} events, worker as a process ` +
    `(default settings but the batch size${
      WORKER_ARGS.length > 0 ? ", " + WORKER_ARGS.join(" ") : ""
    }), ` +
    `${UPDATES ? "every row an update of an older one, " : ""}${ROUNDS} rounds; median [min–max]`,
);
await using gearmand = await startGearmand();
await using vhost = WITH_RABBITMQ ? await createScratchVhost("se_bench") : undefined;
await using db = await createScratchDatabase("se_bench");
await createSchema(db.url);
const SERVER_PID = await serverPidOf(db.url);
const gearman: Backend = { kind: "gearman", addr: gearmand.addr, pid: gearmand.pid };
const rabbit: Backend | undefined = vhost === undefined
  ? undefined
  : { kind: "rabbitmq", url: vhost.url, pid: await rabbitmqPid() };
const variant: Backend | undefined = VARIANT.length === 0
  ? undefined
  : { ...gearman, args: VARIANT };
const previous: Backend | undefined = BASELINE === undefined
  ? undefined
  : { ...gearman, baseline: BASELINE };

const lines: string[][] = [];
for (const c of CASES) {
  const payloads = jobsOf(c);
  const rows = rowsOf(c, payloads);
  if (UPDATES) {
    if (TABLES[c.table].writeMode !== "full_upsert") {
      throw new Error(`--updates: ${c.table} is not a status table`);
    }
    prefill.set(c.table, rows);
  }
  for (const batch of BATCHES) {
    const rounds: Round[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      const round: Partial<Round> = {};
      const steps = [
        async () => (round.inProcess1 = await ceiling(db.url, c, rows, batch, 1)),
        async () => (round.inProcess2 = await ceiling(db.url, c, rows, batch, 2)),
        async () => (round.plain1 = await plainCeiling(db.url, c, batch, 1)),
        async () => (round.plain2 = await plainCeiling(db.url, c, batch, 2)),
        ...(UNFIXED_CEILING
          ? [async () => (round.unfixed1 = await ceiling(db.url, c, rows, batch, 1, "mysql2"))]
          : []),
        async () => (round.gearman = await drain(db.url, gearman, c, payloads, batch)),
        ...(rabbit === undefined
          ? []
          : [async () => (round.rabbitmq = await drain(db.url, rabbit, c, payloads, batch))]),
        ...(previous === undefined
          ? []
          : [async () => (round.baseline = await drain(db.url, previous, c, payloads, batch))]),
        ...(variant === undefined
          ? []
          : [async () => (round.variant = await drain(db.url, variant, c, payloads, batch))]),
      ];
      for (let k = 0; k < steps.length; k++) {
        await (steps[(k + r) % steps.length] as () => Promise<unknown>)();
      }
      round.c1 = faster(round.inProcess1 as Ceiling, round.plain1 as Ceiling);
      round.c2 = faster(round.inProcess2 as Ceiling, round.plain2 as Ceiling);
      rounds.push(round as Round);
      const drained = (name: string, d: Drain | undefined) =>
        d === undefined
          ? ""
          : `, ${name} ${fmt(d.eventsPerSecond)} (${d.peakRssMb.toFixed(0)} MB, ${
            cpuText(d.cpuPer100k, d.serverCpuPer100k)
          } + broker ${
            Number.isNaN(d.brokerCpuPer100k) ? "?" : d.brokerCpuPer100k.toFixed(2)
          }, ${d.lockRetries} lock retries in ${d.statements} statements)`;
      report(
        `  ${c.table} batch ${batch} round ${r + 1}: 1 conn ${
          ceilingText(round.inProcess1)
        } plain loop ${ceilingText(round.plain1)}${
          round.unfixed1 === undefined ? "" : ` unfixed ${ceilingText(round.unfixed1)}`
        }, 2 conns ${ceilingText(round.inProcess2)} plain loop ${ceilingText(round.plain2)}${
          round.gearman === undefined
            ? ""
            : `, gearman from process start ${
              fmt(round.gearman.eventsPerSecondFromStart)
            } (start-up ${round.gearman.startupSeconds.toFixed(2)} s)`
        }${drained("gearman", round.gearman)}${drained("rabbitmq", round.rabbitmq)}${
          drained("baseline", round.baseline)
        }${drained("variant", round.variant)} events/s`,
      );
    }
    const of = (pick: (x: Round) => Drain | undefined) =>
      rounds.flatMap((x) => {
        const d = pick(x);
        return d === undefined ? [] : [{ d, x }];
      });
    const g = of((x) => x.gearman);
    const q = of((x) => x.rabbitmq);
    const b = of((x) => x.baseline);
    const v = of((x) => x.variant);
    const mb = (x: number) => x.toFixed(0);
    lines.push([
      `\`${c.table}\``,
      String(batch),
      spread(rounds.map((x) => x.c1.eventsPerSecond), fmt),
      spread(rounds.map((x) => x.inProcess1.eventsPerSecond / x.plain1.eventsPerSecond), pct),
      ...(UNFIXED_CEILING
        ? [
          spread(
            rounds.map((x) => (x.unfixed1?.eventsPerSecond ?? NaN) / x.c1.eventsPerSecond),
            pct,
          ),
        ]
        : []),
      spread(rounds.map((x) => x.c2.eventsPerSecond / x.c1.eventsPerSecond), times),
      spread(g.map(({ d }) => d.eventsPerSecond), fmt),
      spread(g.map(({ d, x }) => d.eventsPerSecond / x.c1.eventsPerSecond), pct),
      spread(g.map(({ d, x }) => d.eventsPerSecond / x.c2.eventsPerSecond), pct),
      spread(g.map(({ d, x }) => d.eventsPerSecondFromStart / x.c1.eventsPerSecond), pct),
      spread(g.map(({ d, x }) => d.eventsPerSecondFromStart / x.c2.eventsPerSecond), pct),
      spread(g.map(({ d }) => d.startupSeconds), (x) => x.toFixed(2)),
      spread(q.map(({ d, x }) => d.eventsPerSecond / x.gearman.eventsPerSecond), pct),
      spread(g.map(({ d }) => d.peakRssMb), mb),
      spread(q.map(({ d }) => d.peakRssMb), mb),
      cpuSum([rounds.map((x) => x.c1.clientCpuPer100k), rounds.map((x) => x.c1.serverCpuPer100k)]),
      cpuSum([rounds.map((x) => x.c2.clientCpuPer100k), rounds.map((x) => x.c2.serverCpuPer100k)]),
      cpuSum([
        g.map(({ d }) => d.cpuPer100k),
        g.map(({ d }) => d.serverCpuPer100k),
        g.map(({ d }) => d.brokerCpuPer100k),
      ]),
      cpuSum([
        q.map(({ d }) => d.cpuPer100k),
        q.map(({ d }) => d.serverCpuPer100k),
        q.map(({ d }) => d.brokerCpuPer100k),
      ]),
      `${[...g, ...q].reduce((n, { d }) => n + d.lockRetries, 0)} / ${
        fmt([...g, ...q].reduce((n, { d }) => n + d.statements, 0))
      }`,
      ...(b.length === 0 ? [] : [
        spread(b.map(({ d, x }) => d.eventsPerSecond / x.c1.eventsPerSecond), pct),
        // Paired within a round: the two workers drained the same backlog minutes apart, so
        // these ratios carry less of the machine's drift than the medians of the columns.
        spread(b.map(({ d, x }) => x.gearman.eventsPerSecond / d.eventsPerSecond), pct),
        spread(b.map(({ d, x }) => x.gearman.cpuPer100k / d.cpuPer100k), pct),
        spread(b.map(({ d }) => d.peakRssMb), mb),
      ]),
      ...(v.length === 0 ? [] : [
        spread(v.map(({ d, x }) => d.eventsPerSecond / x.c1.eventsPerSecond), pct),
        spread(v.map(({ d, x }) => x.gearman.eventsPerSecond / d.eventsPerSecond), pct),
        spread(v.map(({ d }) => d.peakRssMb), mb),
      ]),
    ]);
  }
}
report("");
const header = [
  "table",
  "batch",
  "1 conn, ev/s",
  "in-process / plain loop, 1 conn",
  ...(UNFIXED_CEILING ? ["unfixed / 1 conn"] : []),
  "2 conns / 1 conn",
  "Gearman, ev/s",
  "Gearman / 1 conn",
  "Gearman / 2 conns",
  "from process start / 1 conn",
  "from process start / 2 conns",
  "start-up to first job, s",
  "RabbitMQ / Gearman",
  "Gearman peak RSS, MB",
  "RabbitMQ peak RSS, MB",
  "CPU s / 100k, client + MySQL: 1 conn",
  "2 conns",
  "CPU s / 100k, worker + MySQL + broker: Gearman",
  "RabbitMQ",
  "lock retries / statements",
  ...(BASELINE === undefined ? [] : [
    "baseline / 1 conn",
    "Gearman / baseline",
    "worker CPU / baseline, per event",
    "baseline peak RSS, MB",
  ]),
  ...(VARIANT.length === 0
    ? []
    : [`${VARIANT.join(" ")} / 1 conn`, "Gearman / variant", "variant peak RSS, MB"]),
];
report(`| ${header.join(" | ")} |`);
report(`| ${header.map(() => "---").join(" | ")} |`);
for (const line of lines) report(`| ${line.join(" | ")} |`);
