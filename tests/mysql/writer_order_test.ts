/**
 * The writers' bookkeeping over random orders (docs/testing.md#property-tests-every-order-from-a-seed):
 * jobs handed to a table's writers in random sizes, MySQL answering the statements of the writers
 * in random order, rows MySQL rejects, jobs given back at random moments. Checked against the
 * plain rule (D1, D7, docs/writers.md#give-back): every row of a job not given back ends exactly
 * once, committed if MySQL takes it, dead-lettered if it rejects it; a job resolves only once all
 * its rows did; no row of a job given back is dead-lettered after the give-back; the "written"
 * count is exactly the rows MySQL took.
 *
 * MySQL is a fake executor here: the property is about the order of answers, which a real server
 * on one connection per writer does not let a test choose.
 */
import assert from "node:assert/strict";
import { ShardedWriter } from "../../src/mysql/sharded_writer.ts";
import { TABLES } from "../../src/mysql/catalogue.ts";
import type { ExecResult, SqlExecutor } from "../../src/mysql/executor.ts";
import { DbAvailability } from "../../src/mysql/availability.ts";
import type { DeadLetterRecord, DeadLetterSink } from "../../src/mysql/dead_letter_sink.ts";
import { JobTracker } from "../../src/mysql/job_tracker.ts";
import type { Row } from "../../src/events/types.ts";
import { seededRandom } from "../helpers/seeded_random.ts";

const LOG = TABLES.statusengine_logentries;
const DATA = LOG.insertColumns.indexOf("logentry_data");
const WIDTH = LOG.insertColumns.length;

interface Statement {
  readonly markers: readonly string[];
  answer(ok: boolean): void;
}

/** A row error as mysql2 reports it (1366, SQL state 22007): the row's fault. */
function rowError(): Error {
  return Object.assign(new Error("Incorrect integer value"), {
    errno: 1366,
    code: "ER_TRUNCATED_WRONG_VALUE_FOR_FIELD",
    sqlState: "22007",
  });
}

/** One turn of the event loop: the writers' group-commit turn runs. */
const turn = () => new Promise<void>((r) => setImmediate(r));

async function run(seed: number): Promise<void> {
  const rnd = seededRandom(seed);
  const where = `seed ${seed}`;
  const pending: Statement[] = [];
  /** Markers of every row MySQL took, in commit order. */
  const committed: string[] = [];
  const executor: SqlExecutor = {
    run(_sql, values = []) {
      const markers: string[] = [];
      for (let i = DATA; i < values.length; i += WIDTH) markers.push(String(values[i]));
      return new Promise<ExecResult>((resolve, reject) => {
        pending.push({
          markers,
          answer(ok) {
            if (ok) {
              committed.push(...markers);
              resolve({ affectedRows: markers.length, rows: [] });
            } else reject(rowError());
          },
        });
      });
    },
  };
  const jobs: { tracker: JobTracker; markers: string[]; givenBack: boolean }[] = [];
  const jobOf = new Map<string, number>();
  const deadLettered: { marker: string; afterGiveBack: boolean }[] = [];
  const deadLetters: DeadLetterSink = {
    write(record: DeadLetterRecord) {
      const marker = String(record.row?.["logentry_data"]);
      const job = jobs[jobOf.get(marker) ?? -1];
      deadLettered.push({ marker, afterGiveBack: job?.givenBack === true });
      return Promise.resolve();
    },
    close: () => Promise.resolve(),
  };
  const writer = new ShardedWriter({
    table: LOG,
    batchSize: 1 + rnd(6),
    writers: 1 + rnd(3),
    executor,
    availability: new DbAvailability(),
    deadLetters,
  });
  const bad = new Set<string>();
  const done = new Set<number>();
  const handing: Promise<void>[] = [];
  for (let step = 0; step < 120; step++) {
    const action = rnd(10);
    if (action < 4 && jobs.length < 30) {
      const n = 1 + rnd(6);
      const j = jobs.length;
      const markers: string[] = [];
      const rows: Row[] = [];
      for (let i = 0; i < n; i++) {
        const marker = `j${j}-r${i}`;
        markers.push(marker);
        jobOf.set(marker, j);
        if (rnd(5) === 0) bad.add(marker);
        rows.push({ entry_time: j, logentry_type: 1, logentry_data: marker, node_name: "N" });
      }
      const job = { tracker: undefined as unknown as JobTracker, markers, givenBack: false };
      job.tracker = new JobTracker("q", n, () => job.givenBack);
      jobs.push(job);
      void job.tracker.done.then(() => done.add(j));
      handing.push(writer.add(rows, job.tracker));
    } else if (action < 8 && pending.length > 0) {
      const [s] = pending.splice(rnd(pending.length), 1) as [Statement];
      s.answer(!s.markers.some((m) => bad.has(m)));
    } else if (action === 8 && jobs.length > 0) {
      const job = jobs[rnd(jobs.length)];
      if (job !== undefined) job.givenBack = true;
    }
    await turn();
  }
  // Then MySQL answers everything, in random order, until nothing is left to send.
  for (let idle = 0; idle < 5;) {
    if (pending.length === 0) {
      idle++;
      await turn();
      continue;
    }
    idle = 0;
    const [s] = pending.splice(rnd(pending.length), 1) as [Statement];
    s.answer(!s.markers.some((m) => bad.has(m)));
    await turn();
  }
  await Promise.all(handing);
  await writer.flush();

  const seen = new Set<string>();
  for (const m of committed) {
    assert.ok(!seen.has(m), `${where}: row ${m} committed twice`);
    seen.add(m);
    assert.ok(!bad.has(m), `${where}: rejected row ${m} committed`);
  }
  const letters = new Set<string>();
  for (const { marker, afterGiveBack } of deadLettered) {
    assert.ok(!letters.has(marker), `${where}: row ${marker} dead-lettered twice`);
    letters.add(marker);
    assert.ok(bad.has(marker), `${where}: good row ${marker} dead-lettered`);
    assert.ok(!afterGiveBack, `${where}: row ${marker} dead-lettered after its job was given back`);
  }
  assert.equal(writer.totalRows, committed.length, `${where}: rows written miscounted`);
  for (const [j, job] of jobs.entries()) {
    const settled = job.markers.filter((m) => seen.has(m) || letters.has(m)).length;
    assert.equal(
      job.tracker.pending,
      job.markers.length - settled,
      `${where}: job ${j}'s pending rows drifted`,
    );
    assert.equal(
      done.has(j),
      settled === job.markers.length,
      `${where}: job ${j} resolved wrongly`,
    );
    if (job.givenBack) continue;
    for (const m of job.markers) {
      assert.ok(seen.has(m) || letters.has(m), `${where}: row ${m} of job ${j} never settled`);
    }
    assert.equal(
      job.tracker.deadLettered,
      job.markers.filter((m) => bad.has(m)).length,
      `${where}: job ${j}'s dead-lettered rows miscounted`,
    );
  }
  await writer.close(AbortSignal.abort());
}

Deno.test("writer order: whatever order MySQL answers in and jobs are given back, every row ends once, committed or dead-lettered, and jobs resolve exactly when their rows did (D1, D7)", async () => {
  for (let seed = 1; seed <= 60; seed++) await run(seed);
});

/** An error that names no row, as mysql2 reports it (1054, SQL state 42S22): the schema's fault. */
function schemaError(): Error {
  return Object.assign(new Error("Unknown column 'logentry_data' in 'INSERT INTO'"), {
    errno: 1054,
    code: "ER_BAD_FIELD_ERROR",
    sqlState: "42S22",
  });
}

/**
 * A column renamed under the writers, then renamed back: whatever the batch and job sizes and
 * whatever order MySQL answers in (the row-less check included), every row is committed once and
 * none dead-lettered (D7, docs/writers.md#retry-policy).
 */
async function runSchemaFault(seed: number): Promise<void> {
  const rnd = seededRandom(seed);
  const where = `seed ${seed}`;
  let broken = true;
  const pending: Statement[] = [];
  const committed: string[] = [];
  const executor: SqlExecutor = {
    run(_sql, values = []) {
      const markers: string[] = [];
      for (let i = DATA; i < values.length; i += WIDTH) markers.push(String(values[i]));
      return new Promise<ExecResult>((resolve, reject) => {
        pending.push({
          markers,
          answer(ok) {
            if (ok) {
              committed.push(...markers);
              resolve({ affectedRows: markers.length, rows: [] });
            } else reject(schemaError());
          },
        });
      });
    },
  };
  const deadLettered: string[] = [];
  const deadLetters: DeadLetterSink = {
    write(record: DeadLetterRecord) {
      deadLettered.push(String(record.row?.["logentry_data"]));
      return Promise.resolve();
    },
    close: () => Promise.resolve(),
  };
  const writer = new ShardedWriter({
    table: LOG,
    batchSize: 1 + rnd(6),
    writers: 1 + rnd(3),
    executor,
    availability: new DbAvailability(),
    deadLetters,
  });
  const jobs: JobTracker[] = [];
  const markers: string[] = [];
  const handing: Promise<void>[] = [];
  const answer = () => {
    const [s] = pending.splice(rnd(pending.length), 1) as [Statement];
    s.answer(!broken);
  };
  for (let step = 0; step < 60; step++) {
    const action = rnd(10);
    if (action < 3 && jobs.length < 12) {
      const n = 1 + rnd(4);
      const rows: Row[] = [];
      for (let i = 0; i < n; i++) {
        const marker = `j${jobs.length}-r${i}`;
        markers.push(marker);
        rows.push({ entry_time: 1, logentry_type: 1, logentry_data: marker, node_name: "N" });
      }
      const job = new JobTracker("q", n);
      jobs.push(job);
      handing.push(writer.add(rows, job));
    } else if (action < 9 && pending.length > 0) {
      answer();
    } else if (action === 9 && rnd(2) === 0) {
      broken = false; // the column renamed back, at a random moment
    }
    await turn();
  }
  broken = false;
  // Held statements come back after the hold's pause (100 ms on): answer until every job ended.
  const until = performance.now() + 20_000;
  while (jobs.some((j) => j.pending > 0)) {
    assert.ok(performance.now() < until, `${where}: jobs still pending after the fault`);
    if (pending.length > 0) answer();
    await new Promise((r) => setTimeout(r, 1));
  }
  await Promise.all(handing);
  assert.deepEqual(deadLettered, [], `${where}: rows dead-lettered for the schema's fault`);
  assert.deepEqual([...committed].sort(), [...markers].sort(), `${where}: rows committed`);
  await writer.close(AbortSignal.abort());
}

Deno.test("writer order: a schema fault mended at a random moment dead-letters no row, whatever the batching and the order of MySQL's answers (D7)", async () => {
  for (let seed = 1; seed <= 60; seed++) await runSchemaFault(seed);
});
