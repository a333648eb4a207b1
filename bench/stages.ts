/**
 * What each stage of the hot path costs per event, each stage timed alone over the same jobs
 * (the backlog of `bench/pipeline.ts`), per table and batch size:
 *
 * - take job: gearmand's `JOB_ASSIGN_UNIQ` packets cut out of 64 KiB reads (`PacketParser`);
 * - bytes → text: the job body's UTF-8 decode (`decodePayload`'s decoder);
 * - text → JSON: `JSON.parse` of the body;
 * - decode: `decodeJob` less its `JSON.parse` (the events into rows, the type rules);
 * - row → values: every row fitted to its columns into a statement's values (`appendAdjustedRow`);
 * - wire packet: the statement's `COM_STMT_EXECUTE` packet (`encodeExecutePacket`);
 * - ack: the job's `WORK_COMPLETE` packet;
 * - commit: the ceiling (`_plain_ceiling.ts`, its own process): the same statements sent and
 *   committed back to back on one connection, its client's CPU and its wall time per event.
 *
 * Their sum is what the worker cannot avoid doing per event in this design; what a drain of the
 * worker costs beyond it (`bench/pipeline.ts`'s CPU per event) is the glue: the promises and
 * turns between the stages, the writers' bookkeeping, sockets and the collections of a larger
 * heap. `bench/v8_ticks.ts` attributes a drain's samples to the same stages (its table "by stage
 * of the hot path"), and docs/performance.md#stages puts the two side by side.
 *
 *   deno run -A bench/stages.ts [--jobs 1000] [--events-per-job 100] [--repeat 5] [--no-commit]
 *     [--batches 100,700] [--tables statusengine_hostchecks,statusengine_servicestatus]
 */
import process from "node:process";
import { createScratchDatabase } from "../tests/helpers/mysql.ts";
import { createSchema } from "../tests/helpers/worker.ts";
import { decodeJob } from "../src/events/decode.ts";
import type { Row, SqlValue } from "../src/events/types.ts";
import { encodePacket, PACKET, PacketParser } from "../src/gearman/codec.ts";
import { TABLES } from "../src/mysql/catalogue.ts";
import { encodeExecutePacket } from "../src/mysql/execute_packet.ts";
import { appendAdjustedRow, type ValueAdjustment } from "../src/mysql/values.ts";
import { ALL_CASES, type Case, jobsOf } from "./_pipeline_rows.ts";
import { arg, formatMachine, machineInfo, median, report } from "./_util.ts";

/** One stage's cost: microseconds per event, median over the repetitions, and their range. */
export interface StageCost {
  readonly stage: string;
  readonly median: number;
  readonly min: number;
  readonly max: number;
}

function cpuMicros(): number {
  const { user, system } = process.cpuUsage();
  return user + system;
}

/**
 * Microseconds of CPU time (this process's, user + system: what the stage costs the machine,
 * its collections on V8's helper threads included, not the time other processes took the core)
 * per event of each stage in each repetition. The stages take turns within a repetition, so a
 * burst of other load on the machine falls on all of them alike; the first `warmUp`
 * repetitions are not counted (the code is optimised by then).
 *
 * @param stages One function per stage, each handling `events` events per call.
 * @returns Per stage, one figure per counted repetition.
 */
export function timePerEvent(
  stages: readonly (() => void)[],
  events: number,
  repeat: number,
  warmUp = 3,
): number[][] {
  const out = stages.map(() => [] as number[]);
  for (let r = 0; r < warmUp + repeat; r++) {
    stages.forEach((run, i) => {
      const t0 = cpuMicros();
      run();
      if (r >= warmUp) out[i]?.push((cpuMicros() - t0) / events);
    });
  }
  return out;
}

/** The median and range of one stage's repetitions. */
export function stageCost(stage: string, samples: readonly number[]): StageCost {
  return { stage, median: median(samples), min: Math.min(...samples), max: Math.max(...samples) };
}

/**
 * `decodeJob` includes `JSON.parse`: the decode stage is the difference, repetition by
 * repetition (both ran in the same repetition order), never below 0.
 */
export function without(whole: readonly number[], part: readonly number[]): number[] {
  return whole.map((w, i) => Math.max(0, w - (part[i] ?? 0)));
}

/** The stage table's lines: µs per event, median [range], and each stage's share of the sum. */
export function stageLines(costs: readonly StageCost[]): string[] {
  const total = costs.reduce((s, c) => s + c.median, 0);
  const lines = costs.map((c) =>
    `| ${c.stage} | ${c.median.toFixed(2)} [${c.min.toFixed(2)}–${c.max.toFixed(2)}] | ` +
    `${(100 * c.median / total).toFixed(0)} % |`
  );
  lines.push(`| sum | ${total.toFixed(2)} | 100 % |`);
  return lines;
}

function list(name: string, fallback: string): string[] {
  const i = Deno.args.indexOf(name);
  return (i === -1 ? fallback : (Deno.args[i + 1] ?? "")).split(",").filter((s) => s !== "");
}

const CTX_NODE = "N";

/** The isolated stages of one table at one batch size. */
function measure(c: Case, batch: number, bodies: readonly Uint8Array[], repeat: number) {
  const table = TABLES[c.table];
  const utf8 = new TextDecoder();
  const texts = bodies.map((b) => utf8.decode(b));
  const now = Math.floor(Date.now() / 1000);
  const ctx = { nodeName: CTX_NODE, nowSeconds: now, statusMaxAgeSeconds: 0 };
  const decoded = texts.map((t) => decodeJob(c.queue, t, ctx));
  const rows = decoded.flatMap((d) => d.kind === "rows" ? d.rows.map((r) => r.row) : []);
  const events = rows.length;
  if (events === 0) throw new Error(`${c.queue}: no rows decoded`);
  const width = table.columns.length;

  // What gearmand sends: every job as JOB_ASSIGN_UNIQ, read 64 KiB at a time.
  const handles = bodies.map((_, i) => `H:bench:${i}`);
  const stream = concat(
    bodies.map((b, i) =>
      encodePacket("RES", PACKET.JOB_ASSIGN_UNIQ, [handles[i] as string, c.queue, "", b])
    ),
  );
  const statements: SqlValue[][] = [];
  for (let i = 0; i < rows.length; i += batch) statements.push([]);

  const adjustments: ValueAdjustment[] = [];
  const [take, text, json, decode, fit, packet, ack] = timePerEvent(
    [
      () => {
        const parser = new PacketParser({ expect: "RES" });
        const read = new Uint8Array(64 * 1024);
        for (let at = 0; at < stream.length; at += read.length) {
          const n = Math.min(read.length, stream.length - at);
          read.set(stream.subarray(at, at + n));
          parser.push(read.subarray(0, n), { transient: true });
        }
      },
      () => {
        for (const b of bodies) utf8.decode(b);
      },
      () => {
        for (const t of texts) JSON.parse(t);
      },
      () => {
        for (const t of texts) decodeJob(c.queue, t, ctx);
      },
      () => {
        for (let s = 0; s < statements.length; s++) {
          const values = statements[s] as SqlValue[];
          values.length = 0;
          const end = Math.min(rows.length, (s + 1) * batch);
          for (let r = s * batch; r < end; r++) {
            appendAdjustedRow(table, rows[r] as Row, values, adjustments);
          }
        }
        adjustments.length = 0;
      },
      () => {
        for (const values of statements) encodeExecutePacket(1, values, false);
      },
      () => {
        for (const h of handles) encodePacket("REQ", PACKET.WORK_COMPLETE, [h, ""]);
      },
    ],
    events,
    repeat,
  ) as number[][] as [
    number[],
    number[],
    number[],
    number[],
    number[],
    number[],
    number[],
  ];
  if (statements.some((v) => v.length % width !== 0)) throw new Error("rows of the wrong width");
  return [
    stageCost("take job (Gearman packet)", take),
    stageCost("bytes → text (UTF-8)", text),
    stageCost("text → JSON (`JSON.parse`)", json),
    stageCost("decode (events → rows)", without(decode, json)),
    stageCost("row → values (fit)", fit),
    stageCost("wire packet (`COM_STMT_EXECUTE`)", packet),
    stageCost("ack (`WORK_COMPLETE`)", ack),
  ];
}

function concat(parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** The ceiling's run: commit and send on one connection, µs per event of wall and client CPU. */
async function commitCost(url: string, c: Case, batch: number, jobs: number, perJob: number) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-all",
      new URL("_plain_ceiling.ts", import.meta.url).pathname,
      ...["--url", url, "--table", c.table, "--batch", String(batch), "--connections", "1"],
      ...["--jobs", String(jobs), "--events-per-job", String(perJob)],
      ...["--now", String(Math.floor(Date.now() / 1000))],
    ],
    stdout: "piped",
    stderr: "inherit",
  }).output();
  if (!out.success) throw new Error(`_plain_ceiling.ts failed (${out.code})`);
  const r = JSON.parse(new TextDecoder().decode(out.stdout).trim().split("\n").pop() ?? "");
  return { wall: 1e6 / r.eventsPerSecond, clientCpu: r.clientCpuPer100k * 10 };
}

if (import.meta.main) {
  const jobs = arg("--jobs", 1000);
  const perJob = arg("--events-per-job", 100);
  const repeat = arg("--repeat", 5);
  const batches = list("--batches", "100,700").map(Number);
  const tables = list("--tables", "statusengine_hostchecks,statusengine_servicestatus");
  const withCommit = !Deno.args.includes("--no-commit");
  report(formatMachine(await machineInfo()));
  report(
    `${jobs} jobs × ${perJob} events, each stage alone over all of them, ${repeat} repetitions ` +
      "after three warm-ups; CPU µs per event, median [range]",
  );
  await using db = withCommit ? await createScratchDatabase("se_stages") : undefined;
  if (db !== undefined) await createSchema(db.url);
  for (const c of ALL_CASES.filter((x) => tables.includes(x.table))) {
    const now = Math.floor(Date.now() / 1000);
    const bodies = jobsOf(c, jobs, perJob, now).map((j) => new TextEncoder().encode(j));
    for (const batch of batches) {
      report(`\n\`${c.table}\`, batch ${batch}\n`);
      report("| stage | CPU µs per event | share of the stages |");
      report("| ----- | ---------------- | ------------------- |");
      for (const line of stageLines(measure(c, batch, bodies, repeat))) report(line);
      if (db !== undefined) {
        await db.query(`TRUNCATE TABLE ${c.table}`);
        const commit = await commitCost(db.url, c, batch, jobs, perJob);
        report(
          `\ncommit (the ceiling, one connection): ${commit.wall.toFixed(2)} µs of wall time per ` +
            `event, of which its client's CPU ${commit.clientCpu.toFixed(2)} µs`,
        );
      }
    }
  }
}
