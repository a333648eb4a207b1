/**
 * What keeping the newest status snapshot costs MariaDB (docs/writers.md#newest-snapshot): the
 * same servicestatus rows written as prepared multi-row upserts, once with the worker's statement
 * and once with the plain upsert it replaced (every non-key column `= VALUES(col)`), into an empty
 * table (every row inserted) and into a table holding the same rows a minute older (every row an
 * update). The server is a private MariaDB started for the bench, so the CPU time read from its
 * `/proc` entry is the statements' alone, whatever else the machine runs; wall-clock rates on a
 * shared machine move too much to compare. The forms alternate within each round; the ratio is
 * taken per round, then the median and range over the rounds are printed.
 *
 *   deno run -A bench/status_upsert.ts [--rows 30000] [--batch 100] [--rounds 3]
 */
import mysql from "mysql2/promise";
import { startMariadbd } from "../tests/helpers/mariadbd.ts";
import { insertStatement } from "../src/mysql/sql.ts";
import { adjustRow } from "../src/mysql/values.ts";
import type { SqlValue } from "../src/events/types.ts";
import { TABLES } from "../src/mysql/catalogue.ts";
import { createTableStatement, quoteIdentifier } from "../src/mysql/ddl.ts";
import { arg, fmt, formatMachine, machineInfo, median, report } from "./_util.ts";

const ROWS = arg("--rows", 30_000);
const BATCH = arg("--batch", 100);
const ROUNDS = arg("--rounds", 3);
const TABLE = TABLES.statusengine_servicestatus;

await using server = await startMariadbd();
/** The server's CPU seconds so far (user + system, from `/proc/<pid>/stat`). */
function serverCpuSeconds(): number {
  const fields = Deno.readTextFileSync(`/proc/${server.pid}/stat`).split(") ")[1]?.split(" ") ??
    [];
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

const conn = await mysql.createConnection({
  host: server.host,
  port: server.port,
  user: "root",
  charset: "utf8mb4",
});
await conn.query("CREATE DATABASE bench");
await conn.query("USE bench");

const worker = insertStatement(TABLE, BATCH);
const plain = worker.slice(0, worker.indexOf(" ON DUPLICATE KEY UPDATE ")) +
  ` ON DUPLICATE KEY UPDATE ${
    TABLE.updateColumns.map((c) => `${quoteIdentifier(c)}=VALUES(${quoteIdentifier(c)})`)
      .join(",")
  }`;
const forms = { "plain upsert": plain, "newest snapshot": worker } as const;

function rows(time: number): SqlValue[][] {
  return Array.from({ length: ROWS }, (_, i) =>
    adjustRow(TABLE, {
      hostname: `host-${i % 1000}`,
      service_description: `service-${i}`,
      status_update_time: time,
      last_check: time - 5,
      output: "OK - all fine",
      node_name: "node",
      current_state: 0,
    }).values);
}
const older = rows(1_800_000_000);
const newer = rows(1_800_000_060);

async function write(sql: string, all: readonly SqlValue[][]): Promise<void> {
  for (let i = 0; i < all.length; i += BATCH) {
    await conn.execute(sql, all.slice(i, i + BATCH).flat());
  }
}

/** Server CPU seconds per 100,000 rows of one step. */
async function step(sql: string, updates: boolean): Promise<number> {
  await conn.query(`DROP TABLE IF EXISTS ${quoteIdentifier(TABLE.name)}`);
  await conn.query(createTableStatement(TABLE, { collation: "utf8mb4_general_ci" }));
  if (updates) await write(plain, older);
  const cpu0 = serverCpuSeconds();
  await write(sql, newer);
  return (serverCpuSeconds() - cpu0) / ROWS * 100_000;
}

report(formatMachine(await machineInfo()));
report(
  `status upsert: ${fmt(ROWS)} servicestatus rows in statements of ${BATCH}, private MariaDB, ` +
    `${ROUNDS} rounds; server CPU s per 100,000 rows, median [min–max]`,
);
for (const updates of [false, true]) {
  const cpu: Record<string, number[]> = {};
  const ratios: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const names = Object.keys(forms) as (keyof typeof forms)[];
    const round: Record<string, number> = {};
    for (const name of r % 2 === 0 ? names : [...names].reverse()) {
      round[name] = await step(forms[name], updates);
      (cpu[name] ??= []).push(round[name]);
    }
    ratios.push((round["newest snapshot"] ?? NaN) / (round["plain upsert"] ?? NaN));
  }
  const spread = (xs: readonly number[], digits = 2) =>
    `${median(xs).toFixed(digits)} [${Math.min(...xs).toFixed(digits)}–${
      Math.max(...xs).toFixed(digits)
    }]`;
  report(
    `  ${updates ? "updates" : "inserts"}: ${
      Object.entries(cpu).map(([name, xs]) => `${name} ${spread(xs)}`).join(", ")
    }; newest snapshot / plain ${spread(ratios)}`,
  );
}
await conn.end();
