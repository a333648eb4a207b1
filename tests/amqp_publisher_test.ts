/**
 * The test publisher against a real RabbitMQ (scratch vhost): what the
 * drain benchmark and `status` rely on when they watch a queue's depth.
 */
import assert from "node:assert/strict";
import { AMQPClient } from "@cloudamqp/amqp-client";
import { rabbitMqCommandPublisher } from "../src/commands/publisher.ts";
import { COMMAND_QUEUE } from "../src/commands/validate.ts";
import { errorMessage } from "../src/log.ts";
import { hasCode } from "../src/util/errors.ts";
import { AmqpPublisher } from "../src/amqp/publisher.ts";
import { createScratchVhost } from "./helpers/rabbitmq.ts";
import { startTcpProxy } from "./helpers/tcp_proxy.ts";
import { track, waitFor } from "./helpers/wait.ts";
import { TEST_QUEUE_DURABILITY } from "./helpers/worker.ts";

/** Channels the broker counts on the connections of a vhost. */
async function channelsOf(vhost: string): Promise<number> {
  const out = await new Deno.Command("rabbitmqctl", {
    args: ["list_connections", "vhost", "channels", "-q", "--no-table-headers"],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  let channels = 0;
  for (const line of new TextDecoder().decode(out.stdout).split("\n")) {
    const [name, count] = line.trim().split(/\s+/);
    if (name === vhost) channels += Number(count);
  }
  return channels;
}

Deno.test("publisher: depth asks on one kept channel, and a missing queue does not break the next call", async () => {
  await using vhost = await createScratchVhost("se_pub");
  await using publisher = await AmqpPublisher.connect(vhost.url, TEST_QUEUE_DURABILITY);
  await publisher.publish("q_depth", ["a", "b"]);
  for (let i = 0; i < 5; i++) {
    assert.deepEqual(await publisher.depth("q_depth"), { ready: 2, consumers: 0 });
  }
  // The publishing channel and the probe, not one channel per call left open or reopened.
  assert.equal(await channelsOf(vhost.name), 2);

  // 404 NOT_FOUND closes the probe; the next call opens another, publishing goes on.
  await assert.rejects(publisher.depth("q_missing"), /NOT_FOUND|404/);
  assert.deepEqual(await publisher.depth("q_depth"), { ready: 2, consumers: 0 });
  await publisher.publish("q_depth", ["c"]);
  assert.deepEqual(await publisher.depth("q_depth"), { ready: 3, consumers: 0 });
});

Deno.test("publisher: depth calls made at once while the probe channel opens share it", async () => {
  await using vhost = await createScratchVhost("se_pub");
  await using publisher = await AmqpPublisher.connect(vhost.url, TEST_QUEUE_DURABILITY);
  await publisher.publish("q_depth", ["a"]);
  const all = await Promise.all(Array.from({ length: 5 }, () => publisher.depth("q_depth")));
  for (const d of all) assert.deepEqual(d, { ready: 1, consumers: 0 });
  assert.equal(await channelsOf(vhost.name), 2, "the publishing channel and one probe");
});

Deno.test("publisher: a publish to a queue deleted since it was declared fails, it does not resolve for a dropped message", async () => {
  await using vhost = await createScratchVhost("se_pub");
  await using publisher = await AmqpPublisher.connect(vhost.url, TEST_QUEUE_DURABILITY);
  await using other = await AmqpPublisher.connect(vhost.url, TEST_QUEUE_DURABILITY);
  await publisher.publish("q_gone", ["a"]);
  // Deleted behind the publisher's back (an operator, a lost node of a non-durable queue).
  await other.deleteQueue("q_gone");
  // The default exchange drops a message for a missing queue and still confirms it.
  await assert.rejects(publisher.publish("q_gone", ["b"]), /q_gone/);
  await assert.rejects(other.depth("q_gone"), /NOT_FOUND|404/);
  // Not a dead channel: the next publish declares the queue again and lands.
  await publisher.publish("q_gone", ["c"]);
  assert.deepEqual(await other.depth("q_gone"), { ready: 1, consumers: 0 });
});

// close() waited for the broker's close-ok without a bound: a broker that went silent (frozen,
// partitioned) held it until the heartbeat gave up, 60 s by default, which made the shutdown's
// "close command publisher" step outlast systemd's stop timeout. No timed assertion: the wait below
// only bounds a hang, which without the fix lasts the whole heartbeat.
Deno.test("publisher: close on a broker that went silent does not wait for the heartbeat", async () => {
  await using vhost = await createScratchVhost("se_pub");
  const broker = new URL(vhost.url);
  await using proxy = await startTcpProxy(`${broker.hostname}:${broker.port || "5672"}`);
  const url = new URL(vhost.url);
  url.host = proxy.addr;
  url.searchParams.set("heartbeat", "120");
  const publisher = await AmqpPublisher.connect(url.href, TEST_QUEUE_DURABILITY);
  await publisher.publish("q_close", ["a"]);
  proxy.freeze();
  const closed = track(publisher.close());
  await waitFor(() => closed.settled, { timeoutMs: 30_000, message: "close() to return" });
});

// A broker nack (a queue bounded with overflow reject-publish, an operator's guard against a
// command flood while the core is down) says the message was not queued. It was reported as a lost
// confirm, "it may have been queued": /commands answered 504 and a task was deleted, not retried.
Deno.test("publisher: a message the broker nacks (queue full, reject-publish) is known not to be queued: 503 for /commands, a task stays", async () => {
  await using vhost = await createScratchVhost("se_pub");
  const client = new AMQPClient(vhost.url, undefined, null);
  await client.connect();
  try {
    const channel = await client.channel();
    await channel.queueDeclare(COMMAND_QUEUE, { durable: false }, {
      "x-max-length": 0,
      "x-overflow": "reject-publish",
    });
  } finally {
    await client.close();
  }
  await using publisher = rabbitMqCommandPublisher(vhost.url, {
    ...TEST_QUEUE_DURABILITY,
    declare: "passive",
  });
  const err = await publisher.publish('{"Command":"raw","Data":"x"}').then(
    () => undefined,
    (e) => e,
  );
  assert.ok(hasCode(err, "command_publish"), String(err));
  assert.match(errorMessage(err), /rejected|nack/i);
});
