/**
 * mysql2 over DenoSocket against a real MariaDB: what the worker's pool does with it, and the
 * ways a connection ends.
 */
import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import {
  connectionOptionsOf,
  createScratchDatabase,
  type ScratchDatabase,
} from "../helpers/mysql.ts";
import { freePort } from "../helpers/gearmand.ts";
import { waitFor } from "../helpers/wait.ts";
import { classifyMysqlError } from "../../src/mysql/errors.ts";
import { denoSocketStream } from "../../src/mysql/failover.ts";

function pool(db: ScratchDatabase, extra: mysql.PoolOptions = {}): mysql.Pool {
  return mysql.createPool({
    ...connectionOptionsOf(db),
    connectionLimit: 2,
    stream: denoSocketStream,
    ...extra,
  });
}

/** The server's id of the connection a query runs on. */
async function connectionId(q: mysql.Pool | mysql.PoolConnection): Promise<number> {
  const [rows] = await q.query("SELECT CONNECTION_ID() AS id");
  return Number((rows as { id: number }[])[0]?.id);
}

/** Whether the server lists connection `id` (with `info` running, when given). */
async function serverHas(db: ScratchDatabase, id: number, info = "%"): Promise<boolean> {
  const rows = await db.query<unknown[]>(
    "SELECT ID FROM information_schema.PROCESSLIST WHERE ID = ? AND COALESCE(INFO, '') LIKE ?",
    [id, info],
  );
  return rows.length > 0;
}

Deno.test("deno socket: queries, prepared statements, a 3 MB packet out and a 4 MB result in", async () => {
  await using db = await createScratchDatabase();
  const p = pool(db);
  try {
    await p.query("CREATE TABLE t (id int PRIMARY KEY, body mediumtext) DEFAULT CHARSET=utf8mb4");
    const big = "äöü-€-\u{1F600}-".repeat(150_000); // about 3 MB as UTF-8
    await p.execute("INSERT INTO t VALUES (?, ?), (?, ?)", [1, big, 2, "small"]);
    const [rows] = await p.query("SELECT id, body FROM t ORDER BY id");
    const got = rows as { id: number; body: string }[];
    assert.equal(got.length, 2);
    assert.equal(got[0]?.body, big);
    assert.equal(got[1]?.body, "small");
    const [many] = await p.query("SELECT seq, REPEAT('x', 400) AS pad FROM seq_1_to_10000");
    assert.equal((many as unknown[]).length, 10_000);
    // Several statements at once over the pool's two connections.
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) => p.execute("SELECT ? + 1 AS n", [i])),
    );
    assert.deepEqual(answers.map(([r]) => (r as { n: number }[])[0]?.n), [
      ...Array.from({ length: 20 }, (_, i) => i + 1),
    ]);
  } finally {
    await p.end();
  }
});

Deno.test("deno socket: nothing listening is ECONNREFUSED, classified as MySQL unavailable", async () => {
  const p = mysql.createPool({
    host: "127.0.0.1",
    port: freePort(),
    user: "nobody",
    connectionLimit: 1,
    stream: denoSocketStream,
  });
  try {
    const err = await p.query("SELECT 1").then(() => undefined, (e: unknown) => e);
    assert.equal((err as { code?: unknown }).code, "ECONNREFUSED");
    assert.equal(classifyMysqlError(err), "unavailable");
  } finally {
    await p.end();
  }
});

Deno.test("deno socket: a connection the server kills fails its statement as unavailable, and the pool goes on with a new one", async () => {
  await using db = await createScratchDatabase();
  const p = pool(db, { connectionLimit: 1 });
  try {
    const id = await connectionId(p);
    const sleeping = p.query("SELECT SLEEP(30)").then(() => undefined, (e: unknown) => e);
    await waitFor(() => serverHas(db, id, "SELECT SLEEP%"), { message: "the statement runs" });
    await db.query(`KILL CONNECTION ${id}`);
    const err = await sleeping;
    assert.ok(err instanceof Error, String(err));
    assert.equal(classifyMysqlError(err), "unavailable");
    assert.notEqual(await connectionId(p), id);
  } finally {
    await p.end();
  }
});

Deno.test("deno socket: a destroyed connection is closed at the server, and the pool goes on with a new one", async () => {
  await using db = await createScratchDatabase();
  const p = pool(db, { connectionLimit: 1 });
  try {
    const conn = await p.getConnection();
    const id = await connectionId(conn);
    conn.destroy();
    await waitFor(async () => !(await serverHas(db, id)), {
      message: "the server dropped the destroyed connection",
    });
    assert.notEqual(await connectionId(p), id);
  } finally {
    await p.end();
  }
});

Deno.test("deno socket: a Unix socket path connects as well", async () => {
  await using db = await createScratchDatabase();
  const paths = await db.query<{ path: string }[]>("SELECT @@socket AS path");
  const path = String(paths[0]?.path);
  const p = mysql.createPool({
    socketPath: path,
    user: db.user,
    ...(db.password === "" ? {} : { password: db.password }),
    database: db.name,
    connectionLimit: 1,
    stream: denoSocketStream,
  });
  try {
    const [rows] = await p.query("SELECT 2 AS two");
    assert.equal((rows as { two: number }[])[0]?.two, 2);
  } finally {
    await p.end();
  }
});
