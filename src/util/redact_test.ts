import assert from "node:assert/strict";
import { redactText, redactUrl } from "./redact.ts";

// Each test: its name, then every input with what redactUrl makes of it.
const URL_CASES: [name: string, cases: [input: string, expected: string][]][] = [
  [
    "masks the password of MySQL and AMQP URLs and Go DSNs, nothing else",
    [
      [
        "mysql://root:secret@127.0.0.1:3306/statusengine",
        "mysql://root:****@127.0.0.1:3306/statusengine",
      ],
      ["mysql://root@h/db", "mysql://root@h/db"],
      ["mysql://h:3306/db", "mysql://h:3306/db"],
      ["mysql://root:p%40ss@db/se", "mysql://root:****@db/se"],
      ["mysql://root:pw@/se?socket=/tmp/s.sock", "mysql://root:****@/se?socket=/tmp/s.sock"],
      [
        "amqp://statusengine:statusengine@127.0.0.1:5672/",
        "amqp://statusengine:****@127.0.0.1:5672/",
      ],
      ["amqps://u:pw@broker/vhost?heartbeat=10", "amqps://u:****@broker/vhost?heartbeat=10"],
      ["u:secret@tcp(h:3306)/db", "u:****@tcp(h:3306)/db"],
      ["u@tcp(h:3306)/db", "u@tcp(h:3306)/db"],
      ["u:pw@unix(/run/mysqld/mysqld.sock)/db", "u:****@unix(/run/mysqld/mysqld.sock)/db"],
      ["just words", "just words"],
      ["", ""],
    ],
  ],
  [
    "an unencoded @ / ? # : or space in the password never leaks a part of it",
    [
      ["mysql://u:se@cr/et@h/db", "mysql://u:****@h/db"],
      ["mysql://root:p@ss@db/se", "mysql://root:****@db/se"],
      ["mysql://u:se?cret@h/db", "mysql://u:****@h/db"],
      ["mysql://u:1234/secret@h/db", "mysql://u:****@h/db"],
      ["amqp://u:se#cret@h/", "amqp://u:****@h/"],
      ["mysql://root:s e c r e t@db/se", "mysql://root:****@db/se"],
      ["u:se@cr/et:x@tcp(h)/db", "u:****@tcp(h)/db"],
    ],
  ],
];

for (const [name, cases] of URL_CASES) {
  Deno.test(`redactUrl: ${name}`, () => {
    for (const [input, expected] of cases) assert.equal(redactUrl(input), expected, input);
  });
}

Deno.test("redactUrl: a URL that does not parse and has no @ is masked after its authority's colon", () => {
  assert.equal(redactUrl("mysql://root:secret/se"), "mysql://root:****/se");
  assert.equal(redactUrl("mysql://root:sec ret"), "mysql://root:****");
});

Deno.test("redactUrl: password-like query parameters are masked, others kept", () => {
  assert.equal(
    redactUrl("mysql://root@db/se?password=secret&connectTimeout=1"),
    "mysql://root@db/se?password=****&connectTimeout=1",
  );
  assert.equal(
    redactUrl("mysql://h/db?x=1&PWD=a&api_key=b&auth_token=c&passwd=d#frag"),
    // An unencoded # may be part of the secret: masked with it.
    "mysql://h/db?x=1&PWD=****&api_key=****&auth_token=****&passwd=****",
  );
});

Deno.test("redactText: masks a short password where it stands, never inside words", () => {
  const message = "MySQL at mysql://se:se@db:3306/x refused the login (Access denied for user " +
    "'se'@'localhost' (using password: YES)): check the user's grants on the database";
  assert.equal(
    redactText(message, "se"),
    message.replace("se:se@", "se:****@"),
  );
  // The user info of a Go DSN, which is no URL, and of a URL already masked.
  assert.equal(redactText("dsn u:se@tcp(h)/db failed", "se"), "dsn u:****@tcp(h)/db failed");
  assert.equal(redactText("at mysql://u:****@h/db", "se"), "at mysql://u:****@h/db");
});

Deno.test("redactText: a password of 8 characters or more is masked anywhere, URLs always", () => {
  assert.equal(
    redactText("server said: bad token hunter2secret.", "hunter2secret"),
    "server said: bad token ****.",
  );
  // A percent-encoded password in a URL is masked by the URL's structure, whatever its length.
  assert.equal(
    redactText("cannot reach amqp://u:p%40ss@h/ (refused)", "p@ss"),
    "cannot reach amqp://u:****@h/ (refused)",
  );
  assert.equal(
    redactText("no password: mysql://u:pw@h/db", undefined),
    "no password: mysql://u:****@h/db",
  );
  assert.equal(redactText("nothing secret here", ""), "nothing secret here");
});
