/**
 * The writers' pool with several hosts (src/mysql/failover.ts): after a move, no statement takes
 * a connection to the host left. Two TCP proxies in front of one private MariaDB stand in for two
 * hosts; a connection's id tells whether a statement took a new connection or an old one.
 * Every user of the writers' pool goes to the first host that answers, not the first listed.
 */
import assert from "node:assert/strict";
import { startMariadbd, WORKER_USER } from "../helpers/mariadbd.ts";
import { startWorkerServer } from "../helpers/backlog.ts";
import { selfSignedIdentity, startTcpProxy } from "../helpers/tcp_proxy.ts";
import { MysqlHosts } from "../../src/mysql/failover.ts";
import { createWriterPool, poolExecutor } from "../../src/mysql/executor.ts";
import { endPool } from "../../src/mysql/connect.ts";
import { mysqlOptionsFromUrl } from "../../src/util/mysql_url.ts";
import { classifyMysqlError } from "../../src/mysql/errors.ts";
import { errorMessage } from "../../src/log.ts";
import { createScratchDatabase } from "../helpers/mysql.ts";
import { createSchema } from "../helpers/worker.ts";
import { fixture } from "../helpers/fixture_rows.ts";
import { bufferIo } from "../helpers/cli_run.ts";
import { withLogs } from "../helpers/logs.ts";
import { runDeadLettersCommand } from "../../src/cli/dead_letters.ts";

for (const tls of [false, true]) {
  Deno.test(`failover pool${tls ? " (TLS)" : ""}: after the move back to the first host, the idle connections to the second are closed and no statement runs on them`, async () => {
    const certDir = await Deno.makeTempDir({ prefix: "se-failover-tls-" });
    const identity = await selfSignedIdentity();
    await Deno.writeTextFile(`${certDir}/cert.pem`, identity.cert);
    await Deno.writeTextFile(`${certDir}/key.pem`, identity.key);
    await Deno.chmod(certDir, 0o755);
    await using server = await startMariadbd({
      extraArgs: tls ? [`--ssl-cert=${certDir}/cert.pem`, `--ssl-key=${certDir}/key.pem`] : [],
    });
    await using first = await startTcpProxy(`${server.host}:${server.port}`);
    await using second = await startTcpProxy(`${server.host}:${server.port}`);
    const ssl = tls ? `?ssl=${encodeURIComponent('{"rejectUnauthorized":false}')}` : "";
    const options = mysqlOptionsFromUrl(`mysql://root@${first.addr},${second.addr}/mysql${ssl}`);
    const hosts = new MysqlHosts(options, { failbackAfterMs: 0 });
    const pool = createWriterPool(options, 2, hosts);
    try {
      const run = poolExecutor(pool);
      const connectionId = async () =>
        Number((await run.run("SELECT CONNECTION_ID() AS id")).rows[0]?.id);
      const encrypted = async () =>
        String((await run.run("SHOW SESSION STATUS LIKE 'Ssl_cipher'")).rows[0]?.Value ?? "");

      first.block();
      assert.equal(await hosts.check(), undefined);
      assert.equal(hosts.label, second.addr);
      const onSecond = await connectionId();
      assert.equal(await encrypted() !== "", tls, "the connection is encrypted as the URL says");

      first.unblock();
      await hosts.failBack();
      assert.equal(hosts.label, first.addr, "moved back to the first host");
      const accepted = first.accepted;
      const after = await connectionId();
      assert.notEqual(
        after,
        onSecond,
        `the statement after the move back ran on connection ${after}, the idle one to the ` +
          "second host",
      );
      assert.ok(first.accepted > accepted, "a new connection to the first host was opened");
    } finally {
      await hosts.stop();
      await endPool(pool, 5_000);
      await Deno.remove(certDir, { recursive: true });
    }
  });
}

Deno.test("failover pool: dead-letters replay with the first host of the URL down writes through the second", async () => {
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const url = new URL(db.url);
  await using dead = await startTcpProxy(`${url.hostname}:${url.port || 3306}`);
  dead.block();
  const dir = await Deno.makeTempDir({ prefix: "se-failover-replay-" });
  try {
    const path = `${dir}/dead.ndjson`;
    const doc = JSON.parse(fixture("statusngin_hostchecks"));
    doc.messages[0].hostcheck.host_name = "replayed-through-the-second";
    const record = {
      time: "2026-03-01T12:00:00.000Z",
      queue: "statusngin_hostchecks",
      reason: "bad_type",
      error: "e",
      payload: JSON.stringify(doc),
    };
    await Deno.writeTextFile(path, `${JSON.stringify(record)}\n`);
    const twoHosts = db.url.replace(`@${url.host}/`, `@${dead.addr},${url.host}/`);
    assert.notEqual(twoHosts, db.url);
    const stop = new AbortController();
    const io = bufferIo();
    const held = await withLogs(async (logs) => {
      const holding = () => logs.some((l) => l.message.includes("cannot take writes"));
      const running = runDeadLettersCommand(
        {
          action: "replay",
          file: path,
          deadLetterFile: "",
          json: false,
          mysqlUrl: twoHosts,
          batchSize: 100,
          nodeName: "N",
          statusMaxAgeSeconds: 0,
          perfdataToMysql: true,
          progressIntervalMs: 0,
        },
        io,
        stop.signal,
      );
      // Held on the dead first host: stop it there (the replay would wait for that host for ever).
      let done = false;
      void running.finally(() => (done = true));
      while (!done && !holding()) await new Promise((r) => setTimeout(r, 10));
      if (holding()) stop.abort();
      await running;
      return holding();
    });
    assert.equal(held, false, `the replay held its rows for the dead first host: ${io.outLines}`);
    const rows = await db.query<{ n: number }[]>(
      "SELECT COUNT(*) AS n FROM statusengine_hostchecks WHERE hostname = ?",
      ["replayed-through-the-second"],
    );
    assert.equal(rows[0]?.n, 1);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("failover pool (TLS, verifyIdentity): after a move the writers' connections check the certificate of the host they reach", async () => {
  const certDir = await Deno.makeTempDir({ prefix: "se-failover-tls-" });
  const identity = await selfSignedIdentity();
  await Deno.writeTextFile(`${certDir}/cert.pem`, identity.cert);
  await Deno.writeTextFile(`${certDir}/key.pem`, identity.key);
  await Deno.chmod(certDir, 0o755);
  await using server = await startMariadbd({
    extraArgs: [`--ssl-cert=${certDir}/cert.pem`, `--ssl-key=${certDir}/key.pem`],
  });
  await using proxy = await startTcpProxy(`${server.host}:${server.port}`);
  // The first host is gone (its name resolves no more); the second's certificate names it
  // `localhost`, which is how the URL names it.
  const ssl = encodeURIComponent(JSON.stringify({ ca: identity.cert, verifyIdentity: true }));
  const options = mysqlOptionsFromUrl(
    `mysql://root@db-gone.invalid:3306,localhost:${proxy.port}/mysql?ssl=${ssl}`,
  );
  const hosts = new MysqlHosts(options, { failbackAfterMs: 0 });
  const pool = createWriterPool(options, 2, hosts);
  try {
    assert.equal(await hosts.check(), undefined, "the probe of the second host passes");
    assert.equal(hosts.label, `localhost:${proxy.port}`);
    const encrypted = await poolExecutor(pool).run("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
      .catch((err: unknown) => {
        throw new Error(`as ${classifyMysqlError(err)}: ${errorMessage(err)}`, { cause: err });
      });
    assert.notEqual(String(encrypted.rows[0]?.Value ?? ""), "", "the connection is encrypted");
  } finally {
    await hosts.stop();
    await endPool(pool, 5_000);
    await Deno.remove(certDir, { recursive: true });
  }
});

/**
 * Two private servers with the worker's own account (no SUPER, no READ ONLY ADMIN, so
 * `read_only` refuses its writes), the first behind a proxy that can make it silent.
 */
async function twoWriterServers() {
  const first = await startWorkerServer(READ_ONLY_DB);
  const second = await startWorkerServer(READ_ONLY_DB).catch(async (err: unknown) => {
    await first.stop();
    throw err;
  });
  const proxy = await startTcpProxy(`${first.host}:${first.port}`);
  const { user, password } = WORKER_USER;
  const h2 = `${second.host}:${second.port}`;
  const options = mysqlOptionsFromUrl(
    `mysql://${user}:${password}@${proxy.addr},${h2}/${READ_ONLY_DB}`,
  );
  const hosts = new MysqlHosts(options, { failbackAfterMs: 0 });
  const pool = createWriterPool(options, 2, hosts);
  const run = poolExecutor(pool, { onUnavailable: () => hosts.suspect() });
  const write = (name: string) =>
    run.run(
      "INSERT INTO statusengine_nodes (node_name, node_version, node_start_time) VALUES (?, ?, ?)",
      [name, "test", 0],
    );
  return {
    first,
    second,
    proxy,
    h1: proxy.addr,
    h2,
    hosts,
    write,
    async [Symbol.asyncDispose]() {
      await hosts.stop();
      await endPool(pool, 5_000);
      await proxy[Symbol.asyncDispose]();
      await first.stop();
      await second.stop();
    },
  };
}

const READ_ONLY_DB = "statusengine";

Deno.test("failover pool: a read-only earlier host (an old primary back as a replica) is not taken back", async () => {
  await using s = await twoWriterServers();
  s.proxy.block();
  assert.equal(await s.hosts.check(), undefined);
  assert.equal(s.hosts.label, s.h2);
  await s.write("on-the-second");

  await s.first.query("SET GLOBAL read_only = 1");
  s.proxy.unblock();
  await s.hosts.failBack();
  assert.equal(
    s.hosts.label,
    s.h2,
    `moved back to the read-only first host ${s.h1}: every write there fails with 1290`,
  );
  await s.write("still-on-the-second");

  await s.first.query("SET GLOBAL read_only = 0");
  await s.hosts.failBack();
  assert.equal(s.hosts.label, s.h1, "moved back once the first host takes writes again");
  await s.write("back-on-the-first");
});

Deno.test("failover pool: a write refused as read-only (1290) moves the pool to a host that takes writes", async () => {
  await using s = await twoWriterServers();
  assert.equal(await s.hosts.check(), undefined);
  assert.equal(s.hosts.label, s.h1);
  await s.write("on-the-first");

  await s.first.query("SET GLOBAL read_only = 1");
  const refused = await s.write("refused").then(() => undefined, (err: unknown) => err);
  assert.equal(classifyMysqlError(refused), "unavailable", errorMessage(refused));
  assert.equal(await s.hosts.check(), undefined);
  assert.equal(
    s.hosts.label,
    s.h2,
    `stayed on the read-only host ${s.h1} while ${s.h2} takes writes: the writes are held`,
  );
  await s.write("on-the-second");
});

for (const tls of [false, true]) {
  Deno.test(`failover pool (--mysql-statement-timeout 0${tls ? ", TLS" : ""}): a statement stuck on a frozen host left is given up at the move, not waited for`, async () => {
    const certDir = await Deno.makeTempDir({ prefix: "se-failover-tls-" });
    const identity = await selfSignedIdentity();
    await Deno.writeTextFile(`${certDir}/cert.pem`, identity.cert);
    await Deno.writeTextFile(`${certDir}/key.pem`, identity.key);
    await Deno.chmod(certDir, 0o755);
    await using server = await startMariadbd({
      extraArgs: tls ? [`--ssl-cert=${certDir}/cert.pem`, `--ssl-key=${certDir}/key.pem`] : [],
    });
    await using first = await startTcpProxy(`${server.host}:${server.port}`);
    await using second = await startTcpProxy(`${server.host}:${server.port}`);
    const ssl = tls ? `?ssl=${encodeURIComponent('{"rejectUnauthorized":false}')}` : "";
    const options = mysqlOptionsFromUrl(`mysql://root@${first.addr},${second.addr}/mysql${ssl}`);
    const hosts = new MysqlHosts(options, { failbackAfterMs: 0 });
    const pool = createWriterPool(options, 2, hosts);
    try {
      // No statement timeout: nothing but the move can end a statement a frozen host never answers.
      const run = poolExecutor(pool, { onUnavailable: () => hosts.suspect() });
      assert.equal(await hosts.check(), undefined);
      assert.equal(hosts.label, first.addr);
      await run.run("SELECT 1");
      const stuck = run.run("SELECT 2 AS x").then(() => undefined, (err: unknown) => err);
      first.freeze();
      assert.equal(await hosts.check(), undefined);
      assert.equal(hosts.label, second.addr, "moved off the frozen host");
      // Bounded only so that the fault fails the test instead of hanging it.
      const bound = 10_000;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const waited = new Promise<"waiting">((r) => (timer = setTimeout(() => r("waiting"), bound)));
      const settled = await Promise.race([stuck.then((err) => ({ err })), waited]);
      clearTimeout(timer);
      assert.notEqual(
        settled,
        "waiting",
        `the statement on the frozen host left was still waiting ${bound / 1000} s after the ` +
          "move: its writer stalls while the next host takes writes",
      );
      const { err } = settled as { err: unknown };
      assert.equal(
        classifyMysqlError(err),
        "unavailable",
        `held and sent again: ${errorMessage(err)}`,
      );
      assert.equal(
        (await run.run("SELECT 3 AS x")).rows[0]?.x,
        3,
        "the next host takes statements",
      );
    } finally {
      first.unblock();
      await hosts.stop();
      await endPool(pool, 5_000);
      await Deno.remove(certDir, { recursive: true });
    }
  });
}
