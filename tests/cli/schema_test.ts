import assert from "node:assert/strict";
import mysql from "mysql2/promise";
import { createScratchDatabase, testMysqlBaseUrl } from "../helpers/mysql.ts";
import { freePort } from "../helpers/gearmand.ts";
import { mysqlOptionsFromUrl } from "../../src/mysql/mod.ts";
import { runSchemaCommand, type SchemaCommandOptions } from "../../src/cli/schema.ts";

interface Captured {
  code: number;
  out: string[];
  err: string[];
}

async function run(options: SchemaCommandOptions): Promise<Captured> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runSchemaCommand(options, {
    out: (line) => out.push(line),
    err: (line) => err.push(line),
  });
  return { code, out, err };
}

const NOW = new Date("2026-07-15T00:00:00Z");

/** A database name that does not exist yet; dropped on dispose if the test created it. */
function freshDatabase(): { name: string; url: string } & AsyncDisposable {
  const name = `se_test_${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
  const url = new URL(testMysqlBaseUrl());
  url.pathname = `/${name}`;
  return {
    name,
    url: url.href,
    async [Symbol.asyncDispose]() {
      const { database: _, ...server } = mysqlOptionsFromUrl(url.href);
      const admin = await mysql.createConnection(server);
      try {
        await admin.query(`DROP DATABASE IF EXISTS \`${name}\``);
      } finally {
        await admin.end();
      }
    },
  };
}

async function databaseExists(name: string): Promise<boolean> {
  const { database: _, ...server } = mysqlOptionsFromUrl(testMysqlBaseUrl());
  const admin = await mysql.createConnection(server);
  try {
    const [rows] = await admin.query(
      "SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
      [name],
    );
    return (rows as unknown[]).length > 0;
  } finally {
    await admin.end();
  }
}

Deno.test("schema: creates the database and all 25 tables, after which --check passes", async () => {
  await using db = freshDatabase();
  const created = await run({ mysqlUrl: db.url, check: false, createDatabase: true, now: NOW });
  assert.equal(created.code, 0, created.err.join("\n"));
  assert.deepEqual(created.err, []);
  assert.match(
    created.out[0] ?? "",
    new RegExp(`^Created database ${db.name} \\(utf8mb4, utf8mb4_`),
  );
  assert.equal(created.out.filter((l) => l.startsWith("Created table statusengine_")).length, 25);
  assert.match(created.out.at(-1) ?? "", /matches the 25 tables the worker needs/);

  const checked = await run({ mysqlUrl: db.url, check: true, createDatabase: false });
  assert.equal(checked.code, 0);
  assert.deepEqual(checked.out, [`Schema of ${db.name} matches the 25 tables the worker needs`]);

  const again = await run({ mysqlUrl: db.url, check: false, createDatabase: true, now: NOW });
  assert.equal(again.code, 0);
  assert.ok(!again.out.some((l) => l.startsWith("Created")), again.out.join("\n"));
});

Deno.test("schema: a missing database is an error without --create-database", async () => {
  await using db = freshDatabase();
  const result = await run({ mysqlUrl: db.url, check: false, createDatabase: false });
  assert.equal(result.code, 1);
  assert.match(result.err.join("\n"), /does not exist .*--create-database/);
  assert.equal(await databaseExists(db.name), false);
});

Deno.test("schema --check: changes nothing and exits 1 when the database is missing", async () => {
  await using db = freshDatabase();
  const result = await run({ mysqlUrl: db.url, check: true, createDatabase: true });
  assert.equal(result.code, 1);
  assert.match(result.out.join("\n"), /does not exist/);
  assert.equal(await databaseExists(db.name), false);
});

Deno.test("schema --check: prints every difference and creates nothing", async () => {
  await using db = await createScratchDatabase();
  await db.query("CREATE TABLE statusengine_nodes (node_name varchar(255) NOT NULL PRIMARY KEY)");
  const result = await run({ mysqlUrl: db.url, check: true, createDatabase: false });
  assert.equal(result.code, 1);
  assert.ok(
    result.out.includes(
      "statusengine_nodes.node_version: column is missing (expected varchar(255) NULL) " +
        "(ALTER TABLE `statusengine_nodes` ADD COLUMN `node_version` varchar(255) NULL DEFAULT NULL AFTER `node_name`)",
    ),
    result.out.join("\n"),
  );
  assert.equal(result.out.filter((l) => l.endsWith(": table is missing")).length, 24);
  assert.equal(result.out.at(-1), `26 difference(s) in ${db.name}`);
  const tables = await db.query<unknown[]>(
    "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?",
    [db.name],
  );
  assert.equal(tables.length, 1);
});

Deno.test("schema: differences in existing tables are reported, not repaired, and exit 0 (D2)", async () => {
  await using db = await createScratchDatabase();
  await db.query("CREATE TABLE statusengine_nodes (node_name varchar(255) NOT NULL PRIMARY KEY)");
  await db.query("INSERT INTO statusengine_nodes VALUES ('N')");
  const result = await run({ mysqlUrl: db.url, check: false, createDatabase: false, now: NOW });
  assert.equal(result.code, 0, result.err.join("\n"));
  assert.equal(result.out.filter((l) => l.startsWith("Created table")).length, 24);
  assert.ok(
    result.out.some((l) => l.startsWith("statusengine_nodes.node_start_time: column is missing")),
  );
  assert.match(result.out.at(-1) ?? "", /^2 difference\(s\) remain in .*never altered$/);
  const rows = await db.query<{ node_name: string }[]>("SELECT node_name FROM statusengine_nodes");
  assert.deepEqual(rows.map((r) => r.node_name), ["N"]);
});

Deno.test("schema: a malformed URL exits 1 and never prints the password (D8)", async () => {
  for (
    const mysqlUrl of [
      "mysql://root:hunter2secret@h:notaport/db",
      "mysql://root:hunter2secret@h/db?x=1",
    ]
  ) {
    const result = await run({ mysqlUrl, check: false, createDatabase: false });
    assert.equal(result.code, 1);
    assert.equal(result.out.length, 0);
    assert.match(result.err.join("\n"), /Cannot parse MySQL URL "mysql:\/\/root:\*\*\*\*@/);
    assert.ok(!JSON.stringify(result).includes("hunter2secret"));
  }
});

Deno.test("schema: a URL without a database exits 1", async () => {
  const base = testMysqlBaseUrl();
  const result = await run({ mysqlUrl: base, check: true, createDatabase: false });
  assert.equal(result.code, 1);
  assert.match(result.err.join("\n"), /names no database/);
});

Deno.test("schema: an unreachable server exits 1 and never prints the password (D8)", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  const result = await run({
    mysqlUrl: `mysql://root:hunter2secret@127.0.0.1:${port}/db?connectTimeout=2000`,
    check: true,
    createDatabase: false,
  });
  assert.equal(result.code, 1);
  assert.match(
    result.err.join("\n"),
    /^Cannot run schema: MySQL at mysql:\/\/root:\*\*\*\*@127\.0\.0\.1:\d+\/db\S* does not answer/,
  );
  assert.ok(!JSON.stringify(result).includes("hunter2secret"));
});

Deno.test("schema: a refused login exits 1 and never prints the password (D8)", async () => {
  await using db = await createScratchDatabase();
  const url = new URL(db.url);
  url.username = "se_no_such_user";
  url.password = "hunter2secret";
  const result = await run({ mysqlUrl: url.href, check: true, createDatabase: false });
  assert.equal(result.code, 1);
  assert.match(result.err.join("\n"), /MySQL at .*:\*\*\*\*@.* refused the login \(Access denied/);
  assert.match(result.err.join("\n"), /check the user and password/);
  assert.ok(!JSON.stringify(result).includes("hunter2secret"));
});

Deno.test("schema: with several hosts, a login refused by one while an earlier one is down is reported as the refusal", async () => {
  await using db = await createScratchDatabase();
  const url = new URL(db.url);
  url.username = "se_no_such_user";
  url.password = "hunter2secret";
  const dead = `127.0.0.1:${await freePort()}`;
  const twoHosts = url.href.replace(`@${url.host}`, `@${dead},${url.host}`);
  const result = await run({ mysqlUrl: twoHosts, check: true, createDatabase: false });
  assert.equal(result.code, 1);
  const text = result.err.join("\n");
  assert.match(text, new RegExp(`refused the login \\(${url.host}: Access denied.*; ${dead}: `));
  assert.match(text, /check the user and password/);
  assert.doesNotMatch(text, /does not answer/);
  assert.ok(!JSON.stringify(result).includes("hunter2secret"));
});

Deno.test("schema: a short password is masked in the URL, not inside the words of the refusal", async () => {
  // Before, the password `se` was masked as a substring of the whole message: "refu****d the
  // login (Access denied for u****r …) … grants on the databa****".
  await using db = await createScratchDatabase();
  const url = new URL(db.url);
  url.username = "se_no_such_user";
  url.password = "se";
  const result = await run({ mysqlUrl: url.href, check: true, createDatabase: false });
  assert.equal(result.code, 1);
  const text = result.err.join("\n");
  assert.match(text, /MySQL at mysql:\/\/se_no_such_user:\*\*\*\*@\S+ refused the login/);
  assert.match(text, /Access denied for user 'se_no_such_user'/);
  assert.match(text, /grants on the database/);
  assert.ok(!text.includes(":se@"), text);
});
