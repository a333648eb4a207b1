import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { startMariadbd } from "./mariadbd.ts";

Deno.test("mariadbd helper: a private server answers on its own port and leaves nothing behind", async () => {
  const server = await startMariadbd();
  const datadir = server.datadir;
  try {
    assert.notEqual(server.port, 3306);
    const rows = await server.query<{ v: string }[]>("SELECT VERSION() AS v");
    assert.match(rows[0]?.v ?? "", /MariaDB/);
  } finally {
    await server.stop();
  }
  await assert.rejects(Deno.stat(datadir), Deno.errors.NotFound);
});

// What the disk-full fault tests rely on: a file that may not grow makes
// InnoDB answer 1114 "table is full" (and the server survives), and lifting
// the limit heals it without a restart.
Deno.test("mariadbd helper: limitFileSize makes a growing table fail with 1114 until the limit is lifted", async () => {
  await using server = await startMariadbd();
  await server.query("CREATE DATABASE d");
  await server.query(
    "CREATE TABLE d.t (id int auto_increment primary key, v varchar(2000)) ENGINE=InnoDB",
  );
  const sizes = await server.fileSizes();
  const own = sizes.get("d/t.ibd");
  assert.ok(own !== undefined, `d/t.ibd in ${[...sizes.keys()].join(", ")}`);
  // Every file the server writes at high offsets (redo log, system
  // tablespace) is already larger than the table: only growth is refused.
  const largest = Math.max(...sizes.values());
  await server.limitFileSize(largest);
  const conn = await mysql.createConnection({ host: server.host, port: server.port, user: "root" });
  try {
    let failure: unknown;
    for (let i = 0; i < 20_000 && failure === undefined; i++) {
      await conn.query("INSERT INTO d.t (v) VALUES (REPEAT('x', 2000))").catch((err) => {
        failure = err;
      });
    }
    assert.equal((failure as { errno?: number } | undefined)?.errno, 1114, String(failure));
    await server.limitFileSize(undefined);
    await conn.query("INSERT INTO d.t (v) VALUES (REPEAT('x', 2000))");
  } finally {
    await conn.end();
  }
});

// What the MySQL-restart tests rely on: the server goes away for good (clients see their
// connections end and new ones refused), and comes back on the same port with its data.
Deno.test("mariadbd helper: down and restart keep the port and the data", async () => {
  await using server = await startMariadbd();
  await server.query("CREATE DATABASE d");
  await server.query("CREATE TABLE d.t (id int primary key) ENGINE=InnoDB");
  await server.query("INSERT INTO d.t VALUES (1)");
  const pid = server.pid;
  await server.down("SIGTERM");
  await assert.rejects(server.query("SELECT 1"));
  await server.restart();
  assert.notEqual(server.pid, pid);
  assert.deepEqual(await server.query("SELECT id FROM d.t"), [{ id: 1 }]);
  await server.down("SIGKILL");
  await server.restart();
  assert.deepEqual(await server.query("SELECT id FROM d.t"), [{ id: 1 }]);
});
