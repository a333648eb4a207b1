/**
 * The plain-loop ceiling of `bench/pipeline.ts`, in a process of its own: it
 * builds its rows and every statement's values before the timer, then sends
 * mysql2 prepared multi-row upserts of the batch size back to back on each of
 * its connections, the way the worker's writers send them (the worker's packet
 * encoder, `Deno.connect` sockets, no stack trace per call). Nothing else is in
 * its heap, so no collection of a large heap runs inside the timer. Prints one
 * JSON line: events/s and its own CPU seconds per 100,000 events.
 *
 *   deno run -A bench/_plain_ceiling.ts --url URL --table T --batch 100 --connections 1
 *     --jobs 1000 --events-per-job 100 --now SECONDS [--server-pid PID]
 */
import process from "node:process";
import mysql from "mysql2/promise";
import { insertStatement } from "../src/mysql/sql.ts";
import { TABLES } from "../src/mysql/catalogue.ts";
import { mysqlOptionsFromUrl } from "../src/util/mysql_url.ts";
import { denoSocketStream } from "../src/mysql/failover.ts";
import { bulkParameters, installBulkExecuteEncoder } from "../src/mysql/mysql2_internals.ts";
import { ALL_CASES, jobsOf, rowsOf } from "./_pipeline_rows.ts";
import { report } from "./_util.ts";

function text(name: string): string {
  const value = Deno.args[Deno.args.indexOf(name) + 1];
  if (!Deno.args.includes(name) || value === undefined) throw new Error(`missing ${name}`);
  return value;
}
const c = ALL_CASES.find((x) => x.table === text("--table"));
if (c === undefined) throw new Error(`unknown table ${text("--table")}`);
const batch = Number(text("--batch"));
const connections = Number(text("--connections"));
const now = Number(text("--now"));
const table = TABLES[c.table];
installBulkExecuteEncoder();

const rows = rowsOf(
  c,
  jobsOf(c, Number(text("--jobs")), Number(text("--events-per-job")), now),
  now,
);
// Rows shared out over the connections, then cut into statements of `batch` rows.
const statements: unknown[][][] = Array.from({ length: connections }, () => []);
for (let k = 0; k < connections; k++) {
  const share = rows.filter((_, i) => i % connections === k);
  for (let i = 0; i < share.length; i += batch) {
    (statements[k] as unknown[][]).push(share.slice(i, i + batch).flat());
  }
}
const conns = await Promise.all(statements.map(() =>
  mysql.createConnection({
    ...mysqlOptionsFromUrl(text("--url")),
    trace: false,
    stream: denoSocketStream,
  } as mysql.ConnectionOptions)
));
const cpu = () => {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
};
// Prepared once per connection before the timer, as a long-running writer has them.
await Promise.all(conns.map(async (conn, k) => {
  const sizes = new Set((statements[k] as unknown[][]).map((v) => v.length));
  for (const size of sizes) await conn.prepare(insertStatement(table, size / table.columns.length));
}));
const serverPid = Deno.args.includes("--server-pid") ? Number(text("--server-pid")) : undefined;
/** CPU seconds of the MySQL server so far, NaN when it is not on this machine. */
function serverCpu(): number {
  if (serverPid === undefined) return NaN;
  const stat = Deno.readTextFileSync(`/proc/${serverPid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
}
const t0 = performance.now();
const cpu0 = cpu();
const server0 = serverCpu();
await Promise.all(conns.map(async (conn, k) => {
  for (const values of statements[k] as unknown[][]) {
    await conn.execute(
      insertStatement(table, values.length / table.columns.length),
      bulkParameters(values) as mysql.ExecuteValues,
    );
  }
}));
const seconds = (performance.now() - t0) / 1000;
const clientCpuPer100k = (cpu() - cpu0) / rows.length * 100_000;
const serverCpuPer100k = (serverCpu() - server0) / rows.length * 100_000;
await Promise.all(conns.map((conn) => conn.end()));
report(JSON.stringify({
  eventsPerSecond: rows.length / seconds,
  clientCpuPer100k,
  serverCpuPer100k: Number.isNaN(serverCpuPer100k) ? null : serverCpuPer100k,
}));
