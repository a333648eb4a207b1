/**
 * The task manager against a small model of `statusengine_tasks`, with MySQL and the submission
 * failing at random points: each task reaches the core once, in entry order.
 *
 * What would break without it: a DELETE that failed after a successful submission (MySQL going
 * away between the two, or its answer lost) left the row, and the next poll submitted the task
 * again: the UI's acknowledgement or downtime ran twice after every MySQL blip.
 */
import assert from "node:assert/strict";
import type { ExecResult, SqlExecutor } from "../../src/mysql/executor.ts";
import { TaskManager, type TaskSubmitter } from "../../src/tasks/task_manager.ts";
import { seededRandom } from "../helpers/seeded_random.ts";

interface Row {
  uuid: string | null;
  "node_name": string;
  "entry_time": number;
  type: string | null;
  payload: string | null;
}

const NODE = "N";

/** The two statements the manager sends, on an array; `fail` decides each statement's fate. */
function fakeTable(
  rows: Row[],
  fail: (kind: "select" | "delete") => "ok" | "before" | "after",
): SqlExecutor {
  const same = (a: unknown, b: unknown) => (a ?? null) === (b ?? null);
  return {
    run(sql: string, values: readonly unknown[] = []): Promise<ExecResult> {
      if (sql.startsWith("SELECT")) {
        if (fail("select") !== "ok") return Promise.reject(new Error("select failed"));
        // In the order written, as InnoDB keeps a table without a key (no ORDER BY is sent).
        const mine = rows.filter((r) => r.node_name === values[0]);
        return Promise.resolve({ affectedRows: 0, rows: mine.map((r) => ({ ...r })) });
      }
      assert.ok(sql.startsWith("DELETE"), sql);
      const fate = fail("delete");
      if (fate === "before") return Promise.reject(new Error("connection lost"));
      const [node, uuid, entry, type, payload] = values;
      const i = rows.findIndex((r) =>
        r.node_name === node && same(r.uuid, uuid) && String(r.entry_time) === String(entry) &&
        same(r.type, type) && same(r.payload, payload)
      );
      if (i >= 0) rows.splice(i, 1);
      // "after": committed, but the answer was lost with the connection.
      if (fate === "after") return Promise.reject(new Error("connection lost after commit"));
      return Promise.resolve({ affectedRows: i >= 0 ? 1 : 0, rows: [] });
    },
  };
}

Deno.test("task manager: with MySQL and the submission failing at random points, each task is submitted once, in entry order", async () => {
  for (let seed = 1; seed <= 200; seed++) {
    const rnd = seededRandom(seed);
    const rows: Row[] = [];
    const expected: string[] = [];
    let entry = 0;
    const insert = () => {
      const n = expected.length;
      // Distinct random uuids; entry times rise, several tasks may share one second.
      entry += rnd(2);
      rows.push({
        uuid: `${rnd(1_000_000)}-${n}`,
        node_name: NODE,
        entry_time: entry,
        type: "externalcommand",
        payload: `[${n}] ENABLE_HOST_CHECK;h${n}`,
      });
      expected.push(`[${n}] ENABLE_HOST_CHECK;h${n}`);
    };
    for (let i = 0, n = 1 + rnd(6); i < n; i++) insert();
    const fates = ["ok", "ok", "before", "after"] as const;
    const fate = (n: number) => fates[rnd(n)] ?? "ok";
    const executor = fakeTable(rows, (kind) => kind === "select" ? fate(3) : fate(4));
    const submitted: string[] = [];
    const submitter: TaskSubmitter = {
      method: "broker",
      submit(command) {
        if (rnd(4) === 0) return Promise.reject(new Error("broker unreachable"));
        submitted.push(command.line);
        return Promise.resolve();
      },
    };
    const manager = new TaskManager({ executor, nodeName: NODE, intervalMs: 1, submitter });
    const signal = new AbortController().signal;
    for (let round = 0; round < 1000 && rows.length > 0; round++) {
      if (rnd(5) === 0) insert();
      await manager.poll(signal).catch(() => {});
    }
    assert.equal(rows.length, 0, `seed ${seed}: every task deleted`);
    assert.deepEqual(submitted, expected, `seed ${seed}: each task once, in entry order`);
  }
});
