/**
 * The `cleanup` command against a real scratch database with the full schema
 * (docs/operations.md#cleanup). Needs MySQL; fails (never skips) without it.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { type CleanupCommandOptions, runCleanupCommand } from "../src/cli/cleanup.ts";
import {
  formatLocalRfc3339,
  RETENTION_TABLES,
  retentionCutoff,
  unixSeconds,
} from "../src/cleanup/retention.ts";
import { configureLogging, resetLogging } from "../src/log.ts";
import { type TableName, TABLES } from "../src/mysql/catalogue.ts";
import { diffSchema, ensureSchema } from "../src/mysql/schema.ts";
import { mysqlOptionsFromUrl } from "../src/util/mysql_url.ts";
import { createScratchDatabase, type ScratchDatabase } from "./helpers/mysql.ts";
import { startMariadbd } from "./helpers/mariadbd.ts";
import { createSchema } from "./helpers/worker.ts";
import { startMysqlProxy } from "./helpers/tcp_proxy.ts";
import { recordTimers, track, waitFor } from "./helpers/wait.ts";

/** A fixed reference instant (local time), so cutoffs are reproducible. */
const NOW = new Date(2026, 6, 15, 12, 0, 0);

interface LogRecord {
  level: string;
  message: string;
  properties: Record<string, unknown>;
}

interface Run {
  code: number;
  out: string[];
  err: string[];
  logs: LogRecord[];
}

/**
 * Run the command with logs captured as JSON records. `onLog` sees every record as it is
 * written (synchronously), which lets a test abort at an exact point of the run.
 */
async function run(
  options: Partial<CleanupCommandOptions> & Pick<CleanupCommandOptions, "mysqlUrl">,
  hooks: { signal?: AbortSignal; onLog?: (record: LogRecord) => void } = {},
): Promise<Run> {
  const logs: LogRecord[] = [];
  await configureLogging({
    level: "debug",
    format: "json",
    write: (line) => {
      const record = JSON.parse(line) as LogRecord;
      logs.push(record);
      hooks.onLog?.(record);
    },
  });
  const out: string[] = [];
  const err: string[] = [];
  try {
    const code = await runCleanupCommand(
      { batchSize: 5000, batchPauseMs: 0, ages: {}, now: NOW, ...options },
      { out: (l) => out.push(l), err: (l) => err.push(l) },
      hooks.signal ?? new AbortController().signal,
    );
    return { code, out, err, logs };
  } finally {
    await resetLogging();
  }
}

function logsOf(r: Run, message: string, table?: string): LogRecord[] {
  return r.logs.filter((l) =>
    l.message === message && (table === undefined || l.properties.table === table)
  );
}

function cutoffOf(table: TableName, days?: number): number {
  const rule = RETENTION_TABLES.find((t) => t.table === table);
  if (rule === undefined) throw new Error(`${table} is not a retention table`);
  return unixSeconds(retentionCutoff(NOW, days ?? rule.defaultDays));
}

function columnOf(table: TableName): string {
  const rule = RETENTION_TABLES.find((t) => t.table === table);
  if (rule === undefined) throw new Error(`${table} is not a retention table`);
  return rule.column;
}

let serial = 0;

/**
 * Insert one row per time into a table, every other column filled with a value unique to
 * the row (so primary keys never collide) and within its type.
 */
async function insertRows(db: ScratchDatabase, table: TableName, times: number[]): Promise<void> {
  const { sql, rows } = insertOf(table, times);
  await db.query(sql, [rows]);
}

/** The statement and rows of {@linkcode insertRows}, for a connection of the test's own. */
function insertOf(table: TableName, times: number[]): { sql: string; rows: unknown[][] } {
  const spec = TABLES[table];
  const column = columnOf(table);
  const rows = times.map((time) => {
    const id = ++serial;
    return spec.insertColumns.map((name) => {
      if (name === column) return time;
      const kind = spec.columns.find((c) => c.name === name)?.sqlType;
      if (kind === undefined) throw new Error(`${table}.${name} missing`);
      if (kind.kind === "string") return `r${id}`.slice(0, kind.maxChars);
      if (kind.kind === "double") return id;
      return kind.flag ? id % 2 : Math.min(id, kind.max);
    });
  });
  const columns = spec.insertColumns.map((c) => `\`${c}\``).join(", ");
  return { sql: `INSERT INTO \`${table}\` (${columns}) VALUES ?`, rows };
}

async function timesIn(db: ScratchDatabase, table: TableName): Promise<number[]> {
  const column = columnOf(table);
  const rows = await db.query<Record<string, number>[]>(
    `SELECT \`${column}\` AS t FROM \`${table}\` ORDER BY \`${column}\``,
  );
  return rows.map((r) => Number(r.t));
}

async function partitionCount(db: ScratchDatabase): Promise<number> {
  const rows = await db.query<{ n: number }[]>(
    "SELECT COUNT(*) AS n FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = ? AND PARTITION_NAME IS NOT NULL",
    [db.name],
  );
  return Number(rows[0]?.n);
}

async function schemaDatabase(): Promise<ScratchDatabase> {
  const db = await createScratchDatabase();
  try {
    await createSchema(db.url);
  } catch (err: unknown) {
    await db.drop();
    throw err;
  }
  return db;
}

/** Old (strictly before the cutoff) and kept (at or after it) times around a cutoff. */
function around(cutoff: number): { old: number[]; kept: number[] } {
  return { old: [cutoff - 86_400 * 40, cutoff - 1], kept: [cutoff, cutoff + 1, cutoff + 86_400] };
}

const SAMPLE_TABLES: readonly TableName[] = [
  "statusengine_hostchecks", // partitioned on start_time
  "statusengine_host_acknowledgements", // not partitioned
  "statusengine_host_statehistory", // partitioned on state_time, 365 days
  "statusengine_service_downtimehistory", // age_service_downtimes cleans the history table
  "statusengine_logentries", // partitioned, AUTO_INCREMENT id
  "statusengine_perfdata", // timestamp_unix, no primary key
  "statusengine_tasks", // age_tasks: leftovers of the UI's task queue, as the PHP cleanup did
  "statusengine_downtime_tombstones", // the worker's own, by end_time (docs/downtimes.md)
];

Deno.test("cleanup: exactly the rows strictly older than each table's cutoff are deleted, one line per table", async () => {
  await using db = await schemaDatabase();
  for (const table of SAMPLE_TABLES) {
    const { old, kept } = around(cutoffOf(table));
    await insertRows(db, table, [...old, ...kept]);
  }
  const partitions = await partitionCount(db);
  assert.ok(partitions > 0);

  const r = await run({ mysqlUrl: db.url });

  assert.equal(r.code, 0, r.err.join("\n"));
  for (const table of SAMPLE_TABLES) {
    assert.deepEqual(await timesIn(db, table), around(cutoffOf(table)).kept, table);
    const [finished] = logsOf(r, "cleanup: table finished", table);
    assert.equal(finished?.properties.rows, 2, table);
    const [starting] = logsOf(r, "cleanup: starting table", table);
    assert.equal(starting?.properties.cutoff_unix, cutoffOf(table), table);
    assert.equal(
      starting?.properties.cutoff,
      formatLocalRfc3339(retentionCutoff(NOW, Number(starting?.properties.age_days))),
    );
  }
  // The schema's partitions all lie after these cutoffs: nothing to drop, nothing to add.
  assert.equal(await partitionCount(db), partitions);
  assert.equal(logsOf(r, "cleanup: table finished").length, RETENTION_TABLES.length);
  assert.equal(logsOf(r, "cleanup: finished").length, 1);
  assert.equal(logsOf(r, "cleanup: starting")[0]?.properties.tables, RETENTION_TABLES.length);
  // Each table is reported once, by its log line; nothing is printed besides the log.
  assert.deepEqual(r.out, []);
  const [perfdata] = logsOf(r, "cleanup: table finished", "statusengine_perfdata");
  assert.equal(perfdata?.properties.layout, "unpartitioned");
  assert.equal(perfdata?.properties.batches, 1);
  assert.equal(typeof perfdata?.properties.rows_per_s, "number");
  assert.equal(
    logsOf(r, "cleanup: table finished", "statusengine_hostchecks")[0]?.properties.layout,
    "weekly",
  );
});

Deno.test("cleanup: an explicit age of 0 disables a table and a missing key means the default", async () => {
  await using db = await schemaDatabase();
  const checks = around(cutoffOf("statusengine_hostchecks"));
  const logs = around(cutoffOf("statusengine_logentries", 2));
  await insertRows(db, "statusengine_hostchecks", [...checks.old, ...checks.kept]);
  await insertRows(db, "statusengine_logentries", [...logs.old, ...logs.kept]);

  const r = await run({ mysqlUrl: db.url, ages: { age_hostchecks: 0, age_logentries: 2 } });

  assert.equal(r.code, 0, r.err.join("\n"));
  assert.deepEqual(await timesIn(db, "statusengine_hostchecks"), [...checks.old, ...checks.kept]);
  assert.deepEqual(await timesIn(db, "statusengine_logentries"), logs.kept);
  assert.equal(
    logsOf(r, "cleanup: table disabled, nothing is deleted", "statusengine_hostchecks")
      .length,
    1,
  );
  assert.equal(logsOf(r, "cleanup: starting table", "statusengine_hostchecks").length, 0);
  assert.equal(
    logsOf(r, "cleanup: starting table", "statusengine_servicechecks")[0]?.properties.age_days,
    5,
  );
  assert.equal(logsOf(r, "cleanup: starting")[0]?.properties.tables, RETENTION_TABLES.length - 1);
});

Deno.test("cleanup: batch size 3 takes 4 statements for 10 old rows and pauses between them", async () => {
  await using db = await schemaDatabase();
  const cutoff = cutoffOf("statusengine_hostchecks");
  const old = Array.from({ length: 10 }, (_, i) => cutoff - 100 - i);
  await insertRows(db, "statusengine_hostchecks", [...old, cutoff]);
  const pauseMs = 150;

  const r = await run({ mysqlUrl: db.url, batchSize: 3, batchPauseMs: pauseMs });

  assert.equal(r.code, 0, r.err.join("\n"));
  assert.deepEqual(await timesIn(db, "statusengine_hostchecks"), [cutoff]);
  const batches = logsOf(r, "cleanup: batch deleted", "statusengine_hostchecks");
  assert.deepEqual(batches.map((b) => b.properties.rows), [3, 3, 3, 1]);
  const [finished] = logsOf(r, "cleanup: table finished", "statusengine_hostchecks");
  assert.equal(finished?.properties.rows, 10);
  assert.equal(finished?.properties.batches, 4);
  // Three pauses: between batches 1-2, 2-3 and 3-4, none after the last.
  assert.ok(
    Number(finished?.properties.duration_ms) >= 3 * pauseMs - 5,
    String(finished?.properties.duration_ms),
  );
});

Deno.test("cleanup: no pause follows the last batch of a table, nor separates tables", async () => {
  await using db = await schemaDatabase();
  const cutoff = cutoffOf("statusengine_hostchecks");
  await insertRows(db, "statusengine_hostchecks", [cutoff - 10, cutoff - 9]);

  // Every table ends with its first statement (fewer rows than the batch size), so no pause
  // is due at all: the run asks for no timer of the pause's length (an odd one, which
  // nothing else uses).
  const pauseMs = 31_415;
  let r: Run;
  {
    using timers = recordTimers();
    r = await run({ mysqlUrl: db.url, batchSize: 3, batchPauseMs: pauseMs });
    assert.deepEqual(timers.requested.filter((ms) => ms === pauseMs), [], "a pause was taken");
  }

  assert.equal(r.code, 0, r.err.join("\n"));
  assert.deepEqual(await timesIn(db, "statusengine_hostchecks"), []);
  assert.equal(logsOf(r, "cleanup: batch deleted").length, RETENTION_TABLES.length);
});

Deno.test("cleanup: a missing table is reported as failed, the others are still cleaned, exit 1", async () => {
  await using db = await schemaDatabase();
  const checks = around(cutoffOf("statusengine_hostchecks"));
  const logs = around(cutoffOf("statusengine_logentries"));
  await insertRows(db, "statusengine_hostchecks", [...checks.old, ...checks.kept]);
  await insertRows(db, "statusengine_logentries", [...logs.old, ...logs.kept]);
  await db.query("DROP TABLE `statusengine_servicechecks`");

  const r = await run({ mysqlUrl: db.url });

  assert.equal(r.code, 1);
  assert.deepEqual(await timesIn(db, "statusengine_hostchecks"), checks.kept);
  assert.deepEqual(await timesIn(db, "statusengine_logentries"), logs.kept);
  const [failed] = logsOf(r, "cleanup: table failed", "statusengine_servicechecks");
  assert.equal(failed?.level, "error");
  assert.match(String(failed?.properties.error), /statusengine_servicechecks/);
  assert.equal(logsOf(r, "cleanup: table finished").length, RETENTION_TABLES.length - 1);
  const [summary] = logsOf(r, "cleanup: finished with errors");
  assert.equal(summary?.level, "error");
  assert.equal(summary?.properties.failed, 1);
  assert.equal(logsOf(r, "cleanup: finished").length, 0);
});

Deno.test("cleanup: a signal aborted before the run deletes nothing and exits 0", async () => {
  await using db = await schemaDatabase();
  const checks = around(cutoffOf("statusengine_hostchecks"));
  await insertRows(db, "statusengine_hostchecks", [...checks.old, ...checks.kept]);
  const controller = new AbortController();
  controller.abort();

  const r = await run({ mysqlUrl: db.url }, { signal: controller.signal });

  assert.equal(r.code, 0);
  assert.deepEqual(await timesIn(db, "statusengine_hostchecks"), [...checks.old, ...checks.kept]);
  assert.equal(logsOf(r, "cleanup: starting table").length, 0);
  const [warning] = logsOf(r, "cleanup: interrupted, remaining tables left for the next run");
  assert.equal(warning?.level, "warn");
  assert.equal(warning?.properties.remaining_tables, RETENTION_TABLES.length);
});

Deno.test("cleanup: a signal between batches stops at once with exit 0 and leaves later tables untouched", async () => {
  await using db = await schemaDatabase();
  const cutoff = cutoffOf("statusengine_hostchecks");
  const old = Array.from({ length: 10 }, (_, i) => cutoff - 100 - i);
  await insertRows(db, "statusengine_hostchecks", old);
  const logs = around(cutoffOf("statusengine_logentries"));
  await insertRows(db, "statusengine_logentries", [...logs.old, ...logs.kept]);
  const controller = new AbortController();

  // Abort right after the first batch committed; the one-hour pause must not be waited out
  // (a run that waited it fails the wait below).
  const running = run({ mysqlUrl: db.url, batchSize: 3, batchPauseMs: 3_600_000 }, {
    signal: controller.signal,
    onLog: (record) => {
      if (record.message === "cleanup: batch deleted") controller.abort();
    },
  });
  const ran = track(running);
  await waitFor(() => ran.settled, {
    timeoutMs: 30_000,
    message: "the run to end at the signal, not after the pause",
  });
  const r = await running;

  assert.equal(r.code, 0, r.err.join("\n"));
  assert.equal((await timesIn(db, "statusengine_hostchecks")).length, 7);
  assert.deepEqual(await timesIn(db, "statusengine_logentries"), [...logs.old, ...logs.kept]);
  const [interrupted] = logsOf(r, "cleanup: table interrupted", "statusengine_hostchecks");
  assert.equal(interrupted?.properties.rows, 3);
  assert.equal(interrupted?.properties.batches, 1);
  assert.equal(logsOf(r, "cleanup: starting table").length, 1);
  assert.equal(
    logsOf(r, "cleanup: interrupted, remaining tables left for the next run")[0]?.properties
      .remaining_tables,
    RETENTION_TABLES.length - 1,
  );
  assert.equal(logsOf(r, "cleanup: table failed").length, 0);
});

Deno.test("cleanup: a DELETE in flight is abandoned on abort by closing its connection, exit 0", async () => {
  await using db = await schemaDatabase();
  const cutoff = cutoffOf("statusengine_hostchecks");
  await insertRows(db, "statusengine_hostchecks", [cutoff - 10, cutoff - 9]);
  const logs = around(cutoffOf("statusengine_logentries"));
  await insertRows(db, "statusengine_logentries", logs.old);

  // Hold row locks in an open transaction so the DELETE waits (innodb_lock_wait_timeout is
  // far longer than this test).
  const locker = await mysql.createConnection(mysqlOptionsFromUrl(db.url));
  try {
    await locker.query("START TRANSACTION");
    await locker.query("SELECT * FROM `statusengine_hostchecks` FOR UPDATE");
    const controller = new AbortController();
    const running = run({ mysqlUrl: db.url }, { signal: controller.signal });
    await waitFor(async () => {
      const rows = await db.query<unknown[]>(
        "SELECT 1 FROM information_schema.PROCESSLIST WHERE DB = ? AND INFO LIKE 'DELETE FROM `statusengine_hostchecks`%'",
        [db.name],
      );
      return rows.length > 0;
    }, { message: "the DELETE to wait for the row lock" });
    controller.abort();
    const r = await running;

    assert.equal(r.code, 0, r.err.join("\n"));
    const [interrupted] = logsOf(r, "cleanup: table interrupted", "statusengine_hostchecks");
    assert.equal(interrupted?.properties.batches, 0);
    assert.equal(logsOf(r, "cleanup: table failed").length, 0);
    assert.deepEqual(await timesIn(db, "statusengine_logentries"), logs.old);
  } finally {
    await locker.query("ROLLBACK").catch(() => {});
    await locker.end();
  }
});

Deno.test("cleanup: MySQL unreachable before the run exits 1 without showing the password", async () => {
  const r = await run({ mysqlUrl: "mysql://root:s3cret-pw@127.0.0.1:1/statusengine" });

  assert.equal(r.code, 1);
  assert.match(
    r.err.join("\n"),
    /Cannot run cleanup: MySQL at mysql:\/\/root:\*\*\*\*@127\.0\.0\.1:1\/\S+ does not answer/,
  );
  assert.equal(logsOf(r, "cleanup: cannot connect to MySQL")[0]?.level, "error");
  assert.equal(logsOf(r, "cleanup: starting table").length, 0);
  const everything = JSON.stringify(r);
  assert.ok(!everything.includes("s3cret-pw"), everything);
});

Deno.test("cleanup: a refused login says so and what to check, as schema and run do", async () => {
  // The cleanup unit often runs with an account of its own (cleanup.env): a wrong password there
  // was reported as "Cannot connect to MySQL", which reads as an outage.
  await using db = await createScratchDatabase();
  const url = new URL(db.url);
  url.username = "se_no_such_user";
  url.password = "s3cret-pw";
  const r = await run({ mysqlUrl: url.href });

  assert.equal(r.code, 1);
  const text = r.err.join("\n");
  assert.match(text, /MySQL at mysql:\/\/se_no_such_user:\*\*\*\*@\S+ refused the login \(Access/);
  assert.match(text, /check the user and password/);
  assert.ok(!JSON.stringify(r).includes("s3cret-pw"));
});

Deno.test("cleanup: an unknown retention key, a negative age or a zero batch size refuses to run", async () => {
  for (
    const options of [
      { ages: { age_users: 5 } },
      { ages: { ageHostchecksDays: 5 } },
      { ages: { age_hostchecks: -1 } },
      { ages: { age_hostchecks: 1.5 } },
      { batchSize: 0 },
      { batchPauseMs: -1 },
    ]
  ) {
    const r = await run({ mysqlUrl: "mysql://root@127.0.0.1:1/statusengine", ...options });
    assert.equal(r.code, 1, JSON.stringify(options));
    assert.match(r.err.join("\n"), /^Cannot run cleanup: /, JSON.stringify(options));
    assert.equal(logsOf(r, "cleanup: cannot start").length, 1);
  }
});

// The cutoff is N calendar days back in local time. The legacy worker
// subtracted 86400 × N seconds, which moves the cutoff by an hour across a DST change. The
// time zone of a running process cannot be changed, so the check runs in a child process.
Deno.test("cleanup: the cutoff is calendar days in local time across both DST changes (Europe/Berlin)", async () => {
  const script = `
    import { retentionCutoff, unixSeconds, formatLocalRfc3339 } from ${
    JSON.stringify(new URL("../src/cleanup/retention.ts", import.meta.url).href)
  };
    const spring = new Date(2026, 2, 30, 12, 0, 0); // Monday after the change of Sunday 29 March
    const autumn = new Date(2026, 9, 26, 12, 0, 0); // Monday after the change of Sunday 25 October
    console.log(JSON.stringify({
      zone: Intl.DateTimeFormat().resolvedOptions().timeZone,
      spring: [unixSeconds(spring), unixSeconds(retentionCutoff(spring, 2)), formatLocalRfc3339(retentionCutoff(spring, 2))],
      autumn: [unixSeconds(autumn), unixSeconds(retentionCutoff(autumn, 2)), formatLocalRfc3339(retentionCutoff(autumn, 2))],
      nodst: [unixSeconds(autumn), unixSeconds(retentionCutoff(autumn, 1))],
    }));
  `;
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--config", new URL("../deno.json", import.meta.url).pathname, script],
    env: { TZ: "Europe/Berlin" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stderr = new TextDecoder().decode(output.stderr);
  assert.equal(output.code, 0, stderr);
  const result = JSON.parse(new TextDecoder().decode(output.stdout)) as {
    zone: string;
    spring: [number, number, string];
    autumn: [number, number, string];
    nodst: [number, number];
  };
  assert.equal(result.zone, "Europe/Berlin");
  // 2026-03-30 12:00 CEST = 10:00Z; two calendar days back is 2026-03-28 12:00 CET = 11:00Z.
  assert.equal(result.spring[0], Date.UTC(2026, 2, 30, 10) / 1000);
  assert.equal(result.spring[1], Date.UTC(2026, 2, 28, 11) / 1000);
  assert.equal(result.spring[0] - result.spring[1], 47 * 3600);
  assert.equal(result.spring[2], "2026-03-28T12:00:00+01:00");
  // 2026-10-26 12:00 CET = 11:00Z; two calendar days back is 2026-10-24 12:00 CEST = 10:00Z.
  assert.equal(result.autumn[0], Date.UTC(2026, 9, 26, 11) / 1000);
  assert.equal(result.autumn[1], Date.UTC(2026, 9, 24, 10) / 1000);
  assert.equal(result.autumn[0] - result.autumn[1], 49 * 3600);
  assert.equal(result.autumn[2], "2026-10-24T12:00:00+02:00");
  assert.equal(result.nodst[0] - result.nodst[1], 24 * 3600);
});

Deno.test("cleanup: a server that accepts but never answers fails the start within 5 s, exit 1", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const accepted: Deno.Conn[] = [];
  const accepting = (async () => {
    try {
      for await (const conn of listener) accepted.push(conn);
    } catch {
      // listener closed
    }
  })();
  try {
    const port = (listener.addr as Deno.NetAddr).port;
    // The connect timeout ends the attempt; a start that kept waiting fails this wait.
    const running = run({ mysqlUrl: `mysql://root@127.0.0.1:${port}/statusengine` });
    const ran = track(running);
    await waitFor(() => ran.settled, { timeoutMs: 8_000, message: "the start to fail" });
    const r = await running;

    assert.equal(r.code, 1);
    assert.match(r.err.join("\n"), /Cannot run cleanup: MySQL at \S+ does not answer/);
  } finally {
    for (const conn of accepted) conn.close();
    listener.close();
    await accepting;
  }
});

// ---- weekly partitions (docs/retention.md) -----------------------------------------------

/** A database whose partitioned tables were laid out by `schema` at `created`. */
async function schemaDatabaseAt(created: Date): Promise<ScratchDatabase> {
  const db = await createScratchDatabase();
  try {
    const conn = await mysql.createConnection(mysqlOptionsFromUrl(db.url));
    try {
      await ensureSchema(conn, { now: created });
    } finally {
      await conn.end();
    }
  } catch (err: unknown) {
    await db.drop();
    throw err;
  }
  return db;
}

async function partitionsOf(db: ScratchDatabase, table: TableName): Promise<string[]> {
  const rows = await db.query<{ p: string }[]>(
    `SELECT PARTITION_NAME AS p FROM information_schema.PARTITIONS
      WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY PARTITION_ORDINAL_POSITION`,
    [db.name, table],
  );
  return rows.map((r) => String(r.p));
}

async function rowsInPartition(
  db: ScratchDatabase,
  table: TableName,
  partition: string,
): Promise<number> {
  const rows = await db.query<{ n: number }[]>(
    `SELECT COUNT(*) AS n FROM \`${table}\` PARTITION (\`${partition}\`)`,
  );
  return Number(rows[0]?.n);
}

const DAY_S = 86_400;
/** Unix seconds of a UTC date and hour. */
function utc(y: number, m: number, d: number, h = 0): number {
  return Date.UTC(y, m - 1, d, h) / 1000;
}
/** Every `stepDays` from `from` (inclusive) to `to` (exclusive), Unix seconds. */
function times(from: number, to: number, stepDays: number): number[] {
  const out: number[] = [];
  for (let t = from; t < to; t += stepDays * DAY_S) out.push(t);
  return out;
}

const CHECKS: TableName = "statusengine_servicechecks";

Deno.test("cleanup: expired weeks are dropped, the straddling week trimmed by DELETE, weeks ahead laid out, p_max stays empty", async () => {
  // Laid out by `schema` on Wednesday 2026-06-03: p_2026_23 … p_2026_27, p_max.
  await using db = await schemaDatabaseAt(new Date(Date.UTC(2026, 5, 3, 12)));
  assert.deepEqual(await partitionsOf(db, CHECKS), [
    "p_2026_23",
    "p_2026_24",
    "p_2026_25",
    "p_2026_26",
    "p_2026_27",
    "p_max",
  ]);
  // Wednesday 2026-07-01 (ISO week 27), 14 days: the cutoff lies on 2026-06-17, in week 25.
  const now = new Date(Date.UTC(2026, 6, 1, 12));
  const cutoff = unixSeconds(retentionCutoff(now, 14));
  assert.ok(cutoff > utc(2026, 6, 15) && cutoff < utc(2026, 6, 22), String(cutoff));
  // A row every 6 hours from before the first week up to week 27, plus both sides of the cutoff.
  const all = [...times(utc(2026, 5, 20), utc(2026, 7, 5), 0.25), cutoff - 1, cutoff].sort((a, b) =>
    a - b
  );
  await insertRows(db, CHECKS, all);
  const kept = all.filter((t) => t >= cutoff);
  const trimmed = all.filter((t) => t >= utc(2026, 6, 15) && t < cutoff).length;
  const hostchecks = times(utc(2026, 5, 1), utc(2026, 7, 1), 3);
  await insertRows(db, "statusengine_hostchecks", hostchecks);

  // The dry run changes nothing and prints what the run then does.
  const dry = await run({
    mysqlUrl: db.url,
    now,
    dryRun: true,
    ages: { age_servicechecks: 14, age_hostchecks: 0 },
  });
  assert.equal(dry.code, 0, dry.err.join("\n"));
  assert.deepEqual(await timesIn(db, CHECKS), all);
  assert.equal((await partitionsOf(db, CHECKS)).length, 6);
  const line = dry.out.find((l) => l.startsWith(`${CHECKS} `)) ?? "";
  assert.match(line, /add p_2026_28, p_2026_29, p_2026_30, p_2026_31;/, line);
  assert.match(line, /drop p_2026_23, p_2026_24 \(~\d+ rows\);/, line);
  // The cutoff as the run logs it: local RFC 3339, then Unix seconds.
  const cutoffText = formatLocalRfc3339(retentionCutoff(now, 14));
  assert.ok(
    line.endsWith(
      `delete ${trimmed} rows from p_2026_25 (start_time < ${cutoffText}, unix ${cutoff})`,
    ),
    line,
  );
  assert.match(dry.out.at(-1) ?? "", /^Dry run, nothing changed: /);
  assert.equal(dry.out.length, RETENTION_TABLES.length + 1, "one line per table and the summary");
  assert.equal(logsOf(dry, "cleanup: partitions dropped").length, 0);

  const r = await run({
    mysqlUrl: db.url,
    now,
    ages: { age_servicechecks: 14, age_hostchecks: 0 },
    progressIntervalMs: 0,
    batchSize: 10,
  });

  assert.equal(r.code, 0, r.err.join("\n"));
  assert.deepEqual(await timesIn(db, CHECKS), kept);
  assert.deepEqual(await partitionsOf(db, CHECKS), [
    "p_2026_25",
    "p_2026_26",
    "p_2026_27",
    "p_2026_28",
    "p_2026_29",
    "p_2026_30",
    "p_2026_31",
    "p_max",
  ]);
  assert.equal(await rowsInPartition(db, CHECKS, "p_max"), 0);
  const [dropped] = logsOf(r, "cleanup: partitions dropped", CHECKS);
  assert.equal(dropped?.properties.partitions, "p_2026_23,p_2026_24");
  // Only the straddling week went through DELETE.
  const [finished] = logsOf(r, "cleanup: table finished", CHECKS);
  assert.equal(finished?.properties.rows, trimmed);
  assert.equal(finished?.properties.partitions_dropped, 2);
  assert.equal(finished?.properties.partitions_added, 4);
  assert.equal(finished?.properties.cutoff, cutoffText);
  assert.equal(finished?.properties.cutoff_unix, cutoff);
  // Progress while deleting: rows done of the total counted first, and the time left.
  const progress = logsOf(r, "cleanup: table progress", CHECKS);
  assert.ok(progress.length > 0, "progress while deleting");
  // Rows done so far: a chunk of 10 rows along the key deletes those of its rows that are old.
  let done = 0;
  for (const { properties } of progress) {
    assert.ok(Number(properties.rows) >= done, JSON.stringify(properties));
    assert.ok(Number(properties.rows) <= trimmed, JSON.stringify(properties));
    done = Number(properties.rows);
    assert.equal(properties.rows_total, trimmed, JSON.stringify(properties));
    assert.ok(Number.isInteger(properties.eta_s) && Number(properties.eta_s) >= 0);
  }
  // A table with age 0 keeps every row but still gets its weeks ahead.
  assert.deepEqual(await timesIn(db, "statusengine_hostchecks"), hostchecks);
  assert.equal((await partitionsOf(db, "statusengine_hostchecks")).at(-2), "p_2026_31");
  assert.equal(logsOf(r, "cleanup: p_max holds rows, weeks ahead cannot be laid out").length, 0);

  // `schema --check` sees the maintained layout as the schema's own: no difference.
  const conn = await mysql.createConnection(mysqlOptionsFromUrl(db.url));
  try {
    assert.deepEqual(await diffSchema(conn), []);
  } finally {
    await conn.end();
  }

  // A second run on the same day finds nothing to add or drop.
  const again = await run({ mysqlUrl: db.url, now, ages: { age_servicechecks: 14 } });
  assert.equal(again.code, 0);
  const [second] = logsOf(again, "cleanup: table finished", CHECKS);
  assert.equal(second?.properties.partitions_added, 0);
  assert.equal(second?.properties.partitions_dropped, 0);
  assert.equal(second?.properties.rows, 0);
});

Deno.test("cleanup: an unpartitioned (legacy) table is cleaned by batched DELETE as before", async () => {
  await using db = await schemaDatabaseAt(new Date(Date.UTC(2026, 5, 3, 12)));
  await db.query(`ALTER TABLE \`${CHECKS}\` REMOVE PARTITIONING`);
  const now = new Date(Date.UTC(2026, 6, 1, 12));
  const cutoff = unixSeconds(retentionCutoff(now, 14));
  const all = [...times(utc(2026, 5, 20), utc(2026, 7, 5), 1), cutoff - 1, cutoff].sort((a, b) =>
    a - b
  );
  await insertRows(db, CHECKS, all);

  const r = await run({ mysqlUrl: db.url, now, ages: { age_servicechecks: 14 }, batchSize: 7 });

  assert.equal(r.code, 0, r.err.join("\n"));
  assert.deepEqual(await timesIn(db, CHECKS), all.filter((t) => t >= cutoff));
  assert.deepEqual(await partitionsOf(db, CHECKS), ["null"]);
  const [finished] = logsOf(r, "cleanup: table finished", CHECKS);
  assert.equal(finished?.properties.layout, "unpartitioned");
  assert.equal(finished?.properties.rows, all.filter((t) => t < cutoff).length);
  assert.equal(finished?.properties.partitions_dropped, 0);
});

Deno.test("cleanup: old rows spread along a large table are deleted in one walk of it, a chunk per statement, not a read from its start per batch", async () => {
  // A private server: its Handler_read_* counters count this run's reads and nothing else.
  await using server = await startMariadbd();
  await server.query("CREATE DATABASE walk CHARACTER SET utf8mb4");
  const url = server.url({ database: "walk" });
  const conn = await mysql.createConnection(mysqlOptionsFromUrl(url));
  const cutoff = cutoffOf(CHECKS, 14);
  const services = 50;
  const perService = 400;
  const oldPerService = 20;
  try {
    await ensureSchema(conn, { now: NOW });
    await conn.query(`ALTER TABLE \`${CHECKS}\` REMOVE PARTITIONING`);
    // Each service's oldest 20 checks are older than the cutoff: the old rows lie spread along
    // the primary key (service_description, start_time, start_time_usec).
    await conn.query(
      `INSERT INTO \`${CHECKS}\` (service_description, start_time, start_time_usec, hostname, ` +
        "state, is_hardstate, end_time, output, latency, execution_time, perfdata, command, " +
        "current_check_attempt, max_check_attempts) " +
        `SELECT CONCAT('s', LPAD(seq DIV ${perService}, 3, '0')), ` +
        `? - ${
          oldPerService * 60
        } + (seq MOD ${perService}) * 60, 0, 'h', 0, 1, 0, 'OK', 0, 0, '', ` +
        `'c', 1, 3 FROM seq_0_to_${services * perService - 1}`,
      [cutoff],
    );
  } finally {
    await conn.end();
  }
  const reads = async () =>
    (await server.query<{ Value: string }[]>("SHOW GLOBAL STATUS LIKE 'Handler_read%'"))
      .reduce((n, r) => n + Number(r.Value), 0);
  const before = await reads();

  const r = await run({ mysqlUrl: url, ages: { age_servicechecks: 14 }, batchSize: 20 });

  const examined = (await reads()) - before;
  assert.equal(r.code, 0, r.err.join("\n"));
  const [left] = await server.query<{ n: number; old: number }[]>(
    `SELECT COUNT(*) AS n, SUM(start_time < ?) AS old FROM \`${CHECKS}\``,
    [cutoff],
    "walk",
  );
  assert.equal(Number(left?.n), services * (perService - oldPerService));
  assert.equal(Number(left?.old), 0);
  // The count before the DELETE reads the table once, the walk twice (a key read and a DELETE
  // per chunk). A DELETE … LIMIT 20 repeated from the table's start reads past every earlier
  // service's rows for each batch: some 510,000 rows here.
  const rows = services * perService;
  assert.ok(examined <= 4 * rows, `${examined} rows examined for a table of ${rows}`);
});

Deno.test("cleanup: a p_max holding rows is reported, and --repair-partitions splits it into weeks, resumably", async () => {
  // Laid out in January, never maintained since: half a year of rows sits in p_max.
  await using db = await schemaDatabaseAt(new Date(Date.UTC(2026, 0, 7, 12)));
  const now = new Date(Date.UTC(2026, 6, 1, 12));
  const all = times(utc(2026, 1, 5, 6), utc(2026, 7, 1), 1);
  await insertRows(db, CHECKS, all);
  const inMax = await rowsInPartition(db, CHECKS, "p_max");
  assert.ok(inMax > 100, String(inMax));
  const ages = { "age_servicechecks": 365 };

  const nightly = await run({ mysqlUrl: db.url, now, ages });
  assert.equal(nightly.code, 0, nightly.err.join("\n"));
  const [report] = logsOf(
    nightly,
    "cleanup: p_max holds rows, weeks ahead cannot be laid out",
    CHECKS,
  );
  assert.equal(report?.level, "warn");
  assert.ok(Number(report?.properties.weeks_missing) > 20, JSON.stringify(report));
  assert.match(String(report?.properties.hint), /cleanup --repair-partitions/);
  assert.match(
    String(logsOf(nightly, "cleanup: finished")[0]?.properties.tables_needing_repair),
    /statusengine_servicechecks/,
  );
  // Never repaired automatically: p_max still holds the rows.
  assert.equal(await rowsInPartition(db, CHECKS, "p_max"), inMax);
  assert.equal((await partitionsOf(db, CHECKS)).length, 6);

  // The dry run of the repair lists steps and changes nothing.
  const dry = await run({ mysqlUrl: db.url, now, ages, repairPartitions: true, dryRun: true });
  assert.equal(dry.code, 0, dry.err.join("\n"));
  assert.ok(dry.out.some((l) => /^statusengine_servicechecks +step 1: split p_2026_07, /.test(l)));
  // Its summary counts the steps it listed.
  const listed = dry.out.filter((l) => / step \d+: split /.test(l));
  const tablesListed = new Set(listed.map((l) => l.split(" ")[0])).size;
  assert.ok(listed.length >= 2, dry.out.join("\n"));
  const [dryDone] = logsOf(dry, "cleanup: repair dry run finished");
  assert.equal(dryDone?.properties.steps, listed.length);
  assert.equal(dryDone?.properties.tables_repaired, tablesListed);
  assert.equal(
    dry.out.at(-1),
    `Dry run, nothing changed: the repair would take ${listed.length} step(s) on ${tablesListed} table(s)`,
  );
  assert.equal((await partitionsOf(db, CHECKS)).length, 6);

  // Interrupted after its first step ...
  const controller = new AbortController();
  const first = await run({ mysqlUrl: db.url, now, ages, repairPartitions: true }, {
    signal: controller.signal,
    onLog: (record) => {
      if (record.message === "cleanup: repair step") controller.abort();
    },
  });
  assert.equal(first.code, 0, first.err.join("\n"));
  assert.equal(logsOf(first, "cleanup: repair step").length, 1);
  assert.equal(logsOf(first, "cleanup: repair interrupted, run it again to continue").length, 1);
  const afterFirst = await partitionsOf(db, CHECKS);
  assert.ok(afterFirst.length > 6);
  assert.ok(await rowsInPartition(db, CHECKS, "p_max") > 0);

  // ... and continued by the next run.
  const second = await run({ mysqlUrl: db.url, now, ages, repairPartitions: true });
  assert.equal(second.code, 0, second.err.join("\n"));
  assert.ok(logsOf(second, "cleanup: repair step", CHECKS).length >= 1);
  assert.equal(await rowsInPartition(db, CHECKS, "p_max"), 0);
  assert.deepEqual(await timesIn(db, CHECKS), all, "the repair moves rows, never loses one");
  const names = await partitionsOf(db, CHECKS);
  assert.equal(names.at(-1), "p_max");
  assert.equal(names.at(-2), "p_2026_31");
  // Contiguous weeks: every week from the first to the last has its partition.
  assert.equal(names.length - 1, 31 - 2 + 1);
  // Every row is in the partition of its ISO week.
  for (const name of names.slice(1, -1)) {
    const week = Number(name.slice(-2));
    const monday = utc(2025, 12, 29) + (week - 1) * 7 * DAY_S;
    const expected = all.filter((t) => t >= monday && t < monday + 7 * DAY_S).length;
    assert.equal(await rowsInPartition(db, CHECKS, name), expected, name);
  }

  // Afterwards the nightly run keeps it in order without a warning.
  const later = await run({ mysqlUrl: db.url, now, ages });
  assert.equal(later.code, 0);
  assert.equal(
    logsOf(later, "cleanup: p_max holds rows, weeks ahead cannot be laid out").length,
    0,
  );
});

Deno.test("cleanup: while p_max holds rows, expired weeks are still dropped and old rows deleted from the whole table", async () => {
  await using db = await schemaDatabaseAt(new Date(Date.UTC(2026, 0, 7, 12)));
  const now = new Date(Date.UTC(2026, 6, 1, 12));
  const all = times(utc(2026, 1, 5, 6), utc(2026, 7, 1), 1);
  await insertRows(db, CHECKS, all);
  const cutoff = unixSeconds(retentionCutoff(now, 100));

  const r = await run({ mysqlUrl: db.url, now, ages: { "age_servicechecks": 100 } });

  assert.equal(r.code, 0, r.err.join("\n"));
  assert.deepEqual(await timesIn(db, CHECKS), all.filter((t) => t >= cutoff));
  // Every week of the January layout has expired; p_max (with the remaining rows) is left.
  assert.deepEqual(await partitionsOf(db, CHECKS), ["p_max"]);
  const [finished] = logsOf(r, "cleanup: table finished", CHECKS);
  assert.equal(finished?.properties.partitions_dropped, 5);
  assert.equal(finished?.properties.partitions_added, 0);
  assert.equal(
    logsOf(r, "cleanup: p_max holds rows, weeks ahead cannot be laid out", CHECKS).length,
    1,
  );

  // The repair then lays out weeks from the oldest row left in p_max.
  const repair = await run({ mysqlUrl: db.url, now, repairPartitions: true });
  assert.equal(repair.code, 0, repair.err.join("\n"));
  assert.equal(await rowsInPartition(db, CHECKS, "p_max"), 0);
  assert.deepEqual(await timesIn(db, CHECKS), all.filter((t) => t >= cutoff));
});

Deno.test("cleanup: with rows in p_max, the dry run announces exactly the rows the run then drops and deletes", async () => {
  // The repair case: laid out in January, never maintained, so p_max holds months of rows,
  // and the five January weeks have expired. The run drops those weeks first and then deletes
  // over what is left, so the rows of the dropped weeks must not be counted again.
  await using db = await schemaDatabaseAt(new Date(Date.UTC(2026, 0, 7, 12)));
  const now = new Date(Date.UTC(2026, 6, 1, 12));
  const ages = { "age_servicechecks": 100 };
  const cutoff = unixSeconds(retentionCutoff(now, 100));
  const all = times(utc(2026, 1, 5, 6), utc(2026, 7, 1), 0.02);
  await insertRows(db, CHECKS, all);
  const weeks = (await partitionsOf(db, CHECKS)).slice(0, -1);
  let inWeeks = 0;
  for (const week of weeks) inWeeks += await rowsInPartition(db, CHECKS, week);
  const older = all.filter((t) => t < cutoff).length;
  assert.ok(inWeeks > 1000 && older - inWeeks > 1000, `${inWeeks} ${older}`);

  const dry = await run({ mysqlUrl: db.url, now, ages, dryRun: true });
  assert.equal(dry.code, 0, JSON.stringify(dry.logs.filter((l) => l.level === "error")));
  const line = dry.out.find((l) => l.startsWith(`${CHECKS} `)) ?? "";
  const dropped = /drop [^;]* \(~(\d+) rows\)/.exec(line);
  const deleted = /delete (\d+) rows/.exec(line);
  assert.ok(dropped !== null && deleted !== null, line);

  const r = await run({ mysqlUrl: db.url, now, ages });
  assert.equal(r.code, 0, r.err.join("\n"));
  assert.deepEqual(await timesIn(db, CHECKS), all.filter((t) => t >= cutoff));
  const [finished] = logsOf(r, "cleanup: table finished", CHECKS);
  assert.equal(finished?.properties.partitions_dropped, weeks.length);
  // The rows the run deleted one by one: exactly what the dry run announced.
  assert.equal(Number(deleted[1]), finished?.properties.rows, line);
  assert.equal(Number(deleted[1]), older - inWeeks, line);
  // The dropped rows are the engine's estimate (counting them would read what the drop
  // spares): the same figure the run reports, and within 5 % of the rows the weeks held.
  assert.equal(Number(dropped[1]), finished?.properties.rows_dropped_estimate, line);
  assert.ok(Math.abs(Number(dropped[1]) - inWeeks) <= inWeeks * 0.05, `${line} vs ${inWeeks}`);
});

Deno.test("cleanup: an ALTER kept waiting by a long transaction gives up, the table fails, the others are cleaned", async () => {
  await using db = await schemaDatabaseAt(new Date(Date.UTC(2026, 5, 3, 12)));
  const now = new Date(Date.UTC(2026, 6, 1, 12));
  const cutoff = unixSeconds(retentionCutoff(now, 14));
  await insertRows(db, CHECKS, [utc(2026, 6, 4), cutoff + 1]);
  // Before the first week and inside the weeks ahead: nothing to drop, only rows to delete.
  const logs = around(unixSeconds(retentionCutoff(now, 5)));
  await insertRows(db, "statusengine_logentries", [...logs.old, ...logs.kept]);
  // An open transaction that read the table holds its metadata lock until it ends.
  const reader = await mysql.createConnection(mysqlOptionsFromUrl(db.url));
  try {
    await reader.query("START TRANSACTION");
    await reader.query(`SELECT COUNT(*) FROM \`${CHECKS}\``);

    const r = await run({ mysqlUrl: db.url, now, ages: { "age_servicechecks": 14 } });

    assert.equal(r.code, 1);
    const [failed] = logsOf(r, "cleanup: table failed", CHECKS);
    assert.match(String(failed?.properties.error), /lock wait timeout/i);
    assert.deepEqual(await timesIn(db, "statusengine_logentries"), logs.kept);
    assert.equal(logsOf(r, "cleanup: table finished", "statusengine_logentries").length, 1);
  } finally {
    await reader.query("ROLLBACK").catch(() => {});
    await reader.end();
  }
  // Nothing was half done: both rows are still there, in their weeks.
  assert.equal((await timesIn(db, CHECKS)).length, 2);
});

Deno.test("cleanup: a table partitioned another way is cleaned by DELETE, warned about, and schema --check reports it", async () => {
  await using db = await schemaDatabaseAt(new Date(Date.UTC(2026, 5, 3, 12)));
  await db.query(`ALTER TABLE \`${CHECKS}\` PARTITION BY HASH (start_time) PARTITIONS 3`);
  const now = new Date(Date.UTC(2026, 6, 1, 12));
  const cutoff = unixSeconds(retentionCutoff(now, 14));
  const all = [...times(utc(2026, 5, 20), utc(2026, 7, 5), 1), cutoff - 1, cutoff].sort((a, b) =>
    a - b
  );
  await insertRows(db, CHECKS, all);

  const r = await run({ mysqlUrl: db.url, now, ages: { "age_servicechecks": 14 } });

  assert.equal(r.code, 0, r.err.join("\n"));
  assert.deepEqual(await timesIn(db, CHECKS), all.filter((t) => t >= cutoff));
  assert.equal((await partitionsOf(db, CHECKS)).length, 3, "the layout is left alone");
  const [warning] = logsOf(r, "cleanup: table partitioned in another way, cleaned by DELETE only");
  assert.equal(warning?.properties.table, CHECKS);
  assert.equal(warning?.properties.partitioning, "HASH (start_time)");
  assert.equal(logsOf(r, "cleanup: table finished", CHECKS)[0]?.properties.layout, "other");
  const conn = await mysql.createConnection(mysqlOptionsFromUrl(db.url));
  try {
    const differences = await diffSchema(conn);
    assert.ok(
      differences.some((d) => d.kind === "partitioning" && d.table === CHECKS),
      JSON.stringify(differences),
    );
  } finally {
    await conn.end();
  }
});

// The walk: with the worker's account (SELECT, INSERT, UPDATE, DELETE) cleanup worked until the
// weeks laid out ahead ran out; then each partitioned table failed on ALTER, deletes included,
// and the dry run had said nothing.
Deno.test("cleanup: an account without ALTER and DROP is named with the GRANT to add, in the dry run as a warning; the run still deletes old rows and exits 1", async () => {
  await using db = await schemaDatabaseAt(new Date(Date.UTC(2026, 5, 3, 12)));
  const user = `se_cleanup_${crypto.randomUUID().slice(0, 8)}`;
  await db.query(`CREATE USER '${user}'@'%' IDENTIFIED BY 'pw'`);
  try {
    await db.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON \`${db.name}\`.* TO '${user}'@'%'`);
    const url = new URL(db.url);
    url.username = user;
    url.password = "pw";
    // Wednesday 2026-07-01: weeks 28 … 31 must be laid out and weeks 23, 24 dropped.
    const now = new Date(Date.UTC(2026, 6, 1, 12));
    const cutoff = unixSeconds(retentionCutoff(now, 14));
    const all = times(utc(2026, 5, 20), utc(2026, 7, 5), 1);
    await insertRows(db, CHECKS, all);
    const ages = { "age_servicechecks": 14, "age_hostchecks": 0 };
    const grant = `GRANT ALTER, DROP ON \`${db.name}\`.* TO '${user}'@'%'`;
    const advice = (r: Run) => logsOf(r, "cleanup: the account may not maintain partitions");

    const dry = await run({ mysqlUrl: url.href, now, dryRun: true, ages });
    assert.equal(dry.code, 0, dry.err.join("\n"));
    assert.equal(advice(dry).length, 1, "said once");
    assert.equal(advice(dry)[0]?.level, "warn");
    assert.ok(String(advice(dry)[0]?.properties.hint).includes(grant), JSON.stringify(advice(dry)));

    const r = await run({ mysqlUrl: url.href, now, ages });
    assert.equal(r.code, 1, r.err.join("\n"));
    assert.equal(advice(r).length, 1);
    assert.equal(advice(r)[0]?.level, "error");
    assert.deepEqual(await timesIn(db, CHECKS), all.filter((t) => t >= cutoff), "old rows gone");
    assert.equal((await partitionsOf(db, CHECKS)).length, 6, "no partition changed");
    assert.equal(logsOf(r, "cleanup: table failed").length, 0);
    const [end] = logsOf(r, "cleanup: finished with errors");
    assert.ok(String(end?.properties.hint).includes(grant), JSON.stringify(end));

    // With the grant, neither warns, and the run lays the weeks out.
    await db.query(grant);
    const granted = await run({ mysqlUrl: url.href, now, ages });
    assert.equal(granted.code, 0, granted.err.join("\n"));
    assert.equal(advice(granted).length, 0);
    assert.equal((await partitionsOf(db, CHECKS)).at(-2), "p_2026_31");
  } finally {
    await db.query(`DROP USER '${user}'@'%'`);
  }
});

Deno.test("cleanup: a progress line before any row was deleted gives the total but no ETA", async () => {
  await using db = await schemaDatabaseAt(new Date(Date.UTC(2026, 5, 3, 12)));
  await db.query(`ALTER TABLE \`${CHECKS}\` REMOVE PARTITIONING`);
  const cutoff = cutoffOf(CHECKS, 14);
  // Along the key (service_description, …) the first service has only rows to keep, so the
  // first chunks delete nothing; the old rows come with the second service.
  const columns = "service_description, start_time, start_time_usec, hostname, state, " +
    "is_hardstate, end_time, output, latency, execution_time, perfdata, command, " +
    "current_check_attempt, max_check_attempts";
  const row = (
    service: string,
    time: number,
  ) => [service, time, 0, "h", 0, 1, 0, "OK", 0, 0, "", "c", 1, 3];
  await db.query(`INSERT INTO \`${CHECKS}\` (${columns}) VALUES ?`, [[
    ...[0, 1, 2, 3].map((i) => row("a", cutoff + i)),
    ...[1, 2].map((i) => row("b", cutoff - i)),
  ]]);

  const r = await run({
    mysqlUrl: db.url,
    ages: { age_servicechecks: 14 },
    batchSize: 2,
    progressIntervalMs: 0,
  });

  assert.equal(r.code, 0, r.err.join("\n"));
  const progress = logsOf(r, "cleanup: table progress", CHECKS).map((l) => l.properties);
  const before = progress.filter((p) => p.rows === 0);
  assert.ok(before.length > 0, JSON.stringify(progress));
  for (const p of before) {
    assert.equal(p.rows_total, 2, JSON.stringify(p));
    // Nothing done yet says nothing of the time left: no ETA rather than an infinite one.
    assert.ok(!("eta_s" in p), `eta_s ${JSON.stringify(p.eta_s)} while no row was deleted`);
  }
  const [finished] = logsOf(r, "cleanup: table finished", CHECKS);
  assert.equal(finished?.properties.rows, 2);
});

Deno.test("cleanup: a hand-made layout whose names the weeks ahead would take still has its old rows deleted, and fails naming the partition", async () => {
  await using db = await schemaDatabaseAt(new Date(Date.UTC(2026, 5, 3, 12)));
  // Weeks named by ISO week but ending on Sunday, not Monday: the week after p_2026_27 starts
  // on Sunday 2026-07-05 and would be named p_2026_27 again.
  const sundays = [7, 14, 21, 28].map((d) => ["p_2026_" + (d / 7 + 22), utc(2026, 6, d) / DAY_S])
    .concat([["p_2026_27", utc(2026, 7, 5) / DAY_S]]);
  await db.query(
    `ALTER TABLE \`${CHECKS}\` PARTITION BY RANGE (start_time DIV 86400) (${
      sundays.map(([name, day]) => `PARTITION ${name} VALUES LESS THAN (${day})`).join(", ")
    }, PARTITION p_max VALUES LESS THAN MAXVALUE)`,
  );
  const now = new Date(Date.UTC(2026, 6, 1, 12));
  const cutoff = unixSeconds(retentionCutoff(now, 14));
  const all = [...times(utc(2026, 6, 1), utc(2026, 7, 5), 1), cutoff - 1, cutoff].sort((a, b) =>
    a - b
  );
  await insertRows(db, CHECKS, all);

  const r = await run({ mysqlUrl: db.url, now, ages: { "age_servicechecks": 14 } });

  assert.equal(r.code, 1, "the layout needs the operator");
  const [failed] = logsOf(r, "cleanup: table failed", CHECKS);
  // The age is still a promise: the old rows went, by DELETE as from a table laid out otherwise.
  assert.deepEqual(await timesIn(db, CHECKS), all.filter((t) => t >= cutoff));
  assert.equal(failed?.properties.rows, all.filter((t) => t < cutoff).length);
  assert.match(String(failed?.properties.error), /p_2026_27/);
  // `schema --check` compares only the partitioning expression: it cannot show this.
  assert.doesNotMatch(String(failed?.properties.error), /schema --check/);
});

Deno.test("cleanup: a table disabled with age 0 that does not exist is skipped, not a failure", async () => {
  await using db = await schemaDatabase();
  await db.query("DROP TABLE `statusengine_tasks`");
  const checks = around(cutoffOf("statusengine_hostchecks"));
  await insertRows(db, "statusengine_hostchecks", [...checks.old, ...checks.kept]);

  const dry = await run({ mysqlUrl: db.url, ages: { age_tasks: 0 }, dryRun: true });
  assert.equal(dry.code, 0, JSON.stringify(logsOf(dry, "cleanup: table failed")));
  assert.ok(dry.out.some((l) => /^statusengine_tasks +disabled \(age_tasks: 0\)$/.test(l)));

  const r = await run({ mysqlUrl: db.url, ages: { age_tasks: 0 } });

  assert.equal(r.code, 0, JSON.stringify(logsOf(r, "cleanup: table failed")));
  assert.equal(logsOf(r, "cleanup: table failed").length, 0);
  assert.deepEqual(await timesIn(db, "statusengine_hostchecks"), checks.kept);

  // Nor is it a failure of the repair.
  const repair = await run({ mysqlUrl: db.url, ages: { age_tasks: 0 }, repairPartitions: true });
  assert.equal(repair.code, 0, JSON.stringify(logsOf(repair, "cleanup: repair failed")));
});

Deno.test("cleanup: a run interrupted after a table failed still exits 1 and names the table", async () => {
  await using db = await schemaDatabase();
  await db.query("DROP TABLE `statusengine_hostchecks`");
  const controller = new AbortController();

  // The first table fails; the signal comes while the second is being cleaned.
  const r = await run({ mysqlUrl: db.url }, {
    signal: controller.signal,
    onLog: (record) => {
      if (record.message === "cleanup: table failed") controller.abort();
    },
  });

  // The interruption is no failure, the table before it was one.
  assert.equal(r.code, 1, "exit code");
  assert.equal(logsOf(r, "cleanup: table failed", "statusengine_hostchecks").length, 1);
  const [interrupted] = logsOf(r, "cleanup: interrupted, remaining tables left for the next run");
  assert.equal(interrupted?.properties.failed_tables, "statusengine_hostchecks");

  // The same for the repair.
  const again = new AbortController();
  const repair = await run({ mysqlUrl: db.url, repairPartitions: true }, {
    signal: again.signal,
    onLog: (record) => {
      if (record.message === "cleanup: repair failed") again.abort();
    },
  });
  assert.equal(repair.code, 1, "exit code of the repair");
  const [stopped] = logsOf(repair, "cleanup: repair interrupted, run it again to continue");
  assert.equal(stopped?.properties.failed_tables, "statusengine_hostchecks");
});

// One row from a wrong clock or a bad payload (times are not bounded on decode) sits in p_max:
// the repair laid out every week up to it, hundreds of partitions; beyond MariaDB's 8192 per
// table every run failed, its hint saying to run it again.
Deno.test("cleanup: --repair-partitions refuses a p_max row more than a year ahead, naming its time and table, and changes nothing", async () => {
  await using db = await schemaDatabaseAt(new Date(Date.UTC(2026, 5, 3, 12)));
  const now = new Date(Date.UTC(2026, 6, 1, 12));
  const farFuture = utc(2029, 3, 1, 6);
  await insertRows(db, CHECKS, [utc(2026, 6, 30), farFuture]);
  const before = await partitionsOf(db, CHECKS);

  for (const dryRun of [true, false]) {
    const r = await run({ mysqlUrl: db.url, now, repairPartitions: true, dryRun });

    assert.equal(r.code, 1, `dry run ${dryRun}: ${r.out.join("\n")}`);
    // The other tables still get their weeks ahead.
    assert.deepEqual(r.out.filter((l) => l.startsWith(`${CHECKS} `)), []);
    const [refused] = logsOf(
      r,
      "cleanup: repair refused: p_max holds rows far in the future",
      CHECKS,
    );
    assert.equal(
      refused?.level,
      "error",
      JSON.stringify(r.logs.filter((l) => l.level !== "debug")),
    );
    assert.equal(refused?.properties.newest, farFuture);
    assert.equal(refused?.properties.newest_utc, "2029-03-01T06:00:00.000Z");
    assert.match(
      String(refused?.properties.hint),
      new RegExp(
        `DELETE FROM \`${CHECKS}\` PARTITION \\(\`p_max\`\\) WHERE \`start_time\` >= \\d+`,
      ),
    );
    assert.doesNotMatch(String(refused?.properties.hint), /run the repair again: it continues/);
  }
  assert.deepEqual(await partitionsOf(db, CHECKS), before);
  assert.equal((await timesIn(db, CHECKS)).length, 2, "the repair deletes nothing");

  // The largest time decoding accepts (15 digits) lies beyond what a Date can show.
  await insertRows(db, CHECKS, [999_999_999_999_999]);
  const r = await run({ mysqlUrl: db.url, now, repairPartitions: true });
  const [refused] = logsOf(
    r,
    "cleanup: repair refused: p_max holds rows far in the future",
    CHECKS,
  );
  assert.equal(
    refused?.properties.newest,
    999_999_999_999_999,
    JSON.stringify(r.logs.filter((l) => l.level === "error")),
  );
  assert.equal(refused?.properties.newest_utc, null);
});

/** Re-lay a table out with its weekly ranges, each split into two HASH subpartitions. */
async function subpartition(db: ScratchDatabase, table: TableName, withMax: boolean) {
  const rows = await db.query<{ p: string; d: string }[]>(
    `SELECT PARTITION_NAME AS p, PARTITION_DESCRIPTION AS d FROM information_schema.PARTITIONS
      WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY PARTITION_ORDINAL_POSITION`,
    [db.name, table],
  );
  const ranges = rows.filter((r) => withMax || r.d !== "MAXVALUE").map((r) =>
    `PARTITION \`${r.p}\` VALUES LESS THAN (${r.d})`
  );
  const column = columnOf(table);
  await db.query(
    `ALTER TABLE \`${table}\` PARTITION BY RANGE (\`${column}\` DIV 86400)
       SUBPARTITION BY HASH (\`${column}\`) SUBPARTITIONS 2 (${ranges.join(", ")})`,
  );
}

// information_schema.PARTITIONS has a row per subpartition: the plan named each week twice,
// `DROP PARTITION p, p` was refused (1507), and with p_max the table was called "partitioned
// another way" although `schema --check` finds no difference.
Deno.test("cleanup: a weekly layout split into subpartitions is maintained like any weekly layout", async () => {
  const now = new Date(Date.UTC(2026, 6, 1, 12));
  const cutoff = unixSeconds(retentionCutoff(now, 14));
  const all = [...times(utc(2026, 5, 20), utc(2026, 7, 5), 1), cutoff - 1, cutoff].sort((a, b) =>
    a - b
  );
  for (const withMax of [false, true]) {
    await using db = await schemaDatabaseAt(new Date(Date.UTC(2026, 5, 3, 12)));
    await subpartition(db, CHECKS, withMax);
    await insertRows(db, CHECKS, all);

    const r = await run({ mysqlUrl: db.url, now, ages: { "age_servicechecks": 14 } });

    const [finished] = logsOf(r, "cleanup: table finished", CHECKS);
    assert.equal(r.code, 0, JSON.stringify(r.logs.filter((l) => l.level === "error")));
    assert.equal(finished?.properties.layout, "weekly", `with p_max ${withMax}`);
    assert.equal(finished?.properties.partitions_dropped, 2);
    assert.deepEqual(await timesIn(db, CHECKS), all.filter((t) => t >= cutoff));
    assert.equal((await partitionsOf(db, CHECKS))[0], "p_2026_25");
  }
});

// Two runs at once (cron overlap, a manual run during the timer's) planned the same weeks: the
// second one's REORGANIZE failed with "Duplicate partition name", which does not say why.
Deno.test("cleanup: a second run while one is running on the same database stops at once, naming the other run's connection, exit 75", async () => {
  await using db = await schemaDatabaseAt(new Date(Date.UTC(2026, 5, 3, 12)));
  const now = new Date(Date.UTC(2026, 6, 1, 12));
  const first = RETENTION_TABLES[0]?.table ?? "";
  // A reader's open transaction holds the first table's metadata lock: the first run's ALTER
  // waits for it, in the middle of the run.
  const reader = await mysql.createConnection(mysqlOptionsFromUrl(db.url));
  // The statements of the runs waiting for a metadata lock, oldest first.
  const waiting = async () =>
    (await db.query<{ id: number }[]>(
      `SELECT ID AS id FROM information_schema.PROCESSLIST
        WHERE DB = ? AND STATE = 'Waiting for table metadata lock' ORDER BY TIME DESC, ID`,
      [db.name],
    )).map((r) => Number(r.id));
  const lines: string[] = [];
  await configureLogging({ level: "info", format: "json", write: (l) => void lines.push(l) });
  try {
    await reader.query("START TRANSACTION");
    await reader.query(`SELECT COUNT(*) FROM \`${first}\``);
    const start = () => {
      const io = { out: [] as string[], err: [] as string[] };
      const code = runCleanupCommand(
        { mysqlUrl: db.url, batchSize: 5000, batchPauseMs: 0, ages: {}, now },
        { out: (l) => io.out.push(l), err: (l) => io.err.push(l) },
        new AbortController().signal,
      );
      return { io, code, settled: track(code) };
    };
    const a = start();
    await waitFor(async () => (await waiting()).length === 1, { message: "the first run's ALTER" });
    const [running] = await waiting();
    const b = start();
    // Without a lock between the runs, the second reads the layout the first is about to change
    // and waits behind its ALTER.
    await waitFor(async () => b.settled.settled || (await waiting()).length === 2, {
      message: "the second run to end or to wait as well",
    });
    await reader.query("COMMIT");

    assert.equal(await a.code, 0, lines.filter((l) => l.includes('"error"')).join("\n"));
    assert.equal(await b.code, 75, b.io.err.join("\n"));
    assert.equal(b.io.err.length, 1);
    assert.match(
      b.io.err[0] ?? "",
      new RegExp(`^Another cleanup is running on "${db.name}" \\(MySQL connection id ${running}; `),
    );
  } finally {
    await reader.end();
    await resetLogging();
  }
});

// On SIGTERM the run closes its connection, but the server goes on with the ALTER it left (or
// with its wait for the metadata lock). A rerun queued behind it and failed with "Lock wait
// timeout exceeded; try restarting transaction", its hint saying to run the repair again.
Deno.test("cleanup: a rerun while the server still runs the ALTER an interrupted repair left says so, exit 75", async () => {
  await using db = await schemaDatabaseAt(new Date(Date.UTC(2026, 5, 3, 12)));
  const now = new Date(Date.UTC(2026, 6, 1, 12));
  const first = RETENTION_TABLES[0]?.table ?? "";
  const alters = async () =>
    (await db.query<{ id: number }[]>(
      `SELECT ID AS id FROM information_schema.PROCESSLIST
        WHERE DB = ? AND INFO LIKE 'ALTER TABLE%'`,
      [db.name],
    )).map((r) => Number(r.id));
  // A reader's open transaction keeps the repair's first ALTER waiting on the server.
  const reader = await mysql.createConnection(mysqlOptionsFromUrl(db.url));
  try {
    await reader.query("START TRANSACTION");
    await reader.query(`SELECT COUNT(*) FROM \`${first}\``);
    const controller = new AbortController();
    const stopping = run({ mysqlUrl: db.url, now, repairPartitions: true }, {
      signal: controller.signal,
    });
    await waitFor(async () => (await alters()).length === 1, { message: "the repair's ALTER" });
    const [left] = await alters();
    controller.abort();
    assert.equal((await stopping).code, 0);
    assert.deepEqual(await alters(), [left], "the server still has the abandoned ALTER");

    const again = await run({ mysqlUrl: db.url, now, repairPartitions: true });

    assert.equal(again.code, 75, JSON.stringify(again.logs.filter((l) => l.level === "error")));
    assert.match(
      again.err.join("\n"),
      new RegExp(`connection id ${left}; a run stopped during an ALTER TABLE holds it until`),
    );
  } finally {
    await reader.query("ROLLBACK").catch(() => {});
    await reader.end();
  }
});

// A table whose connection broke is retried on a new one, but the server may still run the
// statement the old one left (here an ALTER waiting for a metadata lock), holding the run's own
// lock: every later table then failed with "Another cleanup is running".
Deno.test("cleanup: after its connection broke mid-ALTER the run goes on with the next tables, not stopped by its own lock", async () => {
  await using db = await schemaDatabaseAt(new Date(Date.UTC(2026, 5, 3, 12)));
  await using proxy = await startMysqlProxy(db);
  const now = new Date(Date.UTC(2026, 6, 1, 12));
  const first = RETENTION_TABLES[0]?.table ?? "";
  const logs = around(unixSeconds(retentionCutoff(now, 5)));
  await insertRows(db, "statusengine_logentries", [...logs.old, ...logs.kept]);
  const reader = await mysql.createConnection(mysqlOptionsFromUrl(db.url));
  try {
    await reader.query("START TRANSACTION");
    await reader.query(`SELECT COUNT(*) FROM \`${first}\``);
    const r = await run({ mysqlUrl: proxy.url, now }, {
      onLog: (record) => {
        if (record.message === "cleanup: starting table" && record.properties.table === first) {
          // The first table's ALTER will wait for the reader; cut the run's connection then.
          void waitFor(async () =>
            (await db.query<{ n: number }[]>(
              `SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST
                WHERE DB = ? AND INFO LIKE 'ALTER TABLE%'`,
              [db.name],
            ))[0]?.n === 1
          ).then(() => proxy.sever());
        }
      },
    });

    const failed = logsOf(r, "cleanup: table failed").map((l) => l.properties.table);
    assert.deepEqual(failed, [first], JSON.stringify(logsOf(r, "cleanup: table failed")));
    assert.equal(r.code, 1);
    assert.deepEqual(await timesIn(db, "statusengine_logentries"), logs.kept);
  } finally {
    await reader.query("ROLLBACK").catch(() => {});
    await reader.end();
  }
});

// The week the nightly DELETE walks is the one the worker writes into on some days (age 5, a
// Saturday), and the walk's locks meet the worker's inserts there. A deadlock with a writer rolls
// back one statement of a transient conflict, which failed the whole table for the night.
Deno.test("cleanup: a chunk's DELETE chosen as a deadlock victim against a writer is sent again, the table finishes", async () => {
  // Laid out on Wednesday 2026-06-03, cleaned the same day with age 1: nothing to add or drop,
  // the cutoff lies in the first week, which is walked by DELETE.
  const now = new Date(Date.UTC(2026, 5, 3, 12));
  await using db = await schemaDatabaseAt(now);
  const cutoff = unixSeconds(retentionCutoff(now, 1));
  const old = Array.from({ length: 10 }, (_, i) => cutoff - 100 + i);
  await insertRows(db, CHECKS, old);
  // Keys in time order, so the DELETE's walk locks the old rows before it meets the writer's.
  await db.query(`UPDATE \`${CHECKS}\` SET service_description = CONCAT('svc-', start_time)`);
  const row = (svc: string, time: number) => {
    const { sql, rows } = insertOf(CHECKS, [time]);
    const at = TABLES[CHECKS].insertColumns.indexOf("service_description");
    return { sql, rows: rows.map((r) => r.with(at, svc)) };
  };
  await db.query("CREATE TABLE ballast (id INT PRIMARY KEY) ENGINE=InnoDB");
  const writer = await mysql.createConnection(mysqlOptionsFromUrl(db.url));
  try {
    // A writer with more work in its transaction than the DELETE, so InnoDB rolls back the DELETE.
    await writer.query("START TRANSACTION");
    await writer.query("INSERT INTO ballast VALUES ?", [
      Array.from({ length: 1000 }, (_, i) => [i]),
    ]);
    const last = row("svc-z", cutoff + 10);
    await writer.query(last.sql, [last.rows]);
    const running = run({ mysqlUrl: db.url, now, ages: { "age_servicechecks": 1 } });
    // A DELETE of ten rows still running after half a second waits for a lock. (INNODB_TRX is no
    // witness: MariaDB 10.11 was seen leaving this waiting DELETE out of it.)
    const lockWaits = async () =>
      Number(
        (await db.query<{ n: number }[]>(
          `SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST
            WHERE DB = ? AND INFO LIKE 'DELETE%' AND TIME_MS >= 500`,
          [db.name],
        ))[0]?.n,
      );
    // The DELETE has locked the old rows and waits for the writer's row after them ...
    await waitFor(async () => await lockWaits() > 0, { timeoutMs: 60_000 });
    // ... when the writer inserts between two of the old rows: a deadlock.
    const between = row(`svc-${old[0]}a`, cutoff + 20);
    await writer.query(between.sql, [between.rows]);
    await writer.query("COMMIT");
    const r = await running;

    assert.deepEqual(logsOf(r, "cleanup: table failed"), []);
    assert.equal(r.code, 0);
    assert.equal(logsOf(r, "cleanup: table finished", CHECKS)[0]?.properties.rows, old.length);
    assert.deepEqual(await timesIn(db, CHECKS), [cutoff + 10, cutoff + 20]);
  } finally {
    await writer.query("ROLLBACK").catch(() => {});
    await writer.end();
  }
});
