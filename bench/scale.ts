/**
 * Cost as the installation grows (docs/performance.md#scale): the same workload at 10k, 100k and
 * 1M services (10 services per host; 100,000 services per node, so 1M is 10 nodes of 10,000 hosts),
 * status and history tables pre-filled in MySQL by INSERT … SELECT from the SEQUENCE engine, in a
 * private MariaDB. For each size, side by side:
 *
 * - drain: a backlog of `--events` servicestatus events, then as many servicechecks events, in
 *   jobs of 100, each addressing the objects of one node (the worker's), into the full tables:
 *   events/s and the ratio to the smallest size, MySQL CPU per 100k events, the worker's peak RSS;
 * - the core-restart sweep of one node (1 % of its hosts and their services stale) inside the full
 *   status tables, through the worker's `StatusCleaner`: wall time, the longest pause of the status
 *   writers, rows examined (`Handler_read_*` deltas of the otherwise idle server);
 * - at the largest size only: `cleanup` of the oldest day of the servicechecks history, by
 *   partition and by DELETE (an unpartitioned copy), and `/ws` with `--ws-clients` raw clients
 *   at the live rate of that size (every service checked every 5 minutes), subscribed once to
 *   every topic and once to a topic the stream does not carry.
 *
 *   deno task bench:scale
 *   deno run -A bench/scale.ts [--sizes 10000,100000,1000000] [--events 100000]
 *     [--history-per-service 20] [--history-days 28] [--ws-clients 100] [--ws-seconds 20]
 *
 * Needs MariaDB (mariadbd, mariadb-install-db) and gearmand; never touches 127.0.0.1:3306.
 */
import mysql from "mysql2/promise";
import { startMariadbd } from "../tests/helpers/mariadbd.ts";
import { freePort, startGearmand } from "../tests/helpers/gearmand.ts";
import { jobsAtGearmand } from "../tests/helpers/worker.ts";
import { seriesSum, startWorkerProcess } from "../tests/helpers/worker_process.ts";
import { ensureSchema } from "../src/mysql/schema.ts";
import { TABLES } from "../src/mysql/catalogue.ts";
import { insertStatement } from "../src/mysql/sql.ts";
import { adjustRow } from "../src/mysql/values.ts";
import type { Row } from "../src/events/types.ts";
import { decodeJob } from "../src/events/decode.ts";
import { poolExecutor } from "../src/mysql/executor.ts";
import { DbAvailability } from "../src/mysql/availability.ts";
import { type PausableWriter, StatusCleaner } from "../src/mysql/core_restart.ts";
import { runCleanupCommand } from "../src/cli/cleanup.ts";
import { configureLogging, resetLogging } from "../src/log.ts";
import {
  arg,
  cpuSeconds,
  fmt,
  formatMachine,
  loadAverage,
  machineInfo,
  peakRssMb,
  report,
  submitMany,
} from "./_util.ts";

const SIZES =
  (Deno.args.includes("--sizes")
    ? String(Deno.args[Deno.args.indexOf("--sizes") + 1])
    : "10000,100000,1000000").split(",").map(Number);
const EVENTS = arg("--events", 100_000);
const HISTORY_PER_SERVICE = arg("--history-per-service", 20);
const HISTORY_DAYS = arg("--history-days", 28);
const WS_CLIENTS = arg("--ws-clients", 100);
const WS_SECONDS = arg("--ws-seconds", 20);
const PER_JOB = 100;
const SERVICES_PER_HOST = 10;
const SERVICES_PER_NODE = 100_000;
const FILL_CHUNK = 200_000;
const DAY = 86_400;
const KEY = "scale-bench-key";
const FIXTURES = new URL("../src/events/testdata/", import.meta.url);
const NOW = Math.floor(Date.now() / 1000);
/** Re-published (kept) and stale status times of the pre-filled rows. */
const FRESH = NOW - 60;
const STALE = NOW - DAY;

const t0Total = performance.now();
const info = await machineInfo();
report(`scale bench: ${formatMachine(info)}`);
report(`scale bench: load average at start ${loadAverage()}`);

await using server = await startMariadbd({
  extraArgs: [
    "--innodb-buffer-pool-size=3G",
    "--innodb-log-file-size=1G",
    "--innodb-flush-log-at-trx-commit=2",
  ],
});
await using gearmand = await startGearmand();

async function handlerReads(): Promise<number> {
  const rows = await server.query<{ Variable_name: string; Value: string }[]>(
    "SHOW GLOBAL STATUS LIKE 'Handler_read%'",
  );
  return rows.reduce((n, r) => n + Number(r.Value), 0);
}

function seconds(since: number): string {
  return ((performance.now() - since) / 1000).toFixed(1);
}

/** `rows` copies of a template row, the columns in `exprs` computed from `seq` (0-based). */
async function fill(
  conn: mysql.Connection,
  table: keyof typeof TABLES,
  rows: number,
  exprs: Record<string, string>,
  template: Row,
): Promise<void> {
  const t = table as "statusengine_servicestatus";
  await conn.query(`DELETE FROM ${table} WHERE hostname = 'template'`);
  await conn.query(insertStatement(TABLES[t], 1), adjustRow(t, template).values);
  const columns = TABLES[table].insertColumns;
  const select = columns.map((c) => exprs[c] ?? `tpl.\`${c}\``).join(", ");
  for (let from = 0; from < rows; from += FILL_CHUNK) {
    const to = Math.min(rows, from + FILL_CHUNK) - 1;
    await conn.query(
      `INSERT IGNORE INTO ${table} (${columns.map((c) => `\`${c}\``).join(", ")}) ` +
        `SELECT ${select} FROM seq_${from}_to_${to} JOIN ${table} tpl ` +
        "WHERE tpl.hostname = 'template'",
    );
  }
  await conn.query(`DELETE FROM ${table} WHERE hostname = 'template'`);
}

/**
 * The node of the k-th node's rows: the first one is the bench worker's ("N", set by
 * tests/helpers/worker_process.ts), the others `node2` … `node10`.
 */
function nodeOf(k: string): string {
  return `IF(${k} = 0, 'N', CONCAT('node', 1 + ${k}))`;
}

/** The history's first second: `HISTORY_DAYS` days back, at midnight UTC. */
const HISTORY_START = (Math.floor(NOW / DAY) - HISTORY_DAYS + 1) * DAY;

/**
 * The row the worker writes for the first event of the drain's jobs of `queue` (the fixture's):
 * the pre-filled rows carry its values, so that at every size an event changes the same columns
 * of its row (only the times), whether the row was written by the fill or by an earlier event.
 */
function fixtureRow(queue: string): Row {
  const job = decodeJob(queue, jobs(queue, 1, 1)[0] ?? "", {
    nodeName: "N",
    nowSeconds: NOW,
    statusMaxAgeSeconds: 0,
  });
  if (job.kind !== "rows" || job.rows[0] === undefined) throw new Error(`${queue}: no row`);
  return job.rows[0].row;
}

/**
 * Wait until MariaDB has written the fill's dirty pages (at most 10 minutes): otherwise its page
 * cleaner writes millions of history rows during the drain that follows, which then pays for the
 * fill. A real installation's history grows at its own pace, not in one burst.
 *
 * @returns Seconds waited.
 */
async function flushDirtyPages(): Promise<number> {
  const started = performance.now();
  const dirty = async () => {
    const [row] = await server.query<{ Value: string }[]>(
      "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'",
    );
    return Number(row?.Value ?? 0);
  };
  // Write them as fast as the disk takes them (the defaults allow 200–2,000 pages a second).
  const [before] = await server.query<{ io: number; max: number; pct: number }[]>(
    "SELECT @@innodb_io_capacity AS io, @@innodb_io_capacity_max AS max, " +
      "@@innodb_max_dirty_pages_pct AS pct",
  );
  await server.query("SET GLOBAL innodb_io_capacity_max = 100000");
  await server.query("SET GLOBAL innodb_io_capacity = 50000");
  await server.query("SET GLOBAL innodb_max_dirty_pages_pct = 0");
  try {
    while ((await dirty()) > 100 && performance.now() - started < 600_000) {
      await new Promise((r) => setTimeout(r, 500));
    }
  } finally {
    await server.query(`SET GLOBAL innodb_max_dirty_pages_pct = ${Number(before?.pct)}`);
    await server.query(`SET GLOBAL innodb_io_capacity = ${Number(before?.io)}`);
    await server.query(`SET GLOBAL innodb_io_capacity_max = ${Number(before?.max)}`);
  }
  return (performance.now() - started) / 1000;
}

/** A database of `services` services, the status and servicechecks tables filled. */
async function prepare(database: string, services: number): Promise<mysql.Connection> {
  await server.query(`CREATE DATABASE ${database} CHARACTER SET utf8mb4`);
  const conn = await mysql.createConnection({
    host: server.host,
    port: server.port,
    user: "root",
    database,
    charset: "utf8mb4",
  });
  await ensureSchema(conn, { now: new Date(HISTORY_START * 1000) });
  // Lay out the weeks up to now, as `cleanup` keeps them (every age 0: nothing is deleted).
  await cleanupRun(database, {}, true);
  const hosts = services / SERVICES_PER_HOST;
  const hostsPerNode = SERVICES_PER_NODE / SERVICES_PER_HOST;
  // Host k is on node 1 + k / 10,000; every hundredth host and its services are stale.
  await fill(conn, "statusengine_servicestatus", services, {
    hostname: `CONCAT('h', seq DIV ${SERVICES_PER_HOST})`,
    service_description: `CONCAT('s', seq MOD ${SERVICES_PER_HOST})`,
    node_name: nodeOf(`seq DIV ${SERVICES_PER_NODE}`),
    status_update_time: `IF((seq DIV ${SERVICES_PER_HOST}) MOD 100 = 0, ${STALE}, ${FRESH})`,
  }, { ...fixtureRow("statusngin_servicestatus"), hostname: "template", service_description: "t" });
  await fill(conn, "statusengine_hoststatus", hosts, {
    hostname: "CONCAT('h', seq)",
    node_name: nodeOf(`seq DIV ${hostsPerNode}`),
    status_update_time: `IF(seq MOD 100 = 0, ${STALE}, ${FRESH})`,
  }, { hostname: "template", node_name: "t", output: "PING OK" });
  const history = services * HISTORY_PER_SERVICE;
  const span = NOW - HISTORY_START;
  await fill(conn, "statusengine_servicechecks", history, {
    hostname: `CONCAT('h', (seq DIV ${SERVICES_PER_HOST}) MOD ${hosts})`,
    service_description: `CONCAT('s', seq MOD ${SERVICES_PER_HOST})`,
    start_time: `${HISTORY_START} + seq * ${span} DIV ${history}`,
    start_time_usec: "seq MOD 1000000",
    end_time: `${HISTORY_START} + seq * ${span} DIV ${history} + 1`,
  }, { ...fixtureRow("statusngin_servicechecks"), hostname: "template", service_description: "t" });
  await conn.query("ANALYZE TABLE statusengine_servicestatus, statusengine_hoststatus");
  return conn;
}

/** Jobs of the fixture's first event of `queue`, event i addressing service i of the first node. */
function jobs(queue: string, events: number, nodeServices: number): string[] {
  const doc = JSON.parse(Deno.readTextFileSync(new URL(`${queue}.job`, FIXTURES)));
  const template = doc.messages[0];
  const out: string[] = [];
  for (let j = 0; j * PER_JOB < events; j++) {
    const messages = [];
    for (let k = 0; k < PER_JOB && j * PER_JOB + k < events; k++) {
      // Spread over the node's services (a prime stride), not in key order.
      const i = ((j * PER_JOB + k) * 7_919) % nodeServices;
      const m = structuredClone(template);
      m.timestamp = NOW;
      const o = m.servicestatus ?? m.servicecheck;
      o.host_name = `h${Math.floor(i / SERVICES_PER_HOST)}`;
      if (m.servicestatus !== undefined) {
        o.description = `s${i % SERVICES_PER_HOST}`;
        o.status_update_time = NOW;
      } else {
        o.service_description = `s${i % SERVICES_PER_HOST}`;
        // A key of its own per event (start_time is part of it), within the partitions.
        o.start_time = NOW - 2 * DAY + j * PER_JOB + k;
      }
      messages.push(m);
    }
    out.push(JSON.stringify({ messages }));
  }
  return out;
}

interface Drain {
  readonly rate: number;
  readonly mysqlCpuPer100k: number;
  readonly workerCpuPer100k: number;
}

async function drain(queue: string, payloads: readonly string[], worker: number): Promise<Drain> {
  const cpu0 = cpuSeconds(server.pid);
  const workerCpu0 = cpuSeconds(worker);
  const started = performance.now();
  await submitMany(gearmand.addr, queue, payloads.length, (i) => payloads[i] as string);
  while ((await jobsAtGearmand(gearmand.addr, queue)) > 0) {
    await new Promise((r) => setTimeout(r, 50));
  }
  const s = (performance.now() - started) / 1000;
  const events = payloads.length * PER_JOB;
  return {
    rate: events / s,
    mysqlCpuPer100k: (cpuSeconds(server.pid) - cpu0) * 100_000 / events,
    workerCpuPer100k: (cpuSeconds(worker) - workerCpu0) * 100_000 / events,
  };
}

interface Sweep {
  readonly wallS: number;
  readonly longestPauseMs: number;
  readonly pauses: number;
  readonly rowsExamined: number;
  readonly deleted: number;
}

/** The core-restart sweep of the last node, as the worker runs it (StatusCleaner). */
async function sweep(database: string, node: string): Promise<Sweep> {
  const pool = mysql.createPool({
    host: server.host,
    port: server.port,
    user: "root",
    database,
    charset: "utf8mb4",
    connectionLimit: 2,
  });
  const count = async () => {
    const [rows] = await pool.query<mysql.RowDataPacket[]>(
      "SELECT (SELECT COUNT(*) FROM statusengine_servicestatus WHERE node_name = ?) + " +
        "(SELECT COUNT(*) FROM statusengine_hoststatus WHERE node_name = ?) AS n",
      [node, node],
    );
    return Number(rows[0]?.["n"]);
  };
  // The same stale rows at every size, whatever the drain refreshed: every hundredth host of the
  // node and its services.
  for (const table of ["statusengine_servicestatus", "statusengine_hoststatus"]) {
    await pool.query(
      `UPDATE ${table} SET status_update_time = ` +
        `IF(CAST(SUBSTRING(hostname, 2) AS UNSIGNED) MOD 100 = 0, ?, ?) WHERE node_name = ?`,
      [STALE, FRESH, node],
    );
  }
  const before = await count();
  let longest = 0;
  let pauses = 0;
  const writer: PausableWriter = {
    held: 0,
    async withPaused(fn) {
      const t = performance.now();
      try {
        return await fn();
      } finally {
        pauses++;
        longest = Math.max(longest, performance.now() - t);
      }
    },
  };
  const cleaner = new StatusCleaner({
    executor: poolExecutor(pool),
    availability: new DbAvailability(),
    nodeName: node,
    openItcockpit: false,
    statusMaxAgeSeconds: 0,
    writers: { statusengine_servicestatus: writer, statusengine_hoststatus: writer },
    committed: { newest: () => FRESH, rows: () => 0 },
    timing: { settleMs: 0, pollMs: 10 },
  });
  const reads0 = await handlerReads();
  const started = performance.now();
  await cleaner.onRestart({
    messageSeconds: FRESH - 1,
    receivedAtMs: Date.now(),
    linkOpenedAtMs: null,
  }, new AbortController().signal);
  await cleaner.idle();
  const wallS = (performance.now() - started) / 1000;
  const rowsExamined = (await handlerReads()) - reads0;
  await cleaner.close();
  const deleted = before - await count();
  await pool.end();
  // Each writer is paused once per chunk; both pauses nest, so the outer one is the longest.
  return { wallS, longestPauseMs: longest, pauses: pauses / 2, rowsExamined, deleted };
}

interface CleanupResult {
  readonly wallS: number;
  readonly rows: number;
  readonly statements: number;
  readonly longestStatementMs: number;
}

async function cleanupRun(
  database: string,
  ages: Record<string, number>,
  quiet = false,
): Promise<CleanupResult> {
  let rows = 0;
  let statements = 0;
  let longest = 0;
  await configureLogging({
    level: "debug",
    format: "json",
    write: (line) => {
      const r = JSON.parse(line) as { message: string; properties: Record<string, unknown> };
      const p = r.properties;
      if (p.table !== "statusengine_servicechecks") return;
      if (r.message === "cleanup: batch deleted") {
        statements++;
        longest = Math.max(longest, Number(p.duration_ms));
      } else if (r.message === "cleanup: table finished") {
        rows = Number(p.rows) + Number(p.rows_dropped_estimate ?? 0);
      }
    },
  });
  const started = performance.now();
  try {
    const every = [
      "hostchecks",
      "servicechecks",
      "host_acknowledgements",
      "service_acknowledgements",
      "host_notifications",
      "service_notifications",
      "host_notifications_log",
      "service_notifications_log",
      "host_statehistory",
      "service_statehistory",
      "host_downtimes",
      "service_downtimes",
      "logentries",
      "perfdata",
      "tasks",
    ];
    const code = await runCleanupCommand(
      {
        mysqlUrl: server.url({ database }),
        batchSize: 5_000,
        batchPauseMs: 0,
        ages: { ...Object.fromEntries(every.map((t) => [`age_${t}`, 0])), ...ages },
        now: new Date(NOW * 1000),
      },
      { out: () => {}, err: (l) => quiet || report(`  ${l}`) },
      new AbortController().signal,
    );
    if (code !== 0) throw new Error(`cleanup of ${database} exited ${code}`);
  } finally {
    await resetLogging();
  }
  return {
    wallS: (performance.now() - started) / 1000,
    rows,
    statements,
    longestStatementMs: longest,
  };
}

interface SizeResult {
  readonly services: number;
  readonly fillS: number;
  readonly status: Drain;
  readonly checks: Drain;
  readonly peakRssMb: number;
  readonly sweep: Sweep;
}

/**
 * `/ws` at the live rate of `services` (every service checked every 5 minutes) with
 * `WS_CLIENTS` raw clients subscribed to `topics` (every topic when undefined), through a worker
 * of its own: one report line.
 */
async function wsRun(database: string, services: number, topics?: string): Promise<void> {
  const rate = services / 300;
  const wsPort = freePort();
  await using worker = await startWorkerProcess({
    gearmanAddr: gearmand.addr,
    mysqlUrl: server.url({ database }),
    listenAddr: `127.0.0.1:${wsPort}`,
    args: [
      "--api-keys",
      KEY,
      "--queues",
      "statusngin_servicestatus,statusngin_servicechecks",
    ],
  });
  const clients = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-net",
      new URL("_ws_clients.ts", import.meta.url).pathname,
      "raw",
      `ws://127.0.0.1:${wsPort}/ws?api_key=${KEY}${
        topics === undefined ? "" : `&topics=${topics}`
      }`,
      String(WS_CLIENTS),
    ],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const lines = clients.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let out = "";
  const nextLine = async () => {
    while (!out.includes("\n")) {
      const { value, done } = await lines.read();
      if (done) throw new Error("websocket clients exited");
      out += value;
    }
    const nl = out.indexOf("\n");
    const l = out.slice(0, nl);
    out = out.slice(nl + 1);
    return l;
  };
  if ((await nextLine()) !== "ready") throw new Error("websocket clients did not start");
  const stdin = clients.stdin.getWriter();
  const nodeServices = Math.min(services, SERVICES_PER_NODE);
  const perSecondJobs = Math.max(1, Math.round(rate / PER_JOB));
  const status = jobs("statusngin_servicestatus", perSecondJobs * PER_JOB, nodeServices);
  const checks = jobs("statusngin_servicechecks", perSecondJobs * PER_JOB, nodeServices);
  const cpu0 = cpuSeconds(worker.pid);
  const started = performance.now();
  let behind = 0;
  for (let s = 0; s < WS_SECONDS; s++) {
    const tick = performance.now();
    await submitMany(
      gearmand.addr,
      "statusngin_servicestatus",
      status.length,
      (i) => status[i] as string,
    );
    await submitMany(
      gearmand.addr,
      "statusngin_servicechecks",
      checks.length,
      (i) => checks[i] as string,
    );
    await new Promise((r) => setTimeout(r, Math.max(0, 1000 - (performance.now() - tick))));
    // Jobs of this second not yet taken when the next second's arrive: the worker fell behind.
    behind = Math.max(
      behind,
      await jobsAtGearmand(gearmand.addr, "statusngin_servicestatus") +
        await jobsAtGearmand(gearmand.addr, "statusngin_servicechecks"),
    );
  }
  const wallS = (performance.now() - started) / 1000;
  const cpu = cpuSeconds(worker.pid) - cpu0;
  // The last second's frames are still on their way to the clients.
  await new Promise((r) => setTimeout(r, 2_000));
  await stdin.write(new TextEncoder().encode("report\n"));
  const totals = JSON.parse(await nextLine()) as { frames: number; bytes: number };
  await stdin.close();
  await clients.status;
  const metrics = await worker.metrics();
  const slowClosed = seriesSum(metrics, "statusengine_websocket_slow_clients_closed_total");
  const dropped = seriesSum(metrics, "statusengine_websocket_messages_dropped_total") +
    seriesSum(metrics, "statusengine_websocket_publish_dropped_total");
  report(
    `/ws at the live rate of ${fmt(services)} services (${fmt(2 * perSecondJobs * PER_JOB)} ` +
      `events/s for ${WS_SECONDS} s), ${WS_CLIENTS} raw clients subscribed to ${
        topics ?? "every topic"
      }: worker CPU ${(100 * cpu / wallS).toFixed(0)} %, most jobs waiting at a second's end ${
        fmt(behind)
      }, frames per client ${fmt(totals.frames / WS_CLIENTS)} of ${
        fmt(2 * perSecondJobs * WS_SECONDS)
      }, ${fmt(slowClosed)} slow clients closed, ${
        fmt(dropped)
      } messages dropped, worker peak RSS ${
        peakRssMb(worker.pid).toFixed(0)
      } MB (load ${loadAverage()})`,
  );
}

const results: SizeResult[] = [];
let largest: { database: string; conn: mysql.Connection; services: number } | undefined;
for (const services of SIZES) {
  // The previous size's tables would share the buffer pool with this one's.
  if (largest !== undefined) {
    await largest.conn.end();
    await server.query(`DROP DATABASE ${largest.database}`);
  }
  const database = `scale_${services}`;
  const fillStarted = performance.now();
  const conn = await prepare(database, services);
  const fillS = (performance.now() - fillStarted) / 1000;
  const flushS = await flushDirtyPages();
  const nodeServices = Math.min(services, SERVICES_PER_NODE);
  report(
    `${fmt(services)} services: filled ${fmt(services)} servicestatus, ${
      fmt(services / SERVICES_PER_HOST)
    } hoststatus, ${fmt(services * HISTORY_PER_SERVICE)} servicechecks rows in ${
      fillS.toFixed(0)
    } s, its dirty pages written in ${flushS.toFixed(0)} s (load ${loadAverage()})`,
  );
  const statusJobs = jobs("statusngin_servicestatus", EVENTS, nodeServices);
  const checkJobs = jobs("statusngin_servicechecks", EVENTS, nodeServices);
  let status: Drain;
  let checks: Drain;
  let rss: number;
  {
    await using worker = await startWorkerProcess({
      gearmanAddr: gearmand.addr,
      mysqlUrl: server.url({ database }),
      args: [
        "--queues",
        "statusngin_servicestatus,statusngin_servicechecks",
      ],
    });
    status = await drain("statusngin_servicestatus", statusJobs, worker.pid);
    checks = await drain("statusngin_servicechecks", checkJobs, worker.pid);
    rss = peakRssMb(worker.pid);
    const dead = seriesSum(await worker.metrics(), "statusengine_dead_letters_total");
    if (dead > 0) throw new Error(`${dead} dead letters at ${services} services`);
  }
  const nodes = Math.max(1, services / SERVICES_PER_NODE);
  const swept = nodes === 1 ? "N" : `node${nodes}`;
  const s = await sweep(database, swept);
  report(
    `${fmt(services)} services: servicestatus ${fmt(status.rate)}/s, servicechecks ${
      fmt(checks.rate)
    }/s, worker peak RSS ${rss.toFixed(0)} MB; sweep of ${swept} ${s.wallS.toFixed(2)} s, ` +
      `longest pause ${s.longestPauseMs.toFixed(0)} ms, ${fmt(s.rowsExamined)} rows examined, ` +
      `${fmt(s.deleted)} deleted (load ${loadAverage()})`,
  );
  results.push({ services, fillS, status, checks, peakRssMb: rss, sweep: s });
  largest = { database, conn, services };
}

const base = results[0];
report("");
report(
  "services  | servicestatus/s (ratio) | servicechecks/s (ratio) | MySQL CPU s/100k status, checks " +
    "| worker CPU s/100k status, checks | worker peak RSS MB | sweep of one node: wall s, longest pause ms, chunks, rows examined, deleted",
);
for (const r of results) {
  const ratio = (a: number, b: number | undefined) => (b === undefined ? 1 : a / b).toFixed(2);
  report(
    `${fmt(r.services).padStart(9)} | ${fmt(r.status.rate).padStart(7)} (${
      ratio(r.status.rate, base?.status.rate)
    }) | ${fmt(r.checks.rate).padStart(7)} (${ratio(r.checks.rate, base?.checks.rate)}) | ${
      r.status.mysqlCpuPer100k.toFixed(2)
    }, ${r.checks.mysqlCpuPer100k.toFixed(2)} | ${r.status.workerCpuPer100k.toFixed(2)}, ${
      r.checks.workerCpuPer100k.toFixed(2)
    } | ${r.peakRssMb.toFixed(0)} | ${r.sweep.wallS.toFixed(2)}, ${
      r.sweep.longestPauseMs.toFixed(0)
    }, ${r.sweep.pauses}, ${fmt(r.sweep.rowsExamined)}, ${fmt(r.sweep.deleted)}`,
  );
}

if (largest !== undefined) {
  const { database, conn, services } = largest;
  // Cleanup of the oldest day: the partitioned table as `schema` creates it, and a copy without
  // partitions (the legacy layout, cleaned by DELETE alone).
  const legacy = `${database}_legacy`;
  const copyStarted = performance.now();
  await server.query(`CREATE DATABASE ${legacy} CHARACTER SET utf8mb4`);
  const legacyConn = await mysql.createConnection({
    host: server.host,
    port: server.port,
    user: "root",
    database: legacy,
    charset: "utf8mb4",
  });
  await ensureSchema(legacyConn, { now: new Date(HISTORY_START * 1000) });
  await legacyConn.query("ALTER TABLE statusengine_servicechecks REMOVE PARTITIONING");
  await legacyConn.end();
  await server.query(
    `INSERT INTO ${legacy}.statusengine_servicechecks ` +
      `SELECT * FROM ${database}.statusengine_servicechecks`,
  );
  report(`copied the servicechecks history unpartitioned in ${seconds(copyStarted)} s`);
  const ages = { "age_servicechecks": HISTORY_DAYS - 1 };
  const reads0 = await handlerReads();
  const byPartition = await cleanupRun(database, ages);
  const reads1 = await handlerReads();
  const byDelete = await cleanupRun(legacy, ages);
  const reads2 = await handlerReads();
  const line = (label: string, r: CleanupResult, examined: number) =>
    `  ${label.padEnd(13)} ${r.wallS.toFixed(1).padStart(7)} s, ${fmt(r.rows)} rows, ${
      fmt(r.statements)
    } DELETE statements, longest ${fmt(r.longestStatementMs)} ms, ${fmt(examined)} rows examined`;
  report(
    `cleanup of the oldest day of ${fmt(services * HISTORY_PER_SERVICE)} servicechecks rows ` +
      `(${HISTORY_DAYS} days) at ${fmt(services)} services (load ${loadAverage()}):`,
  );
  report(line("by partition", byPartition, reads1 - reads0));
  report(line("by DELETE", byDelete, reads2 - reads1));
  await server.query(`DROP DATABASE ${legacy}`);

  // /ws at the live rate of the largest size: the firehose, and clients that watch a topic the
  // stream does not carry (a UI waiting for state changes: what the hub's filter costs).
  await wsRun(database, services);
  await wsRun(database, services, "statusngin_statechanges");
  await conn.end();
}
report(`scale bench: done in ${seconds(t0Total)} s, load average ${loadAverage()}`);
