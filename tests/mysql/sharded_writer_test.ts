/**
 * Several writers per table against a real MariaDB (scratch database): rows
 * are routed by their key, so the rows of one key keep their hand-off order
 * however many jobs wait for buffer space at once; the status upsert still
 * ends with each object's last snapshot.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import {
  connectionOptionsOf,
  createScratchDatabase,
  type ScratchDatabase,
} from "../helpers/mysql.ts";
import { lockTables, waitForBlocked } from "../helpers/mysql_lock.ts";
import { waitFor } from "../helpers/wait.ts";
import { ShardedWriter } from "../../src/mysql/sharded_writer.ts";
import { type TableName, TABLES } from "../../src/mysql/catalogue.ts";
import { createTableStatement } from "../../src/mysql/ddl.ts";
import { poolExecutor } from "../../src/mysql/executor.ts";
import { DbAvailability } from "../../src/mysql/availability.ts";
import type { Row } from "../../src/events/types.ts";
import { createMetrics } from "../../src/metrics/registry.ts";
import { JobTracker } from "../../src/mysql/job_tracker.ts";
import { DeadLetters } from "../../src/pipeline/dead_letter.ts";
import { deadline } from "../../src/util/async.ts";

const HOSTSTATUS = "statusengine_hoststatus";
const SERVICESTATUS = "statusengine_servicestatus";
const LOGENTRIES = "statusengine_logentries";

interface Fixture extends AsyncDisposable {
  readonly db: ScratchDatabase;
  writers(table: TableName, batchSize: number, writers: number): ShardedWriter;
}

async function setup(tables: readonly TableName[]): Promise<Fixture> {
  const db = await createScratchDatabase();
  for (const t of tables) {
    await db.query(createTableStatement(TABLES[t], { collation: "utf8mb4_general_ci" }));
  }
  const pool = mysql.createPool({
    ...connectionOptionsOf(db),
    connectionLimit: 8,
  });
  const metrics = createMetrics();
  const availability = new DbAvailability(metrics.dbAvailable);
  const made: ShardedWriter[] = [];
  return {
    db,
    writers(table, batchSize, writers) {
      const w = new ShardedWriter({
        table: TABLES[table],
        batchSize,
        writers,
        executor: poolExecutor(pool),
        availability,
        deadLetters: new DeadLetters(null),
        metrics,
      });
      made.push(w);
      return w;
    },
    async [Symbol.asyncDispose]() {
      using budget = deadline(5_000);
      await Promise.all(made.map((w) => w.close(budget.signal)));
      await pool.end();
      await db.drop();
    },
  };
}

function hostStatus(host: string, time: number, output: string): Row {
  return {
    hostname: host,
    status_update_time: time,
    output,
    long_output: "",
    perfdata: "",
    current_state: time % 2,
    node_name: "N",
  };
}

/** Fisher–Yates with a fixed seed, so a failure can be replayed. */
function shuffled<T>(items: readonly T[], seed: number): T[] {
  const out = [...items];
  let s = seed;
  for (let i = out.length - 1; i > 0; i--) {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    const j = s % (i + 1);
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}

Deno.test("sharded writer: every row of one key goes to the same writer, also keys MySQL compares equal (case, trailing spaces, cut to the column)", async () => {
  await using f = await setup([SERVICESTATUS]);
  const w = f.writers(SERVICESTATUS, 10, 4);
  const key = (host: string, service: string) =>
    w.shardOf({ hostname: host, service_description: service, node_name: "N" });
  const long = "h".repeat(300);
  for (let i = 0; i < 200; i++) {
    const host = `Host-${i}`;
    const service = `Service ${i % 7}`;
    const shard = key(host, service);
    assert.equal(key(host.toUpperCase(), service.toLowerCase()), shard);
    assert.equal(key(host, `${service}   `), shard);
    assert.equal(key(`${long}${i}`, service), key(`${long}${i + 1}`, service), "cut at 255");
  }
  const used = new Set(Array.from({ length: 200 }, (_, i) => key(`h${i}`, "s")));
  assert.equal(used.size, 4, "keys are spread over every writer");
});

Deno.test("sharded writer: numbers route by value (5, 5.0, '5', 4.6 alike), and text outside ASCII by MySQL's comparison too", async () => {
  await using f = await setup(["statusengine_hostchecks"]);
  const w = f.writers("statusengine_hostchecks", 10, 5);
  const key = (host: string, start: unknown, usec: unknown = 0) =>
    w.shardOf({ hostname: host, start_time: start as number, start_time_usec: usec as number });
  for (let i = 0; i < 100; i++) {
    const t = 1_785_470_000 + i * 7_919;
    const shard = key(`host-${i}`, t, i);
    assert.equal(key(`host-${i}`, String(t), `${i}`), shard);
    assert.equal(key(`host-${i}`, `${t}.0`, i + 0.4), shard);
    assert.equal(key(`HOST-${i}\t `, t - 0.4, i), shard);
    assert.equal(key(`Größe-${i}`, t, i), key(`GRÖSSE-${i}`.replace("SS", "ß"), t, i));
    assert.equal(key(`Ärger-${i} `, t, i), key(`ärger-${i}`, t, i));
  }
  assert.equal(key("h", 2 ** 40 + 3), key("h", String(2 ** 40 + 3)));
  const used = new Set(Array.from({ length: 200 }, (_, i) => key("h", 1_785_470_000 + i)));
  assert.equal(used.size, 5, "times alone spread rows over every writer");
});

Deno.test("sharded writer: many interleaved updates of the same status keys end with the last update of each key, with jobs queueing for buffer space (status last-write-wins)", async () => {
  await using f = await setup([HOSTSTATUS]);
  // A small batch, so that many jobs wait for buffer space at once: a writer's own wait queue
  // let a later job overtake a woken one that found the space taken again.
  const w = f.writers(HOSTSTATUS, 3, 3);
  const hosts = Array.from({ length: 24 }, (_, i) => `host-${i}`);
  const rounds = 60;
  await using lock = await lockTables(f.db, [HOSTSTATUS]);
  const jobs: Promise<void>[] = [];
  for (let r = 1; r <= rounds; r++) {
    // One job per round, each object in a different order; jobs are handed over at once,
    // as concurrent handlers do, while the table is locked so that they queue up.
    const rows = shuffled(hosts, r).map((h) => hostStatus(h, 1_000 + r, `round ${r}`));
    const tracker = new JobTracker("statusngin_hoststatus", rows.length);
    jobs.push(w.add(rows, tracker).then(() => tracker.done));
  }
  await waitForBlocked(f.db, "INSERT INTO `statusengine_hoststatus`%", 3);
  await lock.unlock();
  await Promise.all(jobs);
  const stored = await f.db.query<
    { hostname: string; status_update_time: number; output: string }[]
  >(
    `SELECT hostname, status_update_time, output FROM ${HOSTSTATUS} ORDER BY hostname`,
  );
  assert.equal(stored.length, hosts.length);
  for (const row of stored) {
    assert.equal(Number(row.status_update_time), 1_000 + rounds, `${row.hostname}`);
    assert.equal(row.output, `round ${rounds}`, `${row.hostname}`);
  }
});

Deno.test("sharded writer: rows without a natural key are spread over the writers, every row written once", async () => {
  await using f = await setup([LOGENTRIES]);
  const w = f.writers(LOGENTRIES, 50, 2);
  const jobs: Promise<void>[] = [];
  for (let j = 0; j < 40; j++) {
    const rows = Array.from({ length: 25 }, (_, i) => ({
      entry_time: 1_700_000_000 + j,
      logentry_type: 1,
      logentry_data: `job ${j} row ${i}`,
      node_name: "N",
    }));
    const tracker = new JobTracker("statusngin_logentries", rows.length);
    jobs.push(w.add(rows, tracker).then(() => tracker.done));
  }
  await Promise.all(jobs);
  assert.equal(w.totalRows, 1000);
  for (const shard of w.shards) assert.ok(shard.totalRows > 0, "every writer wrote rows");
  const [n] = await f.db.query<{ n: number }[]>(`SELECT COUNT(*) AS n FROM ${LOGENTRIES}`);
  assert.equal(Number(n?.n), 1000);
});

Deno.test("sharded writer: withPaused holds every writer of the table while it runs, and flush commits what each holds", async () => {
  await using f = await setup([HOSTSTATUS]);
  const w = f.writers(HOSTSTATUS, 100, 2);
  const rows = Array.from({ length: 40 }, (_, i) => hostStatus(`h${i}`, 1, "before"));
  const tracker = new JobTracker("statusngin_hoststatus", rows.length);
  await w.add(rows, tracker);
  const seen = await w.withPaused(async () => {
    // Everything handed over before is committed; nothing is sent while fn runs.
    const [n] = await f.db.query<{ n: number }[]>(`SELECT COUNT(*) AS n FROM ${HOSTSTATUS}`);
    const later = new JobTracker("statusngin_hoststatus", 10);
    await w.add(
      Array.from({ length: 10 }, (_, i) => hostStatus(`late${i}`, 2, "during")),
      later,
    );
    assert.equal(w.buffered, 10, "rows handed over during the pause wait");
    return Number(n?.n);
  });
  assert.equal(seen, 40);
  await tracker.done;
  await w.flush();
  await waitFor(() => w.buffered === 0, { message: "resumed after the pause" });
  const [n] = await f.db.query<{ n: number }[]>(`SELECT COUNT(*) AS n FROM ${HOSTSTATUS}`);
  assert.equal(Number(n?.n), 50);
});
