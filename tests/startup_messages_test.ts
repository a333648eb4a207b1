/**
 * What `run` says when it cannot start (or starts on something it should warn about), against
 * the real MariaDB and gearmand: each cause in its own words, with what to do, once.
 */
import assert from "node:assert/strict";
import { runCli } from "../src/cli/mod.ts";
import { bufferIo, startRun } from "./helpers/cli_run.ts";
import { createScratchDatabase, testMysqlBaseUrl } from "./helpers/mysql.ts";
import { freePort, startGearmand } from "./helpers/gearmand.ts";
import { orStuck, waitFor } from "./helpers/wait.ts";

interface Result {
  readonly code: number;
  readonly err: string;
  readonly logs: readonly string[];
}

async function run(argv: string[]): Promise<Result> {
  const io = bufferIo();
  const logs: string[] = [];
  const code = await runCli(["run", ...argv], {}, {
    io,
    signals: false,
    logWrite: (l) => logs.push(l),
  });
  return { code, err: io.errLines.join("\n"), logs };
}

/**
 * Run until a log line matches, then stop the worker as SIGTERM would: for what the start waits
 * for (a MySQL or job server that is not there yet) instead of ending.
 */
async function runUntilLogged(argv: string[], line: RegExp): Promise<Result> {
  const io = bufferIo();
  const logs: string[] = [];
  const stop = new AbortController();
  const done = runCli(["run", ...argv], {}, {
    io,
    signals: false,
    signal: stop.signal,
    logWrite: (l) => logs.push(l),
  });
  try {
    await waitFor(() => logs.some((l) => line.test(l)), {
      timeoutMs: 30_000,
      message: `a log line ${line}`,
    });
  } finally {
    stop.abort();
  }
  const code = await done;
  return { code, err: io.errLines.join("\n"), logs };
}

/** Flags every case shares: no listeners that could collide, no dead-letter file. */
function quiet(): string[] {
  return [
    "--metrics-port",
    "0",
    "--listen-addr",
    `127.0.0.1:${freePort()}`,
    "--dead-letter-file",
    "",
  ];
}

function assertSaidOnce(text: string): void {
  assert.doesNotMatch(text, /Cannot start: Cannot start/, text);
}

/** Create the tables as an operator would, with the `schema` command. */
async function schema(mysqlUrl: string): Promise<void> {
  const code = await runCli(["schema", "--mysql-url", mysqlUrl], {}, {
    io: bufferIo(),
    signals: false,
    logWrite: () => {},
  });
  assert.equal(code, 0);
}

Deno.test("run: an unknown database says so and names schema --create-database", async () => {
  await using gearmand = await startGearmand();
  const url = new URL(testMysqlBaseUrl());
  url.pathname = `/se_missing_${crypto.randomUUID().slice(0, 8).replaceAll("-", "")}`;
  const r = await run(["--gearman-addr", gearmand.addr, "--mysql-url", url.href, ...quiet()]);
  assert.equal(r.code, 1);
  assert.match(r.err, /database "se_missing_\w+" does not exist/);
  assert.match(r.err, /schema --create-database/);
  assert.doesNotMatch(r.err, /does not answer/);
  assertSaidOnce(r.err);
});

Deno.test("run: a refused login says to check the user, not that MySQL does not answer", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  const url = new URL(db.url);
  url.username = "se_no_such_user";
  url.password = "wrong-secret";
  const r = await run(["--gearman-addr", gearmand.addr, "--mysql-url", url.href, ...quiet()]);
  assert.equal(r.code, 1);
  assert.match(r.err, /refused the login/);
  assert.match(r.err, /check the user and password/);
  assert.doesNotMatch(r.err, /does not answer/);
  assert.ok(!r.err.includes("wrong-secret"));
});

Deno.test("run: a MySQL that is not there is waited for, and not called a refused login or a missing database", async () => {
  await using gearmand = await startGearmand();
  const r = await runUntilLogged([
    "--gearman-addr",
    gearmand.addr,
    "--mysql-url",
    `mysql://root@127.0.0.1:${freePort()}/statusengine`,
    ...quiet(),
  ], /MySQL not reachable at start-up, waiting for it/);
  assert.equal(r.code, 0, "stopped while waiting: a clean stop");
  assert.doesNotMatch(r.logs.join("\n") + r.err, /refused the login|does not exist/);
});

Deno.test("run: missing tables are said once, on a line short enough to read", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  const r = await run(["--gearman-addr", gearmand.addr, "--mysql-url", db.url, ...quiet()]);
  assert.equal(r.code, 1);
  assertSaidOnce(r.err);
  assert.match(r.err, /table\(s\) missing/);
  assert.match(r.err, /and \d+ more/);
  assert.match(r.err, /"schema" command/);
  for (const line of r.err.split("\n")) assert.ok(line.length < 300, line);
});

Deno.test("run: a job server that is down at start is not a lost connection", async () => {
  await using db = await createScratchDatabase();
  await schema(db.url);
  const addr = `127.0.0.1:${freePort()}`;
  const connect = new RegExp(`Cannot connect to job server ${addr.replaceAll(".", "\\.")}`);
  const r = await runUntilLogged(
    ["--gearman-addr", addr, "--mysql-url", db.url, ...quiet()],
    connect,
  );
  const all = r.logs.join("\n") + r.err;
  assert.doesNotMatch(all, /lost/);
  assertSaidOnce(all);
});

Deno.test("run: a taken metrics port names the setting to change", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await schema(db.url);
  using taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const r = await run([
    "--gearman-addr",
    gearmand.addr,
    "--mysql-url",
    db.url,
    "--listen-addr",
    `127.0.0.1:${freePort()}`,
    "--dead-letter-file",
    "",
    "--metrics-host",
    "127.0.0.1",
    "--metrics-port",
    String(taken.addr.port),
  ]);
  assert.equal(r.code, 1);
  assert.match(r.err, /--metrics-port/);
  assert.match(r.err, /STATUSENGINE_METRICS_PORT/);
});

Deno.test("run: an account that may not write the node row refuses the start, saying what to grant", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await schema(db.url);
  const user = `se_ro_${crypto.randomUUID().slice(0, 6)}`;
  await db.query(`CREATE USER '${user}'@'%' IDENTIFIED BY 'se-secret-pw'`);
  try {
    await db.query(`GRANT SELECT ON \`${db.name}\`.* TO '${user}'@'%'`);
    const url = new URL(db.url);
    url.username = user;
    url.password = "se-secret-pw";
    const r = await run(["--gearman-addr", gearmand.addr, "--mysql-url", url.href, ...quiet()]);
    assert.equal(r.code, 1);
    assertSaidOnce(r.err);
    assert.match(r.err, /Cannot start: MySQL at .* does not let this account write/);
    assert.match(r.err, /INSERT, UPDATE command denied/);
    assert.match(r.err, /GRANT SELECT, INSERT, UPDATE, DELETE ON `se_test_\w+`\.\*/);
    assert.match(r.err, /waiting cannot fix this/);
  } finally {
    await db.query(`DROP USER '${user}'@'%'`);
  }
});

Deno.test("run: a named pipe as the dead-letter file refuses the start, naming it", async () => {
  // Writes to a FIFO block for good once its reader stops (or never came): every job that needs
  // a dead letter waited without a word, and the shutdown waited on the file until SIGKILL.
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await schema(db.url);
  const dir = await Deno.makeTempDir({ prefix: "se-fifo-" });
  try {
    const fifo = `${dir}/dead.ndjson`;
    assert.ok((await new Deno.Command("mkfifo", { args: [fifo] }).output()).success);
    const stop = new AbortController();
    const { done, io, logs } = startRun(gearmand.addr, db.url, {
      deadLetterFile: fifo,
      signal: stop.signal,
    });
    const code = await orStuck(done, 20_000);
    if (code === "stuck") {
      stop.abort();
      await done;
    }
    assert.equal(code, 1, logs.join("\n"));
    assert.match(io.errLines.join("\n"), /dead-letter file ".*dead\.ndjson" .*named pipe/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("run: a drifted column (output varchar(100)) starts with a warning naming it", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await schema(db.url);
  await db.query("ALTER TABLE statusengine_servicestatus MODIFY output varchar(100)");
  const { code, err, logs } = await runUntilLogged(
    ["--gearman-addr", gearmand.addr, "--mysql-url", db.url, ...quiet()],
    /consumer started/,
  );
  assert.equal(code, 0, err);
  const warning = logs.find((l) => l.includes("tables differ from the schema"));
  assert.ok(warning !== undefined, logs.join(""));
  assert.match(warning, /level=warn\b/);
  assert.match(warning, /statusengine_servicestatus\.output/);
  assert.match(warning, /varchar\(100\)/);
  assert.match(warning, /schema --check/);
});

Deno.test("run: a job server down at start while another is up is retried as a connect, never as lost", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await schema(db.url);
  const down = `127.0.0.1:${freePort()}`;
  const { code, err, logs } = await runUntilLogged([
    "--gearman-addr",
    `${gearmand.addr},${down}`,
    "--gearman-reconnect-interval",
    "100ms",
    "--mysql-url",
    db.url,
    ...quiet(),
  ], /connect failed, still retrying/);
  assert.equal(code, 0, err);
  const about = logs.filter((l) => l.includes(down));
  assert.ok(about.length > 0, logs.join(""));
  for (const line of about) {
    assert.doesNotMatch(line, /lost|reconnect failed/, line);
  }
});

Deno.test("run: a worker given the core-restart queue without a status queue says that it cannot date a restart", async () => {
  // The worker dates a restart without a message timestamp by the status it receives (the core
  // clock's lag, docs/core-restart.md): split away from both status queues, every restart was
  // "unknown" and swept nothing, though --queues allows the split.
  await using db = await createScratchDatabase();
  const started = /stale status filter/;
  const restartWarning =
    /statusngin_core_restart .*statusngin_hoststatus or statusngin_servicestatus/;
  const common = ["--gearman-addr", `127.0.0.1:${freePort()}`, "--mysql-url", db.url, ...quiet()];
  const split = await runUntilLogged(
    [...common, "--queues", "statusngin_core_restart,statusngin_hostchecks"],
    started,
  );
  assert.equal(split.logs.filter((l) => restartWarning.test(l)).length, 1, split.logs.join("\n"));
  const withStatus = await runUntilLogged(
    [...common, "--queues", "statusngin_core_restart,statusngin_hoststatus"],
    started,
  );
  assert.ok(!withStatus.logs.some((l) => restartWarning.test(l)), withStatus.logs.join("\n"));
});
