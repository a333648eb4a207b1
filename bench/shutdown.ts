/**
 * Time from SIGTERM to exit of the worker process, against the documented
 * budgets (docs/shutdown.md#order-and-budgets: drain 30 s + flush 10 s + MySQL 5 s + HTTP 5 s,
 * under the unit's TimeoutStopSec=90s), in two situations side by side:
 * a full backlog with MySQL up, and MySQL unreachable (TCP proxy) so that
 * nothing can commit and every bounded wait runs out.
 *
 *   deno run -A bench/shutdown.ts [--events 100000]
 */
import { startGearmand } from "../tests/helpers/gearmand.ts";
import { createScratchDatabase } from "../tests/helpers/mysql.ts";
import { startTcpProxy } from "../tests/helpers/tcp_proxy.ts";
import { createSchema } from "../tests/helpers/worker.ts";
import { seriesValue, startWorkerProcess } from "../tests/helpers/worker_process.ts";
import { losstestJobs } from "../src/cli/losstest.ts";
import { GearmanClient } from "../src/gearman/client.ts";
import { report } from "./_util.ts";

const EVENTS = Number(Deno.args[Deno.args.indexOf("--events") + 1] || 100_000) || 100_000;
const DRAIN_S = 30;
const FLUSH_S = 10;
const BUDGET_S = DRAIN_S + FLUSH_S + 5 + 5;

async function backlog(addr: string, runId: string) {
  await using client = await GearmanClient.connect(addr, { window: 200 });
  const pending: Promise<string>[] = [];
  for (const job of losstestJobs(runId, EVENTS)) {
    pending.push(client.submitBackground("statusngin_hostchecks", job.payload));
    if (pending.length >= 500) await Promise.all(pending.splice(0));
  }
  await Promise.all(pending);
}

async function measure(mysqlDown: boolean): Promise<{ seconds: number; code: number }> {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase("se_bench");
  await createSchema(db.url);
  await using proxy = await startTcpProxy(`${db.host}:${db.port}`);
  const url = new URL(db.url);
  url.host = proxy.addr;
  await backlog(gearmand.addr, mysqlDown ? "down" : "up");
  await using worker = await startWorkerProcess({ gearmanAddr: gearmand.addr, mysqlUrl: url.href });
  if (mysqlDown) {
    proxy.block();
    while (seriesValue(await worker.metrics(), "statusengine_db_available") !== 0) {
      await new Promise((r) => setTimeout(r, 50));
    }
  } else {
    // Let the drain get going so writers and handlers are busy.
    await new Promise((r) => setTimeout(r, 1000));
  }
  const t0 = performance.now();
  worker.kill("SIGTERM");
  const status = await worker.status;
  return { seconds: (performance.now() - t0) / 1000, code: status.code };
}

report(
  `shutdown: SIGTERM → exit with default budgets (drain ${DRAIN_S} s, flush ${FLUSH_S} s); ` +
    `documented worst case ${BUDGET_S} s, systemd TimeoutStopSec 90 s`,
);
report("situation                          | seconds | exit | of budget");
for (
  const [label, down] of [["full backlog, MySQL up", false], ["MySQL unreachable", true]] as const
) {
  const r = await measure(down);
  report(
    `${label.padEnd(34)} | ${r.seconds.toFixed(2).padStart(7)} | ${String(r.code).padStart(4)} | ${
      ((r.seconds / BUDGET_S) * 100).toFixed(0).padStart(8)
    }%`,
  );
}
