import assert from "node:assert/strict";
import { mysqlOptionsFromUrl, type MysqlUrlOptions } from "./mysql_url.ts";

// What a URL gives, field for field.
const PARSED: [name: string, url: string, options: MysqlUrlOptions][] = [
  [
    "host, default port 3306, user, database and utf8mb4",
    "mysql://root@127.0.0.1/statusengine",
    { host: "127.0.0.1", port: 3306, user: "root", database: "statusengine", charset: "utf8mb4" },
  ],
  [
    "password, user and database are percent-decoded",
    "mysql://se%20user:p%40ss%3Aw%2Frd%25@db.example:3307/se%2Ddb",
    {
      host: "db.example",
      port: 3307,
      user: "se user",
      password: "p@ss:w/rd%",
      database: "se-db",
      charset: "utf8mb4",
    },
  ],
  [
    "a host list gives every host in order, the first as host/port",
    "mysql://se:p%40ss%2Cw@db1.example:3307,[::1],10.0.0.3:3309/statusengine",
    {
      host: "db1.example",
      port: 3307,
      user: "se",
      password: "p@ss,w",
      database: "statusengine",
      charset: "utf8mb4",
      hosts: [
        { host: "db1.example", port: 3307 },
        { host: "::1", port: 3306 },
        { host: "10.0.0.3", port: 3309 },
      ],
    },
  ],
];

for (const [name, url, options] of PARSED) {
  Deno.test(`mysqlOptionsFromUrl: ${name}`, () => {
    assert.deepEqual(mysqlOptionsFromUrl(url), options);
  });
}

/** Each URL is refused with a TypeError matching its pattern, whose message shows none of `hidden`. */
function assertRefused(cases: [string, RegExp][], hidden: string[]): void {
  for (const [url, message] of cases) {
    assert.throws(
      () => mysqlOptionsFromUrl(url),
      (err: unknown) => {
        assert.ok(err instanceof TypeError, url);
        assert.match(err.message, message, url);
        for (const part of hidden) {
          assert.ok(!err.message.includes(part), `${url} leaked: ${err.message}`);
        }
        return true;
      },
    );
  }
}

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
  assertRefused(cases, ["secret", "ret@"]);
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

Deno.test("mysqlOptionsFromUrl: a host list after an unencoded @ in the password, with query parameters", () => {
  const options = mysqlOptionsFromUrl("mysql://root:p@ss@h1,h2:3310/db?connectTimeout=2500");
  assert.equal(options.password, "p@ss");
  assert.deepEqual(options.hosts, [{ host: "h1", port: 3306 }, { host: "h2", port: 3310 }]);
  assert.equal(options.connectTimeout, 2500);
});

Deno.test("mysqlOptionsFromUrl: a malformed host list is refused, naming the host, never the password", () => {
  const cases: [string, RegExp][] = [
    ["mysql://u:secret@h1,,h3/d", /host 2 of the list, "", is not host\[:port\]/],
    ["mysql://u:secret@h1,/d", /host 2 of the list, "", is not host\[:port\]/],
    ["mysql://u:secret@h1:3306,h2:abc/d", /host 2 of the list, "h2:abc"/],
    ["mysql://u:secret@h1,h2:70000/d", /host 2 of the list, "h2:70000"/],
    ["mysql://u:secret@[::1,h2/d", /host 1 of the list, "\[::1"/],
    ["mysql://u:secret@h1,h2/d?socket=/tmp/s", /cannot be combined with a socket/],
  ];
  assertRefused(cases, ["secret"]);
});

Deno.test("url: the settings' check accepts what mysqlOptionsFromUrl accepts and refuses a bad list", async () => {
  const { parseMysqlUrl } = await import("../config/values.ts");
  assert.ok(parseMysqlUrl("mysql://u:p@h1:3306,[::1]:3307,h3/statusengine").ok);
  const refused = parseMysqlUrl("mysql://u:secret@h1,h2:x/statusengine");
  assert.ok(!refused.ok);
  assert.match(refused.problem, /host 2 of the list/);
  assert.ok(!parseMysqlUrl("mysql://u:p@h1,h2/").ok, "still names a database");
});
