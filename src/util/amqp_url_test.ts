import assert from "node:assert/strict";
import { DEFAULT_HEARTBEAT_S, parseAmqpUrl } from "./amqp_url.ts";

Deno.test("parseAmqpUrl: an empty path or a bare / is the default vhost /", () => {
  assert.equal(parseAmqpUrl("amqp://u:p@127.0.0.1:5672").vhost, "/");
  assert.equal(parseAmqpUrl("amqp://u:p@127.0.0.1:5672/").vhost, "/");
  assert.equal(parseAmqpUrl("amqp://u:p@127.0.0.1:5672/%2F").vhost, "/");
  assert.equal(parseAmqpUrl("amqp://u:p@h/%2Fmonitoring").vhost, "/monitoring");
  assert.equal(parseAmqpUrl("amqp://u:p@h/statusengine").vhost, "statusengine");
});

Deno.test("parseAmqpUrl: default ports by scheme and the server as host:port", () => {
  assert.equal(parseAmqpUrl("amqp://h/").server, "h:5672");
  assert.equal(parseAmqpUrl("amqps://h/").server, "h:5671");
  assert.equal(parseAmqpUrl("amqps://h/").tls, true);
  assert.equal(parseAmqpUrl("amqp://h:5673/").server, "h:5673");
  assert.equal(parseAmqpUrl("amqp://[::1]:5672/").server, "[::1]:5672");
});

Deno.test("parseAmqpUrl: a heartbeat is requested unless the URL names one", () => {
  const url = new URL(parseAmqpUrl("amqp://u:p@h/").href);
  assert.equal(url.searchParams.get("heartbeat"), String(DEFAULT_HEARTBEAT_S));
  const own = new URL(parseAmqpUrl("amqp://u:p@h/?heartbeat=0").href);
  assert.equal(own.searchParams.get("heartbeat"), "0");
  assert.throws(() => parseAmqpUrl("amqp://u:p@h/?heartbeat=soon"), /heartbeat "soon"/);
});

Deno.test("parseAmqpUrl: a malformed URL is refused with the password masked (D8)", () => {
  for (
    const url of [
      "amqp://u:Sup3rS3cret@[nope/",
      "http://u:Sup3rS3cret@h/",
      "amqp://u:Sup3rS3cret@h:70000/",
      "amqp://u:Sup3rS3cret@h/%zz",
      "amqp://u:Sup3r%zzS3cret@h/",
      "amqp://u:Sup3rS3cret@/vhost",
    ]
  ) {
    assert.throws(() => parseAmqpUrl(url), (err: unknown) => {
      assert.ok(err instanceof TypeError);
      assert.match(err.message, /^Cannot parse AMQP URL "amqp|http/);
      assert.ok(!err.message.includes("Sup3r"), err.message);
      return true;
    }, url);
  }
  assert.equal(parseAmqpUrl("amqp://u:Sup3rS3cret@h/").display, "amqp://u:****@h/");
});

Deno.test("parseAmqpUrl: a host list is split in order, each broker with its own URL and default port", () => {
  const url = parseAmqpUrl("amqp://u:p%40ss@h1:5672,h2:5673,[::1],h3/vh?heartbeat=5");
  assert.deepEqual(url.hosts.map((h) => h.server), ["h1:5672", "h2:5673", "[::1]:5672", "h3:5672"]);
  assert.equal(url.server, "h1:5672");
  assert.equal(url.vhost, "vh");
  assert.equal(url.display, "amqp://u:****@h1:5672,h2:5673,[::1],h3/vh?heartbeat=5");
  for (const h of url.hosts) {
    const one = new URL(h.href);
    assert.equal(`${one.hostname}:${one.port}`, h.server);
    assert.equal(one.password, "p%40ss");
    assert.equal(one.pathname, "/vh");
    assert.equal(one.searchParams.get("heartbeat"), "5");
  }
  const tls = parseAmqpUrl("amqps://u:p@a,b:5000/");
  assert.deepEqual(tls.hosts.map((h) => h.server), ["a:5671", "b:5000"]);
  assert.equal(parseAmqpUrl("amqp://u:p@one/").hosts.length, 1);
});

Deno.test("parseAmqpUrl: a bad host of the list is named, the password masked", () => {
  assert.throws(
    () => parseAmqpUrl("amqp://u:Sup3rS3cret@h1,h2:99999/"),
    (err: unknown) => {
      assert.ok(err instanceof TypeError);
      assert.match(err.message, /host 2 of the list, "h2:99999"/);
      assert.ok(!err.message.includes("Sup3r"), err.message);
      return true;
    },
  );
});
