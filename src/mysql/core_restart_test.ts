/**
 * StatusProgress: the newest committed status time per status table and node, as the
 * core-restart sweep reads it instead of the tables.
 */
import assert from "node:assert/strict";
import { isStatusTable, STATUS_TABLES, StatusProgress } from "./core_restart.ts";
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
  // The rows committed: while they grow the status queue is still draining.
  p.committed(HOSTS, [host("N", 100), host("N", 99), host("O", 1)]);
  assert.equal(p.rows(HOSTS, "N"), 3);
  assert.equal(p.rows(SERVICES, "N"), 0);
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
  assert.equal(p.rows(SERVICES, "N"), 0);
  p.committed(SERVICES, []);
  assert.equal(p.newest(SERVICES, "N"), undefined);
});

Deno.test("status progress: only the two status tables are status tables", () => {
  assert.ok(isStatusTable(HOSTS));
  assert.ok(isStatusTable(SERVICES));
  assert.ok(!isStatusTable("statusengine_hostchecks"));
  assert.ok(!isStatusTable("statusengine_logentries"));
});
