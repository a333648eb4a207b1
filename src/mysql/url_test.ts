import assert from "node:assert/strict";
import { mysqlOptionsFromUrl } from "./url.ts";

Deno.test("mysqlOptionsFromUrl: host, default port 3306, user, database and utf8mb4", () => {
  assert.deepEqual(mysqlOptionsFromUrl("mysql://root@127.0.0.1/statusengine"), {
    host: "127.0.0.1",
    port: 3306,
    user: "root",
    database: "statusengine",
    charset: "utf8mb4",
  });
});

Deno.test("mysqlOptionsFromUrl: password, user and database are percent-decoded", () => {
  assert.deepEqual(
    mysqlOptionsFromUrl("mysql://se%20user:p%40ss%3Aw%2Frd%25@db.example:3307/se%2Ddb"),
    {
      host: "db.example",
      port: 3307,
      user: "se user",
      password: "p@ss:w/rd%",
      database: "se-db",
      charset: "utf8mb4",
    },
  );
});

Deno.test("mysqlOptionsFromUrl: an unencoded @ in the password still parses", () => {
  const options = mysqlOptionsFromUrl("mysql://root:p@ss@host/db");
  assert.equal(options.password, "p@ss");
  assert.equal(options.host, "host");
});

Deno.test("mysqlOptionsFromUrl: IPv6 hosts lose their brackets", () => {
  assert.equal(mysqlOptionsFromUrl("mysql://root@[::1]:3306/db").host, "::1");
});

Deno.test("mysqlOptionsFromUrl: no path means no database", () => {
  assert.equal(mysqlOptionsFromUrl("mysql://root@localhost").database, undefined);
  assert.equal(mysqlOptionsFromUrl("mysql://root@localhost/").database, undefined);
});

Deno.test("mysqlOptionsFromUrl: the socket parameter replaces host and port", () => {
  assert.deepEqual(
    mysqlOptionsFromUrl("mysql://root@localhost/se?socket=/run/mysqld/mysqld.sock"),
    { socketPath: "/run/mysqld/mysqld.sock", user: "root", database: "se", charset: "utf8mb4" },
  );
  assert.deepEqual(
    mysqlOptionsFromUrl("mysql://root:pw@/se?socket=%2Ftmp%2Fmysql.sock&connectTimeout=2500"),
    {
      socketPath: "/tmp/mysql.sock",
      user: "root",
      password: "pw",
      database: "se",
      charset: "utf8mb4",
      connectTimeout: 2500,
    },
  );
});

Deno.test("mysqlOptionsFromUrl: connectTimeout is taken in milliseconds", () => {
  assert.equal(mysqlOptionsFromUrl("mysql://u@h/d?connectTimeout=5000").connectTimeout, 5000);
});

Deno.test("mysqlOptionsFromUrl: the mariadb scheme is accepted too", () => {
  assert.equal(mysqlOptionsFromUrl("mariadb://u@h/d").host, "h");
});

Deno.test("mysqlOptionsFromUrl: malformed URLs throw a TypeError that never shows the password", () => {
  const cases: [string, RegExp][] = [
    ["mysql:/u:secret@h/d", /not a valid URL/],
    ["postgres://u:secret@h/d", /scheme must be/],
    ["mysql://u:secret@h:99999/d", /not a valid URL/],
    ["mysql://u:secret@h:abc/d", /not a valid URL/],
    ["mysql://u:secret@h:0/d", /port must be/],
    ["mysql://:secret@h/d", /missing user name/],
    ["mysql://u:secret@/d", /missing host/],
    ["mysql://u:secret@h/d/e", /one database/],
    ["mysql://u:secret@h/d?sslmode=on", /unknown query parameter "sslmode"/],
    ["mysql://u:secret@h/d?password=secret", /unknown query parameter "password"/],
    ["mysql://u:secret@h/d?connectTimeout=soon", /connectTimeout/],
    ["mysql://u:secret@h/d?connectTimeout=0", /connectTimeout/],
    ["mysql://u:secret@h/d?connectTimeout=1&connectTimeout=2", /more than once/],
    ["mysql://u:secret@h/d?socket=", /"socketPath" is empty/],
    ["mysql://u:secret%zz@h/d", /percent-encoding in the password/],
    ["mysql://u:secret@h/d#frag", /fragment/],
    ["mysql://u:sec/ret@h/d", /not a valid URL/],
  ];
  for (const [url, message] of cases) {
    assert.throws(
      () => mysqlOptionsFromUrl(url),
      (err: unknown) => {
        assert.ok(err instanceof TypeError, url);
        assert.match(err.message, message, url);
        assert.ok(!err.message.includes("secret"), `${url} leaked: ${err.message}`);
        assert.ok(!err.message.includes("ret@"), `${url} leaked: ${err.message}`);
        return true;
      },
    );
  }
});

Deno.test("url: the forms the Go DSN conversion produces are understood (socketPath, ssl)", async () => {
  const { mysqlDsnToUrl } = await import("../config/values.ts");
  for (
    const [dsn, check] of [
      ["se:pw@unix(/run/mysqld/mysqld.sock)/db", { socketPath: "/run/mysqld/mysqld.sock" }],
      ["se:pw@tcp(db:3306)/db?tls=true", { ssl: {} }],
      ["se:pw@tcp(db:3306)/db?tls=skip-verify&timeout=5s", {
        ssl: { rejectUnauthorized: false },
        connectTimeout: 5000,
      }],
    ] as const
  ) {
    const converted = mysqlDsnToUrl(dsn);
    assert.ok(converted.ok, dsn);
    const options = mysqlOptionsFromUrl(converted.value) as unknown as Record<string, unknown>;
    for (const [k, v] of Object.entries(check)) {
      assert.deepEqual(options[k], v, `${dsn}: ${k}`);
    }
  }
});
