import assert from "node:assert/strict";
import { DEFAULT_HEARTBEAT_S, parseAmqpUrl } from "./url.ts";

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
