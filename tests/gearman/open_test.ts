/**
 * Opening a worker link against an address where something other than gearmand answers (the
 * job server list pointing at the MySQL port): the error says what the peer did, at once, instead
 * of claiming a silence the worker never waited for.
 */
import assert from "node:assert/strict";
import { QueueWorker } from "../../src/gearman/worker.ts";
import { ByteBudget, QueueBudget } from "../../src/consumer/budget.ts";
import { DeliveryEngine } from "../../src/consumer/delivery.ts";
import { NOOP_OBSERVER } from "../../src/consumer/contract.ts";
import { getLogger } from "../../src/log.ts";
import { hasCode } from "../../src/util/errors.ts";
import { testMysqlBaseUrl } from "../helpers/mysql.ts";

Deno.test("gearman worker: a server that answers the registration with something other than Gearman is reported as such, not as one that did not answer in time", async () => {
  // The real MariaDB of the test environment greets every connection with its handshake.
  const url = new URL(testMysqlBaseUrl());
  const server = `${url.hostname}:${url.port === "" ? "3306" : url.port}`;
  const engine = new DeliveryEngine({
    handler: () => Promise.resolve(),
    observer: NOOP_OBSERVER,
    deadLetter: () => Promise.resolve(),
    name: "gearman",
    log: getLogger("gearman"),
  });
  let failure: unknown;
  try {
    const worker = await QueueWorker.open({
      queue: "q_open",
      server,
      budget: new QueueBudget("q_open", 1, new ByteBudget(1 << 20)),
      engine,
      connect: { connectTimeoutMs: 5_000, heartbeatIntervalMs: 0 },
    });
    await worker.abort();
  } catch (err: unknown) {
    failure = err;
  }
  assert.ok(failure instanceof Error, "opening a link to the MySQL port fails");
  assert.doesNotMatch(failure.message, /did not answer within/);
  assert.match(failure.message, /Invalid packet magic/);
  assert.ok(hasCode(failure, "connect_failed"), `a connect failure: ${failure.message}`);
});
