/**
 * Scratch databases on the real MariaDB/MySQL server for tests.
 *
 * The server URL comes from `STATUSENGINE_TEST_MYSQL_URL` (default
 * `mysql://root@127.0.0.1:3306`). A test that needs MySQL and cannot reach it
 * fails: it never skips (a green run without services would verify nothing).
 */
import mysql from "mysql2/promise";
import { errorMessage } from "../../src/util/errors.ts";

/** Base URL of the test server, without a database path. */
export function testMysqlBaseUrl(): string {
  return Deno.env.get("STATUSENGINE_TEST_MYSQL_URL") ?? "mysql://root@127.0.0.1:3306";
}

/** A database created for one test and dropped by `drop()` / `await using`. */
export interface ScratchDatabase extends AsyncDisposable {
  /** Database name, `se_test_<random>`. */
  readonly name: string;
  /** `mysql://…/<name>` pointing at the scratch database. */
  readonly url: string;
  /** host/port/user/password of the server, for building proxies or DSNs. */
  readonly host: string;
  readonly port: number;
  readonly user: string;
  readonly password: string;
  /** Run one statement against the scratch database (own short-lived connection pool). */
  query<T = unknown>(sql: string, params?: unknown[]): Promise<T>;
  /** Drop the database and close the pool; idempotent. */
  drop(): Promise<void>;
}

/** mysql2 connection options of a scratch database, for a test's own pool or connection. */
export function connectionOptionsOf(db: ScratchDatabase): {
  host: string;
  port: number;
  user: string;
  password?: string;
  database: string;
  charset: string;
} {
  return {
    host: db.host,
    port: db.port,
    user: db.user,
    ...(db.password === "" ? {} : { password: db.password }),
    database: db.name,
    charset: "utf8mb4",
  };
}

/**
 * Create a fresh, empty database with a random name.
 *
 * @example
 * ```ts ignore
 * await using db = await createScratchDatabase();
 * await db.query("CREATE TABLE t (id int)");
 * ```
 */
export async function createScratchDatabase(prefix = "se_test"): Promise<ScratchDatabase> {
  const base = new URL(testMysqlBaseUrl());
  const name = `${prefix}_${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
  const host = base.hostname;
  const port = Number(base.port || "3306");
  const user = decodeURIComponent(base.username || "root");
  const password = decodeURIComponent(base.password);
  let admin: mysql.Connection;
  try {
    admin = await mysql.createConnection({ host, port, user, password, connectTimeout: 5000 });
  } catch (err: unknown) {
    throw new Error(
      `Cannot reach the test MySQL server at ${host}:${port} (set STATUSENGINE_TEST_MYSQL_URL): ${
        errorMessage(err)
      }`,
      { cause: err },
    );
  }
  try {
    await admin.query(`CREATE DATABASE \`${name}\` CHARACTER SET utf8mb4`);
  } finally {
    await admin.end();
  }
  const pool = mysql.createPool({
    host,
    port,
    user,
    password,
    database: name,
    connectionLimit: 4,
    charset: "utf8mb4",
  });
  const url = new URL(base.href);
  url.pathname = `/${name}`;
  let dropped: Promise<void> | undefined;
  const drop = () => {
    dropped ??= (async () => {
      try {
        await pool.query(`DROP DATABASE IF EXISTS \`${name}\``);
      } finally {
        await pool.end();
      }
    })();
    return dropped;
  };
  return {
    name,
    url: url.href,
    host,
    port,
    user,
    password,
    async query<T>(sql: string, params?: unknown[]): Promise<T> {
      const [rows] = await pool.query(sql, params);
      return rows as T;
    },
    drop,
    [Symbol.asyncDispose]: drop,
  };
}
