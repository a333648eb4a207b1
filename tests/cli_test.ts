/**
 * The command line end to end (in-process through runCli): exit codes,
 * messages and what must never be printed.
 */
import assert from "node:assert/strict";
import { runCli } from "../src/cli/mod.ts";
import { bufferIo, startRun } from "./helpers/cli_run.ts";
import { createScratchDatabase, testMysqlBaseUrl } from "./helpers/mysql.ts";
import { startGearmand } from "./helpers/gearmand.ts";
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

Deno.test("cli: version --help prints help, --json is under Output:, publish names both brokers", async () => {
  const version = await cli(["version", "--help"]);
  assert.equal(version.code, 0, version.err);
  assert.match(version.out, /^Usage: statusengine-worker version/);
  for (const command of ["dead-letters", "status", "config"]) {
    const help = await cli([command, "--help"]);
    assert.match(help.out, /\nOutput:\n {2}--json/, command);
  }
  const deadLetters = await cli(["dead-letters", "--help"]);
  assert.doesNotMatch(deadLetters.out, /\nStatus:\n/);
  const publish = await cli(["publish", "--help"]);
  assert.match(publish.out, /to gearmand or RabbitMQ/);
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
    const c of [
      "run",
      "schema",
      "cleanup",
      "status",
      "publish",
      "losstest",
      "verify",
      "dead-letters",
      "version",
    ]
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

Deno.test("cli: config never prints the TLS key passphrase of a --mysql-url", async () => {
  // mysql2's ssl options travel in the URL as JSON; a passphrase there is as secret as the password.
  const ssl = encodeURIComponent(JSON.stringify({ passphrase: "topsecret", ca: "/etc/ca.pem" }));
  for (const argv of [["config", "run"], ["config", "--json", "run"]]) {
    const r = await cli(argv, { STATUSENGINE_MYSQL_URL: `mysql://se:pw@db/se?ssl=${ssl}` });
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /mysql:\/\/se:\*\*\*\*@db\/se\?ssl=/);
    assert.ok(!(r.out + r.err).includes("topsecret"), r.out);
  }
});

Deno.test("cli: a secret query value with an unencoded # or & is not printed from there on", async () => {
  // The URL parser ends the value at the # (a fragment) or & (another parameter); the refusal
  // quoting the URL showed the rest of the passphrase or password.
  const cases: Record<string, string>[] = [
    { STATUSENGINE_MYSQL_URL: 'mysql://se:pw@db/se?ssl={"passphrase":"top#secretpw"}' },
    { STATUSENGINE_MYSQL_URL: 'mysql://se:pw@db/se?ssl={"passphrase":"top&secretpw"}' },
    { STATUSENGINE_INFLUXDB_URL: "http://influx:8086/write?db=x&p=top#secretpw" },
  ];
  for (const env of cases) {
    const r = await cli(["config", "run"], env);
    assert.equal(r.code, 1, `${JSON.stringify(env)}: refused`);
    assert.ok(!(r.out + r.err).includes("secretpw"), r.out + r.err);
  }
});

Deno.test("cli: dead-letters replay wants its file named, and summary has nothing to read when the file is disabled", async () => {
  const replay = await cli(["dead-letters", "replay"]);
  assert.equal(replay.code, 2);
  assert.match(replay.err, /replay needs the file named: move the worker's file aside first/);
  const summary = await cli(["dead-letters", "summary", "--dead-letter-file", ""]);
  assert.equal(summary.code, 2);
  assert.match(summary.err, /--dead-letter-file is empty/);
  const help = await cli(["dead-letters", "--help"]);
  assert.match(
    help.out,
    /^Usage: statusengine-worker dead-letters summary\|replay \[PATH\] \[flags\]$/m,
  );
});

// An unreachable MySQL is waited for at start-up now (tests/startup_wait_test.ts); refused
// credentials are what ends the start.
Deno.test("cli: run with MySQL refusing the credentials exits 1 and prints the URL with the password masked", async () => {
  await using gearmand = await startGearmand();
  const base = new URL(testMysqlBaseUrl());
  const r = await cli([
    "run",
    "--gearman-addr",
    gearmand.addr,
    "--mysql-url",
    `mysql://se_no_such_user:topsecret@${base.host}/statusengine`,
    "--metrics-port",
    "0",
  ]);
  assert.equal(r.code, 1);
  const shown = `mysql://se_no_such_user:****@${base.host}/statusengine`;
  assert.ok(r.err.includes(shown), r.err);
  assert.match(r.err, /waiting cannot fix this/);
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
  const { done: running, io, logs } = startRun(gearmand.addr, db.url, {
    args: ["--mysql-batch-size", "250"],
    signal: stop.signal,
  });
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
  // docs/logging.md: the start-up log names the node and the settings that differ from the
  // defaults (and only those).
  const starting = logs.find((l) => l.includes("statusengine-worker starting")) ?? "";
  assert.match(starting, /node=statusengine/);
  const changed = logs.find((l) => /settings: \d+ differ from the defaults/.test(l)) ?? "";
  assert.match(changed, /mysql-batch-size=250/);
  assert.match(changed, /gearman-addr=127\.0\.0\.1:\d+/);
  assert.ok(!changed.includes("drain-timeout"), changed);
});

const MAIN = new URL("../main.ts", import.meta.url).pathname;

/** The CLI as a process: stdout and stderr apart, as a script piping the output sees them. */
async function cliProcess(argv: string[], env: Record<string, string> = {}) {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", MAIN, ...argv],
    env,
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decoder = new TextDecoder();
  return {
    code: output.code,
    out: decoder.decode(output.stdout),
    err: decoder.decode(output.stderr),
  };
}

async function withConfigFile<T>(text: string, use: (path: string) => Promise<T>): Promise<T> {
  const path = await Deno.makeTempFile({ suffix: ".yml" });
  try {
    await Deno.writeTextFile(path, text);
    return await use(path);
  } finally {
    await Deno.remove(path);
  }
}

// status --json used to print the config warnings (a legacy key, the /proc password hint) as
// log lines on stdout before the JSON, so `status --json | jq` failed exactly when something
// was worth a warning.
Deno.test("cli: status --json prints only JSON on stdout, the warnings go to stderr", async () => {
  const file = "gearman:\n  address: 127.0.0.1\n  port: 1\n  timeout: 5\nmysql_batchsize: 3\n";
  const r = await withConfigFile(file, (path) =>
    cliProcess([
      "status",
      "--json",
      "--config",
      path,
      "--mysql-url",
      "mysql://se:topsecret@127.0.0.1:1/statusengine",
    ]));
  assert.equal(r.code, 1, r.err);
  const report = JSON.parse(r.out) as { ok: boolean };
  assert.equal(report.ok, false);
  assert.match(r.err, /gearman\.timeout/);
  assert.match(r.err, /\/proc/);
  assert.match(r.err, /did you mean mysql_batch_size/);
  assert.ok(!(r.out + r.err).includes("topsecret"));
});

Deno.test("cli: config --json prints one JSON document naming each setting's value and source", async () => {
  const file = [
    "mysql_batch_size: 500",
    "metrics_prot: 9999",
    "age_hostchecks: 3",
    "check_for_commands: 1",
    "mysql:",
    "  host: db.example",
    "  password: topsecret",
    "",
  ].join("\n");
  const r = await withConfigFile(file, async (path) => ({
    path,
    ...(await cliProcess(["config", "--json", "run", "--config", path, "--log-level", "debug"], {
      STATUSENGINE_NODE_NAME: "node-7",
    })),
  }));
  assert.equal(r.code, 0, r.err);
  const doc = JSON.parse(r.out) as {
    command: string;
    settings: Record<string, { value: string | null; source: string; origin: string }>;
    warnings: string[];
  };
  assert.equal(doc.command, "run");
  assert.deepEqual(doc.settings["mysql-batch-size"], {
    value: "500",
    source: `file ${r.path} key mysql_batch_size`,
    origin: "file",
    default: "100",
    secret: false,
  });
  assert.equal(doc.settings["log-level"]?.source, "flag --log-level");
  assert.equal(doc.settings["node-name"]?.source, "env STATUSENGINE_NODE_NAME");
  assert.equal(doc.settings["node-name"]?.value, "node-7");
  assert.equal(doc.settings["mysql-url"]?.origin, "legacy");
  assert.match(
    doc.settings["mysql-url"]?.value ?? "",
    /^mysql:\/\/statusengine:\*\*\*\*@db\.example:3306\//,
  );
  assert.equal(doc.settings["check-for-commands"]?.value, "true");
  assert.equal(doc.settings["metrics-port"]?.source, "default");
  assert.equal(doc.settings["drain-timeout"]?.value, "30s");
  // A cleanup key in the worker's file is known; a typo is not.
  assert.ok(!("age-hostchecks" in doc.settings));
  assert.deepEqual(doc.warnings.filter((w) => w.includes("unknown key")).length, 1);
  assert.match(doc.warnings.join("\n"), /"metrics_prot".*did you mean metrics_port\?/);
  assert.match(r.err, /warning: .*metrics_prot/);
  assert.ok(!(r.out + r.err).includes("topsecret"));
});

// InfluxDB 1.x also takes its credentials as the query parameters u and p (…/write?db=x&u=U&p=P),
// and the URL is sent as it is; `config` printed that p, and as a flag it drew no /proc warning.
Deno.test("cli: config masks the password of an InfluxDB 1.x URL given as its p parameter", async () => {
  const url = "http://influx:8086/write?db=se&u=writer&p=Infl0xS3cret&precision=s";
  const r = await cli(["config", "--influxdb-url", url]);
  assert.equal(r.code, 0, r.err);
  assert.match(
    r.out,
    /influxdb-url +http:\/\/influx:8086\/write\?db=se&u=writer&p=\*\*\*\*&precision=s/,
  );
  assert.ok(!(r.out + r.err).includes("Infl0xS3cret"), r.out + r.err);
  assert.match(r.err, /influxdb-url is given on the command line/);
});

Deno.test("cli: config shows another command's settings, and refuses where the command would", async () => {
  const cleanup = await cli(["config", "cleanup", "--age-hostchecks", "3"]);
  assert.equal(cleanup.code, 0, cleanup.err);
  assert.match(cleanup.out, /^age-hostchecks +3 +\(flag --age-hostchecks\)$/m);
  assert.match(cleanup.out, /^age-perfdata +90 +\(default\)$/m);
  assert.ok(!cleanup.out.includes("gearman-addr"));
  // The command defaults to run, and flags after config without a command are run's.
  const run = await cli(["config", "--metrics-port", "0"]);
  assert.equal(run.code, 0, run.err);
  assert.match(run.out, /^metrics-port +0 +\(flag --metrics-port\)$/m);
  // Refused values: exit 1 as run would, the message on stderr, JSON still parses.
  const bad = await cli(["config", "--json", "run", "--mysql-batch-size", "900"]);
  assert.equal(bad.code, 1);
  assert.match(bad.err, /mysql-batch-size.*1\.\.700/);
  assert.match((JSON.parse(bad.out) as { error: string }).error, /mysql-batch-size/);
  const none = await cli([
    "config",
    "run",
    "--exclude-queues",
    QUEUE_NAMES.join(","),
  ]);
  assert.equal(none.code, 1);
  assert.match(none.err, /no queue left to consume/);
  const usage = await cli(["config", "run", "--gearman-adr", "x:1"]);
  assert.equal(usage.code, 2);
  assert.match(usage.err, /did you mean --gearman-addr\?/);
  const help = await cli(["config", "--help"]);
  assert.equal(help.code, 0);
  assert.match(help.out, /^Usage: statusengine-worker config \[--json\] \[command\]/);
});

// "config run --json" used to be refused: --json was read as a flag of run, which has none.
Deno.test("cli: config's --json after the command works as before it; a command that takes --json itself keeps it", async () => {
  const before = await cli(["config", "--json", "run", "--mysql-batch-size", "200"]);
  assert.equal(before.code, 0, before.err);
  for (
    const argv of [
      ["config", "run", "--json", "--mysql-batch-size", "200"],
      ["config", "run", "--mysql-batch-size", "200", "-json"],
    ]
  ) {
    const r = await cli(argv);
    assert.equal(r.code, 0, `${argv.join(" ")}: ${r.err}`);
    assert.deepEqual(JSON.parse(r.out), JSON.parse(before.out), argv.join(" "));
  }
  // status takes --json itself: config prints JSON, and shows status's json as given.
  const status = await cli(["config", "status", "--json"]);
  assert.equal(status.code, 0, status.err);
  const doc = JSON.parse(status.out) as { settings: Record<string, { value: string }> };
  assert.equal(doc.settings.json?.value, "true");
  // --no-json after the command is config's too: text.
  const text = await cli(["config", "run", "--no-json"]);
  assert.equal(text.code, 0, text.err);
  assert.match(text.out, /^mysql-batch-size +100 +\(default\)$/m);
});

// Under systemd stdout and stderr are both the journal: the start-up error was logged on stdout
// and printed again on stderr, two journal lines for one failure, neither at priority err.
Deno.test("cli: a fatal start-up error reaches the journal once, at priority err", async () => {
  const argv = [
    "run",
    "--queues",
    "statusngin_hostchecks",
    "--exclude-queues",
    "statusngin_hostchecks",
  ];
  const journal = await cliProcess(argv, { JOURNAL_STREAM: "8:4242" });
  assert.equal(journal.code, 1);
  const fatal = journal.out.split("\n").filter((l) => l.includes("no queue left to consume"));
  assert.equal(fatal.length, 1, journal.out);
  assert.ok(fatal[0]?.startsWith("<3>"), fatal[0]);
  assert.equal(journal.err, "");
  // Piped apart (a script), stderr still carries the message for whoever reads only stderr.
  const piped = await cliProcess(argv);
  assert.equal(piped.code, 1);
  assert.match(piped.err, /no queue left to consume/);
});

Deno.test("cli: a fatal start-up error is printed once when stdout and stderr are one file (2>&1)", async () => {
  // The walker's case: a script or supervisor merging both streams read the error twice, once
  // as the log record and once as the stderr line. Without --allow-all, as the shipped binary
  // runs (tools/compile.ts).
  const output = await new Deno.Command("sh", {
    args: [
      "-c",
      'exec "$0" run --allow-net --allow-env --allow-read "$1" run --queues statusngin_hostchecks ' +
      "--exclude-queues statusngin_hostchecks 2>&1",
      Deno.execPath(),
      MAIN,
    ],
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const merged = new TextDecoder().decode(output.stdout);
  assert.equal(output.code, 1, merged);
  const fatal = merged.split("\n").filter((l) => l.includes("no queue left to consume"));
  assert.equal(fatal.length, 1, merged);
  assert.match(fatal[0] ?? "", /level=error/);
});
