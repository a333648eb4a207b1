/**
 * Retention on weekly partitions against the legacy batched DELETE (docs/retention.md#bench):
 * the same `statusengine_servicechecks` rows (several million over several weeks) in two
 * databases of one private MariaDB, one with the weekly layout `schema` creates and `cleanup`
 * maintains, one unpartitioned (the legacy PHP schema), each cleaned by the real `cleanup`
 * command with a cutoff in the middle of a week. Two rounds:
 *
 * 1. catch-up: the first run after the rows arrived (several weeks expire at once);
 * 2. nightly: the next day's run (the cutoff moves by one day).
 *
 * Prints wall time, the time statements held the table (ALTER: metadata lock on the whole
 * table; DELETE: the sum of the batch statements, row locks and undo), rows removed, the
 * ratio, and checks that both databases keep exactly the same rows.
 *
 *   deno run -A bench/cleanup.ts [--rows 3000000] [--weeks 6] [--batch 5000]
 *
 * Needs MariaDB (the rows are generated with its SEQUENCE engine).
 */
import mysql from "mysql2/promise";
import { runCleanupCommand } from "../src/cli/cleanup.ts";
import { configureLogging, resetLogging } from "../src/log.ts";
import { TABLES } from "../src/mysql/catalogue.ts";
import { ensureSchema } from "../src/mysql/schema.ts";
import { startMariadbd } from "../tests/helpers/mariadbd.ts";
import { arg, fmt, report } from "./_util.ts";

const ROWS = arg("--rows", 3_000_000);
const WEEKS = arg("--weeks", 6);
const BATCH = arg("--batch", 5_000);
const CHUNK = 250_000;
const DAY = 86_400;
const TABLE = TABLES.statusengine_servicechecks;
/** 14 days back from a Thursday noon: the cutoff is a Thursday noon, mid-week. */
const AGE_DAYS = 14;

await using server = await startMariadbd({
  extraArgs: ["--innodb-buffer-pool-size=2G", "--innodb-log-file-size=512M"],
});

// The reference day: the Thursday noon (UTC) of the current week.
const today = Math.floor(Date.now() / 1000 / DAY);
const monday = today - ((today + 3) % 7 + 7) % 7;
const NOW = new Date((monday + 3) * DAY * 1000 + 12 * 3600 * 1000);
const end = NOW.getTime() / 1000;
const start = end - WEEKS * 7 * DAY;

async function connect(database: string): Promise<mysql.Connection> {
  return await mysql.createConnection({
    host: server.host,
    port: server.port,
    user: "root",
    database,
    charset: "utf8mb4",
  });
}

/** Lay out a database as `schema` would have `WEEKS` weeks ago and maintain it up to now. */
async function prepare(name: string, partitioned: boolean): Promise<void> {
  await server.query(`CREATE DATABASE ${name} CHARACTER SET utf8mb4`);
  const conn = await connect(name);
  try {
    await ensureSchema(conn, { now: new Date(start * 1000) });
    if (!partitioned) await conn.query(`ALTER TABLE ${TABLE.name} REMOVE PARTITIONING`);
  } finally {
    await conn.end();
  }
  // A run with every table disabled only lays out the weeks ahead: the maintained layout.
  await cleanup(name, NOW, Object.fromEntries(ALL_KEYS.map((k) => [k, 0])));
}

const ALL_KEYS = [
  "age_hostchecks",
  "age_servicechecks",
  "age_host_acknowledgements",
  "age_service_acknowledgements",
  "age_host_notifications",
  "age_service_notifications",
  "age_host_notifications_log",
  "age_service_notifications_log",
  "age_host_statehistory",
  "age_service_statehistory",
  "age_host_downtimes",
  "age_service_downtimes",
  "age_logentries",
  "age_perfdata",
  "age_tasks",
];

interface Result {
  wallMs: number;
  alterMs: number;
  deleteMs: number;
  deleteStatements: number;
  rowsDeleted: number;
  partitionsDropped: number;
  rowsDroppedEstimate: number;
}

/** Run the real `cleanup` command and add up what its log says the statements took. */
async function cleanup(
  database: string,
  now: Date,
  ages: Record<string, number>,
): Promise<Result> {
  const result: Result = {
    wallMs: 0,
    alterMs: 0,
    deleteMs: 0,
    deleteStatements: 0,
    rowsDeleted: 0,
    partitionsDropped: 0,
    rowsDroppedEstimate: 0,
  };
  await configureLogging({
    level: "debug",
    format: "json",
    write: (line) => {
      const r = JSON.parse(line) as { message: string; properties: Record<string, unknown> };
      const p = r.properties;
      if (p.table !== TABLE.name) return;
      if (r.message === "cleanup: batch deleted") {
        result.deleteMs += Number(p.duration_ms);
        result.deleteStatements++;
      } else if (
        r.message === "cleanup: partitions added" || r.message === "cleanup: partitions dropped"
      ) {
        result.alterMs += Number(p.duration_ms);
      } else if (r.message === "cleanup: table finished") {
        result.rowsDeleted = Number(p.rows);
        result.partitionsDropped = Number(p.partitions_dropped);
        result.rowsDroppedEstimate = Number(p.rows_dropped_estimate);
      }
    },
  });
  const started = performance.now();
  try {
    const code = await runCleanupCommand(
      { mysqlUrl: server.url({ database }), batchSize: BATCH, batchPauseMs: 0, ages, now },
      { out: () => {}, err: (l) => report(`  ${l}`) },
      new AbortController().signal,
    );
    if (code !== 0) throw new Error(`cleanup of ${database} exited ${code}`);
  } finally {
    await resetLogging();
  }
  result.wallMs = performance.now() - started;
  return result;
}

report(
  `cleanup bench: ${fmt(ROWS)} ${TABLE.name} rows over ${WEEKS} weeks, age ${AGE_DAYS} days ` +
    `(cutoff mid-week), batch ${BATCH}, MariaDB ${((await server.query<{ v: string }[]>(
      "SELECT VERSION() AS v",
    ))[0]?.v ?? "?")}`,
);
await prepare("partitioned", true);
await prepare("legacy", false);

// Rows in time order, as the worker writes them; generated by the server in chunks.
const fillStarted = performance.now();
const conn = await connect("partitioned");
try {
  for (let from = 1; from <= ROWS; from += CHUNK) {
    const to = Math.min(ROWS, from + CHUNK - 1);
    await conn.query(
      `INSERT INTO ${TABLE.name} (service_description, start_time, start_time_usec, hostname,
         state, is_hardstate, end_time, output, latency, execution_time, perfdata, command,
         current_check_attempt, max_check_attempts)
       SELECT CONCAT('service-', seq MOD 5000), ${start} + FLOOR((seq - 1) * ${
        end - start
      } / ${ROWS}), seq MOD 1000000, CONCAT('host-', seq MOD 500), seq MOD 4, 1,
         ${start} + FLOOR((seq - 1) * ${end - start} / ${ROWS}) + 1,
         'OK - rta 0.1 ms, lost 0%', 0.01, 0.2, 'rta=0.1ms;100;500;0 pl=0%;20;60;0',
         'check_ping', 1, 3
       FROM seq_${from}_to_${to}`,
    );
  }
  await conn.query(`INSERT INTO legacy.${TABLE.name} SELECT * FROM partitioned.${TABLE.name}`);
} finally {
  await conn.end();
}
report(`filled both databases in ${((performance.now() - fillStarted) / 1000).toFixed(0)} s`);

async function fingerprint(database: string): Promise<string> {
  const rows = await server.query<{ n: number; s: string }[]>(
    `SELECT COUNT(*) AS n, SUM(start_time) AS s, SUM(start_time_usec) AS u FROM ${TABLE.name}`,
    [],
    database,
  );
  return JSON.stringify(rows[0]);
}

function line(label: string, r: Result): string {
  return `  ${label.padEnd(14)} ${(r.wallMs / 1000).toFixed(2).padStart(9)} s wall  ${
    (r.alterMs / 1000).toFixed(2).padStart(7)
  } s ALTER  ${(r.deleteMs / 1000).toFixed(2).padStart(9)} s DELETE (${
    fmt(r.deleteStatements)
  } statements, ${fmt(r.rowsDeleted)} rows)  ${r.partitionsDropped} partitions dropped (~${
    fmt(r.rowsDroppedEstimate)
  } rows)`;
}

const rounds: [string, Date][] = [
  ["catch-up", NOW],
  ["next night", new Date(NOW.getTime() + DAY * 1000)],
];
for (const [name, now] of rounds) {
  const ages = { "age_servicechecks": AGE_DAYS };
  const legacy = await cleanup("legacy", now, ages);
  const partitioned = await cleanup("partitioned", now, ages);
  const same = await fingerprint("legacy") === await fingerprint("partitioned");
  report(`${name}:`);
  report(line("unpartitioned", legacy));
  report(line("partitioned", partitioned));
  const lockedLegacy = legacy.alterMs + legacy.deleteMs;
  const lockedPartitioned = partitioned.alterMs + partitioned.deleteMs;
  report(
    `  ratio unpartitioned/partitioned: wall ${
      (legacy.wallMs / Math.max(partitioned.wallMs, 1)).toFixed(1)
    }x, statements holding the table ${
      (lockedLegacy / Math.max(lockedPartitioned, 1)).toFixed(1)
    }x; same rows kept: ${same ? "yes" : "NO"}`,
  );
  if (!same) Deno.exit(1);
}
