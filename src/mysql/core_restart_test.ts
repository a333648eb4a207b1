/**
 * StatusProgress: the newest committed status time per status table and node, as the
 * core-restart sweep reads it instead of the tables.
 */
import assert from "node:assert/strict";
import {
  isStatusTable,
  type PausableWriter,
  type RestartClock,
  STATUS_TABLES,
  StatusCleaner,
  StatusProgress,
} from "./core_restart.ts";
import { DbAvailability } from "./availability.ts";
import type { SqlExecutor } from "./executor.ts";
import type { Row } from "../events/types.ts";

const HOSTS = "statusengine_hoststatus";
const SERVICES = "statusengine_servicestatus";

function host(node: string, time: number): Row {
  return { hostname: "h", node_name: node, status_update_time: time };
}

Deno.test("status progress: nothing committed reads as undefined, per table and node", () => {
  const p = new StatusProgress();
  for (const t of STATUS_TABLES) assert.equal(p.newest(t, "N"), undefined);
  p.committed(HOSTS, [host("N", 100)]);
  assert.equal(p.newest(HOSTS, "N"), 100);
  assert.equal(p.newest(SERVICES, "N"), undefined, "the other table learnt nothing");
  assert.equal(p.newest(HOSTS, "O"), undefined, "another node learnt nothing");
});

Deno.test("status progress: the newest time wins whatever order the writers report in", () => {
  // Two writers of one table (--mysql-writers-per-table) commit independently; an older
  // batch reported after a newer one must not move the time back.
  const reports: Row[][] = [
    [host("N", 105), host("N", 99)],
    [host("N", 101)],
    [host("N", 104), host("O", 200)],
  ];
  const orders = [[0, 1, 2], [2, 1, 0], [1, 2, 0]];
  for (const order of orders) {
    const p = new StatusProgress();
    for (const i of order) p.committed(HOSTS, reports[i] as Row[]);
    assert.equal(p.newest(HOSTS, "N"), 105, `order ${order}`);
    assert.equal(p.newest(HOSTS, "O"), 200, `order ${order}`);
  }
});

Deno.test("status progress: rows without a node name or a numeric status time are ignored", () => {
  const p = new StatusProgress();
  p.committed(SERVICES, [
    { hostname: "h", service_description: "s", node_name: null, status_update_time: 300 },
    { hostname: "h", service_description: "s", node_name: "N", status_update_time: "300" },
    { hostname: "h", service_description: "s", node_name: "N", status_update_time: null },
    { hostname: "h", service_description: "s", node_name: "N" },
    { hostname: "h", service_description: "s", node_name: "N", status_update_time: NaN },
  ]);
  assert.equal(p.newest(SERVICES, "N"), undefined);
  p.committed(SERVICES, []);
  assert.equal(p.newest(SERVICES, "N"), undefined);
});

Deno.test("status progress: only the two status tables are status tables", () => {
  assert.ok(isStatusTable(HOSTS));
  assert.ok(isStatusTable(SERVICES));
  assert.ok(!isStatusTable("statusengine_hostchecks"));
  assert.ok(!isStatusTable("statusengine_logentries"));
});

/** The status DELETEs a cleaner sent, by cutoff; every statement answers at once. */
function instantCleaner() {
  const cutoffs: number[] = [];
  const executor: SqlExecutor = {
    run(sql, values) {
      if (/^DELETE FROM `statusengine_(host|service)status` WHERE `node_name` = \?/.test(sql)) {
        cutoffs.push(Number(values?.[1]));
      }
      // The node_name index exists, each status table holds one row of the node (its key read
      // finds it), the other reads find none, and every DELETE deletes nothing.
      const rows = /information_schema/.test(sql)
        ? [{ n: 1 }]
        : /^SELECT `hostname`/.test(sql)
        ? [{ hostname: "h", service_description: "s", node_name: "N" }]
        : [];
      return Promise.resolve({ affectedRows: 0, rows });
    },
  };
  const writer: PausableWriter = { withPaused: (fn) => fn() };
  const clock: RestartClock = {
    nowMs: () => T * 1000,
    // Nothing here waits for time: the tables show the restart at once and the settle time is 0.
    sleep: (_ms, signal) =>
      new Promise((_resolve, reject) =>
        signal.addEventListener("abort", () => reject(signal.reason), { once: true })
      ),
  };
  const cleaner = new StatusCleaner({
    executor,
    availability: new DbAvailability(),
    nodeName: "N",
    openItcockpit: false,
    statusMaxAgeSeconds: 0,
    writers: { statusengine_servicestatus: writer, statusengine_hoststatus: writer },
    committed: { newest: () => T + 3600 },
    clock,
    timing: { settleMs: 0, pollMs: 1, startupWindowMs: 0 },
  });
  return { cleaner, cutoffs };
}

const T = 1_800_000_000;

Deno.test("status cleaner: a restart recorded at any point of a running sweep is swept, also just as the sweep ends", async () => {
  // The restart job is handled concurrently with the sweep's statements: its handler may run in
  // any microtask of the sweep, the one after the sweep's last look at what is pending included.
  const signal = new AbortController().signal;
  for (let hops = 0; hops < 300; hops++) {
    const { cleaner, cutoffs } = instantCleaner();
    await cleaner.onRestart(
      { messageSeconds: T, receivedAtMs: T * 1000, linkOpenedAtMs: null },
      signal,
    );
    for (let i = 0; i < hops; i++) await null;
    await cleaner.onRestart(
      { messageSeconds: T + 30, receivedAtMs: T * 1000 + 30_000, linkOpenedAtMs: null },
      signal,
    );
    await cleaner.idle();
    await cleaner.close();
    assert.ok(
      cutoffs.includes(T + 30),
      `the second restart, recorded ${hops} microtasks into the first one's sweep, was never ` +
        `swept (status DELETEs at cutoffs ${JSON.stringify([...new Set(cutoffs)])})`,
    );
  }
});
