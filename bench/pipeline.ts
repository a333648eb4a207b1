/**
 * Events/s end to end (gearmand → worker → MariaDB, and RabbitMQ → worker →
 * MariaDB) side by side with the ceiling: the same rows written straight into
 * the same table with mysql2 multi-row statements of the same size, one after
 * another, no queue. Both backends run on the same tables and batch sizes.
 *
 *   deno run -A bench/pipeline.ts [--events 50000] [--events-per-job 100] [--runs 1]
 *     [--prefetch 100] [--gearman-only]
 *
 * Target (issue 3): end to end ≥ 80 % of the ceiling.
 */
import mysql from "mysql2/promise";
import { startGearmand } from "../tests/helpers/gearmand.ts";
import { createScratchDatabase } from "../tests/helpers/mysql.ts";
import {
  createSchema,
  jobsAtGearmand,
  TEST_QUEUE_DURABILITY,
  testConfig,
} from "../tests/helpers/worker.ts";
import { startWorker } from "../src/daemon/mod.ts";
import { decodeJob } from "../src/events/decode.ts";
import { insertStatement } from "../src/mysql/sql.ts";
import { appendAdjustedRow, type SqlValue, type ValueAdjustment } from "../src/mysql/values.ts";
import { type TableName, TABLES } from "../src/mysql/catalogue.ts";
import { mysqlOptionsFromUrl } from "../src/mysql/url.ts";
import { AmqpPublisher } from "../src/amqp/publisher.ts";
import { createScratchVhost } from "../tests/helpers/rabbitmq.ts";
import { arg, fmt, median, report, submitMany } from "./_util.ts";

const EVENTS = arg("--events", 50_000);
const PER_JOB = arg("--events-per-job", 100);
const RUNS = arg("--runs", 1);
const CAP = arg("--jobs-per-queue", 8);
const PREFETCH = arg("--prefetch", 100);
const WITH_RABBITMQ = !Deno.args.includes("--gearman-only");

const FIXTURES = new URL("../src/events/testdata/", import.meta.url);
const nowSeconds = Math.floor(Date.now() / 1000);

interface Case {
  readonly queue: string;
  readonly table: TableName;
  /** Make event i unique in the table's key. */
  readonly vary: (m: Record<string, Record<string, unknown>>, i: number) => void;
}

const CASES: readonly Case[] = [
  {
    queue: "statusngin_hostchecks",
    table: "statusengine_hostchecks",
    vary: (m, i) => {
      (m["hostcheck"] as Record<string, unknown>)["host_name"] = `bench-host-${i}`;
    },
  },
  {
    queue: "statusngin_servicestatus",
    table: "statusengine_servicestatus",
    vary: (m, i) => {
      const s = m["servicestatus"] as Record<string, unknown>;
      s["host_name"] = `bench-host-${i % 1000}`;
      s["service_description"] = `bench-service-${i}`;
      (m as unknown as Record<string, unknown>)["timestamp"] = nowSeconds;
    },
  },
];

function jobs(c: Case): string[] {
  const doc = JSON.parse(Deno.readTextFileSync(new URL(`${c.queue}.job`, FIXTURES)));
  const template = doc.messages[0];
  const out: string[] = [];
  for (let j = 0; j * PER_JOB < EVENTS; j++) {
    const messages = [];
    for (let k = 0; k < PER_JOB && j * PER_JOB + k < EVENTS; k++) {
      const m = structuredClone(template);
      c.vary(m, j * PER_JOB + k);
      messages.push(m);
    }
    out.push(JSON.stringify({ format: "none", messages }));
  }
  return out;
}

async function ceiling(url: string, c: Case, payloads: string[], batch: number): Promise<number> {
  const table = TABLES[c.table];
  const rows: SqlValue[][] = [];
  const adjustments: ValueAdjustment[] = [];
  for (const p of payloads) {
    const job = decodeJob(c.queue, p, { nodeName: "bench", nowSeconds, statusMaxAgeSeconds: 0 });
    if (job.kind !== "rows") throw new Error(`unexpected ${job.kind}`);
    for (const r of job.rows) {
      const values: SqlValue[] = [];
      appendAdjustedRow(table, r.row, values, adjustments);
      rows.push(values);
    }
  }
  const conn = await mysql.createConnection({ ...mysqlOptionsFromUrl(url) });
  try {
    await conn.query(`TRUNCATE TABLE \`${c.table}\``);
    const t0 = performance.now();
    // Written the way the writers write (server-side prepared statements,
    // src/mysql/executor.ts), so the ceiling is the best mysql2 can do here.
    for (let i = 0; i < rows.length; i += batch) {
      const chunk = rows.slice(i, i + batch);
      await conn.execute(insertStatement(table, chunk.length), chunk.flat());
    }
    return rows.length / ((performance.now() - t0) / 1000);
  } finally {
    await conn.end();
  }
}

/** Where the backlog waits: a gearmand, or a RabbitMQ vhost. */
type Backend = { readonly kind: "gearman"; readonly addr: string } | {
  readonly kind: "rabbitmq";
  readonly url: string;
};

async function enqueue(backend: Backend, queue: string, payloads: string[]): Promise<void> {
  if (backend.kind === "gearman") {
    await submitMany(backend.addr, queue, payloads.length, (i) => payloads[i] as string);
    return;
  }
  await using publisher = await AmqpPublisher.connect(backend.url, TEST_QUEUE_DURABILITY);
  for (let i = 0; i < payloads.length; i += 500) {
    await publisher.publish(queue, payloads.slice(i, i + 500));
  }
}

async function leftOver(backend: Backend, queue: string): Promise<number> {
  if (backend.kind === "gearman") return await jobsAtGearmand(backend.addr, queue);
  await using publisher = await AmqpPublisher.connect(backend.url, TEST_QUEUE_DURABILITY);
  return (await publisher.depth(queue)).ready;
}

async function endToEnd(
  url: string,
  backend: Backend,
  c: Case,
  payloads: string[],
  batch: number,
  cap: number,
): Promise<number> {
  const conn = await mysql.createConnection({ ...mysqlOptionsFromUrl(url) });
  await conn.query(`TRUNCATE TABLE \`${c.table}\``);
  await conn.end();
  await enqueue(backend, c.queue, payloads);
  const worker = await startWorker(testConfig({
    ...(backend.kind === "gearman" ? { gearmanServers: [backend.addr] } : {
      consumer: "rabbitmq",
      rabbitmq: { url: backend.url, prefetch: PREFETCH, ...TEST_QUEUE_DURABILITY },
    }),
    mysqlUrl: url,
    batchSize: batch,
    maxJobsPerQueue: cap,
    queues: [c.queue as never],
    // The synthetic jobs are all decodable; no file is left behind in the working directory.
    deadLetterFile: null,
  }));
  try {
    // Completion from the worker's own counter: polling the broker would add a
    // connection per poll to the measured path. Start-up (pool, schema check)
    // is not part of the pipeline's throughput: the clock starts once the
    // worker is up, counting only jobs completed after that.
    const total = payloads.length;
    const completed = async () =>
      (await worker.metrics.queueJobs.get()).values.find((v) =>
        v.labels["queue_name"] === c.queue && v.labels["result"] === "completed"
      )?.value ?? 0;
    const t0 = performance.now();
    const before = await completed();
    for (;;) {
      if ((await completed()) >= total) break;
      await new Promise((r) => setTimeout(r, 2));
    }
    const seconds = (performance.now() - t0) / 1000;
    // The last acknowledgements may still be on their way to the broker.
    for (let i = 0; (await leftOver(backend, c.queue)) !== 0; i++) {
      if (i === 100) throw new Error(`jobs left at ${backend.kind}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    return ((total - before) * PER_JOB) / seconds;
  } finally {
    await worker.stop();
  }
}

// With acknowledgements after commit (D1) a queue has at most cap × events-per-job rows in
// flight; a batch only fills when that is at least twice the batch size, so batch 700 is also
// shown with the cap sized for it (README, "Sizing").
const CONFIGS = [
  { batch: 100, cap: CAP },
  { batch: 700, cap: CAP },
  { batch: 700, cap: Math.max(CAP, Math.ceil((2 * 700) / PER_JOB) + 2) },
];
report(
  `pipeline: ${fmt(EVENTS)} events in jobs of ${PER_JOB}, median of ${RUNS} run(s); ` +
    "ceiling = the same rows as prepared multi-row INSERTs of the batch size, back to back; " +
    `RabbitMQ prefetch ${PREFETCH}, one message of a queue at a time (R3)`,
);
report(
  "table                       | batch | jobs/queue | gearman ev/s | rabbitmq ev/s | ceiling ev/s | gearman | rabbitmq",
);
await using gearmand = await startGearmand({ threads: 4 });
await using vhost = WITH_RABBITMQ ? await createScratchVhost("se_bench") : undefined;
await using db = await createScratchDatabase("se_bench");
await createSchema(db.url);
const gearman: Backend = { kind: "gearman", addr: gearmand.addr };
const rabbit: Backend | undefined = vhost === undefined
  ? undefined
  : { kind: "rabbitmq", url: vhost.url };
for (const c of CASES) {
  const payloads = jobs(c);
  for (const { batch, cap } of CONFIGS) {
    const viaGearman: number[] = [];
    const viaRabbit: number[] = [];
    const top: number[] = [];
    for (let r = 0; r < RUNS; r++) {
      // Alternate the order: whichever runs later pays for InnoDB's background
      // work (purge, page flushing) left by the one before.
      const steps = [
        async () => top.push(await ceiling(db.url, c, payloads, batch)),
        async () => viaGearman.push(await endToEnd(db.url, gearman, c, payloads, batch, cap)),
        ...(rabbit === undefined
          ? []
          : [async () => viaRabbit.push(await endToEnd(db.url, rabbit, c, payloads, batch, cap))]),
      ];
      if (r % 2 === 1) steps.reverse();
      for (const step of steps) await step();
    }
    const g = median(viaGearman);
    const b = median(top);
    const q = viaRabbit.length === 0 ? NaN : median(viaRabbit);
    const pct = (n: number) => Number.isNaN(n) ? "-" : `${((n / b) * 100).toFixed(0)}%`;
    report(
      `${c.table.padEnd(27)} | ${String(batch).padStart(5)} | ${String(cap).padStart(10)} | ${
        fmt(g).padStart(12)
      } | ${(Number.isNaN(q) ? "-" : fmt(q)).padStart(13)} | ${fmt(b).padStart(12)} | ${
        pct(g).padStart(7)
      } | ${pct(q).padStart(8)}`,
    );
  }
}
