/**
 * The worker process under signals: SIGKILL loses nothing (D1), SIGTERM runs
 * the documented shutdown order and exits 0, a second signal exits at once.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { connectionOptionsOf, createScratchDatabase } from "./helpers/mysql.ts";
import { startGearmand } from "./helpers/gearmand.ts";
import { startMysqlProxy } from "./helpers/tcp_proxy.ts";
import { orStuck, track, waitFor } from "./helpers/wait.ts";
import {
  createSchema,
  jobsAtGearmand,
  publish,
  startTestWorker,
  testConfig,
} from "./helpers/worker.ts";
import { withLogs } from "./helpers/logs.ts";
import {
  seriesValue,
  startWorkerProcess,
  startWorkerWithHungDeadLetter,
} from "./helpers/worker_process.ts";
import { DUPLICATE_SIGNAL_MS } from "../src/cli/mod.ts";

const FIXTURE = JSON.parse(
  Deno.readTextFileSync(
    new URL("../src/events/testdata/statusngin_hostchecks.job", import.meta.url),
  ),
);
const QUEUE = "statusngin_hostchecks";

/** Jobs of 100 host checks whose host names are unique markers. */
function markerJobs(prefix: string, jobs: number): string[] {
  const template = FIXTURE.messages[0];
  return Array.from({ length: jobs }, (_, j) =>
    JSON.stringify({
      format: "none",
      messages: Array.from({ length: 100 }, (_, i) => {
        const m = structuredClone(template);
        m.hostcheck.host_name = `${prefix}-${j * 100 + i}`;
        return m;
      }),
    }));
}

async function countMarkers(
  db: { query<T>(sql: string, params?: unknown[]): Promise<T> },
  prefix: string,
): Promise<number> {
  const [row] = await db.query<{ n: number }[]>(
    "SELECT COUNT(DISTINCT hostname) AS n FROM statusengine_hostchecks WHERE hostname LIKE ?",
    [`${prefix}-%`],
  );
  return Number(row?.n ?? 0);
}

Deno.test("lifecycle: SIGKILL while a backlog drains loses no event; a restart finishes the job (D1)", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await publish(gearmand.addr, QUEUE, markerJobs("kill", 400));
  {
    await using worker = await startWorkerProcess({ gearmanAddr: gearmand.addr, mysqlUrl: db.url });
    await waitFor(async () => (await countMarkers(db, "kill")) >= 5_000, {
      timeoutMs: 60_000,
      message: "the drain to be under way",
    });
    worker.kill("SIGKILL");
    const status = await worker.status;
    assert.equal(status.signal, "SIGKILL");
  }
  const committed = await countMarkers(db, "kill");
  assert.ok(committed < 40_000, `killed mid-drain (${committed} committed)`);
  assert.ok((await jobsAtGearmand(gearmand.addr, QUEUE)) > 0, "unacknowledged jobs went back");
  await using _again = await startWorkerProcess({ gearmanAddr: gearmand.addr, mysqlUrl: db.url });
  await waitFor(async () => (await jobsAtGearmand(gearmand.addr, QUEUE)) === 0, {
    timeoutMs: 120_000,
    message: "the backlog to drain after the restart",
  });
  assert.equal(await countMarkers(db, "kill"), 40_000);
});

Deno.test("lifecycle: SIGTERM under load drains, flushes, closes MySQL and HTTP in that order and exits 0", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await publish(gearmand.addr, QUEUE, markerJobs("term", 300));
  await using worker = await startWorkerProcess({ gearmanAddr: gearmand.addr, mysqlUrl: db.url });
  await waitFor(async () => (await countMarkers(db, "term")) >= 3_000, { timeoutMs: 60_000 });
  worker.kill("SIGTERM");
  const status = await worker.status;
  assert.equal(status.code, 0, worker.stderr());
  const steps = [
    "shutdown signal received",
    "shutdown: drain consumer done",
    "shutdown: flush writers done",
    "shutdown: close MySQL pool done",
    "shutdown: stop metrics server done",
    "shutdown complete",
  ];
  const lines = worker.lines();
  const positions = steps.map((s) => lines.findIndex((l) => l.includes(`msg="${s}`)));
  assert.ok(positions.every((p) => p >= 0), `all steps logged:\n${lines.slice(-30).join("\n")}`);
  assert.deepEqual([...positions].sort((a, b) => a - b), positions, "in the documented order");
  for (const s of steps) {
    assert.equal(lines.filter((l) => l.includes(`msg="${s}`)).length, 1, `${s} logged once`);
  }
  assert.ok(lines.some((l) => l.includes("duration_ms=")), "steps carry their duration");
  // Nothing acknowledged was lost: committed + still queued covers everything.
  await using _again = await startWorkerProcess({ gearmanAddr: gearmand.addr, mysqlUrl: db.url });
  await waitFor(async () => (await jobsAtGearmand(gearmand.addr, QUEUE)) === 0, {
    timeoutMs: 120_000,
  });
  assert.equal(await countMarkers(db, "term"), 30_000);
});

/** The step names of the table in docs/shutdown.md#order-and-budgets, in its order. */
async function documentedShutdownSteps(): Promise<string[]> {
  const doc = await Deno.readTextFile(new URL("../docs/shutdown.md", import.meta.url));
  const section = doc.slice(doc.indexOf("## Order and budgets"), doc.indexOf('<a id="timeout'));
  return [...section.matchAll(/^\| *\d+ *\| *`([^`]+)` *\|/gm)].map((m) => m[1] ?? "");
}

// docs/shutdown.md listed the steps in an older order and without the task queue; the table is
// now checked against what a stopping worker with every part configured logs.
Deno.test("lifecycle: a worker with every part stops in exactly the steps and order docs/shutdown.md lists", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const worker = await startTestWorker(testConfig({
    mysqlUrl: db.url,
    gearmanServers: [gearmand.addr],
    metrics: { hostname: "127.0.0.1", port: 0 },
    websocket: { hostname: "127.0.0.1", port: 0, apiKeys: ["ws-key"] },
    commands: { hostname: "127.0.0.1", port: 0, apiKeys: ["command-key"] },
    tasks: { intervalMs: 60_000, submitMethod: "broker", externalCommandFile: "/nonexistent" },
  }));
  const logged = await withLogs(async (logs) => {
    await worker.stop();
    return logs.flatMap((l) => {
      const step = /^shutdown: (.+) done$/.exec(l.message)?.[1];
      return step === undefined ? [] : [step];
    });
  });
  const documented = await documentedShutdownSteps();
  assert.equal(documented.length, 10, `the table was read: ${documented.join(", ")}`);
  assert.deepEqual(logged, documented);
});

Deno.test("lifecycle: a second SIGTERM during a slow shutdown exits immediately", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using proxy = await startMysqlProxy(db);
  await using worker = await startWorkerProcess({
    gearmanAddr: gearmand.addr,
    mysqlUrl: proxy.url,
  });
  proxy.block();
  await publish(gearmand.addr, QUEUE, markerJobs("second", 20));
  await waitFor(
    async () => seriesValue(await worker.metrics(), "statusengine_db_available") === 0,
    {
      timeoutMs: 20_000,
      message: "MySQL seen as unavailable",
    },
  );
  worker.kill("SIGTERM");
  await waitFor(() => worker.lines().some((l) => l.includes("shutdown signal received")));
  // A signal within DUPLICATE_SIGNAL_MS of the first counts as the same delivery.
  await new Promise((r) => setTimeout(r, DUPLICATE_SIGNAL_MS));
  worker.kill("SIGTERM");
  // MySQL stays away, so the slow shutdown would not end by itself: the worker exits only
  // because the second signal ends it, which its message says.
  const exited = track(worker.status);
  await waitFor(() => exited.settled, { message: "the worker to exit on the second SIGTERM" });
  const status = await worker.status;
  assert.notEqual(status.code, 0);
  assert.ok(worker.stderr().includes("second signal"));
});

Deno.test("lifecycle: an ended pool leaves nothing open on a frozen MySQL, so the process can exit", async () => {
  // The pool's end, as the shutdown's "close MySQL pool" step runs it, in a process of its own
  // that has no Deno.exit(): it exits when nothing is left on its event loop. Before, mysql2's
  // pool.end() called back while a connection whose COM_QUIT a frozen MySQL never answered kept
  // its socket open: that process lived until the server closed the connection (for ever here).
  // No timed assertion: the deadline below only bounds a hang, which without the fix is endless.
  await using db = await createScratchDatabase();
  await using proxy = await startMysqlProxy(db);
  const code = `
    import mysql from "mysql2/promise";
    import { endPool } from "${new URL("../src/mysql/mod.ts", import.meta.url).href}";
    import { denoSocketStream } from "${new URL("../src/mysql/failover.ts", import.meta.url).href}";
    const pool = mysql.createPool({ uri: Deno.args[0], connectionLimit: 3, stream: denoSocketStream });
    await Promise.all([pool.query("SELECT 1"), pool.query("SELECT SLEEP(0.1)"), pool.query("SELECT 2")]);
    console.log("connected");
    await new Response(Deno.stdin.readable).text();
    await endPool(pool, 2_000);
    console.log("ended");
  `;
  const child = new Deno.Command(Deno.execPath(), {
    args: ["eval", "--ext=ts", code, proxy.url],
    cwd: new URL("..", import.meta.url).pathname,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const lines: string[] = [];
  const reading = (async () => {
    for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) lines.push(chunk);
  })();
  const exited = track(child.status);
  try {
    await waitFor(() => lines.join("").includes("connected") || exited.settled);
    assert.ok(lines.join("").includes("connected"), "the child reached MySQL");
    proxy.freeze();
    await child.stdin.close();
    await waitFor(() => exited.settled, {
      timeoutMs: 30_000,
      message: "the child to exit after the pool ended",
    });
    assert.ok(lines.join("").includes("ended"));
  } finally {
    if (!exited.settled) child.kill("SIGKILL");
    await child.status;
    await reading;
    await child.stderr.cancel();
  }
});

// "stop task queue" waited for the poll's statement without a bound: a statement MySQL holds up
// (a table lock here, a frozen server alike) kept the worker from stopping until the statement
// timeout, and for ever with --mysql-statement-timeout 0. No timed assertion: the wait below
// only bounds a hang, which without the fix is endless.
Deno.test("lifecycle: SIGTERM while the task queue's poll waits on MySQL still shuts down and exits 0", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const holder = await mysql.createConnection(connectionOptionsOf(db));
  try {
    await using worker = await startWorkerProcess({
      gearmanAddr: gearmand.addr,
      mysqlUrl: db.url,
      args: [
        "--queues",
        QUEUE,
        "--check-for-commands",
        "--submit-method",
        "broker",
        "--command-check-interval",
        "100ms",
        "--mysql-statement-timeout",
        "0",
      ],
    });
    await holder.query("LOCK TABLES statusengine_tasks WRITE");
    await waitFor(async () => {
      const [rows] = await holder.query(
        "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST " +
          "WHERE DB = ? AND INFO LIKE 'SELECT `uuid`%statusengine_tasks%'",
        [db.name],
      );
      return Number((rows as { n: number }[])[0]?.n) > 0;
    }, { message: "the task queue's poll waiting for the table lock" });
    worker.kill("SIGTERM");
    const exited = track(worker.status);
    await waitFor(() => exited.settled, { timeoutMs: 60_000, message: "the worker to exit" });
    assert.equal((await worker.status).code, 0, worker.stderr());
    assert.ok(worker.lines().some((l) => l.includes('msg="shutdown complete"')));
  } finally {
    await holder.query("UNLOCK TABLES").catch(() => {});
    await holder.end();
  }
});

// The stall's error line counted only the rows waiting in the writers' buffers, not the batches
// the writers hold in their retry loop: a stalled worker said jobs_held=3 rows_held=0.
Deno.test("lifecycle: the write stall's error line counts the held batches in rows_held", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  // An account that may write every table but statusengine_hostchecks: its batches are held.
  const user = `se_noins_${crypto.randomUUID().slice(0, 6)}`;
  await db.query(`CREATE USER '${user}'@'%' IDENTIFIED BY 'se-secret-pw'`);
  try {
    const tables = await db.query<{ t: string }[]>(
      "SELECT TABLE_NAME AS t FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?",
      [db.name],
    );
    for (const { t } of tables) {
      const privileges = t === "statusengine_hostchecks"
        ? "SELECT"
        : "SELECT, INSERT, UPDATE, DELETE";
      await db.query(`GRANT ${privileges} ON \`${db.name}\`.\`${t}\` TO '${user}'@'%'`);
    }
    const url = new URL(db.url);
    url.username = user;
    url.password = "se-secret-pw";
    await using worker = await startWorkerProcess({
      gearmanAddr: gearmand.addr,
      mysqlUrl: url.href,
      args: ["--queues", QUEUE],
    });
    await publish(gearmand.addr, QUEUE, markerJobs("held", 3));
    // Held for a minute, the stall becomes an error (docs/logging.md#mysql-outage).
    const stalled = () => worker.lines().find((l) => l.includes("writes are stalled"));
    await waitFor(() => stalled() !== undefined, { timeoutMs: 120_000, message: "the error" });
    assert.match(stalled() ?? "", /jobs_held=3 rows_held=300\b/);
    worker.kill("SIGTERM");
    assert.equal((await worker.status).code, 0, worker.stderr());
    assert.equal(await countMarkers(db, "held"), 0);
  } finally {
    await db.query(`DROP USER '${user}'@'%'`);
  }
});

// A dead-letter file whose writes never return (a hung NFS mount) held the "close dead-letter
// file" step for ever: SIGTERM never finished and systemd SIGKILLed the worker at TimeoutStopSec.
Deno.test("lifecycle: SIGTERM while a dead-letter write never returns shuts down within the step's budget and exits 0", async () => {
  await using worker = await startWorkerWithHungDeadLetter(QUEUE);
  worker.kill("SIGTERM");
  const status = await orStuck(worker.status);
  assert.notEqual(status, "stuck", worker.lines().slice(-5).join("\n"));
  assert.equal(status === "stuck" ? undefined : status.code, 0, worker.stderr());
  const failed = worker.lines().find((l) => l.includes("shutdown: close dead-letter file failed"));
  assert.ok(failed, worker.lines().join("\n"));
  assert.match(failed, /1 record/);
  assert.ok(worker.lines().some((l) => l.includes('msg="shutdown complete"')));
  // Not acknowledged: the job comes again.
  assert.equal(await jobsAtGearmand(worker.gearmanAddr, QUEUE), 1);
});
