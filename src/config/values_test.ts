import assert from "node:assert/strict";
import {
  formatGoDuration,
  mysqlDsnToUrl,
  parseGoBoolean,
  parseGoDuration,
  parseMysqlUrl,
  splitHostPort,
} from "./values.ts";

function value<T>(parsed: { ok: true; value: T } | { ok: false; problem: string }): T {
  if (!parsed.ok) throw new Error(`expected a value, got problem: ${parsed.problem}`);
  return parsed.value;
}

Deno.test("parseGoDuration: accepts every form Go's time.ParseDuration accepts", () => {
  const cases: [string, number][] = [
    ["0", 0],
    ["-0", 0],
    ["+0", 0],
    ["250ms", 250],
    ["2s", 2000],
    ["5m", 300_000],
    ["1h30m", 5_400_000],
    ["1.5s", 1500],
    [".5s", 500],
    ["5.s", 5000],
    ["100us", 0.1],
    ["100\u00b5s", 0.1],
    ["100\u03bcs", 0.1],
    ["1000000ns", 1],
    ["-2s", -2000],
    ["1h0m0s", 3_600_000],
  ];
  for (const [text, ms] of cases) {
    assert.equal(value(parseGoDuration(text)), ms, text);
  }
});

Deno.test("parseGoDuration: refuses a number without unit, unknown units and empty text", () => {
  for (const text of ["", "300", "5", "1h30", "5 m", "5x", ".s", ".", "-", "1d", "s", "1.2.3s"]) {
    assert.equal(parseGoDuration(text).ok, false, text);
  }
});

Deno.test("formatGoDuration: round-trips the defaults of the table", () => {
  for (const text of ["0s", "250ms", "2s", "5m", "1h30m", "10s"]) {
    assert.equal(formatGoDuration(value(parseGoDuration(text))), text);
  }
});

Deno.test("parseGoBoolean: only Go's strconv.ParseBool spellings", () => {
  for (const t of ["1", "t", "T", "TRUE", "true", "True"]) {
    assert.equal(value(parseGoBoolean(t)), true);
  }
  for (const f of ["0", "f", "F", "FALSE", "false", "False"]) {
    assert.equal(value(parseGoBoolean(f)), false);
  }
  for (const bad of ["on", "off", "yes", "no", "tRuE", "", " "]) {
    assert.equal(parseGoBoolean(bad).ok, false, bad);
  }
});

Deno.test("splitHostPort: host:port, [v6]:port and :port only where allowed", () => {
  assert.deepEqual(value(splitHostPort("127.0.0.1:4730")), { host: "127.0.0.1", port: 4730 });
  assert.deepEqual(value(splitHostPort("gearman.example:4730")), {
    host: "gearman.example",
    port: 4730,
  });
  assert.deepEqual(value(splitHostPort("[::1]:4730")), { host: "::1", port: 4730 });
  assert.deepEqual(value(splitHostPort(":9105", true)), { host: "", port: 9105 });
  for (
    const bad of [":9105", "host", "host:", "host:0", "host:65536", "::1:4730", "ho st:1", "h:x"]
  ) {
    assert.equal(splitHostPort(bad).ok, false, bad);
  }
});

Deno.test("mysqlDsnToUrl: the Go DSN forms become the internal mysql:// URL (D8)", () => {
  assert.equal(
    value(mysqlDsnToUrl("user:pass@tcp(db.example:3306)/statusengine_data?parseTime=true")),
    "mysql://user:pass@db.example:3306/statusengine_data",
  );
  assert.equal(
    value(mysqlDsnToUrl("statusengine@tcp(127.0.0.1:3306)/statusengine")),
    "mysql://statusengine@127.0.0.1:3306/statusengine",
  );
  assert.equal(
    value(mysqlDsnToUrl("user:secret@unix(/run/mysqld/mysqld.sock)/statusengine")),
    "mysql://user:secret@localhost/statusengine?socketPath=%2Frun%2Fmysqld%2Fmysqld.sock",
  );
  // Defaults of the Go driver: no net = tcp, no address = 127.0.0.1:3306, port added.
  assert.equal(value(mysqlDsnToUrl("u:p@/db")), "mysql://u:p@127.0.0.1:3306/db");
  assert.equal(value(mysqlDsnToUrl("u:p@tcp(db)/db")), "mysql://u:p@db:3306/db");
  assert.equal(value(mysqlDsnToUrl("u:p@tcp([::1]:3307)/db")), "mysql://u:p@[::1]:3307/db");
  assert.equal(value(mysqlDsnToUrl("u:p@tcp(::1)/db")), "mysql://u:p@[::1]:3306/db");
  assert.equal(value(mysqlDsnToUrl("u:p@tcp/db")), "mysql://u:p@127.0.0.1:3306/db");
  // The Go driver's anonymous login: the MySQL layer needs a user name.
  const anonymous = mysqlDsnToUrl("/db");
  assert.ok(!anonymous.ok && /names no user/.test(anonymous.problem));
  assert.equal(
    value(mysqlDsnToUrl("u:p@tcp(h:3306)/db?timeout=5s&tls=true")),
    "mysql://u:p@h:3306/db?connectTimeout=5000&ssl=%7B%7D",
  );
});

Deno.test("mysqlDsnToUrl: special characters in the password survive the conversion", () => {
  const password = "p@ss:w/rd?#&%é x";
  const url = value(mysqlDsnToUrl(`statusengine:${password}@tcp(db:3306)/statusengine`));
  const parsed = new URL(url);
  assert.equal(decodeURIComponent(parsed.password), password);
  assert.equal(decodeURIComponent(parsed.username), "statusengine");
  assert.equal(parsed.hostname, "db");
  assert.equal(parsed.pathname, "/statusengine");
  assert.equal(value(parseMysqlUrl(url)), url);
});

Deno.test("mysqlDsnToUrl: parameters without meaning are dropped, unknown ones noted", () => {
  const quiet = mysqlDsnToUrl("u:p@tcp(h:3306)/db?parseTime=true&loc=Local&charset=utf8mb4");
  assert.ok(quiet.ok);
  assert.equal(quiet.notes, undefined);
  const noisy = mysqlDsnToUrl("u:p@tcp(h:3306)/db?charset=latin1&foo=bar");
  assert.ok(noisy.ok);
  assert.equal(noisy.notes?.length, 2);
  assert.match(noisy.notes?.[0] ?? "", /charset=latin1 is ignored/);
  assert.match(noisy.notes?.[1] ?? "", /foo/);
});

Deno.test("mysqlDsnToUrl: refuses what the Go driver refuses, without echoing the password", () => {
  for (
    const bad of [
      "u:S3CRET@tcp(h:3306)",
      "u:S3CRET@tcp(h:3306/db",
      "u:S3CRET@tcp(h:3306)/",
      "u:S3CRET@pipe(x)/db",
      "u:S3CRET@tcp(h:3306)/db?timeout=300",
      "u:S3CRET@tcp(h:3306)/db?tls=custom",
      "u:S3CRET@tcp(h:99999)/db",
    ]
  ) {
    const parsed = mysqlDsnToUrl(bad);
    assert.equal(parsed.ok, false, bad);
    if (!parsed.ok) assert.ok(!parsed.problem.includes("S3CRET"), parsed.problem);
  }
});

Deno.test("parseMysqlUrl: needs scheme, host and database", () => {
  assert.ok(parseMysqlUrl("mysql://root@127.0.0.1:3306/statusengine").ok);
  assert.ok(parseMysqlUrl("mysql://u:p@localhost/db?socketPath=/run/mysqld/mysqld.sock").ok);
  for (
    const bad of [
      "mysql://root@127.0.0.1:3306",
      "mysql://root@127.0.0.1:3306/",
      "postgres://root@h/db",
      "root@h/db",
      "mysql:///db",
      "mysql://u:p@h:99999/db",
      "mysql://u:p%zz@h/db",
    ]
  ) {
    assert.equal(parseMysqlUrl(bad).ok, false, bad);
  }
});
