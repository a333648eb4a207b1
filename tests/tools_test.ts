/**
 * The operator tools against real services: `publish` and `losstest` through a private
 * gearmand into a real in-process worker and MariaDB, `verify` on two scratch databases.
 * A missing service fails these tests; they never skip.
 */
import assert from "node:assert/strict";
import { createScratchDatabase, type ScratchDatabase } from "./helpers/mysql.ts";
import { startGearmand } from "./helpers/gearmand.ts";
import { createScratchVhost } from "./helpers/rabbitmq.ts";
import {
  cutAmqpAtFirstDeclare,
  startMysqlProxy,
  startTcpPeer,
  startTcpProxy,
} from "./helpers/tcp_proxy.ts";
import { AmqpPublisher } from "../src/amqp/publisher.ts";
import { orStuck, waitFor } from "./helpers/wait.ts";
import { capture } from "./helpers/capture.ts";
import { adminCommand } from "../src/gearman/admin.ts";
import {
  createSchema,
  jobsAtGearmand,
  metricValue,
  publish,
  startTestWorker,
  testConfig,
} from "./helpers/worker.ts";
import {
  type PublishItem,
  publishJobs,
  runPublishCommand,
  summaryLine,
} from "../src/cli/publish.ts";
import { lossMarker, runLosstestCommand } from "../src/cli/losstest.ts";
import { runCli } from "../src/cli/mod.ts";
import { runVerifyCommand } from "../src/cli/verify.ts";
import { decodeJob } from "../src/events/decode.ts";
import { QUEUE_NAMES, type QueueName } from "../src/events/queues.ts";
import type { TableRow } from "../src/events/types.ts";
import { jobsFor, syntheticEvents } from "../src/synthetic/mod.ts";
import { type TableName, TABLES } from "../src/mysql/catalogue.ts";
import { cliRun } from "./helpers/cli_run.ts";
import type { StatusReport } from "../src/cli/status/collect.ts";
import { runStatusCommand } from "../src/cli/status/format.ts";

type DbRow = Record<string, unknown>;

/** Rows the decoder makes of the same synthetic events the tool published. */
function expectedRows(queue: QueueName, count: number, seed: number): TableRow[] {
  const now = Date.now();
  const rows: TableRow[] = [];
  for (const job of jobsFor(queue, syntheticEvents(queue, count, { seed, now }))) {
    const d = decodeJob(queue, job, {
      nodeName: "N",
      nowSeconds: now / 1000,
      statusMaxAgeSeconds: 0,
    });
    if (d.kind === "rows") rows.push(...d.rows);
  }
  return rows;
}

async function countRows(
  db: ScratchDatabase,
  table: string,
  where = "1=1",
  params: unknown[] = [],
) {
  const [row] = await db.query<{ n: number }[]>(
    `SELECT COUNT(*) AS n FROM \`${table}\` WHERE ${where}`,
    params,
  );
  return Number(row?.n);
}

function fingerprint(row: Readonly<Record<string, unknown>>, columns: readonly string[]): string {
  return JSON.stringify(columns.map((c) => (row[c] === null ? "" : String(row[c]))));
}

Deno.test("tools: publish → gearmand → worker stores the synthetic events of three queues", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  // The stale filter stays on: the generator's status events are fresh
  // (docs/tables.md#stale-status).
  await using _worker = await startTestWorker(
    testConfig({ gearmanServers: [gearmand.addr], mysqlUrl: db.url, statusMaxAgeSeconds: 300 }),
  );
  const runs = [
    { queue: "statusngin_servicechecks", count: 250, eventsPerJob: 100, seed: 11 },
    { queue: "statusngin_servicestatus", count: 120, eventsPerJob: 50, seed: 12 },
    { queue: "statusngin_statechanges", count: 80, eventsPerJob: 100, seed: 13 },
    { queue: "statusngin_acknowledgements", count: 15, eventsPerJob: 100, seed: 14 },
  ] as const;
  for (const run of runs) {
    const c = capture();
    const code = await runPublishCommand({ ...run, gearmanAddr: [gearmand.addr] }, c.io);
    assert.equal(code, 0, c.err.join("\n"));
    const jobs = run.queue === "statusngin_acknowledgements"
      ? run.count
      : Math.ceil(run.count / run.eventsPerJob);
    assert.match(
      c.out.at(-1) ?? "",
      new RegExp(
        `^published ${jobs} jobs \\(${run.count} events\\) to ${run.queue} on 1 job server in [0-9.]+ s: \\d+ events/s, \\d+ jobs/s$`,
      ),
    );
    assert.ok(c.out[0]?.includes(`(seed ${run.seed})`));
  }
  for (const { queue } of runs) {
    await waitFor(async () => (await jobsAtGearmand(gearmand.addr, queue)) === 0, {
      timeoutMs: 30_000,
      message: `${queue} drained`,
    });
  }

  // Service checks: every event is one row, with the generated texts intact (non-ASCII too).
  const checkColumns = [
    "hostname",
    "service_description",
    "state",
    "output",
    "long_output",
    "perfdata",
  ];
  const wantChecks = expectedRows("statusngin_servicechecks", 250, 11)
    .map((r) => fingerprint(r.row, checkColumns)).sort();
  const gotChecks = (await db.query<DbRow[]>(
    `SELECT ${checkColumns.join(", ")} FROM statusengine_servicechecks`,
  )).map((r) => fingerprint(r, checkColumns)).sort();
  assert.equal(gotChecks.length, 250);
  assert.deepEqual(gotChecks, wantChecks);

  // Service status: one row per object (full upsert), every object of the events present.
  const objects = new Set(
    expectedRows("statusngin_servicestatus", 120, 12).map((r) =>
      `${r.row["hostname"]}|${r.row["service_description"]}`
    ),
  );
  const status = await db.query<DbRow[]>(
    "SELECT hostname, service_description FROM statusengine_servicestatus",
  );
  assert.deepEqual(
    new Set(status.map((r) => `${r["hostname"]}|${r["service_description"]}`)),
    objects,
  );

  // State changes and acknowledgements: routed to the host and the service table
  // (docs/tables.md#host-or-service).
  for (
    const [queue, count, seed] of [
      ["statusngin_statechanges", 80, 13],
      ["statusngin_acknowledgements", 15, 14],
    ] as const
  ) {
    const byTable = new Map<string, number>();
    for (const { table } of expectedRows(queue, count, seed)) {
      byTable.set(table, (byTable.get(table) ?? 0) + 1);
    }
    assert.equal([...byTable.values()].reduce((a, b) => a + b, 0), count);
    for (const [table, n] of byTable) assert.equal(await countRows(db, table), n, table);
  }
});

Deno.test("tools: publish spreads jobs round-robin over several job servers", async () => {
  await using one = await startGearmand();
  await using two = await startGearmand();
  const c = capture();
  const code = await runPublishCommand({
    queue: "statusngin_hostchecks",
    count: 500,
    eventsPerJob: 100,
    gearmanAddr: [one.addr, two.addr],
    seed: 5,
  }, c.io);
  assert.equal(code, 0, c.err.join("\n"));
  assert.equal(await jobsAtGearmand(one.addr, "statusngin_hostchecks"), 3);
  assert.equal(await jobsAtGearmand(two.addr, "statusngin_hostchecks"), 2);
  assert.match(c.out.at(-1) ?? "", /^published 5 jobs \(500 events\) .* on 2 job servers /);
});

Deno.test("tools: publish --from-file sends recorded NDJSON payloads; a bad line publishes nothing", async () => {
  await using gearmand = await startGearmand();
  const dir = await Deno.makeTempDir({ prefix: "se-publish-" });
  try {
    const good = `${dir}/good.ndjson`;
    const host = JSON.stringify(
      JSON.parse(
        await Deno.readTextFile(
          new URL("../src/events/testdata/statusngin_hostchecks.job", import.meta.url),
        ),
      ),
    );
    // A line of 200 KiB spans four of readLines' 64 KiB chunks.
    const long = JSON.stringify({ ...JSON.parse(host), pad: "x".repeat(200 * 1024) });
    await Deno.writeTextFile(
      good,
      `${host}\n\n  \r\n${host}\r\n${long}\r\n{"messages":[],"format":"none"}`,
    );
    const ok = capture();
    assert.equal(
      await runPublishCommand({
        queue: "statusngin_hostchecks",
        count: 1,
        eventsPerJob: 1,
        fromFile: good,
        gearmanAddr: [gearmand.addr],
      }, ok.io),
      0,
      ok.err.join("\n"),
    );
    assert.match(ok.out.at(-1) ?? "", /^published 4 jobs \(3 events\)/);
    assert.equal(await jobsAtGearmand(gearmand.addr, "statusngin_hostchecks"), 4);

    const bad = `${dir}/bad.ndjson`;
    await Deno.writeTextFile(bad, `${host}\n\n{"messages":[\n${host}\n`);
    const failed = capture();
    assert.equal(
      await runPublishCommand({
        queue: "statusngin_logentries",
        count: 1,
        eventsPerJob: 1,
        fromFile: bad,
        gearmanAddr: [gearmand.addr],
      }, failed.io),
      1,
    );
    assert.match(failed.err.join("\n"), /line 3 is not valid JSON: .*nothing was published/);
    assert.equal(await jobsAtGearmand(gearmand.addr, "statusngin_logentries"), 0);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("tools: publish to an unknown queue is a usage error listing the twelve queues", async () => {
  const c = capture();
  const code = await runPublishCommand({
    queue: "statusngin_flappings",
    count: 1,
    eventsPerJob: 1,
    gearmanAddr: ["127.0.0.1:1"],
  }, c.io);
  assert.equal(code, 2);
  for (const q of QUEUE_NAMES) assert.ok(c.err.join("\n").includes(q), q);
});

Deno.test("tools: publish stops submitting when its signal aborts and reports what was confirmed", async () => {
  await using gearmand = await startGearmand();
  const controller = new AbortController();
  function* items(): Generator<PublishItem> {
    for (let i = 0; i < 1_000; i++) {
      if (i === 3) controller.abort();
      yield { payload: '{"messages":[],"format":"none"}', events: 0 };
    }
  }
  const c = capture();
  const result = await publishJobs("statusngin_logentries", items(), {
    gearmanAddr: [gearmand.addr],
    io: c.io,
    signal: controller.signal,
  });
  assert.equal(result.interrupted, true);
  assert.equal(result.jobs, 3);
  assert.equal(await jobsAtGearmand(gearmand.addr, "statusngin_logentries"), 3);
  assert.match(
    summaryLine("statusngin_logentries", result, 1),
    /^interrupted after publishing 3 jobs /,
  );

  const early = capture();
  assert.equal(
    await runPublishCommand(
      { queue: "statusngin_logentries", count: 10, eventsPerJob: 5, gearmanAddr: [gearmand.addr] },
      early.io,
      AbortSignal.abort(),
    ),
    130,
  );
  assert.equal(await jobsAtGearmand(gearmand.addr, "statusngin_logentries"), 3);
});

Deno.test("tools: a job server refusing jobs mid-run fails publish with the confirmed count", async () => {
  await using gearmand = await startGearmand();
  // maxqueue only limits a function that already has jobs (docs/gearman-protocol.md#maxqueue).
  await publish(gearmand.addr, "statusngin_logentries", ['{"messages":[],"format":"none"}']);
  assert.deepEqual(await adminCommand(gearmand.addr, "maxqueue statusngin_logentries 3"), ["OK"]);
  const c = capture();
  const code = await runPublishCommand({
    queue: "statusngin_logentries",
    count: 10,
    eventsPerJob: 2,
    gearmanAddr: [gearmand.addr],
  }, c.io);
  assert.equal(code, 1);
  assert.match(
    c.err.join("\n"),
    /^Cannot publish to statusngin_logentries on .*: Job server refused submission: QUEUE_ERROR .*\(2 jobs with 4 events confirmed before the failure\)$/,
  );
  assert.equal(await jobsAtGearmand(gearmand.addr, "statusngin_logentries"), 3);
});

Deno.test("tools: publish to an unreachable job server fails with exit 1 naming the server", async () => {
  const c = capture();
  const code = await runPublishCommand({
    queue: "statusngin_hoststatus",
    count: 10,
    eventsPerJob: 5,
    gearmanAddr: ["127.0.0.1:1"],
  }, c.io);
  assert.equal(code, 1);
  assert.match(c.err.join("\n"), /^Cannot publish to statusngin_hoststatus on 127\.0\.0\.1:1: /);
});

// The RabbitMQ connect of publish had neither a time limit nor the signal (the job servers have
// both): a broker that accepts and never answers the handshake held publish forever, Ctrl-C too.
Deno.test("tools: publish to a RabbitMQ broker that never answers stops on its signal, and fails on its own without one", async () => {
  await using peer = startTcpPeer();
  const run = {
    queue: "statusngin_hoststatus",
    count: 10,
    eventsPerJob: 5,
    gearmanAddr: [],
    rabbitmqUrl: `amqp://guest:guest@${peer.addr}/`,
  };
  const controller = new AbortController();
  void peer.accepted.then(() => controller.abort());
  for (const [signal, expected] of [[controller.signal, 130], [undefined, 1]] as const) {
    const c = capture();
    const code = await orStuck(runPublishCommand(run, c.io, signal));
    assert.equal(code, expected, `signal ${signal === undefined ? "none" : "aborted"}`);
  }
});

Deno.test("tools: losstest publish → worker drains → verify passes; deleted markers are reported as exact ranges; cleanup removes the run", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const count = 12_000;
  const base = { runId: "t1", count, gearmanAddr: [gearmand.addr], mysqlUrl: db.url };

  const published = capture();
  assert.equal(await runLosstestCommand({ ...base, mode: "publish" }, published.io), 0);
  assert.match(
    published.out.at(-1) ?? "",
    /^published 120 jobs \(12000 events\) to statusngin_hostchecks/,
  );

  // Nothing consumed yet: everything is missing, and the backlog is shown as not loss.
  const before = capture();
  assert.equal(await runLosstestCommand({ ...base, mode: "verify" }, before.io), 1);
  assert.ok(before.out.includes("missing: 12000"), before.out.join("\n"));
  assert.ok(before.out.includes("missing sequence numbers: 0-11999"));
  assert.ok(
    before.out.includes(
      "jobs still queued at gearmand for statusngin_hostchecks: 120 (about 12000 events; not loss)",
    ),
    before.out.join("\n"),
  );

  {
    await using _worker = await startTestWorker(
      testConfig({ gearmanServers: [gearmand.addr], mysqlUrl: db.url }),
    );
    await waitFor(
      async () => (await jobsAtGearmand(gearmand.addr, "statusngin_hostchecks")) === 0,
      {
        timeoutMs: 60_000,
        message: "losstest backlog drained",
      },
    );
  }

  const passed = capture();
  assert.equal(
    await runLosstestCommand({ ...base, mode: "verify" }, passed.io),
    0,
    passed.out.join("\n"),
  );
  for (
    const line of [
      "rows: 12000",
      "distinct events: 12000",
      "missing: 0",
      "jobs still queued at gearmand for statusngin_hostchecks: 0 (about 0 events; not loss)",
      "PASS: all 12000 events present",
    ]
  ) {
    assert.ok(passed.out.includes(line), `${line}\n${passed.out.join("\n")}`);
  }
  assert.ok(!passed.out.some((l) => l.startsWith("duplicate rows")));

  const lost = [...Array(100).keys(), 250, ...Array.from({ length: 100 }, (_, i) => 11_900 + i)];
  await db.query("DELETE FROM statusengine_hostchecks WHERE hostname IN (?)", [
    lost.map((s) => lossMarker("t1", s)),
  ]);
  // A marker of another run whose id extends ours must neither count nor be cleaned up.
  await copyRow(db, "statusengine_hostchecks", "hostname", lossMarker("t1", 300), "lt-t1-x-5");
  const failed = capture();
  assert.equal(await runLosstestCommand({ ...base, mode: "verify" }, failed.io), 1);
  assert.ok(failed.out.includes("missing: 201"), failed.out.join("\n"));
  assert.ok(failed.out.includes("rows: 11799"), failed.out.join("\n"));
  assert.ok(failed.out.includes("missing sequence numbers: 0-99, 250, 11900-11999"));
  assert.ok(failed.out.includes("FAIL: 201 of 12000 events missing"));

  const cleaned = capture();
  assert.equal(
    await runLosstestCommand({ ...base, mode: "cleanup" }, cleaned.io),
    0,
    cleaned.err.join("\n"),
  );
  assert.match(cleaned.out.at(-1) ?? "", /^losstest cleanup: deleted 11799 rows of run "t1"/);
  assert.equal(await countRows(db, "statusengine_hostchecks", "hostname LIKE 'lt-t1-%'"), 1);
  assert.equal(await countRows(db, "statusengine_hostchecks", "hostname = 'lt-t1-x-5'"), 1);
});

/** Copy one row of a table, with another value in the column `column`. */
async function copyRow(
  db: ScratchDatabase,
  table: TableName,
  column: string,
  from: unknown,
  to: string,
): Promise<void> {
  const cols = TABLES[table].insertColumns;
  await db.query(
    `INSERT INTO \`${table}\` (${cols.join(", ")}) SELECT ${
      cols.map((c) => (c === column ? "?" : c)).join(", ")
    } FROM \`${table}\` WHERE ${column} = ? LIMIT 1`,
    [to, from],
  );
}

/** Insert decoded rows (last row per primary key wins, as the status upsert does). */
async function insertRows(db: ScratchDatabase, rows: readonly TableRow[]): Promise<void> {
  const byTable = new Map<string, Map<string, Readonly<Record<string, unknown>>>>();
  for (const { table, row } of rows) {
    const t = TABLES[table as TableName];
    const rowsOfTable = byTable.get(table) ?? new Map();
    rowsOfTable.set(JSON.stringify(t.primaryKey.map((c) => row[c])), row);
    byTable.set(table, rowsOfTable);
  }
  for (const [table, rowMap] of byTable) {
    const cols = TABLES[table as TableName].insertColumns;
    await db.query(
      `INSERT INTO \`${table}\` (${cols.map((c) => `\`${c}\``).join(", ")}) VALUES ?`,
      [
        [...rowMap.values()].map((r) => cols.map((c) => r[c] ?? null)),
      ],
    );
  }
}

Deno.test("tools: verify reports exactly one changed column and one extra row between two databases, and --ignore-columns hides the column", async () => {
  await using a = await createScratchDatabase();
  await using b = await createScratchDatabase();
  await createSchema(a.url);
  await createSchema(b.url);
  const rows = [
    ...expectedRows("statusngin_hoststatus", 200, 21),
    ...expectedRows("statusngin_servicechecks", 300, 22),
    ...expectedRows("statusngin_statechanges", 100, 23),
  ];
  await insertRows(a, rows);
  await insertRows(b, rows);
  const tables = [
    "statusengine_hoststatus",
    "statusengine_servicechecks",
    "statusengine_host_statehistory",
    "statusengine_service_statehistory",
  ];
  const verify = async (options: { tables?: string[]; ignoreColumns?: string[] }) => {
    const c = capture();
    const code = await runVerifyCommand({
      mysqlUrlA: a.url,
      mysqlUrlB: b.url,
      limit: 5000,
      ...options,
    }, c.io);
    return { code, out: c.out, err: c.err };
  };

  const same = await verify({ tables });
  assert.equal(same.code, 0, same.out.join("\n"));
  const hosts = await countRows(a, "statusengine_hoststatus");
  const hostChanges = await countRows(a, "statusengine_host_statehistory");
  assert.ok(
    same.out.includes(`statusengine_hoststatus: identical (${hosts} rows)`),
    same.out.join("\n"),
  );
  assert.ok(same.out.includes("statusengine_servicechecks: identical (300 rows)"));
  assert.equal(same.out.at(-1), "verify: 4 tables: 4 identical, 0 different, 0 errors");
  // The default 16 tables, most of them empty on both sides, are identical too.
  assert.equal((await verify({})).code, 0);

  // B differs in one column of one service check and has one extra host state change. A
  // latency that agrees at 14 significant digits (how the legacy worker stored it) is
  // not a difference.
  const checks = await a.query<DbRow[]>(
    "SELECT service_description, start_time, start_time_usec, latency FROM statusengine_servicechecks WHERE latency > 0",
  );
  const check = checks.find((r) => {
    const x = Number(r["latency"]);
    return Number(x.toPrecision(14)) !== x;
  });
  assert.ok(check !== undefined, "a latency with more than 14 significant digits");
  const latency = Number(check["latency"]);
  await b.query(
    "UPDATE statusengine_servicechecks SET output = 'changed in B', latency = ? WHERE service_description = ? AND start_time = ? AND start_time_usec = ?",
    [
      Number(latency.toPrecision(14)),
      check["service_description"],
      check["start_time"],
      check["start_time_usec"],
    ],
  );
  const [change] = await b.query<DbRow[]>(
    "SELECT hostname FROM statusengine_host_statehistory LIMIT 1",
  );
  await copyRow(
    b,
    "statusengine_host_statehistory",
    "hostname",
    change?.["hostname"],
    "extra.example.com",
  );

  const [extra] = await b.query<DbRow[]>(
    "SELECT state_time, state_time_usec FROM statusengine_host_statehistory WHERE hostname = 'extra.example.com'",
  );
  const diff = await verify({ tables });
  assert.equal(diff.code, 1);
  const text = diff.out.join("\n");
  assert.ok(
    diff.out.includes(
      "statusengine_servicechecks: DIFFERENT: 299 equal, 0 only in A, 0 only in B, 1 different (A 300 rows, B 300 rows)",
    ),
    text,
  );
  assert.ok(diff.out.includes("  column output: 1 row differs"), text);
  assert.ok(!text.includes("column latency"), text);
  assert.ok(
    diff.out.some((l) =>
      /^ {2}example: \(service_description='[^']+', start_time=\d+, start_time_usec=\d+\) column output: A='[^']*' B='changed in B'$/
        .test(l)
    ),
    text,
  );
  assert.ok(
    diff.out.includes(
      `statusengine_host_statehistory: DIFFERENT: ${hostChanges} equal, 0 only in A, 1 only in B, 0 different (A ${hostChanges} rows, B ${
        hostChanges + 1
      } rows)`,
    ),
    text,
  );
  assert.ok(
    diff.out.includes(
      `  example: (hostname='extra.example.com', state_time=${
        extra?.["state_time"]
      }, state_time_usec=${extra?.["state_time_usec"]}) only in B`,
    ),
    text,
  );
  assert.ok(diff.out.includes(`statusengine_hoststatus: identical (${hosts} rows)`), text);
  assert.equal(diff.out.at(-1), "verify: 4 tables: 2 identical, 2 different, 0 errors");

  const ignored = await verify({ tables, ignoreColumns: ["statusengine_servicechecks.output"] });
  assert.equal(ignored.code, 1, "the extra row is still a difference");
  assert.ok(
    ignored.out.includes("statusengine_servicechecks: identical (300 rows)"),
    ignored.out.join("\n"),
  );
  assert.ok(ignored.out.includes("ignoring columns: statusengine_servicechecks.output"));
  const onlyChecks = await verify({
    tables: ["statusengine_servicechecks"],
    ignoreColumns: ["output"],
  });
  assert.equal(onlyChecks.code, 0, onlyChecks.out.join("\n"));
});

Deno.test("tools: verify refuses unknown tables and columns with the list of valid names", async () => {
  const c = capture();
  assert.equal(
    await runVerifyCommand({
      mysqlUrlA: "mysql://root@127.0.0.1:1/a",
      mysqlUrlB: "mysql://root@127.0.0.1:1/b",
      tables: ["statusengine_hoststatus", "statusengine_nope"],
      limit: 10,
    }, c.io),
    2,
  );
  assert.match(
    c.err.join("\n"),
    /unknown table "statusengine_nope"; valid tables: statusengine_dbversion, /,
  );
  for (const t of Object.keys(TABLES)) assert.ok(c.err.join("\n").includes(t), t);
  const d = capture();
  assert.equal(
    await runVerifyCommand({
      mysqlUrlA: "mysql://root@127.0.0.1:1/a",
      mysqlUrlB: "mysql://root@127.0.0.1:1/b",
      limit: 10,
      ignoreColumns: ["statusengine_hoststatus.nope"],
    }, d.io),
    2,
  );
  assert.match(d.err.join("\n"), /table statusengine_hoststatus has no column "nope"/);
});

Deno.test("tools: verify reports a table that cannot be read as an error and exits 1", async () => {
  await using a = await createScratchDatabase();
  await using b = await createScratchDatabase();
  await createSchema(a.url);
  const c = capture();
  const code = await runVerifyCommand({
    mysqlUrlA: a.url,
    mysqlUrlB: b.url,
    tables: ["statusengine_hoststatus"],
    limit: 10,
  }, c.io);
  assert.equal(code, 1);
  assert.match(
    c.out.join("\n"),
    /ERROR verifying table statusengine_hoststatus: B: .*doesn't exist/,
  );
  assert.equal(c.out.at(-1), "verify: 1 table: 0 identical, 0 different, 1 error");
});

Deno.test("tools: verify names the side's own setting when its login is refused", async () => {
  await using a = await createScratchDatabase();
  const refused = new URL(a.url);
  refused.username = "se_no_such_user";
  const c = capture();
  const code = await runVerifyCommand(
    { mysqlUrlA: a.url, mysqlUrlB: refused.href, limit: 10 },
    c.io,
  );
  assert.equal(code, 1);
  assert.match(
    c.err.join("\n"),
    /database B: MySQL at \S+ refused the login .*--mysql-url-b \(STATUSENGINE_MYSQL_URL_B\)/,
  );
});

/** `losstest …` through the command line, as an operator types it. */
async function losstestCli(argv: string[]): Promise<{ code: number; out: string; err: string }> {
  const c = capture();
  const code = await runCli(["losstest", ...argv], {}, {
    io: c.io,
    signals: false,
    logWrite: () => {},
  });
  return { code, out: c.out.join("\n"), err: c.err.join("\n") };
}

// publish and losstest used to refuse --config: the job server and the database had to be
// repeated as flags although the worker's file already named them.
Deno.test("tools: publish and losstest read the job server and the database from the worker's --config file", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const path = await Deno.makeTempFile({ suffix: ".yml" });
  try {
    await Deno.writeTextFile(path, `gearman_addr: ${gearmand.addr}\nmysql_url: ${db.url}\n`);
    const c = capture();
    const published = await runCli(
      ["publish", "--config", path, "--queue", "statusngin_hostchecks", "--count", "200"],
      {},
      { io: c.io, signals: false, logWrite: () => {} },
    );
    assert.equal(published, 0, c.err.join("\n"));
    assert.equal(await jobsAtGearmand(gearmand.addr, "statusngin_hostchecks"), 2);

    const marked = await losstestCli([
      "publish",
      "--run-id",
      "cfg",
      "--count",
      "100",
      "--config",
      path,
    ]);
    assert.equal(marked.code, 0, marked.err);
    assert.equal(await jobsAtGearmand(gearmand.addr, "statusngin_hostchecks"), 3);
    // verify asks both: nothing is in the scratch database yet, and the job is still queued.
    const verify = await losstestCli([
      "verify",
      "--run-id",
      "cfg",
      "--count",
      "100",
      "--config",
      path,
    ]);
    assert.equal(verify.code, 1, verify.out + verify.err);
    assert.match(
      verify.out,
      /NOT FINISHED: 100 of 100 events not in MySQL yet and 3 job\(s\) still queued/,
    );
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("tools: losstest verify checks what the run published, not the default count, and never passes while its jobs are queued", async () => {
  // Two job servers: publish spreads the jobs over both, a worker drains only the first.
  await using first = await startGearmand();
  await using second = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const servers = `${first.addr},${second.addr}`;
  const published = await losstestCli([
    "publish",
    "--run-id",
    "r6",
    "--count",
    "300",
    "--gearman-addr",
    servers,
  ]);
  assert.equal(published.code, 0, published.err);

  // Nothing has arrived: without --count there is nothing to check against.
  const early = await losstestCli([
    "verify",
    "--run-id",
    "r6",
    "--gearman-addr",
    servers,
    "--mysql-url",
    db.url,
  ]);
  assert.equal(early.code, 1, early.out);
  assert.match(early.err, /no event of run "r6" has arrived/);
  assert.doesNotMatch(early.out, /PASS/);

  {
    await using _worker = await startTestWorker(
      testConfig({ gearmanServers: [first.addr], mysqlUrl: db.url }),
    );
    await waitFor(async () => (await jobsAtGearmand(first.addr, "statusngin_hostchecks")) === 0, {
      timeoutMs: 60_000,
      message: "the first job server drained",
    });
  }
  const verify = ["verify", "--run-id", "r6", "--gearman-addr", servers, "--mysql-url", db.url];
  const partial = await losstestCli(verify);
  assert.equal(partial.code, 1, partial.out);
  assert.match(partial.out, /expecting 300 events as published/);
  assert.match(
    partial.out,
    /NOT FINISHED: 100 of 300 events not in MySQL yet and 1 job\(s\) still queued/,
  );
  assert.doesNotMatch(partial.out, /PASS/);

  // A --count that covers only what arrived first is refused, not passed.
  const narrow = await losstestCli([...verify, "--count", "10"]);
  assert.equal(narrow.code, 2, narrow.out);
  assert.match(narrow.err, /published 300 events, --count 10 disagrees/);
  assert.doesNotMatch(narrow.out, /PASS/);

  {
    await using _worker = await startTestWorker(
      testConfig({ gearmanServers: [second.addr], mysqlUrl: db.url }),
    );
    await waitFor(async () => (await jobsAtGearmand(second.addr, "statusngin_hostchecks")) === 0, {
      timeoutMs: 60_000,
      message: "the second job server drained",
    });
  }
  const done = await losstestCli(verify);
  assert.equal(done.code, 0, done.out + done.err);
  assert.match(done.out, /PASS: all 300 events present/);
});

// The tools take the worker's --mysql-url as it is, host list included (docs/running.md#mysql-hosts).
Deno.test("tools: with a host list whose first host is dead, schema, cleanup, status and verify use the next host that answers", async () => {
  await using a = await createScratchDatabase();
  await using b = await createScratchDatabase();
  await createSchema(a.url);
  await createSchema(b.url);
  // Port 1: nothing listens, the connection is refused.
  const listed = (url: string) => url.replace(/^mysql:\/\/([^@/]*@)?/, "mysql://$1127.0.0.1:1,");
  assert.match(listed(a.url), /@127\.0\.0\.1:1,[^/]+\/se_test_/);

  const schema = await cliRun(["schema", "--check", "--mysql-url", listed(a.url)], {});
  assert.equal(schema.code, 0, schema.text);

  const cleanup = await cliRun(["cleanup", "--dry-run", "--mysql-url", listed(a.url)], {});
  assert.equal(cleanup.code, 0, cleanup.text);

  await using gearmand = await startGearmand();
  const out: string[] = [];
  await runStatusCommand({ gearmanAddr: [gearmand.addr], mysqlUrl: listed(a.url), json: true }, {
    out: (l) => out.push(l),
    err: () => {},
  });
  const report = JSON.parse(out.join("\n")) as StatusReport;
  assert.equal(report.mysql.ok, true, out.join("\n"));
  assert.equal(report.mysql.host, `${a.host}:${a.port}`);

  const c = capture();
  const verified = await runVerifyCommand({
    mysqlUrlA: listed(a.url),
    mysqlUrlB: listed(b.url),
    tables: ["statusengine_hoststatus"],
    limit: 10,
  }, c.io);
  assert.equal(verified, 0, c.out.join("\n"));
});

// Run "r8-x" extends run "r8" ("lt-r8-x-5" starts with "lt-r8-"): its events used to be taken
// for r8's when verify read the run's recorded size, so r8 was refused as published twice.
Deno.test("tools: losstest verify of a run ignores the recorded size of a run whose id extends it", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const target = ["--gearman-addr", gearmand.addr];
  for (const [runId, count] of [["r8", "100"], ["r8-x", "200"]] as const) {
    const published = await losstestCli([
      "publish",
      "--run-id",
      runId,
      "--count",
      count,
      ...target,
    ]);
    assert.equal(published.code, 0, published.err);
  }
  {
    await using _worker = await startTestWorker(
      testConfig({ gearmanServers: [gearmand.addr], mysqlUrl: db.url }),
    );
    await waitFor(async () => (await countRows(db, "statusengine_hostchecks")) === 300, {
      timeoutMs: 60_000,
      message: "both runs stored",
    });
  }
  for (const [runId, count] of [["r8", 100], ["r8-x", 200]] as const) {
    const verify = await losstestCli([
      "verify",
      "--run-id",
      runId,
      ...target,
      "--mysql-url",
      db.url,
    ]);
    assert.equal(verify.code, 0, `${runId}: ${verify.out}\n${verify.err}`);
    assert.match(verify.out, new RegExp(`PASS: all ${count} events present`));
  }
});

/** verify of the given tables of A and B, captured. */
async function verifyCaptured(
  a: ScratchDatabase,
  b: ScratchDatabase,
  options: { tables: string[]; limit?: number; ignoreColumns?: string[] },
) {
  const c = capture();
  const code = await runVerifyCommand(
    { mysqlUrlA: a.url, mysqlUrlB: b.url, limit: 5000, ...options },
    c.io,
  );
  return { code, out: c.out.join("\n") };
}

async function insertLogentries(db: ScratchDatabase, rows: readonly (readonly unknown[])[]) {
  await db.query(
    "INSERT INTO statusengine_logentries (entry_time, logentry_type, logentry_data, node_name) VALUES ?",
    [rows],
  );
}

// statusengine_logentries is matched by all its columns but id; an ignored column stayed in that
// key, so two workers with different node names differed in every row whatever was ignored.
Deno.test("tools: verify --ignore-columns leaves the column out of the match of a table matched by all its columns", async () => {
  await using a = await createScratchDatabase();
  await using b = await createScratchDatabase();
  await createSchema(a.url);
  await createSchema(b.url);
  const rows = (node: string) => [1, 2, 3].map((n) => [1_700_000_000 + n, 1, `line ${n}`, node]);
  await insertLogentries(a, rows("legacy"));
  await insertLogentries(b, rows("ours"));
  const tables = ["statusengine_logentries"];
  const plain = await verifyCaptured(a, b, { tables });
  assert.equal(plain.code, 1, plain.out);
  const ignored = await verifyCaptured(a, b, { tables, ignoreColumns: ["node_name"] });
  assert.equal(ignored.code, 0, ignored.out);
  assert.match(ignored.out, /statusengine_logentries: identical \(3 rows\)/);
});

// The newest rows of statusengine_logentries were cut by id among equal entry times, and the ids
// of the two databases differ: the same rows, inserted in another order, fell out of the window
// on one side only.
Deno.test("tools: verify cuts the window of statusengine_logentries at the same row whatever the ids", async () => {
  await using a = await createScratchDatabase();
  await using b = await createScratchDatabase();
  await createSchema(a.url);
  await createSchema(b.url);
  const rows = ["x", "y", "z"].map((line) => [1_700_000_000, 1, line, "N"]);
  await insertLogentries(a, rows);
  await insertLogentries(b, rows.toReversed());
  const verify = await verifyCaptured(a, b, { tables: ["statusengine_logentries"], limit: 2 });
  assert.equal(verify.code, 0, verify.out);
  assert.match(verify.out, /statusengine_logentries: identical \(2 rows\)/);
});

// Entries at the same time that differ only in case are equal to the tables' collation, so their
// order, and where the window was cut, was left to each database: the same rows inserted in
// another order were "only in A" and "only in B".
Deno.test("tools: verify cuts the window at the same row when rows differ only in case", async () => {
  await using a = await createScratchDatabase();
  await using b = await createScratchDatabase();
  await createSchema(a.url);
  await createSchema(b.url);
  const entry = (line: string, t = 0) => [1_700_000_000 + t, 1, line, "N"];
  await insertLogentries(a, [entry("x"), entry("X"), entry("z", 1)]);
  await insertLogentries(b, [entry("X"), entry("x"), entry("z", 1)]);
  const verify = await verifyCaptured(a, b, { tables: ["statusengine_logentries"], limit: 2 });
  assert.equal(verify.code, 0, verify.out);
  assert.match(verify.out, /statusengine_logentries: identical \(2 rows\)/);
});

// MySQL compares the markers case-insensitively, so verify and cleanup of "R9" address the rows of
// run "r9"; verify used to find them all and then count none of them, failing every event.
Deno.test("tools: losstest verify of a run id differing only in case counts the rows it finds", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const target = ["--gearman-addr", gearmand.addr];
  const published = await losstestCli(["publish", "--run-id", "r9", "--count", "100", ...target]);
  assert.equal(published.code, 0, published.err);
  {
    await using _worker = await startTestWorker(
      testConfig({ gearmanServers: [gearmand.addr], mysqlUrl: db.url }),
    );
    await waitFor(async () => (await countRows(db, "statusengine_hostchecks")) === 100, {
      timeoutMs: 60_000,
      message: "the run stored",
    });
  }
  const verify = await losstestCli(["verify", "--run-id", "R9", ...target, "--mysql-url", db.url]);
  assert.equal(verify.code, 0, `${verify.out}\n${verify.err}`);
  assert.match(verify.out, /PASS: all 100 events present/);
  const cleanup = await losstestCli(["cleanup", "--run-id", "R9", "--mysql-url", db.url]);
  assert.equal(cleanup.code, 0, cleanup.err);
  assert.match(cleanup.out, /deleted 100 rows/);
});

// B holds one newer row than A. With both windows full, B's window ends one row later in time, and
// A's oldest row of its window, which B holds just outside its own, was reported "only in A".
Deno.test("tools: verify does not report a row outside the other database's window as only in one", async () => {
  await using a = await createScratchDatabase();
  await using b = await createScratchDatabase();
  await createSchema(a.url);
  await createSchema(b.url);
  const rows = [1, 2, 3, 4, 5, 6].map((n) => [1_700_000_000 + n, 1, `line ${n}`, "N"]);
  await insertLogentries(a, rows.slice(0, 5));
  await insertLogentries(b, rows);
  const verify = await verifyCaptured(a, b, { tables: ["statusengine_logentries"], limit: 5 });
  assert.equal(verify.code, 1, verify.out);
  assert.match(verify.out, /DIFFERENT: 4 equal, 0 only in A, 1 only in B, 0 different/);
});

// B has written one check more than A, all in the same second. B's window then ends one check
// later, and A's oldest check, which B holds just past its window, was reported "only in A":
// only the seconds were compared with the window's edge, not the microseconds, so a live shadow
// run at a few checks per second was never identical.
Deno.test("tools: verify does not report a check of the other window's last second as only in one", async () => {
  await using a = await createScratchDatabase();
  await using b = await createScratchDatabase();
  await createSchema(a.url);
  await createSchema(b.url);
  const checks = [1, 2, 3, 4].map((usec) => ["h", 1_700_000_000, usec, 1_700_000_000]);
  const insert = (db: ScratchDatabase, rows: typeof checks) =>
    db.query(
      "INSERT INTO statusengine_hostchecks (hostname, start_time, start_time_usec, end_time) VALUES ?",
      [rows],
    );
  await insert(a, checks.slice(0, 3));
  await insert(b, checks);
  const verify = await verifyCaptured(a, b, { tables: ["statusengine_hostchecks"], limit: 3 });
  assert.equal(verify.code, 1, verify.out);
  assert.match(verify.out, /DIFFERENT: 2 equal, 0 only in A, 1 only in B, 0 different/);
});

// AMQP reports ready messages only: the deliveries a worker holds unacknowledged (here while its
// MySQL is unreachable) are not counted, and verify used to call the run a FAIL with every
// one of its events still on its way.
Deno.test("tools: losstest verify through RabbitMQ gives no FAIL while a consumer may hold the missing events", async () => {
  await using vhost = await createScratchVhost();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using proxy = await startMysqlProxy(db);
  await using worker = await startTestWorker(testConfig({
    consumer: "rabbitmq",
    rabbitmq: { url: vhost.url, prefetch: 10, durableQueues: false },
    mysqlUrl: proxy.url,
    queues: ["statusngin_hostchecks"],
  }));
  proxy.block();
  const base = { runId: "r10", count: 300, gearmanAddr: [], rabbitmqUrl: vhost.url };
  const published = capture();
  assert.equal(
    await runLosstestCommand({ ...base, mode: "publish", mysqlUrl: db.url }, published.io),
    0,
  );
  await using probe = await AmqpPublisher.connect(vhost.url, { durableQueues: false });
  await waitFor(async () => (await probe.depth("statusngin_hostchecks")).ready === 0, {
    message: "every message delivered to the worker",
  });
  const held = await metricValue(worker, "statusengine_queue_jobs_in_flight", {
    queue_name: "statusngin_hostchecks",
  });
  assert.ok(held > 0, `jobs held: ${held}`);
  const verify = capture();
  const code = await runLosstestCommand({ ...base, mode: "verify", mysqlUrl: db.url }, verify.io);
  const out = verify.out.join("\n");
  assert.equal(code, 1, out);
  assert.match(out, /NOT FINISHED: 300 of 300 events not in MySQL yet/);
  assert.doesNotMatch(out, /FAIL/);

  proxy.unblock();
  await waitFor(async () => (await countRows(db, "statusengine_hostchecks")) === 300, {
    timeoutMs: 60_000,
    message: "the held events written once MySQL returned",
  });
});

// A broker that accepts the connection and never answers: the backlog read had no bound, so
// verify waited for it forever, deaf to its own limit and to the first Ctrl-C.
Deno.test("tools: losstest verify stops on its signal while the broker does not answer", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using peer = startTcpPeer();
  const controller = new AbortController();
  const out: string[] = [];
  const err: string[] = [];
  const io = {
    out: (line: string) => {
      out.push(line);
      // Abort once verify has read MySQL and turns to the broker.
      if (line.startsWith("missing:")) controller.abort();
    },
    err: (line: string) => void err.push(line),
  };
  const verify = runLosstestCommand(
    {
      mode: "verify",
      runId: "r11",
      count: 10,
      gearmanAddr: [],
      rabbitmqUrl: `amqp://guest:guest@${peer.addr}/`,
      mysqlUrl: db.url,
    },
    io,
    controller.signal,
  );
  const code = await orStuck(verify);
  assert.equal(code, 130, `verify did not return after its signal aborted: ${out.join("\n")}`);
  assert.match(err.join("\n"), /Cannot finish losstest verify: verify was interrupted/);
  assert.doesNotMatch(out.join("\n"), /FAIL|PASS/);
});

// The worker writes the markers of jobs still queued after the cleanup: the run came back with
// no word of it.
Deno.test("tools: losstest cleanup warns while jobs are still queued for statusngin_hostchecks", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const target = ["--gearman-addr", gearmand.addr];
  const published = await losstestCli(["publish", "--run-id", "q1", "--count", "100", ...target]);
  assert.equal(published.code, 0, published.err);
  const cleanup = await losstestCli([
    "cleanup",
    "--run-id",
    "q1",
    ...target,
    "--mysql-url",
    db.url,
  ]);
  assert.equal(cleanup.code, 0, cleanup.err);
  assert.match(cleanup.out, /deleted 0 rows/);
  assert.match(
    cleanup.err,
    /^warning: 1 job\(s\) still queued for statusngin_hostchecks: the worker may write rows of run "q1" after this cleanup; run cleanup again once the queue is drained$/m,
  );
});

/**
 * losstest verify of run `runId` (10 events, none in MySQL) through a broker that falls silent
 * at the depth check; `abortAtCut` aborts verify's signal then, else it is aborted once verify
 * returned. Its exit code, output and whether the broker fell silent.
 */
async function verifyThroughSilentBroker(
  runId: string,
  { abortAtCut }: { abortAtCut: boolean },
): Promise<{ code: number | "stuck"; out: string; cut: boolean }> {
  await using vhost = await createScratchVhost();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const controller = new AbortController();
  using proxy = cutAmqpAtFirstDeclare("freeze", () => abortAtCut && controller.abort());
  const url = new URL(vhost.url);
  url.host = `127.0.0.1:${proxy.port}`;
  const c = capture();
  const verify = runLosstestCommand(
    { mode: "verify", runId, count: 10, gearmanAddr: [], rabbitmqUrl: url.href, mysqlUrl: db.url },
    c.io,
    controller.signal,
  );
  const code = await orStuck(verify);
  controller.abort();
  await verify;
  return { code, out: c.out.join("\n"), cut: proxy.cut };
}

// The depth check gave up on its signal, then the close of the connection waited for the broker's
// close-ok, which a silent broker never sends: verify could not be stopped.
Deno.test("tools: losstest verify stops on its signal while the broker falls silent after connecting", async () => {
  const { code, out, cut } = await verifyThroughSilentBroker("r12", { abortAtCut: true });
  assert.ok(cut, "the broker fell silent at the depth check");
  assert.equal(code, 130, `verify did not return after its signal aborted: ${out}`);
});

// The backlog read connected to the brokers of amqp://h1,h2/ with no bound of its own: a first
// broker that accepts and never answers the handshake held verify (and cleanup) until their 5- and
// 10-minute limits, and the healthy second broker was never asked.
Deno.test("tools: losstest verify with a silent first broker of the URL reads the backlog at the second", async () => {
  await using vhost = await createScratchVhost();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using silent = startTcpPeer();
  const base = { runId: "r13", count: 300, gearmanAddr: [], mysqlUrl: db.url };
  const published = capture();
  assert.equal(
    await runLosstestCommand({ ...base, mode: "publish", rabbitmqUrl: vhost.url }, published.io),
    0,
    published.err.join("\n"),
  );
  const real = new URL(vhost.url);
  const url =
    `amqp://${real.username}:${real.password}@${silent.addr},${real.host}${real.pathname}`;
  const controller = new AbortController();
  const c = capture();
  const verify = runLosstestCommand(
    { ...base, mode: "verify", rabbitmqUrl: url },
    c.io,
    controller.signal,
  );
  const code = await orStuck(verify);
  controller.abort();
  await verify;
  const out = c.out.join("\n");
  assert.equal(code, 1, `verify did not read the second broker: ${out}`);
  assert.match(
    out,
    /for statusngin_hostchecks: 3 ready \(about 300 events; not loss\), 0 consumers/,
  );
  assert.match(out, /NOT FINISHED: 300 of 300 events not in MySQL yet and 3 job\(s\) still queued/);
  await silent.accepted;
});

// The depth check after the connect was bounded only by the command's limit: a broker that falls
// silent after the handshake held verify for 5 minutes (cleanup 10) and then ended it "exceeded its
// 5-minute limit" without a verdict, where a silent job server costs 2 s and "unknown".
Deno.test("tools: losstest verify through a broker that falls silent after connecting reports the backlog unknown", async () => {
  const { code, out, cut } = await verifyThroughSilentBroker("r14", { abortAtCut: false });
  assert.ok(cut, "the broker fell silent at the depth check");
  assert.equal(code, 1, `verify did not give up on the silent broker: ${out}`);
  assert.match(out, /for statusngin_hostchecks: unknown \(no answer within \d+ ms\)/);
  assert.match(out, /NOT FINISHED: 10 of 10 events not in MySQL yet and an unknown number of/);
});

// A transient queue is gone after a broker restart, and its messages with it: verify read the
// missing queue as a backlog unknown and said NOT FINISHED ("run verify again once the queue is
// drained") for ever, hiding the loss it exists to show.
Deno.test("tools: losstest verify through RabbitMQ calls the events of a queue that no longer exists lost", async () => {
  await using vhost = await createScratchVhost();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const base = {
    runId: "r15",
    count: 300,
    gearmanAddr: [],
    rabbitmqUrl: vhost.url,
    mysqlUrl: db.url,
  };
  const published = capture();
  assert.equal(await runLosstestCommand({ ...base, mode: "publish" }, published.io), 0);
  {
    await using broker = await AmqpPublisher.connect(vhost.url, { durableQueues: false });
    await broker.deleteQueue("statusngin_hostchecks");
  }
  const verify = capture();
  const code = await runLosstestCommand({ ...base, mode: "verify" }, verify.io);
  const out = verify.out.join("\n");
  assert.equal(code, 1, out);
  assert.match(out, /for statusngin_hostchecks: 0 \(the queue does not exist/);
  assert.match(out, /FAIL: 300 of 300 events missing/);
  const cleanup = capture();
  assert.equal(await runLosstestCommand({ ...base, mode: "cleanup" }, cleanup.io), 0);
  assert.deepEqual(cleanup.err, []);
});

/** Run tools/dev_env.sh with `args` and extra environment: its exit code and stderr. */
async function devEnv(
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number; err: string }> {
  const script = new URL("../tools/dev_env.sh", import.meta.url).pathname;
  const { code, stderr } = await new Deno.Command("bash", {
    args: [script, ...args],
    env,
    stdout: "null",
    stderr: "piped",
  }).output();
  return { code, err: new TextDecoder().decode(stderr) };
}

/** Remove the temporary directory of the gearmand log the script named. */
async function removeLogDir(err: string): Promise<void> {
  const log = /(\/\S+)\/gearmand\.log/.exec(err)?.[1];
  if (log !== undefined) await Deno.remove(log, { recursive: true });
}

// gearmand that cannot bind its port does not exit: it retries the bind and never answers. The
// script waited 5 s for it, said "ready" and exited 0, so `tools/dev_env.sh --gearmand && deno task
// start` started a worker that waited for a job server that would never come, its cause in a log
// under a temporary directory nobody was told of.
Deno.test("tools: dev_env.sh --gearmand fails with gearmand's log when the job server does not come up", async () => {
  // A port bound without listening: nothing answers there, and gearmand cannot bind it.
  const holder = new Deno.Command("python3", {
    args: [
      "-c",
      "import socket,sys\ns=socket.socket()\ns.bind(('127.0.0.1',0))\nprint(s.getsockname()[1],flush=True)\nsys.stdin.read()",
    ],
    stdin: "piped",
    stdout: "piped",
  }).spawn();
  try {
    const reader = holder.stdout.pipeThrough(new TextDecoderStream()).getReader();
    const { value = "" } = await reader.read();
    await reader.cancel();
    const port = value.trim();
    assert.match(port, /^\d+$/);
    const run = await devEnv(["--gearmand"], { DEV_ENV_GEARMAND_PORT: port });
    assert.equal(run.code, 1, run.err);
    assert.match(
      run.err,
      new RegExp(`gearmand \\(pid \\d+\\) does not answer on 127\\.0\\.0\\.1:${port}`),
    );
    assert.match(run.err, /is the port taken\?\); its log, \S+gearmand\.log:/);
    assert.doesNotMatch(run.err, /dev_env: ready/);
    // The gearmand it started is gone, not left to take the port once it is free.
    const pid = /gearmand \(pid (\d+)\) does not answer/.exec(run.err)?.[1];
    assert.ok(pid !== undefined, run.err);
    await waitFor(async () => {
      const stat = await Deno.readTextFile(`/proc/${pid}/stat`).catch(() => "");
      return !/^\d+ \(gearmand\) [^Z]/.test(stat);
    }, { message: `gearmand ${pid} stopped` });
    await removeLogDir(run.err);
  } finally {
    await holder.stdin.close();
    await holder.status;
  }
});

// The job server the script starts answers as soon as the script has exited 0.
Deno.test("tools: dev_env.sh --gearmand exits 0 once its gearmand answers, and names its pid", async () => {
  const probe = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (probe.addr as Deno.NetAddr).port;
  probe.close();
  const run = await devEnv(["--gearmand"], { DEV_ENV_GEARMAND_PORT: String(port) });
  const pid = Number(/gearmand \(pid (\d+)\)/.exec(run.err)?.[1]);
  try {
    assert.equal(run.code, 0, run.err);
    assert.ok(Number.isSafeInteger(pid), run.err);
    assert.match(
      await adminCommand(`127.0.0.1:${port}`, "version").then((l) => l[0] ?? ""),
      /^OK /,
    );
  } finally {
    if (Number.isSafeInteger(pid)) Deno.kill(pid, "SIGTERM");
    await removeLogDir(run.err);
  }
});

// A job server frozen mid-run (SIGSTOP, a paused VM, a partition without RST) answers nothing:
// publish waited for the oldest answer of a full window, and after the signal for every answer in
// flight, without end, so Ctrl-C did nothing and only a second one ended it, without a summary.
// The freeze is a proxy that stops forwarding: a SIGSTOP sent from the job generator let gearmand
// answer up to 99 more jobs on a loaded machine.
Deno.test("tools: publish interrupted while its job server is frozen returns, counting the jobs with no answer", async () => {
  await using gearmand = await startGearmand();
  await using proxy = await startTcpProxy(gearmand.addr);
  const controller = new AbortController();
  function* items(): Generator<PublishItem> {
    for (let i = 0; i < 1_000; i++) {
      if (i === 5) proxy.freeze();
      // The window (256 jobs) is full from here on: publish waits for an answer that never comes.
      if (i === 256) controller.abort();
      yield { payload: '{"messages":[],"format":"none"}', events: 0 };
    }
  }
  const c = capture();
  const publishing = publishJobs("statusngin_logentries", items(), {
    gearmanAddr: [proxy.addr],
    io: c.io,
    signal: controller.signal,
  });
  // Only the first 5 jobs can be answered.
  const result = await orStuck(publishing);
  assert.notEqual(result, "stuck", "publish did not return after its signal aborted");
  if (result === "stuck") return;
  assert.equal(result.interrupted, true);
  assert.ok(result.jobs <= 5, `confirmed: ${result.jobs}`);
  assert.ok(result.unconfirmed >= 251, `unconfirmed: ${result.unconfirmed}`);
  assert.match(
    summaryLine("statusngin_logentries", result, 1),
    /^interrupted after publishing \d jobs \(0 events\) and \d+ more with no answer \(outcome unknown\) to /,
  );
});

// Interrupted while the job server was lost mid-run, publish said it "was interrupted before it
// started": the jobs it had confirmed went unreported, as if nothing had been published.
Deno.test("tools: publish interrupted as its job server dies reports what it confirmed, not that it never started", async () => {
  await using gearmand = await startGearmand();
  const controller = new AbortController();
  const out: string[] = [];
  const err: string[] = [];
  const io = {
    out: (line: string) => {
      out.push(line);
      // Once jobs are confirmed (a busy machine may print the first progress line before any):
      // the job server dies, and Ctrl-C follows.
      if (/^progress: [1-9]/.test(line) && !controller.signal.aborted) {
        Deno.kill(gearmand.pid, "SIGKILL");
        controller.abort();
      }
    },
    err: (line: string) => void err.push(line),
  };
  const code = await runPublishCommand(
    {
      queue: "statusngin_logentries",
      count: 100_000_000,
      eventsPerJob: 100,
      gearmanAddr: [gearmand.addr],
    },
    io,
    controller.signal,
  );
  const text = [...out, ...err].join("\n");
  assert.ok(controller.signal.aborted, text);
  assert.doesNotMatch(text, /before it started/);
  assert.match(
    err.join("\n"),
    /\([1-9]\d* jobs with [1-9]\d* events confirmed before the failure\)/,
  );
  assert.equal(code, 130, text);
});

// Stopped by its signal (Ctrl-C) while connecting, losstest publish exited 1 with "Cannot run
// losstest publish …: signal received", the code of a failed job server, not 130, as publish does.
Deno.test("tools: losstest publish stopped by its signal before it starts exits 130", async () => {
  await using gearmand = await startGearmand();
  const c = capture();
  const code = await runLosstestCommand(
    { mode: "publish", runId: "r16", count: 10, gearmanAddr: [gearmand.addr], mysqlUrl: "" },
    c.io,
    AbortSignal.abort(new DOMException("signal received", "AbortError")),
  );
  assert.equal(code, 130, c.err.join("\n"));
  assert.match(c.err.join("\n"), /^Cannot run losstest publish: interrupted before it started$/m);
  assert.equal(await jobsAtGearmand(gearmand.addr, "statusngin_hostchecks"), 0);
});
