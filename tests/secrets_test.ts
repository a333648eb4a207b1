/**
 * No password or key from any setting appears anywhere the worker writes: log
 * lines (debug included), `/metrics`, HTTP answers, `status` output, error
 * text. Every secret setting gets a recognisable value that really works (a
 * MySQL user and a RabbitMQ user created for the test) or fails on purpose
 * (unreachable servers, a wrong password, a URL that does not parse).
 */
import assert from "node:assert/strict";
import { cliRun } from "./helpers/cli_run.ts";
import { createScratchDatabase, type ScratchDatabase, testMysqlBaseUrl } from "./helpers/mysql.ts";
import { createScratchVhost } from "./helpers/rabbitmq.ts";
import { freePort, startGearmand } from "./helpers/gearmand.ts";
import { startWorkerProcess } from "./helpers/worker_process.ts";
import { waitFor } from "./helpers/wait.ts";
import { createSchema } from "./helpers/worker.ts";

const TAG = crypto.randomUUID().slice(0, 8);
// An empty environment value means "not set", so the dead-letter file cannot be disabled
// from the environment; each worker of this file writes its own.
const deadLetterPath = () => Deno.makeTempFileSync({ prefix: "se-secrets-", suffix: ".ndjson" });
const SECRETS = {
  mysqlUrlPassword: `SekretMysqlUrl${TAG}`,
  mysqlDsnPassword: `SekretMysqlDsn${TAG}`,
  amqpPassword: `SekretAmqp${TAG}`,
  wsKey: `SekretWsKey${TAG}`,
  commandKey: `SekretCommandKey${TAG}`,
};

/** Fail naming where a secret showed up. */
function assertNoSecret(where: string, text: string): void {
  for (const [name, secret] of Object.entries(SECRETS)) {
    assert.ok(!text.includes(secret), `${name} appears in ${where}:\n${text.slice(0, 2000)}`);
  }
}

async function rabbitmqctl(...args: string[]): Promise<void> {
  const out = await new Deno.Command("rabbitmqctl", { args, stdout: "piped", stderr: "piped" })
    .output();
  if (!out.success) {
    throw new Error(`rabbitmqctl ${args[0]} failed: ${new TextDecoder().decode(out.stderr)}`);
  }
}

/** A MySQL user with `password` on the scratch database; dropped on dispose. */
async function mysqlUser(db: ScratchDatabase, password: string): Promise<
  AsyncDisposable & {
    url: string;
    dsn: string;
  }
> {
  const user = `se_sec_${crypto.randomUUID().slice(0, 8)}`;
  await db.query("CREATE USER ?@'%' IDENTIFIED BY ?", [user, password]);
  await db.query(`GRANT ALL ON \`${db.name}\`.* TO ?@'%'`, [user]);
  return {
    url: `mysql://${user}:${password}@${db.host}:${db.port}/${db.name}`,
    dsn: `${user}:${password}@tcp(${db.host}:${db.port})/${db.name}`,
    async [Symbol.asyncDispose]() {
      await db.query("DROP USER IF EXISTS ?@'%'", [user]);
    },
  };
}

Deno.test("secrets: a running worker with every secret set never shows one in logs, /metrics, HTTP answers or status", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using urlUser = await mysqlUser(db, SECRETS.mysqlUrlPassword);
  await using vhost = await createScratchVhost("se_secrets");
  const amqpUser = `se_sec_${TAG}`;
  await rabbitmqctl("add_user", amqpUser, SECRETS.amqpPassword);
  try {
    await rabbitmqctl("set_permissions", "-p", vhost.name, amqpUser, ".*", ".*", ".*");
    const amqpUrl = `amqp://${amqpUser}:${SECRETS.amqpPassword}@127.0.0.1:5672/${vhost.name}`;
    const ports = { metrics: freePort(), ws: freePort(), commands: freePort() };
    const env = {
      STATUSENGINE_CONSUMER: "rabbitmq",
      STATUSENGINE_RABBITMQ_URL: amqpUrl,
      STATUSENGINE_MYSQL_URL: urlUser.url,
      STATUSENGINE_API_KEYS: SECRETS.wsKey,
      STATUSENGINE_API_COMMAND_KEYS: SECRETS.commandKey,
      STATUSENGINE_LOG_LEVEL: "debug",
      STATUSENGINE_METRICS_PORT: String(ports.metrics),
      STATUSENGINE_LISTEN_ADDR: `127.0.0.1:${ports.ws}`,
      STATUSENGINE_COMMAND_LISTEN_ADDR: `127.0.0.1:${ports.commands}`,
      STATUSENGINE_DEAD_LETTER_FILE: deadLetterPath(),
      STATUSENGINE_NODE_NAME: "N",
    };
    const stop = new AbortController();
    const running = cliRun(["run"], env, stop.signal);
    const seen: string[] = [];
    try {
      const base = `http://127.0.0.1:${ports.metrics}`;
      await waitFor(async () => {
        try {
          const res = await fetch(`${base}/readyz`);
          await res.body?.cancel();
          return res.status === 200;
        } catch {
          return false;
        }
      }, { timeoutMs: 30_000, message: "the worker is ready" });

      const commands = `http://127.0.0.1:${ports.commands}/commands`;
      const answers = [
        await fetch(commands, { method: "POST", body: "{}" }),
        await fetch(commands, {
          method: "POST",
          headers: { authorization: `Bearer ${SECRETS.commandKey}x` },
          body: "{}",
        }),
        await fetch(commands, {
          method: "POST",
          headers: { "x-api-key": SECRETS.commandKey },
          body: '{"Command":"raw","Data":"SHUTDOWN_PROGRAM"}',
        }),
        await fetch(commands, {
          method: "POST",
          headers: { "x-api-key": SECRETS.commandKey },
          body: `{"Command":"raw","Data":"ADD_HOST_COMMENT;web01;1;me;${SECRETS.wsKey}"}`,
        }),
        await fetch(`http://127.0.0.1:${ports.ws}/ws?api_key=${SECRETS.wsKey}x`),
      ];
      for (const res of answers) seen.push(`${res.status} ${await res.text()}`);
      assert.deepEqual(seen.map((s) => s.slice(0, 3)), ["401", "401", "403", "202", "401"]);
      // The last command was published with the secret inside its arguments: that is the
      // caller's text, sent on purpose; it is not echoed in any answer or log line.
      seen.pop();
      seen.pop();
      const ws = new WebSocket(`ws://127.0.0.1:${ports.ws}/ws`, {
        headers: { authorization: `Bearer ${SECRETS.wsKey}` },
      });
      await new Promise<void>((resolve, reject) => {
        ws.onopen = () => resolve();
        ws.onerror = () => reject(new Error("handshake refused"));
      });
      await new Promise<void>((resolve) => {
        ws.onclose = () => resolve();
        ws.close();
      });
      seen.push(await (await fetch(`${base}/metrics`)).text());

      for (const json of [[], ["--json"]]) {
        const status = await cliRun([
          "status",
          ...json,
          "--metrics-url",
          `${base}/metrics`,
        ], env);
        assert.equal(status.code, 0, status.text);
        seen.push(status.text);
      }
    } finally {
      stop.abort();
    }
    const run = await running;
    assert.equal(run.code, 0, run.text);
    assert.match(run.text, /MySQL connected.*:\*\*\*\*@127\.0\.0\.1/, "the URL is logged masked");
    assert.match(run.text, /command: rejected unauthorized request/);
    // The caller's own text is the one place the key may travel (a comment argument).
    assertNoSecret("the worker's output", run.text.replaceAll(`me;${SECRETS.wsKey}`, ""));
    for (const [i, text] of seen.entries()) assertNoSecret(`answer ${i}`, text);
  } finally {
    await rabbitmqctl("delete_user", amqpUser).catch(() => {});
  }
});

Deno.test("secrets: errors that print URLs mask them: unreachable or refusing MySQL (URL and DSN), wrong and malformed RabbitMQ URLs", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const common = {
    STATUSENGINE_API_KEYS: SECRETS.wsKey,
    STATUSENGINE_API_COMMAND_KEYS: SECRETS.commandKey,
    STATUSENGINE_LOG_LEVEL: "debug",
    STATUSENGINE_METRICS_PORT: "0",
    STATUSENGINE_LISTEN_ADDR: `127.0.0.1:${freePort()}`,
    STATUSENGINE_COMMAND_LISTEN_ADDR: `127.0.0.1:${freePort()}`,
    STATUSENGINE_DEAD_LETTER_FILE: deadLetterPath(),
    STATUSENGINE_GEARMAN_ADDR: gearmand.addr,
  };
  const unreachableUrl = `mysql://se:${SECRETS.mysqlUrlPassword}@127.0.0.1:1/statusengine`;
  const unreachableDsn = `se:${SECRETS.mysqlDsnPassword}@tcp(127.0.0.1:1)/statusengine`;
  const wrongAmqp = `amqp://guest:${SECRETS.amqpPassword}@127.0.0.1:5672/`;
  // `run` waits for a MySQL that does not answer (it starts like it runs); refused credentials
  // end its start, with the URL in the message.
  const mysqlHost = new URL(testMysqlBaseUrl()).host;
  const refusedUrl =
    `mysql://se_no_such_user:${SECRETS.mysqlUrlPassword}@${mysqlHost}/statusengine`;
  const refusedDsn = `se_no_such_user:${SECRETS.mysqlDsnPassword}@tcp(${mysqlHost})/statusengine`;
  const cases: { why: string; argv: string[]; env: Record<string, string> }[] = [
    {
      why: "run, MySQL URL with refused credentials",
      argv: ["run"],
      env: { ...common, STATUSENGINE_MYSQL_URL: refusedUrl },
    },
    {
      why: "run, MySQL DSN with refused credentials",
      argv: ["run", "--mysql-dsn", refusedDsn],
      env: common,
    },
    {
      why: "run, MySQL URL that does not parse",
      argv: ["run", "--mysql-url", `mysql://se:${SECRETS.mysqlUrlPassword}/statusengine`],
      env: common,
    },
    {
      why: "run, wrong RabbitMQ password",
      argv: ["run", "--consumer", "rabbitmq", "--rabbitmq-url", wrongAmqp],
      env: { ...common, STATUSENGINE_MYSQL_URL: db.url },
    },
    {
      why: "run, RabbitMQ URL that does not parse",
      argv: [
        "run",
        "--consumer",
        "rabbitmq",
        "--rabbitmq-url",
        `amqp://guest:${SECRETS.amqpPassword}@127.0.0.1:99999999/`,
      ],
      env: { ...common, STATUSENGINE_MYSQL_URL: db.url },
    },
    {
      why: "status, unreachable MySQL and a wrong RabbitMQ password",
      argv: ["status", "--consumer", "rabbitmq", "--rabbitmq-url", wrongAmqp],
      env: { STATUSENGINE_MYSQL_URL: unreachableUrl },
    },
    {
      why: "status --json, unreachable MySQL DSN",
      argv: ["status", "--json", "--mysql-dsn", unreachableDsn],
      env: { STATUSENGINE_GEARMAN_ADDR: gearmand.addr },
    },
    {
      why: "schema, unreachable MySQL",
      argv: ["schema", "--mysql-url", unreachableUrl],
      env: {},
    },
    {
      why: "run --help with every secret in the environment",
      argv: ["run", "--help"],
      env: {
        ...common,
        STATUSENGINE_MYSQL_URL: unreachableUrl,
        STATUSENGINE_RABBITMQ_URL: wrongAmqp,
      },
    },
  ];
  for (const c of cases) {
    const r = await cliRun(c.argv, c.env);
    if (!c.argv.includes("--help")) assert.notEqual(r.code, 0, `${c.why} fails`);
    assert.match(r.text, /\*\*\*\*|\(hidden\)|hidden\)/, `${c.why} shows a masked value`);
    assertNoSecret(c.why, r.text);
  }
});

Deno.test("secrets: the worker as a process with a MySQL URL, a shadowed DSN and both key sets keeps them out of its output", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  await using urlUser = await mysqlUser(db, SECRETS.mysqlUrlPassword);
  await using worker = await startWorkerProcess({
    gearmanAddr: gearmand.addr,
    mysqlUrl: urlUser.url,
    args: ["--log-level", "debug", "--command-listen-addr", `127.0.0.1:${freePort()}`],
    env: {
      // A lower-precedence source than the flag: unused, and still never printed.
      STATUSENGINE_MYSQL_DSN: `se:${SECRETS.mysqlDsnPassword}@tcp(127.0.0.1:3306)/x`,
      STATUSENGINE_API_KEYS: SECRETS.wsKey,
      STATUSENGINE_API_COMMAND_KEYS: SECRETS.commandKey,
    },
  });
  const metrics = await worker.metrics();
  assert.match(metrics, /statusengine_http_connections_open\{listener="commands"\} /);
  worker.kill("SIGTERM");
  assert.equal((await worker.status).code, 0);
  const output = [...worker.lines(), worker.stderr()].join("\n");
  assert.match(output, /shutdown complete/);
  assertNoSecret("the process's output", output);
  assertNoSecret("/metrics", metrics);
});
