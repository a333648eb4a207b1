/**
 * The dead-letter file under a running worker (gearmand → worker → MariaDB):
 * a full disk behind the file, its recovery, and logrotate's `create` and
 * `copytruncate` while jobs keep arriving (D7).
 */
import assert from "node:assert/strict";
import { createScratchDatabase } from "./helpers/mysql.ts";
import { startMariadbd } from "./helpers/mariadbd.ts";
import { startGearmand } from "./helpers/gearmand.ts";
import { waitFor } from "./helpers/wait.ts";
import {
  createSchema,
  jobsAtGearmand,
  metricValue,
  publish,
  startTestWorker,
  testConfig,
} from "./helpers/worker.ts";
import type { RunningWorker } from "../src/daemon/mod.ts";
import { expectedRows, fixture } from "./helpers/fixture_rows.ts";
import { registrySum } from "./helpers/metric_registry.ts";
import { bufferIo, cliRun } from "./helpers/cli_run.ts";
import { withLogs } from "./helpers/logs.ts";
import { seriesValue, startWorkerWithHungDeadLetter } from "./helpers/worker_process.ts";
import { blockedStatements, lockTables } from "./helpers/mysql_lock.ts";
import { runDeadLettersCommand } from "../src/cli/dead_letters.ts";
import type { QueueName } from "../src/events/mod.ts";

const Q = "statusngin_hostchecks";

type DeadLettersOptions = Parameters<typeof runDeadLettersCommand>[0];

/** The options of `dead-letters replay <file> --mysql-url <mysqlUrl>`, the others at their defaults. */
function replayOptions(
  file: string,
  mysqlUrl: string,
  more: Partial<DeadLettersOptions> = {},
): DeadLettersOptions {
  return {
    action: "replay",
    file,
    deadLetterFile: "",
    json: false,
    mysqlUrl,
    batchSize: 100,
    nodeName: "N",
    statusMaxAgeSeconds: 0,
    perfdataToMysql: true,
    ...more,
  };
}

function deadLettersCounted(worker: RunningWorker): Promise<number> {
  return registrySum(worker.metrics, "statusengine_dead_letters_total");
}

/**
 * The records of the file: the lines its newline ends. What follows the last newline is a record
 * the worker is writing right now (a failing write leaves it there until it is cut back off): a
 * read while jobs are still being `retried` skips it; any other read asserts there is none.
 */
async function records(
  path: string,
  retried = false,
): Promise<{ payload: string; queue: string }[]> {
  const bytes = await Deno.readFile(path);
  assert.equal(bytes.indexOf(0), -1, "no NUL bytes in the file");
  const lines = new TextDecoder().decode(bytes).split("\n");
  const writing = lines.pop();
  if (!retried) assert.equal(writing, "", "the file ends with a whole record");
  return lines.filter((l) => l !== "").map((l) => JSON.parse(l));
}

function goodJob(host: string): string {
  const doc = JSON.parse(fixture(Q));
  doc.messages[0].hostcheck.host_name = host;
  return JSON.stringify(doc);
}

Deno.test("dead letters: a full dead-letter file fails /readyz and counts write errors, not dead letters; once writable every record is written once, and rotation (create, copytruncate) is followed", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const dir = await Deno.makeTempDir({ prefix: "se-dl-" });
  try {
    const path = `${dir}/dead.ndjson`;
    // A full disk: every write to /dev/full fails with ENOSPC.
    await Deno.symlink("/dev/full", path);
    await using worker = await startTestWorker(testConfig({
      gearmanServers: [gearmand.addr],
      mysqlUrl: db.url,
      deadLetterFile: path,
      queues: [Q],
      metrics: { hostname: "127.0.0.1", port: 0 },
    }));
    const readyz = async () => {
      const res = await fetch(`http://127.0.0.1:${worker.metricsPort}/readyz`);
      return { status: res.status, text: await res.text() };
    };
    assert.equal((await readyz()).status, 200);

    await publish(gearmand.addr, Q, ["not json 1", "not json 2", "not json 3"]);
    await waitFor(
      async () => (await metricValue(worker, "statusengine_dead_letter_write_errors_total")) >= 6,
      { timeoutMs: 30_000, message: "every bad job to fail its dead-letter write twice" },
    );
    const notReady = await readyz();
    assert.equal(notReady.status, 503);
    assert.match(notReady.text, /dead-letter file cannot be written/);
    assert.equal(await deadLettersCounted(worker), 0, "failed attempts are not dead letters");
    assert.equal(await jobsAtGearmand(gearmand.addr, Q), 3, "the bad jobs are not acknowledged");

    // Jobs that need no dead letter still flow past the stuck ones.
    await publish(gearmand.addr, Q, [goodJob("ok-1"), goodJob("ok-2")]);
    await waitFor(async () => {
      const rows = await db.query<unknown[]>(
        "SELECT 1 FROM statusengine_hostchecks WHERE hostname LIKE 'ok-%'",
      );
      return rows.length === 2;
    }, { timeoutMs: 30_000, message: "the good jobs committed" });

    // Space is back: the path is a regular file again.
    await Deno.remove(path);
    await waitFor(async () => (await jobsAtGearmand(gearmand.addr, Q)) === 0, {
      timeoutMs: 30_000,
      message: "the bad jobs dead-lettered and acknowledged",
    });
    assert.equal((await readyz()).status, 200);
    assert.deepEqual((await records(path)).map((r) => r.payload).sort(), [
      "not json 1",
      "not json 2",
      "not json 3",
    ]);
    assert.equal(await deadLettersCounted(worker), 3, "one per record written");

    // logrotate `create`: the file is renamed and an empty one created in its place.
    await Deno.rename(path, `${path}.1`);
    await Deno.writeTextFile(path, "");
    await publish(gearmand.addr, Q, ["not json 4"]);
    await waitFor(async () => (await deadLettersCounted(worker)) === 4, { timeoutMs: 30_000 });
    assert.deepEqual((await records(path)).map((r) => r.payload), ["not json 4"]);
    assert.equal((await records(`${path}.1`)).length, 3, "nothing more went to the rotated file");

    // logrotate `copytruncate`: copied, then truncated in place.
    await Deno.copyFile(path, `${path}.2`);
    await Deno.truncate(path, 0);
    await publish(gearmand.addr, Q, ["not json 5"]);
    await waitFor(async () => (await deadLettersCounted(worker)) === 5, { timeoutMs: 30_000 });
    assert.deepEqual((await records(path)).map((r) => r.payload), ["not json 5"]);
    assert.equal((await readyz()).status, 200);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** A tmpfs of `size` mounted on a new temporary directory; unmounted and removed on dispose. */
async function smallFilesystem(size: string): Promise<string & AsyncDisposable> {
  const dir = await Deno.makeTempDir({ prefix: "se-dl-fs-" });
  const mount = await new Deno.Command("mount", {
    args: ["-t", "tmpfs", "-o", `size=${size}`, "tmpfs", dir],
    stderr: "piped",
  }).output();
  if (!mount.success) {
    await Deno.remove(dir);
    throw new Error(
      `this test mounts a ${size} tmpfs to fill it for real and needs the right to mount ` +
        `(root): ${new TextDecoder().decode(mount.stderr).trim()}`,
    );
  }
  return Object.assign(dir, {
    async [Symbol.asyncDispose]() {
      await new Deno.Command("umount", { args: [dir] }).output();
      await Deno.remove(dir, { recursive: true });
    },
  }) as unknown as string & AsyncDisposable;
}

Deno.test("dead letters: a real file system that fills up in the middle of a record leaves no torn or extra record; the records in the file equal statusengine_dead_letters_total", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  // 64 KiB, 56 of them taken by a filler file: two 4 KiB pages are left, room for one
  // record of about 5 KB and half of the next.
  await using fs = await smallFilesystem("64k");
  const path = `${fs}/dead.ndjson`;
  await Deno.writeFile(`${fs}/filler`, new Uint8Array(56 * 1024));
  await using worker = await startTestWorker(testConfig({
    gearmanServers: [gearmand.addr],
    mysqlUrl: db.url,
    deadLetterFile: path,
    queues: [Q],
  }));
  const bad = [1, 2, 3].map((n) => `not json ${n} ${"y".repeat(5000)}`);
  await publish(gearmand.addr, Q, bad);
  await waitFor(
    async () => (await metricValue(worker, "statusengine_dead_letter_write_errors_total")) >= 3,
    { timeoutMs: 30_000, message: "the disk to fill and writes to fail" },
  );
  assert.equal(await deadLettersCounted(worker), 1, "one record fitted");
  assert.deepEqual((await records(path, true)).map((r) => r.payload), [bad[0]], "no torn record");
  // Space is back.
  await Deno.remove(`${fs}/filler`);
  await waitFor(async () => (await jobsAtGearmand(gearmand.addr, Q)) === 0, {
    timeoutMs: 30_000,
    message: "the bad jobs dead-lettered and acknowledged",
  });
  const written = await records(path);
  assert.deepEqual(written.map((r) => r.payload).sort(), [...bad].sort(), "each record once");
  assert.equal(await deadLettersCounted(worker), written.length);
});

/** A job of `queue` holding only the first event of its fixture, changed by `edit`. */
function oneEventJob(queue: QueueName, edit: (event: Record<string, unknown>) => void): string {
  const doc = JSON.parse(fixture(queue));
  doc.messages = doc.messages.slice(0, 1);
  edit(doc.messages[0]);
  return JSON.stringify(doc);
}

Deno.test("dead letters: rows MariaDB rejected are summarised, replayed once the column is widened (exactly once, a second replay writes nothing twice), and a row that fails again lands in a new file", async () => {
  const LOGS = "statusngin_logentries";
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const dir = await Deno.makeTempDir({ prefix: "se-dl-replay-" });
  try {
    const path = `${dir}/dead.ndjson`;
    // An installation whose columns are narrower than the worker fits values to: MariaDB
    // rejects the longer values (data too long), and the worker dead-letters those rows.
    await db.query("ALTER TABLE statusengine_hostchecks MODIFY output VARCHAR(20) NULL");
    await db.query("ALTER TABLE statusengine_logentries MODIFY logentry_data VARCHAR(20) NULL");
    const hostcheck = (host: string, output: string) =>
      oneEventJob(Q, (e) => Object.assign(e["hostcheck"] as object, { host_name: host, output }));
    const logentry = (data: string) =>
      oneEventJob(LOGS, (e) => Object.assign(e["logentry"] as object, { data }));
    const longLog = `replay me ${"l".repeat(60)}`;
    {
      await using worker = await startTestWorker(testConfig({
        gearmanServers: [gearmand.addr],
        mysqlUrl: db.url,
        deadLetterFile: path,
        queues: [Q, LOGS],
        metrics: { hostname: "127.0.0.1", port: 0 },
      }));
      await publish(gearmand.addr, Q, [
        hostcheck("dl-fits", "short"),
        hostcheck("dl-wider", "o".repeat(100)),
        hostcheck("dl-widest", "o".repeat(500)),
        "not json",
      ]);
      await publish(gearmand.addr, LOGS, [logentry(longLog)]);
      await waitFor(async () => (await deadLettersCounted(worker)) === 4, {
        timeoutMs: 30_000,
        message: "three rejected rows and one undecodable payload dead-lettered",
      });
    }
    const hosts = async () =>
      (await db.query<{ hostname: string }[]>(
        "SELECT hostname FROM statusengine_hostchecks ORDER BY hostname",
      )).map((r) => r.hostname);
    const logs = async () =>
      (await db.query<{ n: number }[]>(
        "SELECT COUNT(*) AS n FROM statusengine_logentries WHERE logentry_data = ?",
        [longLog],
      ))[0]?.n;
    assert.deepEqual(await hosts(), ["dl-fits"]);

    const summary = await cliRun(["dead-letters", "summary", path, "--json"], {});
    assert.equal(summary.code, 0, summary.text);
    const doc = JSON.parse(summary.text.split("\n")[0] ?? "");
    assert.equal(doc.records, 4);
    assert.equal(doc.malformed, 0);
    assert.deepEqual(
      doc.groups.map((g: { table: string | null; reason: string; count: number }) =>
        `${g.table ?? "payload"} ${g.reason} ${g.count}`
      ).sort(),
      [
        "payload not_json 1",
        "statusengine_hostchecks sql_rejected 2",
        "statusengine_logentries sql_rejected 1",
      ],
    );
    assert.ok(doc.oldest <= doc.newest, "oldest and newest from the records' times");

    // The cause is fixed, but not all of it: dl-widest still does not fit.
    await db.query("ALTER TABLE statusengine_hostchecks MODIFY output VARCHAR(200) NULL");
    await db.query("ALTER TABLE statusengine_logentries MODIFY logentry_data VARCHAR(2048) NULL");

    const replay = async (at: string) => {
      const io = bufferIo();
      const code = await runDeadLettersCommand(
        replayOptions(path, db.url, { progressIntervalMs: 0, now: () => new Date(at) }),
        io,
        new AbortController().signal,
      );
      return { code, out: io.outLines };
    };
    const first = await replay("2026-01-01T00:00:00Z");
    assert.equal(first.code, 1, "not everything replayed");
    assert.ok(first.out.some((l) => l.startsWith("progress: ")), first.out.join("\n"));
    assert.deepEqual(await hosts(), ["dl-fits", "dl-wider"]);
    assert.equal(await logs(), 1);
    const leftOver = `${path}.replay-20260101T000000.000Z`;
    assert.ok(
      first.out.includes(`records left over (failed again or not replayable): ${leftOver}`),
    );
    const left = await records(leftOver) as unknown as {
      reason: string;
      row?: { hostname: string };
    }[];
    assert.deepEqual(left.map((r) => `${r.reason} ${r.row?.hostname ?? ""}`).sort(), [
      "not_json ",
      "sql_rejected dl-widest",
    ]);

    // Replaying the same file again writes nothing twice, the keyless log table included.
    const second = await cliRun(["dead-letters", "replay", path, "--mysql-url", db.url], {});
    assert.equal(second.code, 1, second.text);
    assert.match(second.text, /4 records, 4 submitted, 1 already present, 2 failed again/);
    assert.deepEqual(await hosts(), ["dl-fits", "dl-wider"]);
    assert.equal(await logs(), 1);

    // Once everything fits, a file of the rows that failed replays completely: exit 0, no new file.
    await db.query("ALTER TABLE statusengine_hostchecks MODIFY output VARCHAR(1024) NULL");
    const rows = `${dir}/rows.ndjson`;
    await Deno.writeTextFile(
      rows,
      (await Deno.readTextFile(leftOver)).split("\n").filter((l) => l.includes("sql_rejected"))
        .join("\n") + "\n",
    );
    const third = await cliRun(["dead-letters", "replay", rows, "--mysql-url", db.url], {});
    assert.equal(third.code, 0, third.text);
    assert.doesNotMatch(third.text, /left over/);
    assert.deepEqual(await hosts(), ["dl-fits", "dl-wider", "dl-widest"]);
    assert.equal(
      (await Array.fromAsync(Deno.readDir(dir))).filter((e) =>
        e.name.startsWith("rows.ndjson.replay-")
      ).length,
      0,
      "nothing left over, no file",
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// The design relies on strict mode (D6): whatever the fitting cannot make fit is refused and
// dead-lettered. A server whose global sql_mode is '' (old installs, `sql_mode=''` from old
// guides) would instead cut or replace the value with a warning and report success.
Deno.test("dead letters: on a server whose sql_mode is '', a value that does not fit a narrowed column or a utf8mb3 column is dead-lettered, never stored cut or replaced", async () => {
  const LOGS = "statusngin_logentries";
  await using gearmand = await startGearmand();
  await using server = await startMariadbd({ extraArgs: ["--sql-mode="] });
  assert.equal((await server.query<{ m: string }[]>("SELECT @@GLOBAL.sql_mode AS m"))[0]?.m, "");
  await server.query("CREATE DATABASE se CHARACTER SET utf8mb4");
  const url = server.url({ database: "se" });
  await createSchema(url);
  // A column an operator narrowed, and a table the legacy SQL left in 3-byte utf8.
  await server.query(
    "ALTER TABLE statusengine_hostchecks MODIFY output VARCHAR(20) NULL",
    [],
    "se",
  );
  await server.query(
    "ALTER TABLE statusengine_logentries CONVERT TO CHARACTER SET utf8mb3",
    [],
    "se",
  );
  const hostcheck = (host: string, output: string) =>
    oneEventJob(Q, (e) => Object.assign(e["hostcheck"] as object, { host_name: host, output }));
  const logentry = (data: string) =>
    oneEventJob(LOGS, (e) => Object.assign(e["logentry"] as object, { data }));
  await using worker = await startTestWorker(testConfig({
    gearmanServers: [gearmand.addr],
    mysqlUrl: url,
    queues: [Q, LOGS],
    metrics: { hostname: "127.0.0.1", port: 0 },
  }));
  await publish(gearmand.addr, Q, [hostcheck("fits", "short"), hostcheck("long", "o".repeat(100))]);
  await publish(gearmand.addr, LOGS, [logentry("plain text"), logentry("disk full \u{1F4A5}")]);
  const stored = async () =>
    Number(
      (await server.query<{ n: number }[]>(
        "SELECT (SELECT COUNT(*) FROM statusengine_hostchecks) + " +
          "(SELECT COUNT(*) FROM statusengine_logentries) AS n",
        [],
        "se",
      ))[0]?.n,
    );
  await waitFor(async () => (await stored()) + (await deadLettersCounted(worker)) === 4, {
    timeoutMs: 30_000,
    message: "every event stored or dead-lettered",
  });
  assert.deepEqual(
    await server.query("SELECT hostname, output FROM statusengine_hostchecks", [], "se"),
    [{ hostname: "fits", output: "short" }],
  );
  assert.deepEqual(
    await server.query("SELECT logentry_data FROM statusengine_logentries", [], "se"),
    [{ logentry_data: "plain text" }],
  );
  assert.equal(await deadLettersCounted(worker), 2);
  const reasons = (await records(worker.deadLetterFile ?? "") as unknown as { reason: string }[])
    .map((r) => r.reason);
  assert.deepEqual(reasons, ["sql_rejected", "sql_rejected"]);
});

Deno.test("dead letters: replay decodes payload records again like a redelivered job, the keyless log rows only once over two replays, and copies what it cannot replay safely to the new file, naming why", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const dir = await Deno.makeTempDir({ prefix: "se-dl-replay-" });
  try {
    const path = `${dir}/dead.ndjson`;
    const time = "2026-03-01T12:00:00.000Z";
    // What the worker would have written had its decoder refused these payloads (a bug a new
    // release fixed), next to records no replay can apply safely.
    const lines = [
      { queue: Q, reason: "bad_type", error: "e", payload: goodJob("payload-host") },
      {
        queue: "statusngin_logentries",
        reason: "bad_type",
        error: "e",
        payload: fixture("statusngin_logentries"),
      },
      {
        queue: "statusngin_hoststatus",
        reason: "sql_rejected",
        error: "e",
        table: "statusengine_hoststatus",
        row: { hostname: "h" },
      },
      {
        queue: "statusngin_downtimes",
        reason: "sql_rejected",
        error: "e",
        table: "statusengine_host_downtimehistory",
        row: { hostname: "h" },
      },
      { queue: Q, reason: "too_large", error: "e", payload: "{", bytes: 99_000_000 },
      {
        queue: "statusngin_core_restart",
        reason: "bad_type",
        error: "e",
        payload: fixture("statusngin_core_restart"),
      },
    ].map((r) => JSON.stringify({ time, ...r }));
    await Deno.writeTextFile(path, [...lines.slice(0, 3), "{torn", ...lines.slice(3)].join("\n"));
    const logRows = expectedRows("statusngin_logentries").length;
    const count = async (table: string) =>
      (await db.query<{ n: number }[]>(`SELECT COUNT(*) AS n FROM ${table}`))[0]?.n;

    const summary = await cliRun(["dead-letters", "summary", path], {});
    assert.equal(summary.code, 0, summary.text);
    assert.match(summary.text, /records: 6, malformed lines: 1/);
    assert.match(
      summary.text,
      /oldest: 2026-03-01T12:00:00.000Z, newest: 2026-03-01T12:00:00.000Z/,
    );
    assert.match(summary.text, /malformed line 4: not JSON/);

    for (let pass = 1; pass <= 2; pass++) {
      const run = await cliRun(["dead-letters", "replay", path, "--mysql-url", db.url], {});
      assert.equal(run.code, 1, run.text);
      assert.match(
        run.text,
        new RegExp(
          `6 records, 2 submitted, ${pass === 1 ? 0 : logRows} already present, 0 failed again, ` +
            "4 not replayable, 1 malformed lines",
        ),
      );
      for (
        const why of [
          /a status snapshot/,
          /a downtime statement/,
          /only the first KiB/,
          /a core restart from the past/,
        ]
      ) {
        assert.match(run.text, why);
      }
      assert.equal(await count("statusengine_hostchecks"), 1, `pass ${pass}`);
      assert.equal(await count("statusengine_logentries"), logRows, `pass ${pass}`);
      assert.equal(await count("statusengine_hoststatus"), 0);
      const leftOver = /records left over \(failed again or not replayable\): (\S+)/.exec(run.text)
        ?.[1];
      assert.ok(leftOver !== undefined, run.text);
      const left = await records(leftOver) as unknown as { time: string; reason: string }[];
      assert.equal(left.length, 4);
      assert.ok(left.every((r) => r.time === time), "a record copied keeps its time");
      await Deno.remove(leftOver);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// The replay's log once said an undecodable payload went "to the dead-letter file"; it goes to the
// replay's left-over file, and the log names that file.
Deno.test("dead letters: a payload replay cannot decode is logged as written to the replay's left-over file, named", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const dir = await Deno.makeTempDir({ prefix: "se-dl-replay-" });
  try {
    const path = `${dir}/dead.ndjson`;
    const record = { time: "2026-03-01T12:00:00.000Z", queue: Q, reason: "bad_json", error: "e" };
    await Deno.writeTextFile(path, JSON.stringify({ ...record, payload: "{not json" }) + "\n");
    const run = await cliRun(["dead-letters", "replay", path, "--mysql-url", db.url], {});
    assert.equal(run.code, 1, run.text);
    const leftOver = /records left over \(failed again or not replayable\): (\S+)/.exec(run.text)
      ?.[1];
    assert.ok(leftOver !== undefined, run.text);
    assert.doesNotMatch(run.text, /written to the dead-letter file/);
    const line = run.text.split("\n").find((l) => l.includes("undecodable payload"));
    assert.ok(line !== undefined, run.text);
    assert.match(line, /written to the replay's left-over file/);
    assert.ok(line.includes(leftOver), line);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("dead letters: replaying an older status snapshot leaves the newer row the table holds (docs/writers.md#newest-snapshot)", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const dir = await Deno.makeTempDir({ prefix: "se-dl-replay-" });
  try {
    const now = Math.floor(Date.now() / 1000);
    const snapshot = (age: number, output: string) => {
      const doc = JSON.parse(fixture("statusngin_servicestatus"));
      const message = doc.messages[0];
      message.timestamp = now - age;
      message.servicestatus.plugin_output = output;
      doc.messages = [message];
      return JSON.stringify({
        time: new Date().toISOString(),
        queue: "statusngin_servicestatus",
        reason: "bad_type",
        error: "e",
        payload: JSON.stringify(doc),
      });
    };
    const replay = async (name: string, record: string) => {
      const path = `${dir}/${name}.ndjson`;
      await Deno.writeTextFile(path, record + "\n");
      const run = await cliRun(["dead-letters", "replay", path, "--mysql-url", db.url], {});
      assert.equal(run.code, 0, run.text);
      assert.match(run.text, /1 records, 1 submitted/);
    };
    const row = async () => (await db.query<{ status_update_time: number; output: string }[]>(
      "SELECT status_update_time, output FROM statusengine_servicestatus",
    ));
    // The newer snapshot was written; a job with an older one is replayed afterwards.
    await replay("newer", snapshot(10, "newer"));
    await replay("older", snapshot(60, "older"));
    assert.deepEqual(await row(), [{ status_update_time: now - 10, output: "newer" }]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// A downtime payload is replayed alone, and its statements give up at once when the replay is
// interrupted (the hold ends with the signal). That rejection once counted as the replay failing:
// "dead-letters failed: signal received", exit 1 and no counts, instead of the interrupted
// replay's final line and exit 130.
Deno.test("dead letters: a replay interrupted while a downtime payload waits for MySQL says it was interrupted (exit 130) and prints its counts", async () => {
  const dir = await Deno.makeTempDir({ prefix: "se-dl-replay-" });
  try {
    const path = `${dir}/dead.ndjson`;
    const payload = fixture("statusngin_downtimes");
    await Deno.writeTextFile(
      path,
      JSON.stringify({ queue: "statusngin_downtimes", reason: "bad_type", error: "e", payload }) +
        "\n",
    );
    // A port nothing listens on: every statement is refused and held.
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const port = listener.addr.port;
    listener.close();
    const controller = new AbortController();
    const io = bufferIo();
    const code = await withLogs(async (logs) => {
      const run = runDeadLettersCommand(
        replayOptions(path, `mysql://root@127.0.0.1:${port}/statusengine`),
        io,
        controller.signal,
      );
      await waitFor(() => logs.some((l) => l.message.includes("MySQL cannot take writes")), {
        timeoutMs: 30_000,
        message: "the downtime statement to be held",
      });
      controller.abort(new Error("signal received"));
      return await run;
    });
    assert.equal(code, 130, [...io.outLines, ...io.errLines].join("\n"));
    assert.match(io.outLines.join("\n"), /1 records, 1 submitted, .*\(interrupted: run it again/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// Two replays of one file at once (a second terminal while the first waits for MySQL) each
// counted the keyless table's identical rows before either wrote, found none, and both wrote
// the log entries: every one twice. A replay now holds a lock on its file; the second refuses.
Deno.test("dead letters: two replays of one file at once write the keyless log rows once: the second is refused while the first runs", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const dir = await Deno.makeTempDir({ prefix: "se-dl-replay-" });
  try {
    const path = `${dir}/dead.ndjson`;
    const LOGS = "statusngin_logentries";
    await Deno.writeTextFile(
      path,
      JSON.stringify({ queue: LOGS, reason: "bad_type", error: "e", payload: fixture(LOGS) }) +
        "\n",
    );
    const logRows = expectedRows(LOGS).length;
    const replay = async () => {
      const io = bufferIo();
      const code = await runDeadLettersCommand(
        replayOptions(path, db.url),
        io,
        new AbortController().signal,
      );
      return { code, text: [...io.outLines, ...io.errLines].join("\n") };
    };
    // The log table locked: a replay waits in its count of identical rows, or its INSERT.
    const lock = await lockTables(db, ["statusengine_logentries"]);
    let settled = 0;
    const runs = [replay(), replay()].map((p) => p.finally(() => settled++));
    await waitFor(
      async () => settled > 0 || (await blockedStatements(db, "%statusengine_logentries%")) >= 2,
      { timeoutMs: 30_000, message: "one replay refused, or both waiting for the table" },
    );
    await lock.unlock();
    const done = await Promise.all(runs);
    const count = (await db.query<{ n: number }[]>(
      "SELECT COUNT(*) AS n FROM statusengine_logentries",
    ))[0]?.n;
    assert.equal(count, logRows, "each log entry once");
    const [first, second] = done as [(typeof done)[0], (typeof done)[0]];
    const [ran, refused] = first.code === 0 ? [first, second] : [second, first];
    assert.equal(ran.code, 0, ran.text);
    assert.match(ran.text, /1 records, 1 submitted/);
    assert.equal(refused.code, 1, refused.text);
    assert.match(refused.text, /another replay of .* is running; nothing was replayed/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// A row MySQL rejects again goes to the replay's left-over file through its table's writer, which
// retries a failed write every second until the file takes it. The left-over file had no
// DeadLetters in front to say so: with it unwritable (a full disk) the replay waited for ever,
// with no line of output. Now the first failure is logged, naming the file; the replay still
// waits (nothing is lost), and an interrupt ends it.
Deno.test("dead letters: a replay whose left-over file cannot be written says so while it waits for it", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await db.query("ALTER TABLE statusengine_hostchecks MODIFY output VARCHAR(20) NULL");
  const dir = await Deno.makeTempDir({ prefix: "se-dl-replay-" });
  try {
    const path = `${dir}/dead.ndjson`;
    const [{ table, row }] = expectedRows(Q) as [ReturnType<typeof expectedRows>[0]];
    await Deno.writeTextFile(
      path,
      JSON.stringify({
        queue: Q,
        reason: "sql_rejected",
        error: "e",
        table,
        row: { ...row, output: "o".repeat(100) },
      }) + "\n",
    );
    // The left-over file is on a full disk.
    const at = "2026-01-01T00:00:00Z";
    const leftOver = `${path}.replay-20260101T000000.000Z`;
    await Deno.symlink("/dev/full", leftOver);
    const controller = new AbortController();
    const io = bufferIo();
    const code = await withLogs(async (logs) => {
      const run = runDeadLettersCommand(
        replayOptions(path, db.url, { now: () => new Date(at) }),
        io,
        controller.signal,
      );
      await waitFor(
        () =>
          logs.some((l) =>
            l.level === "error" &&
            l.message.includes("cannot write the file of records left over") &&
            l.properties["file"] === leftOver
          ),
        { timeoutMs: 20_000, message: "the replay to report its unwritable left-over file" },
      );
      controller.abort(new Error("signal received"));
      return await run;
    });
    assert.equal(code, 130, [...io.outLines, ...io.errLines].join("\n"));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// The rows of the keyless log table are looked up before they are written (replayed before?).
// That lookup ran once, outside the writers' hold: MySQL unreachable for a moment (a restart
// mid-replay) ended the whole replay with "dead-letters failed: Connection refused", no counts and
// the left-over file unnamed, while the rows of every other table waited for MySQL. The lookup
// now waits under the same hold, logged the same way.
Deno.test("dead letters: a replay of log entries waits for an unreachable MySQL like every other table, and an interrupt ends it with exit 130", async () => {
  const dir = await Deno.makeTempDir({ prefix: "se-dl-replay-" });
  try {
    const path = `${dir}/dead.ndjson`;
    const LOGS = "statusngin_logentries";
    await Deno.writeTextFile(
      path,
      JSON.stringify({ queue: LOGS, reason: "bad_type", error: "e", payload: fixture(LOGS) }) +
        "\n",
    );
    // A port nothing listens on: every statement is refused.
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const port = listener.addr.port;
    listener.close();
    const controller = new AbortController();
    const io = bufferIo();
    const code = await withLogs(async (logs) => {
      let settled = false;
      const run = runDeadLettersCommand(
        replayOptions(path, `mysql://root@127.0.0.1:${port}/statusengine`),
        io,
        controller.signal,
      ).finally(() => (settled = true));
      await waitFor(
        () => settled || logs.some((l) => l.message.includes("MySQL cannot take writes")),
        { timeoutMs: 30_000, message: "the replay to end or to hold for MySQL" },
      );
      controller.abort(new Error("signal received"));
      return await run;
    });
    assert.equal(code, 130, [...io.outLines, ...io.errLines].join("\n"));
    assert.match(io.outLines.join("\n"), /1 records, 1 submitted, .*\(interrupted: run it again/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// Waiting cannot fix a wrong password: the replay held its rows for ever, saying only "MySQL
// cannot take writes", where run and the other tools say what to check and exit 1.
Deno.test("dead letters: a replay whose login MySQL refuses says so and exits 1 without waiting", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const dir = await Deno.makeTempDir({ prefix: "se-dl-replay-" });
  const controller = new AbortController();
  try {
    const path = `${dir}/dead.ndjson`;
    const record = { queue: Q, reason: "bad_type", error: "e", payload: goodJob("h1") };
    await Deno.writeTextFile(path, JSON.stringify(record) + "\n");
    const refused = new URL(db.url);
    refused.username = "se_no_such_user";
    const io = bufferIo();
    let settled = false;
    const run = runDeadLettersCommand(replayOptions(path, refused.href), io, controller.signal)
      .finally(() => (settled = true));
    await waitFor(() => settled, { timeoutMs: 30_000, message: "the replay to end" })
      .finally(() => controller.abort());
    assert.equal(await run, 1);
    assert.match(io.errLines.join("\n"), /refused the login .*check the user and password/);
  } finally {
    controller.abort();
    await Deno.remove(dir, { recursive: true });
  }
});

// A write to the file that never returns (a hung mount) neither fails nor succeeds: the job that
// needs it waited for ever, and every later dead letter behind it, while /readyz said 200 and
// neither a log line nor statusengine_dead_letter_write_errors_total said anything.
Deno.test("dead letters: a write that does not return fails /readyz and is logged and counted while its job waits", async () => {
  await using worker = await startWorkerWithHungDeadLetter(Q);
  const readyz = async () => {
    const res = await fetch(`http://127.0.0.1:${worker.metricsPort}/readyz`);
    return { status: res.status, text: await res.text() };
  };
  await waitFor(async () => (await readyz()).status === 503, {
    timeoutMs: 20_000,
    message: "/readyz 503 while the dead-letter write does not return",
  });
  assert.match((await readyz()).text, /dead-letter file cannot be written/);
  const text = await worker.metrics();
  assert.equal(seriesValue(text, "statusengine_dead_letter_write_errors_total"), 1);
  assert.equal(seriesValue(text, "statusengine_queue_jobs_in_flight", { queue_name: Q }), 1);
  assert.ok(
    worker.lines().some((l) =>
      l.includes("cannot write the dead-letter file") && /no answer/.test(l)
    ),
    worker.lines().join("\n"),
  );
  worker.kill("SIGTERM");
  assert.equal((await worker.status).code, 0, worker.stderr());
});
