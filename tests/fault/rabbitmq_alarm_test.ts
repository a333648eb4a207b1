/**
 * A RabbitMQ resource alarm (memory, disk) on a private node: the broker stops reading a
 * connection at its next publish and confirms nothing until the alarm clears, without an error.
 */
import assert from "node:assert/strict";
import { rabbitMqCommandPublisher } from "../../src/commands/publisher.ts";
import { COMMAND_QUEUE } from "../../src/commands/validate.ts";
import { AmqpPublisher } from "../../src/amqp/publisher.ts";
import { hasCode } from "../../src/util/errors.ts";
import { startRabbitMqCluster } from "../helpers/clusters.ts";
import { withLogs } from "../helpers/logs.ts";
import { waitFor } from "../helpers/wait.ts";
import { TEST_QUEUE_DURABILITY } from "../helpers/worker.ts";

Deno.test("fault: a command publish under a RabbitMQ memory alarm says so, is a 504, and is queued once it clears", async () => {
  await using node = await startRabbitMqCluster({ nodes: 1 });
  const url = node.nodes[0]?.url ?? "";
  await withLogs(async (logs) => {
    await using publisher = rabbitMqCommandPublisher(url, TEST_QUEUE_DURABILITY);
    await publisher.publish('{"n":1}');
    await node.ctl(1, "set_vm_memory_high_watermark", "0");
    try {
      // The publisher's connection has heard of the alarm: its next publish is held.
      await waitFor(
        async () => (await node.ctl(1, "list_connections", "state", "-q")).includes("blocking"),
        { timeoutMs: 60_000, intervalMs: 200, message: "the connection to hear of the alarm" },
      );
      await assert.rejects(publisher.publish('{"n":2}'), (err) => {
        // Written, so it may be queued: not sent again, and never a 503 that invites a retry.
        assert.ok(hasCode(err, "command_unconfirmed"), String(err));
        return true;
      });
      const warned = logs.find((l) => l.level === "warn");
      assert.ok(warned !== undefined, "no warning names the alarm");
      assert.match(warned.message, /resource alarm/);
      assert.equal(warned.properties.reason, "low on memory");
    } finally {
      await node.ctl(1, "set_vm_memory_high_watermark", "0.4");
    }
  });
  // The 504 was right: the held message is queued once the alarm clears.
  await using reader = await AmqpPublisher.connect(url, TEST_QUEUE_DURABILITY);
  await waitFor(async () => (await reader.depth(COMMAND_QUEUE)).ready === 2, {
    timeoutMs: 30_000,
    message: "both commands queued",
  });
});
