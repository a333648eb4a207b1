/**
 * Property: the downtime tables end the same whatever order, and however often, the jobs of
 * one downtime are applied (docs/downtimes.md).
 *
 * What would break without it: gearmand puts a job whose handler lost its MySQL connection
 * back behind later jobs, so a START can run before its ADD. The START then matched no history
 * row and was lost, and the late ADD wrote `was_started = 0` for a downtime the core started.
 *
 * Every lifecycle below (host and service; fixed and flexible; ADD → START → STOP → DELETE,
 * ADD → DELETE before the window, LOAD → START → STOP → DELETE, a core restart's LOAD and second
 * START), and every prefix of it (the state while the downtime is still going on), is applied
 * once in the order the core emitted it, then many times as a random shuffle in which each event
 * occurs one to three times. The full rows of the history and scheduled tables must equal the
 * in-order result every time. The statements run through the worker's own decoder and executor
 * against the real MariaDB, or two nodes of a Galera cluster. Set DOWNTIME_ORDER_SEED to replay a
 * failing seed. The tests: tests/downtime_order_test.ts, and tests/clusters_test.ts on Galera.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { createScratchDatabase } from "./mysql.ts";
import { seededRandom } from "./seeded_random.ts";
import { DowntimeExecutor } from "../../src/mysql/downtime.ts";
import { ensureSchema } from "../../src/mysql/schema.ts";
import { poolExecutor } from "../../src/mysql/executor.ts";
import { DbAvailability } from "../../src/mysql/availability.ts";
import { mysqlOptionsFromUrl } from "../../src/util/mysql_url.ts";
import { createMetrics } from "../../src/metrics/registry.ts";
import { DeadLetterFile, DeadLetters } from "../../src/pipeline/dead_letter.ts";
import { type DowntimeEvent, downtimeStatements } from "../../src/events/downtime.ts";
import { deadline } from "../../src/util/async.ts";

const QUEUE = "statusngin_downtimes";
const NODE = "N";
const E = 1_760_000_000;
const ADD = 1100;
const DELETE = 1101;
const LOAD = 1102;
const START = 1103;
const STOP = 1104;
const NAMES: Readonly<Record<number, string>> = {
  [ADD]: "ADD",
  [DELETE]: "DELETE",
  [LOAD]: "LOAD",
  [START]: "START",
  [STOP]: "STOP",
};

/** Shuffles per lifecycle and per prefix, applied one job after another. */
const TRIALS = 30;
/** The same, all jobs of a trial at once on a pool of 8 connections (fewer: it adds no new order). */
const CONCURRENT_TRIALS = 8;
/** Trials applied at the same time (each on its own downtime, so they cannot interact). */
const PARALLEL = 3;

interface Step {
  readonly type: number;
  readonly ts: number;
  readonly usec?: number;
  readonly attr?: number;
}

interface Lifecycle {
  readonly name: string;
  readonly start: number;
  readonly end: number;
  readonly entry: number;
  readonly fixed: 0 | 1;
  readonly duration: number;
  /** In the order the core emits them. */
  readonly steps: readonly Step[];
}

const LIFECYCLES: readonly Lifecycle[] = [
  {
    name: "fixed, runs and expires",
    start: E + 100,
    end: E + 700,
    entry: E + 50,
    fixed: 1,
    duration: 600,
    steps: [
      { type: ADD, ts: E + 50, usec: 111 },
      { type: START, ts: E + 100 },
      { type: STOP, ts: E + 700, attr: 1 },
      { type: DELETE, ts: E + 700 },
    ],
  },
  {
    name: "fixed, window already begun (ADD and START at once), cancelled by a user",
    start: E + 10,
    end: E + 9000,
    entry: E + 20,
    fixed: 1,
    duration: 8990,
    steps: [
      { type: ADD, ts: E + 20, usec: 222 },
      { type: START, ts: E + 20 },
      { type: STOP, ts: E + 500, attr: 2 },
      { type: DELETE, ts: E + 500 },
    ],
  },
  {
    name: "deleted before its window began",
    start: E + 5000,
    end: E + 6000,
    entry: E + 200,
    fixed: 1,
    duration: 1000,
    steps: [{ type: ADD, ts: E + 200, usec: 333 }, { type: DELETE, ts: E + 300 }],
  },
  {
    name: "scheduled before a core restart: LOAD, START, STOP, DELETE",
    start: E + 400,
    end: E + 800,
    entry: E + 10,
    fixed: 1,
    duration: 400,
    steps: [
      { type: LOAD, ts: E + 300, usec: 444 },
      { type: START, ts: E + 400 },
      { type: STOP, ts: E + 800, attr: 1 },
      { type: DELETE, ts: E + 800 },
    ],
  },
  {
    name: "flexible, triggered inside its window",
    start: E + 100,
    end: E + 3000,
    entry: E + 90,
    fixed: 0,
    duration: 300,
    steps: [
      { type: ADD, ts: E + 90, usec: 555 },
      { type: START, ts: E + 1000 },
      { type: STOP, ts: E + 1300, attr: 1 },
      { type: DELETE, ts: E + 1300 },
    ],
  },
  {
    name: "flexible, never triggered, deleted when its window passed",
    start: E + 100,
    end: E + 2000,
    entry: E + 90,
    fixed: 0,
    duration: 600,
    steps: [{ type: ADD, ts: E + 90, usec: 666 }, { type: DELETE, ts: E + 2000 }],
  },
  {
    name: "running across a core restart (LOAD and a second START), then expires",
    start: E + 200,
    end: E + 6000,
    entry: E + 150,
    fixed: 1,
    duration: 5800,
    steps: [
      { type: ADD, ts: E + 150, usec: 777 },
      { type: START, ts: E + 200 },
      { type: LOAD, ts: E + 5000, usec: 888 },
      { type: START, ts: E + 5000 },
      { type: STOP, ts: E + 6000, attr: 1 },
      { type: DELETE, ts: E + 6000 },
    ],
  },
];

type Kind = "host" | "service";
type DbRow = Record<string, unknown>;

function event(l: Lifecycle, kind: Kind, host: string, id: number, s: Step): DowntimeEvent {
  return {
    type: s.type,
    attr: s.attr ?? 0,
    timestamp: s.ts,
    timestampUsec: s.usec ?? 0,
    downtimeType: kind === "host" ? 2 : 1,
    hostName: host,
    serviceDescription: kind === "host" ? "" : "HTTP",
    downtimeId: id,
    startTime: l.start,
    endTime: l.end,
    entryTime: l.entry,
    authorName: "Daniel Z",
    commentData: `downtime ${l.name}`,
    triggeredBy: 0,
    fixed: l.fixed,
    duration: l.duration,
  };
}

/** Each step one to three times, shuffled (Fisher–Yates). */
function shuffleWithRepeats(steps: readonly Step[], rnd: (n: number) => number): Step[] {
  const out = steps.flatMap((s) => Array.from({ length: 1 + rnd(3) }, () => s));
  for (let i = out.length - 1; i > 0; i--) {
    const j = rnd(i + 1);
    [out[i], out[j]] = [out[j] as Step, out[i] as Step];
  }
  return out;
}

function describe(steps: readonly Step[]): string {
  return steps.map((s) => `${NAMES[s.type]}@${s.ts - E}`).join(" → ");
}

/** Where {@link checkEveryOrder} applies the jobs. */
export interface OrderCheckOptions {
  /**
   * false: one job after another in the shuffled order (a redelivery puts a job behind later
   * ones). true: all jobs of a trial at once on several connections, each job's statements in
   * order (what handling the queue with a window larger than one would do).
   */
  readonly concurrent: boolean;
  /**
   * URLs (ending in `/`) of two nodes of a Galera cluster (or one node twice): the trials' jobs
   * alternate between them, as two workers each connected to its own node would apply them; the
   * in-order reference is applied on the first. Default: a scratch database on the test server.
   */
  readonly galeraNodes?: readonly [string, string];
  /**
   * With `galeraNodes` and one job after another: before a job runs on the other node than the
   * trial's previous job, that node takes the trial's lease (an UPDATE of its row of
   * `statusengine_worker_leases`), as a worker on that node taking over the in-order lease does
   * (docs/downtimes.md#galera).
   */
  readonly handOver?: boolean;
}

/** The database of the check: its URL on each node and a reader that sees every node's commits. */
interface CheckDatabase extends AsyncDisposable {
  readonly urls: readonly string[];
  query<T = unknown>(sql: string, params?: unknown[]): Promise<T>;
}

async function checkDatabase(galeraNodes?: readonly [string, string]): Promise<CheckDatabase> {
  if (galeraNodes === undefined) {
    const db = await createScratchDatabase();
    return {
      urls: [db.url],
      query: (sql, params) => db.query(sql, params),
      [Symbol.asyncDispose]: () => db.drop(),
    };
  }
  const name = "se_downtime_order";
  const admin = await mysql.createConnection(mysqlOptionsFromUrl(galeraNodes[0]));
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const urls = galeraNodes.map((u) => `${u}${name}`);
  const reader = mysql.createPool({
    ...mysqlOptionsFromUrl(urls[0] ?? ""),
    connectionLimit: PARALLEL,
  });
  // A read waits until this node applied every commit of the other node before it.
  reader.on("connection", (c) => void c.query("SET SESSION wsrep_sync_wait = 1"));
  return {
    urls,
    async query<T>(sql: string, params?: unknown[]) {
      const [rows] = await reader.query(sql, params);
      return rows as T;
    },
    [Symbol.asyncDispose]: () => reader.end(),
  };
}

/**
 * Apply every lifecycle's prefixes in shuffled orders and compare the rows with the in-order
 * ones (see the module comment); fails naming the seed and the first differences.
 *
 * @param options Sequential or at once; the test server or two Galera nodes.
 */
export async function checkEveryOrder(options: OrderCheckOptions): Promise<void> {
  const concurrent = options.concurrent;
  const seed = Number(Deno.env.get("DOWNTIME_ORDER_SEED") ?? "20261203");
  const rnd = seededRandom(seed);
  await using db = await checkDatabase(options.galeraNodes);
  const pools = db.urls.map((url) =>
    mysql.createPool({
      ...mysqlOptionsFromUrl(url),
      connectionLimit: concurrent ? 8 : PARALLEL + 1,
    })
  );
  const deadLetterPath = await Deno.makeTempFile({ suffix: ".ndjson" });
  const metrics = createMetrics();
  const deadLetters = new DeadLetters(new DeadLetterFile(deadLetterPath), metrics);
  try {
    await ensureSchema(pools[0] as mysql.Pool);
    // Another Galera node applies the CREATE TABLEs a moment later: wait until it has the last one.
    for (const pool of pools.slice(1)) {
      for (let i = 0;; i++) {
        try {
          await pool.query("SELECT 1 FROM statusengine_worker_leases LIMIT 0");
          break;
        } catch (err: unknown) {
          if (i >= 100) throw err;
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    }
    const executors = pools.map((pool) =>
      new DowntimeExecutor({
        executor: poolExecutor(pool),
        availability: new DbAvailability(metrics.dbAvailable),
        deadLetters,
        metrics,
      })
    );

    let nextId = 1;
    const apply = async (
      l: Lifecycle,
      kind: Kind,
      host: string,
      steps: readonly Step[],
      atOnce = false,
      reference = false,
    ) => {
      const id = nextId++;
      let node: number | undefined;
      // The in-order reference on the first node; a trial's jobs alternate between the nodes.
      const job = async (s: Step, index: number) => {
        using limit = deadline(30_000);
        const at = reference ? 0 : index % executors.length;
        const executor = executors[at];
        if (executor === undefined) throw new Error("no executor");
        if (options.handOver === true && !atOnce && node !== undefined && node !== at) {
          // As the lease does, a take-over that fails certification (1213: another trial's
          // row landed in the gap it locked) is tried again.
          for (let attempt = 1;; attempt++) {
            try {
              await pools[at]?.query(
                "INSERT INTO statusengine_worker_leases (name, holder, renewals) VALUES (?, ?, 1) " +
                  "ON DUPLICATE KEY UPDATE holder = VALUES(holder), renewals = renewals + 1",
                [`in-order:${host}`, `node ${at}`],
              );
              break;
            } catch (err: unknown) {
              if ((err as { errno?: number }).errno !== 1213 || attempt >= 10) throw err;
            }
          }
        }
        node = at;
        await executor.run(
          QUEUE,
          downtimeStatements(event(l, kind, host, id, s), NODE),
          limit.signal,
        );
      };
      if (atOnce) await Promise.all(steps.map(job));
      else for (const [i, s] of steps.entries()) await job(s, i);
    };
    // Both tables of the object kind, every column, the trial's own host name blanked out (every
    // trial has its own host, so trials never share a row).
    const rowsOf = async (kind: Kind, host: string) => {
      const out: Record<string, DbRow[]> = {};
      for (const table of [`${kind}_downtimehistory`, `${kind}_scheduleddowntimes`]) {
        const rows = await db.query<DbRow[]>(
          `SELECT * FROM statusengine_${table} WHERE hostname = ?`,
          [host],
        );
        out[table] = rows.map((r) =>
          Object.fromEntries(
            Object.entries(r)
              .filter(([k]) => k !== "hostname" && k !== "internal_downtime_id")
              .map(([k, v]) => [k, typeof v === "bigint" ? Number(v) : v]),
          )
        );
      }
      return out;
    };

    interface Trial {
      readonly lifecycle: Lifecycle;
      readonly kind: Kind;
      readonly prefix: readonly Step[];
      readonly host: string;
      readonly order: readonly Step[];
    }
    const differences: string[] = [];
    let trials = 0;
    let caseNo = 0;
    for (const l of LIFECYCLES) {
      for (const kind of ["host", "service"] as const) {
        for (let n = 1; n <= l.steps.length; n++) {
          const prefix = l.steps.slice(0, n);
          const c = caseNo++;
          const reference = `c${c}-in-order`;
          await apply(l, kind, reference, prefix, false, true);
          const want = await rowsOf(kind, reference);
          const batch: Trial[] = Array.from(
            { length: concurrent ? CONCURRENT_TRIALS : TRIALS },
            (_, t) => ({
              lifecycle: l,
              kind,
              prefix,
              host: `c${c}-t${t}`,
              order: shuffleWithRepeats(prefix, rnd),
            }),
          );
          for (let i = 0; i < batch.length; i += PARALLEL) {
            await Promise.all(
              batch.slice(i, i + PARALLEL).map(async (trial) => {
                await apply(trial.lifecycle, trial.kind, trial.host, trial.order, concurrent);
                const got = await rowsOf(trial.kind, trial.host);
                trials++;
                try {
                  assert.deepEqual(got, want);
                } catch {
                  differences.push(
                    `${kind} downtime "${l.name}", core order ${describe(prefix)}; applied ` +
                      `${describe(trial.order)}:\n  got  ${JSON.stringify(got)}\n  want ${
                        JSON.stringify(want)
                      }`,
                  );
                }
              }),
            );
          }
        }
      }
    }
    assert.ok(trials >= 400, `only ${trials} trials`);
    assert.equal(
      differences.length,
      0,
      `seed ${seed} (replay with DOWNTIME_ORDER_SEED=${seed}): ${differences.length} of ${trials} ` +
        `shuffles${
          concurrent ? " (applied at once)" : ""
        } ended differently from the in-order rows; the first ones:\n${
          differences.slice(0, 5).join("\n")
        }`,
    );
  } finally {
    await deadLetters.close();
    await Promise.all(pools.map((pool) => pool.end()));
    await Deno.remove(deadLetterPath).catch(() => {});
  }
}
