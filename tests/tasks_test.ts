/**
 * The Statusengine UI's task queue end to end: rows of `statusengine_tasks` → validation →
 * gearmand's `statusngin_cmd` or the core's external command file → deleted.
 *
 * What would break without it: the UI writes every user action (reschedule, acknowledge,
 * downtime, passive result) into statusengine_tasks and expects the worker to run it; a
 * worker that never reads the table loses every one of them without a trace.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import {
  connectionOptionsOf,
  createScratchDatabase,
  type ScratchDatabase,
} from "./helpers/mysql.ts";
import { startGearmand } from "./helpers/gearmand.ts";
import { startTcpProxy } from "./helpers/tcp_proxy.ts";
import { takeJobs } from "./helpers/gearman_jobs.ts";
import { waitFor } from "./helpers/wait.ts";
import { withLogs } from "./helpers/logs.ts";
import {
  createSchema,
  jobsAtGearmand,
  metricValue,
  startTestWorker,
  TEST_QUEUE_DURABILITY,
  testConfig,
} from "./helpers/worker.ts";
import type { WorkerConfig } from "../src/daemon/mod.ts";
import { SETTINGS } from "../src/config/mod.ts";
import { AmqpPublisher } from "../src/amqp/publisher.ts";
import { createScratchVhost } from "./helpers/rabbitmq.ts";

const NODE = "N";
const CMD = "statusngin_cmd";

interface Task {
  readonly uuid: string | null;
  readonly node: string;
  readonly entry: number;
  readonly type: string;
  readonly payload: string | null;
}

/** An external command the UI wrote for this node. */
function command(uuid: string | null, entry: number, payload: string): Task {
  return { uuid, node: NODE, entry, type: "externalcommand", payload };
}

/** A SCHEDULE_HOST_CHECK whose host and timestamp tell the tasks apart. */
function scheduleCheck(uuid: string, entry: number): Task {
  return command(uuid, entry, `[${entry}] SCHEDULE_HOST_CHECK;${uuid};${entry}`);
}

async function insertTasks(db: ScratchDatabase, tasks: readonly Task[]): Promise<void> {
  for (const t of tasks) {
    await db.query(
      "INSERT INTO statusengine_tasks (uuid, node_name, entry_time, type, payload) " +
        "VALUES (?, ?, ?, ?, ?)",
      [t.uuid, t.node, t.entry, t.type, t.payload],
    );
  }
}

async function remaining(db: ScratchDatabase): Promise<string[]> {
  const rows = await db.query<{ uuid: string | null; node_name: string }[]>(
    "SELECT uuid, node_name FROM statusengine_tasks ORDER BY entry_time",
  );
  return rows.map((r) => `${r.uuid}@${r.node_name}`);
}

function taskConfig(
  db: ScratchDatabase,
  overrides: Partial<WorkerConfig> & Pick<WorkerConfig, "gearmanServers">,
): WorkerConfig {
  return testConfig({
    mysqlUrl: db.url,
    queues: ["statusngin_core_restart"],
    tasks: {
      intervalMs: 100,
      submitMethod: "broker",
      externalCommandFile: "/nonexistent",
    },
    ...overrides,
  });
}

const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);

Deno.test("tasks: this node's tasks reach statusngin_cmd in entry order as /commands would send them; refused ones are deleted, other nodes' stay", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await insertTasks(db, [
    // Entry order differs from insertion order on purpose.
    command("u2", 200, "ACKNOWLEDGE_HOST_PROBLEM;web01;1;1;1;admin;on it"),
    command("u1", 100, "[1700000000] SCHEDULE_FORCED_SVC_CHECK;web01;HTTP;1700000000"),
    // Refused by the same rules as POST /commands: never runnable, deleted.
    command("u3", 300, "SHUTDOWN_PROGRAM"),
    command("u4", 400, "A;b\nFORGED"),
    { uuid: "u5", node: NODE, entry: 500, type: "othertype", payload: "x" },
    // Without a uuid: still deleted exactly once it ran.
    command(null, 600, "ENABLE_HOST_NOTIFICATIONS;web01"),
    // Another node's task is that node's business.
    {
      uuid: "o1",
      node: "OTHER",
      entry: 50,
      type: "externalcommand",
      payload: "DISABLE_NOTIFICATIONS",
    },
  ]);
  const before = Math.floor(Date.now() / 1000);
  await using worker = await startTestWorker(taskConfig(db, { gearmanServers: [gearmand.addr] }));
  await waitFor(async () => (await remaining(db)).length === 1, {
    message: "every task of this node handled",
  });
  const after = Math.floor(Date.now() / 1000);
  assert.deepEqual(await remaining(db), ["o1@OTHER"]);
  assert.equal(await metricValue(worker, "statusengine_tasks_submitted_total"), 3);
  assert.equal(await metricValue(worker, "statusengine_tasks_rejected_total"), 3);
  assert.equal(await jobsAtGearmand(gearmand.addr, CMD), 3);

  const bodies = (await takeJobs(gearmand.addr, CMD, 3)).map((b) => JSON.parse(text(b)));
  assert.deepEqual(bodies[0], {
    Command: "raw",
    Data: "[1700000000] SCHEDULE_FORCED_SVC_CHECK;web01;HTTP;1700000000",
  });
  const ack = /^\[(\d+)\] ACKNOWLEDGE_HOST_PROBLEM;web01;1;1;1;admin;on it$/.exec(bodies[1]?.Data);
  assert.ok(ack, JSON.stringify(bodies[1]));
  assert.ok(Number(ack[1]) >= before && Number(ack[1]) <= after, "timestamp prefix added");
  assert.match(bodies[2]?.Data, /^\[\d+\] ENABLE_HOST_NOTIFICATIONS;web01$/);
});

Deno.test("tasks: while the job server is unreachable no task is deleted; they are published once it is back", async () => {
  await using gearmand = await startGearmand();
  await using proxy = await startTcpProxy(gearmand.addr);
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using worker = await startTestWorker(taskConfig(db, { gearmanServers: [proxy.addr] }));
  proxy.block();
  await insertTasks(db, [
    command("a", 1, "[1] SCHEDULE_HOST_CHECK;x;1"),
    command("b", 2, "[2] SCHEDULE_HOST_CHECK;y;2"),
  ]);
  await waitFor(
    async () => (await metricValue(worker, "statusengine_tasks_submit_errors_total")) >= 2,
    {
      message: "two failed submission rounds",
    },
  );
  assert.deepEqual(await remaining(db), ["a@N", "b@N"], "nothing deleted while unpublished");
  proxy.unblock();
  await waitFor(async () => (await remaining(db)).length === 0, { message: "tasks published" });
  const bodies = (await takeJobs(gearmand.addr, CMD, 2)).map((b) => JSON.parse(text(b)).Data);
  assert.deepEqual(bodies, ["[1] SCHEDULE_HOST_CHECK;x;1", "[2] SCHEDULE_HOST_CHECK;y;2"]);
});

Deno.test("tasks: submit method cmd writes each command line to the core's FIFO and to a plain file, then deletes the task", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const dir = await Deno.makeTempDir();
  try {
    // The core's command FIFO: the test is the core, reading it. Opened read-write, as the
    // core keeps it open, so a writer closing it is no end of file.
    const fifo = `${dir}/naemon.cmd`;
    const made = await new Deno.Command("mkfifo", { args: [fifo] }).output();
    assert.ok(made.success, "mkfifo");
    const reader = Deno.open(fifo, { read: true, write: true });
    await insertTasks(db, [
      command("f1", 1, "[10] ENABLE_HOST_CHECK;a"),
      command("f2", 2, "DISABLE_HOST_CHECK;b"),
    ]);
    {
      await using _worker = await startTestWorker(taskConfig(db, {
        gearmanServers: [gearmand.addr],
        tasks: { intervalMs: 100, submitMethod: "cmd", externalCommandFile: fifo },
      }));
      const file = await reader;
      try {
        let received = "";
        const buffer = new Uint8Array(4096);
        while (received.split("\n").length < 3) {
          const n = await file.read(buffer);
          if (n === null) break;
          received += new TextDecoder().decode(buffer.subarray(0, n));
        }
        const lines = received.split("\n");
        assert.equal(lines[0], "[10] ENABLE_HOST_CHECK;a");
        assert.match(lines[1] ?? "", /^\[\d+\] DISABLE_HOST_CHECK;b$/);
      } finally {
        file.close();
      }
      await waitFor(async () => (await remaining(db)).length === 0, { message: "tasks deleted" });
    }
    assert.equal(await jobsAtGearmand(gearmand.addr, CMD), 0, "nothing went to the broker");

    // A plain file (a spool, or a core that reads a regular file) is appended to.
    const plain = `${dir}/plain.cmd`;
    await Deno.writeTextFile(plain, "[0] EARLIER;line\n");
    await insertTasks(db, [
      command("p1", 3, "[11] ENABLE_HOST_NOTIFICATIONS;c"),
    ]);
    {
      await using _worker = await startTestWorker(taskConfig(db, {
        gearmanServers: [gearmand.addr],
        tasks: { intervalMs: 100, submitMethod: "cmd", externalCommandFile: plain },
      }));
      await waitFor(async () => (await remaining(db)).length === 0, { message: "task deleted" });
    }
    assert.equal(
      await Deno.readTextFile(plain),
      "[0] EARLIER;line\n[11] ENABLE_HOST_NOTIFICATIONS;c\n",
    );

    // A missing file (the core is not running) is never created; the task waits.
    const missing = `${dir}/missing.cmd`;
    await insertTasks(db, [
      command("m1", 4, "[12] DISABLE_HOST_NOTIFICATIONS;d"),
    ]);
    const warned = await withLogs(async (logs) => {
      await using worker = await startTestWorker(taskConfig(db, {
        gearmanServers: [gearmand.addr],
        tasks: { intervalMs: 100, submitMethod: "cmd", externalCommandFile: missing },
      }));
      await waitFor(
        async () => (await metricValue(worker, "statusengine_tasks_submit_errors_total")) >= 2,
        { message: "two failed writes" },
      );
      return logs.filter((l) => l.message.includes("external command file does not exist"));
    });
    // Once at start, naming the path and the setting; a wrong path would otherwise only show
    // as the same error at every poll.
    assert.equal(warned.length, 1);
    assert.equal(warned[0]?.level, "warn");
    assert.equal(warned[0]?.properties.path, missing);
    assert.match(warned[0]?.message ?? "", /external_command_file/);
    assert.deepEqual(await remaining(db), ["m1@N"]);
    await assert.rejects(Deno.stat(missing), Deno.errors.NotFound);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("tasks: with consumer rabbitmq a task is published to the broker's statusngin_cmd queue, then deleted", async () => {
  await using vhost = await createScratchVhost();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await insertTasks(db, [
    command("r1", 1, "[5] DISABLE_HOST_FLAP_DETECTION;x"),
  ]);
  await using _worker = await startTestWorker(taskConfig(db, {
    gearmanServers: [],
    consumer: "rabbitmq",
    rabbitmq: { url: vhost.url, prefetch: 10, ...TEST_QUEUE_DURABILITY },
  }));
  await waitFor(async () => (await remaining(db)).length === 0, { message: "task deleted" });
  await using publisher = await AmqpPublisher.connect(vhost.url, TEST_QUEUE_DURABILITY);
  assert.equal((await publisher.depth(CMD)).ready, 1);
});

// docs/tables.md said statusengine_tasks was "not used" while the task queue reads and deletes it.
Deno.test("tasks: docs/tables.md says the task queue reads statusengine_tasks, naming its setting", async () => {
  const doc = await Deno.readTextFile(new URL("../docs/tables.md", import.meta.url));
  const row = doc.split("\n").find((l) => l.includes('<a id="tasks-table"></a>')) ?? "";
  const flag = SETTINGS.find((s) => s.flag === "check-for-commands")?.flag;
  assert.ok(flag !== undefined, "the task queue's setting exists");
  assert.ok(row.includes(`\`--${flag}\``), row);
  assert.doesNotMatch(row, /not used/);
});

// Several workers of one node share its database (docs/running.md#several-workers). Each read the
// same rows and ran them all: every acknowledgement, downtime and custom notification twice.
Deno.test("tasks: two workers of one node submit each task once, not once each", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await insertTasks(db, [
    command("t1", 1, "[1] ENABLE_HOST_CHECK;a"),
  ]);
  // The test holds the row's lock: a worker that submitted t1 waits in its DELETE, so a second
  // worker reading t1 meanwhile (a plain read does not wait) shows whether it submits it too.
  const lock = await mysql.createConnection(connectionOptionsOf(db));
  await using _lock = { [Symbol.asyncDispose]: () => lock.end() };
  await lock.query("BEGIN");
  await lock.query("DELETE FROM statusengine_tasks WHERE uuid = 't1'");
  const config = taskConfig(db, { gearmanServers: [gearmand.addr], inOrderLock: {} });
  await using a = await startTestWorker(config);
  await using b = await startTestWorker(config);
  // Released before the workers stop, so their stop never waits for the lock.
  await using _unlock = { [Symbol.asyncDispose]: () => lock.query("ROLLBACK").then(() => {}) };
  const rounds = (w: typeof a) => w.tasks?.rounds ?? 0;
  await waitFor(async () => (await jobsAtGearmand(gearmand.addr, CMD)) >= 1, {
    message: "t1 submitted",
  });
  const [ra, rb] = [rounds(a), rounds(b)];
  // Either a second submission, or a worker that polled twice more without submitting.
  await waitFor(
    async () =>
      (await jobsAtGearmand(gearmand.addr, CMD)) >= 2 || rounds(a) >= ra + 2 ||
      rounds(b) >= rb + 2,
    { message: "a second submission or two more polls" },
  );
  assert.equal(await jobsAtGearmand(gearmand.addr, CMD), 1, "t1 submitted by one worker only");
  await lock.query("ROLLBACK");
  await waitFor(async () => (await remaining(db)).length === 0, { message: "t1 deleted" });
  assert.equal(await jobsAtGearmand(gearmand.addr, CMD), 1);
});

// The UI writes `entry_time` in whole seconds and a random uuid: tasks of one second were run in
// uuid order, so "disable notifications" then "enable notifications" clicked within a second
// could end with notifications disabled. The PHP worker read them in the order they were written.
Deno.test("tasks: tasks of the same second run in the order the UI wrote them", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  // Written in this order; their uuids sort the other way round.
  const uuids = ["f", "e", "d", "c", "b", "a"];
  await insertTasks(
    db,
    uuids.map((uuid, i) =>
      command(uuid, 1000, `[${i}] ${i % 2 === 0 ? "DISABLE" : "ENABLE"}_HOST_NOTIFICATIONS;web01`)
    ),
  );
  await using _worker = await startTestWorker(taskConfig(db, { gearmanServers: [gearmand.addr] }));
  await waitFor(async () => (await remaining(db)).length === 0, { message: "tasks run" });
  const bodies = (await takeJobs(gearmand.addr, CMD, uuids.length))
    .map((b) => JSON.parse(text(b)).Data as string);
  assert.deepEqual(bodies.map((d) => d.slice(0, 3)), ["[0]", "[1]", "[2]", "[3]", "[4]", "[5]"]);
});

Deno.test("tasks: a task the broker took but never confirmed is deleted, not published a second time", async () => {
  await using gearmand = await startGearmand();
  await using proxy = await startTcpProxy(gearmand.addr);
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using _worker = await startTestWorker(taskConfig(db, { gearmanServers: [proxy.addr] }));
  // The first task opens the publisher's connection.
  await insertTasks(db, [scheduleCheck("a", 1)]);
  await waitFor(async () => (await remaining(db)).length === 0, { message: "task a published" });
  // gearmand queues the next job, but its JOB_CREATED never comes back: the publish is
  // unconfirmed after the budget, and the next connection is untouched.
  proxy.holdReplies();
  const warned = await withLogs(async (logs) => {
    await insertTasks(db, [scheduleCheck("b", 2)]);
    await waitFor(async () => (await remaining(db)).length === 0, { message: "task b deleted" });
    return logs.filter((l) => l.message.includes("not confirmed")).map((l) => l.level);
  });
  const bodies = (await takeJobs(gearmand.addr, CMD, 2)).map((b) => JSON.parse(text(b)).Data);
  assert.deepEqual(bodies, ["[1] SCHEDULE_HOST_CHECK;a;1", "[2] SCHEDULE_HOST_CHECK;b;2"]);
  assert.equal(await jobsAtGearmand(gearmand.addr, CMD), 0, "task b was queued twice");
  assert.deepEqual(warned, ["warn"], "one warning that task b may not have reached the core");
});

// A stop (SIGTERM) while a task's publish waited for its confirm kept the task, although the
// message was written and the broker may have queued it: the next start published it again, and
// the core ran it twice (two downtimes, two custom notifications).
Deno.test("tasks: a task written to the broker when the worker stops, before its confirm came, is deleted, not published again at the next start", async () => {
  await using gearmand = await startGearmand();
  await using proxy = await startTcpProxy(gearmand.addr);
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const first = await startTestWorker(taskConfig(db, { gearmanServers: [proxy.addr] }));
  try {
    // The first task opens the publisher's connection.
    await insertTasks(db, [scheduleCheck("a", 1)]);
    await waitFor(async () => (await remaining(db)).length === 0, { message: "task a published" });
    // gearmand queues task b, but its JOB_CREATED never comes back: the worker stops while it
    // waits for it.
    proxy.holdReplies();
    await insertTasks(db, [scheduleCheck("b", 2)]);
    await waitFor(async () => (await jobsAtGearmand(gearmand.addr, CMD)) === 2, {
      message: "task b queued at gearmand",
    });
  } finally {
    await first.stop();
  }
  assert.deepEqual(await remaining(db), [], "task b kept for the next start");
  await using second = await startTestWorker(taskConfig(db, { gearmanServers: [gearmand.addr] }));
  await waitFor(() => (second.tasks?.rounds ?? 0) >= 2, { message: "two polls of the next start" });
  const bodies = (await takeJobs(gearmand.addr, CMD, 2)).map((b) => JSON.parse(text(b)).Data);
  assert.deepEqual(bodies, ["[1] SCHEDULE_HOST_CHECK;a;1", "[2] SCHEDULE_HOST_CHECK;b;2"]);
  assert.equal(await jobsAtGearmand(gearmand.addr, CMD), 0, "task b was queued twice");
});

Deno.test("tasks: after a broker connection fell silent, the next task is published on a fresh connection", async () => {
  await using vhost = await createScratchVhost();
  await using proxy = await startTcpProxy("127.0.0.1:5672");
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const url = new URL(vhost.url);
  url.host = proxy.addr;
  await using _worker = await startTestWorker(taskConfig(db, {
    gearmanServers: [],
    consumer: "rabbitmq",
    rabbitmq: { url: url.href, prefetch: 10, ...TEST_QUEUE_DURABILITY },
  }));
  await insertTasks(db, [scheduleCheck("a", 1)]);
  await waitFor(async () => (await remaining(db)).length === 0, { message: "task a published" });
  // The publisher's connection answers nothing more, not even the close it is given up with.
  proxy.holdReplies();
  await insertTasks(db, [scheduleCheck("b", 2)]);
  await waitFor(async () => (await remaining(db)).length === 0, {
    timeoutMs: 30_000,
    message: "task b given up unconfirmed",
  });
  await insertTasks(db, [scheduleCheck("c", 3)]);
  await waitFor(async () => (await remaining(db)).length === 0, {
    timeoutMs: 30_000,
    message: "task c published on a fresh connection",
  });
});
