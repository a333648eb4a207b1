/**
 * The backlog of `bench/pipeline.ts`, shared with its plain-loop ceiling
 * (`_plain_ceiling.ts`, a process of its own): the same jobs and the same rows
 * in both, built from the captured fixtures.
 */
import { decodeJob } from "../src/events/decode.ts";
import { appendAdjustedRow, type ValueAdjustment } from "../src/mysql/values.ts";
import type { SqlValue } from "../src/events/types.ts";
import { type TableName, TABLES } from "../src/mysql/catalogue.ts";

const FIXTURES = new URL("../src/events/testdata/", import.meta.url);

/** One table of the bench and the queue that feeds it. */
export interface Case {
  readonly queue: string;
  readonly table: TableName;
  /** Make event i unique in the table's key. */
  readonly vary: (m: Record<string, Record<string, unknown>>, i: number, now: number) => void;
}

export const ALL_CASES: readonly Case[] = [
  {
    queue: "statusngin_hostchecks",
    table: "statusengine_hostchecks",
    vary: (m, i) => {
      (m["hostcheck"] as Record<string, unknown>)["host_name"] = `bench-host-${i}`;
    },
  },
  {
    queue: "statusngin_servicestatus",
    table: "statusengine_servicestatus",
    vary: (m, i, now) => {
      const s = m["servicestatus"] as Record<string, unknown>;
      s["host_name"] = `bench-host-${i % 1000}`;
      s["service_description"] = `bench-service-${i}`;
      (m as unknown as Record<string, unknown>)["timestamp"] = now;
    },
  },
];

/** `jobs` bulk jobs of `perJob` events each, every event unique in the table's key. */
export function jobsOf(c: Case, jobs: number, perJob: number, now: number): string[] {
  const doc = JSON.parse(Deno.readTextFileSync(new URL(`${c.queue}.job`, FIXTURES)));
  const template = doc.messages[0];
  const out: string[] = [];
  for (let j = 0; j < jobs; j++) {
    const messages = [];
    for (let k = 0; k < perJob; k++) {
      const m = structuredClone(template);
      c.vary(m, j * perJob + k, now);
      messages.push(m);
    }
    out.push(JSON.stringify({ format: "none", messages }));
  }
  return out;
}

/** The rows the worker would write, as bound values. */
export function rowsOf(c: Case, payloads: readonly string[], now: number): SqlValue[][] {
  const table = TABLES[c.table];
  const rows: SqlValue[][] = [];
  const adjustments: ValueAdjustment[] = [];
  for (const p of payloads) {
    const job = decodeJob(c.queue, p, { nodeName: "N", nowSeconds: now, statusMaxAgeSeconds: 0 });
    if (job.kind !== "rows") throw new Error(`unexpected ${job.kind}`);
    for (const r of job.rows) {
      const values: SqlValue[] = [];
      appendAdjustedRow(table, r.row, values, adjustments);
      rows.push(values);
    }
  }
  return rows;
}
