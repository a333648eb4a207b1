/**
 * The command line end to end (in-process through runCli): exit codes,
 * messages and what must never be printed.
 */
import assert from "node:assert/strict";
import { runCli } from "../src/cli/mod.ts";
import { bufferIo } from "../src/cli/io.ts";
import { createScratchDatabase } from "./helpers/mysql.ts";
import { freePort, startGearmand } from "./helpers/gearmand.ts";
import { waitFor } from "./helpers/wait.ts";
import { adminStatus } from "../src/gearman/admin.ts";
import { QUEUE_NAMES } from "../src/events/queues.ts";

async function cli(argv: string[], env: Record<string, string> = {}) {
  const io = bufferIo();
  const code = await runCli(argv, env, { io, signals: false, logWrite: () => {} });
  return { code, out: io.outLines.join("\n"), err: io.errLines.join("\n") };
}

Deno.test("cli: version and --version answer without a config file, a database or a broker", async () => {
  const env = {
    STATUSENGINE_CONFIG: "/nonexistent/config.yml",
    STATUSENGINE_MYSQL_URL: "mysql://nobody:pw@127.0.0.1:1/none",
  };
  for (const argv of [["version"], ["--version"], ["run", "--version"], ["-version"]]) {
    const r = await cli(argv, env);
    assert.equal(r.code, 0, `${argv.join(" ")}: ${r.err}`);
    assert.match(
      r.out,
      /^statusengine-worker \S+ \(commit \S+, (built \S+, )?deno \d+\.\d+\.\d+\)$/,
    );
  }
});

Deno.test("cli: an unknown flag exits 2 with a hint to --help", async () => {
  const r = await cli(["run", "--gearman-max-concurrent-jobs", "64"]);
  assert.equal(r.code, 2);
  assert.match(r.err, /--gearman-max-concurrent-jobs/);
  assert.match(r.err, /--help/);
});

Deno.test("cli: a bad value refuses to start with exit 1, naming the setting, the source and the accepted form", async () => {
  const fromEnv = await cli(["run"], { STATUSENGINE_MYSQL_BATCH_SIZE: "1000" });
  assert.equal(fromEnv.code, 1);
  assert.match(fromEnv.err, /mysql-batch-size/);
  assert.match(fromEnv.err, /STATUSENGINE_MYSQL_BATCH_SIZE/);
  assert.match(fromEnv.err, /1\.\.700/);
  const cap = await cli(["run", "--gearman-max-concurrent-jobs-per-queue", "0"]);
  assert.equal(cap.code, 1);
  assert.match(cap.err, /gearman-max-concurrent-jobs-per-queue/);
});

Deno.test("cli: --help lists every command and never prints a secret", async () => {
  const top = await cli(["--help"]);
  assert.equal(top.code, 0);
  for (
    const c of ["run", "schema", "cleanup", "status", "publish", "losstest", "verify", "version"]
  ) {
    assert.match(top.out, new RegExp(`^  ${c} `, "m"));
  }
  const run = await cli(["run", "--help"], {
    STATUSENGINE_MYSQL_URL: "mysql://se:topsecret@db/se",
  });
  assert.equal(run.code, 0);
  assert.ok(!run.out.includes("topsecret"));
  assert.match(run.out, /--gearman-reconnect-interval/);
  assert.match(run.out, /STATUSENGINE_GEARMAN_ADDR/);
});

Deno.test("cli: run with an unreachable MySQL exits 1 and prints the URL with the password masked", async () => {
  await using gearmand = await startGearmand();
  const r = await cli([
    "run",
    "--gearman-addr",
    gearmand.addr,
    "--mysql-url",
    "mysql://se:topsecret@127.0.0.1:1/statusengine",
    "--metrics-port",
    "0",
  ]);
  assert.equal(r.code, 1);
  assert.match(r.err, /mysql:\/\/se:\*\*\*\*@127\.0\.0\.1:1\/statusengine/);
  assert.ok(!r.err.includes("topsecret"));
});

Deno.test("cli: run refuses to start on a database without the schema, naming the schema command", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  const r = await cli([
    "run",
    "--gearman-addr",
    gearmand.addr,
    "--mysql-url",
    db.url,
    "--metrics-port",
    "0",
    "--dead-letter-file",
    "",
  ]);
  assert.equal(r.code, 1);
  assert.match(r.err, /missing/);
  assert.match(r.err, /"schema" command/);
});

Deno.test("cli: schema creates the tables, then run starts and stops on its signal with exit 0", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  const schema = await cli(["schema", "--mysql-url", db.url]);
  assert.equal(schema.code, 0, schema.err);
  const check = await cli(["schema", "--check", "--mysql-url", db.url]);
  assert.equal(check.code, 0, check.out + check.err);
  const stop = new AbortController();
  const io = bufferIo();
  const running = runCli(
    [
      "run",
      "--gearman-addr",
      gearmand.addr,
      "--mysql-url",
      db.url,
      "--metrics-port",
      "0",
      "--listen-addr",
      `127.0.0.1:${freePort()}`,
      "--dead-letter-file",
      "",
    ],
    {},
    { io, signals: false, signal: stop.signal, logWrite: () => {} },
  );
  await waitFor(async () => {
    const functions = await adminStatus(gearmand.addr);
    return QUEUE_NAMES.every((q) => functions.find((f) => f.function === q)?.workers === 1);
  }, { message: "the worker registered every queue at gearmand" });
  stop.abort();
  assert.equal(await running, 0, io.errLines.join("\n"));
  const [node] = await db.query<{ node_name: string }[]>(
    "SELECT node_name FROM statusengine_nodes",
  );
  assert.equal(node?.node_name, "statusengine", "registered under the default node name (D11)");
});
