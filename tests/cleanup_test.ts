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
import { mysqlOptionsFromUrl } from "../src/mysql/url.ts";
import { createScratchDatabase, type ScratchDatabase } from "./helpers/mysql.ts";
import { createSchema } from "./helpers/worker.ts";
import { waitFor } from "./helpers/wait.ts";

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
  ms: number;
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
  const started = performance.now();
  try {
    const code = await runCleanupCommand(
      { batchSize: 5000, batchPauseMs: 0, ages: {}, now: NOW, ...options },
      { out: (l) => out.push(l), err: (l) => err.push(l) },
      hooks.signal ?? new AbortController().signal,
    );
    return { code, out, err, logs, ms: performance.now() - started };
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
  await db.query(
    `INSERT INTO \`${table}\` (${spec.insertColumns.map((c) => `\`${c}\``).join(", ")}) VALUES ?`,
    [rows],
  );
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
];

Deno.test("cleanup: exactly the rows strictly older than each table's cutoff are deleted, partitions stay", async () => {
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
  // Batched DELETE only, never DROP PARTITION (docs/operations.md#partitions).
  assert.equal(await partitionCount(db), partitions);
  assert.equal(logsOf(r, "cleanup: table finished").length, 15);
  assert.equal(logsOf(r, "cleanup: finished").length, 1);
  assert.equal(logsOf(r, "cleanup: starting")[0]?.properties.tables, 15);
  // One aligned progress line per table plus the summary.
  assert.equal(r.out.length, 16);
  assert.match(
    r.out.find((l) => l.startsWith("statusengine_perfdata ")) ?? "",
    /^statusengine_perfdata +2 rows deleted in 1 batch, \d+\.\d\d s, [\d.]+ rows\/s$/,
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
  assert.equal(logsOf(r, "cleanup: table disabled, skipping", "statusengine_hostchecks").length, 1);
  assert.equal(logsOf(r, "cleanup: starting table", "statusengine_hostchecks").length, 0);
  assert.equal(
    logsOf(r, "cleanup: starting table", "statusengine_servicechecks")[0]?.properties.age_days,
    5,
  );
  assert.equal(logsOf(r, "cleanup: starting")[0]?.properties.tables, 14);
  assert.ok(r.out.some((l) => /^statusengine_hostchecks +disabled \(age_hostchecks: 0\)$/.test(l)));
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
  assert.ok(
    r.out.some((l) => /^statusengine_hostchecks +10 rows deleted in 4 batches, /.test(l)),
    r.out.join("\n"),
  );
});

Deno.test("cleanup: no pause follows the last batch of a table, nor separates tables", async () => {
  await using db = await schemaDatabase();
  const cutoff = cutoffOf("statusengine_hostchecks");
  await insertRows(db, "statusengine_hostchecks", [cutoff - 10, cutoff - 9]);

  // Every table ends with its first statement (fewer rows than the batch size); a pause
  // after it would make this run last 15 × 30 s.
  const r = await run({ mysqlUrl: db.url, batchSize: 3, batchPauseMs: 30_000 });

  assert.equal(r.code, 0, r.err.join("\n"));
  assert.ok(r.ms < 15_000, `run took ${r.ms} ms`);
  assert.deepEqual(await timesIn(db, "statusengine_hostchecks"), []);
  assert.equal(logsOf(r, "cleanup: batch deleted").length, 15);
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
  assert.equal(logsOf(r, "cleanup: table finished").length, 14);
  const [summary] = logsOf(r, "cleanup: finished with errors");
  assert.equal(summary?.level, "error");
  assert.equal(summary?.properties.failed, 1);
  assert.equal(logsOf(r, "cleanup: finished").length, 0);
  assert.ok(r.err.some((l) => l.startsWith("statusengine_servicechecks ")), r.err.join("\n"));
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
  assert.equal(warning?.properties.remaining_tables, 15);
});

Deno.test("cleanup: a signal between batches stops at once with exit 0 and leaves later tables untouched", async () => {
  await using db = await schemaDatabase();
  const cutoff = cutoffOf("statusengine_hostchecks");
  const old = Array.from({ length: 10 }, (_, i) => cutoff - 100 - i);
  await insertRows(db, "statusengine_hostchecks", old);
  const logs = around(cutoffOf("statusengine_logentries"));
  await insertRows(db, "statusengine_logentries", [...logs.old, ...logs.kept]);
  const controller = new AbortController();

  // Abort right after the first batch committed; the 60 s pause must not be waited out.
  const r = await run({ mysqlUrl: db.url, batchSize: 3, batchPauseMs: 60_000 }, {
    signal: controller.signal,
    onLog: (record) => {
      if (record.message === "cleanup: batch deleted") controller.abort();
    },
  });

  assert.equal(r.code, 0, r.err.join("\n"));
  assert.ok(r.ms < 30_000, `run took ${r.ms} ms`);
  assert.equal((await timesIn(db, "statusengine_hostchecks")).length, 7);
  assert.deepEqual(await timesIn(db, "statusengine_logentries"), [...logs.old, ...logs.kept]);
  const [interrupted] = logsOf(r, "cleanup: table interrupted", "statusengine_hostchecks");
  assert.equal(interrupted?.properties.rows, 3);
  assert.equal(interrupted?.properties.batches, 1);
  assert.equal(logsOf(r, "cleanup: starting table").length, 1);
  assert.equal(
    logsOf(r, "cleanup: interrupted, remaining tables left for the next run")[0]?.properties
      .remaining_tables,
    14,
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
    /Cannot connect to MySQL at "mysql:\/\/root:\*\*\*\*@127\.0\.0\.1:1/,
  );
  assert.equal(logsOf(r, "cleanup: cannot connect to MySQL")[0]?.level, "error");
  assert.equal(logsOf(r, "cleanup: starting table").length, 0);
  const everything = JSON.stringify(r);
  assert.ok(!everything.includes("s3cret-pw"), everything);
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
    const r = await run({ mysqlUrl: `mysql://root@127.0.0.1:${port}/statusengine` });

    assert.equal(r.code, 1);
    assert.ok(r.ms < 8_000, `took ${r.ms} ms`);
    assert.match(r.err.join("\n"), /Cannot connect to MySQL/);
  } finally {
    for (const conn of accepted) conn.close();
    listener.close();
    await accepting;
  }
});
