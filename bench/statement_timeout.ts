/**
 * What `--mysql-statement-timeout` costs: the same prepared bulk INSERTs of
 * statusengine_hostchecks rows through poolExecutor without a timeout
 * (mysql2's `pool.execute`) and with one (a connection taken per statement
 * and a timer around it), alternating, several rounds, one writer at a time
 * as the table writers do. Prints statements/s of each and the ratio.
 *
 *   deno run -A bench/statement_timeout.ts [--statements 2000] [--rows 100] [--rounds 5]
 */
import mysql from "mysql2/promise";
import { createScratchDatabase } from "../tests/helpers/mysql.ts";
import { createSchema } from "../tests/helpers/worker.ts";
import { poolExecutor, PREPARED_STATEMENTS_PER_CONNECTION } from "../src/mysql/executor.ts";
import { insertStatement } from "../src/mysql/sql.ts";
import { appendAdjustedRow, type ValueAdjustment } from "../src/mysql/values.ts";
import type { SqlValue } from "../src/events/types.ts";
import { TABLES } from "../src/mysql/catalogue.ts";
import { mysqlOptionsFromUrl } from "../src/util/mysql_url.ts";
import { arg, fmt, median, report } from "./_util.ts";

const STATEMENTS = arg("--statements", 2_000);
const ROWS = arg("--rows", 100);
const ROUNDS = arg("--rounds", 5);
const TABLE = TABLES.statusengine_hostchecks;

await using db = await createScratchDatabase("se_bench");
await createSchema(db.url);
const pool = mysql.createPool({
  ...mysqlOptionsFromUrl(db.url),
  connectionLimit: 4,
  maxPreparedStatements: PREPARED_STATEMENTS_PER_CONNECTION,
});
const variants = {
  "no timeout": poolExecutor(pool, { statementTimeoutMs: 0 }),
  "30 s timeout": poolExecutor(pool, { statementTimeoutMs: 30_000 }),
};
const sql = insertStatement(TABLE, ROWS);
let seq = 0;
function values(): SqlValue[] {
  const out: SqlValue[] = [];
  const adjustments: ValueAdjustment[] = [];
  for (let i = 0; i < ROWS; i++) {
    seq++;
    appendAdjustedRow(
      TABLE,
      {
        hostname: `bench-${seq}`,
        start_time: 1_700_000_000,
        start_time_usec: seq % 1_000_000,
        end_time: 1_700_000_001,
        state: 0,
        output: "PING OK - Packet loss = 0%, RTA = 0.08 ms",
      },
      out,
      adjustments,
    );
  }
  return out;
}

const rates: Record<string, number[]> = { "no timeout": [], "30 s timeout": [] };
try {
  for (let round = 0; round < ROUNDS; round++) {
    // Alternate which variant goes first, so neither always meets a warmer server.
    const order = Object.entries(variants);
    if (round % 2 === 1) order.reverse();
    for (const [name, executor] of order) {
      const batches = Array.from({ length: STATEMENTS }, values);
      const started = performance.now();
      for (const v of batches) await executor.run(sql, v, { prepared: true });
      rates[name]?.push(STATEMENTS / ((performance.now() - started) / 1000));
      await db.query(`TRUNCATE TABLE ${TABLE.name}`);
    }
  }
} finally {
  await pool.end();
}
const without = median(rates["no timeout"] ?? []);
const withTimeout = median(rates["30 s timeout"] ?? []);
report(
  `statement timeout: ${fmt(without)} statements/s without, ${
    fmt(withTimeout)
  } with (${ROWS} rows each, median of ${ROUNDS}); ratio ${(withTimeout / without).toFixed(3)}`,
);
