import assert from "node:assert/strict";
import { createMetrics } from "../metrics/registry.ts";
import type { CommandPublisher } from "./publisher.ts";
import { startCommandServer } from "./server.ts";

/** A publisher whose publishes wait until the test releases them. */
function gatedPublisher() {
  const started = Promise.withResolvers<string>();
  const release = Promise.withResolvers<void>();
  let closed = false;
  const publisher: CommandPublisher = {
    backend: "gearman",
    target: "fake",
    async publish(body) {
      if (closed) throw new Error("publisher closed");
      started.resolve(body);
      await release.promise;
    },
    close() {
      closed = true;
      return Promise.resolve();
    },
    [Symbol.asyncDispose]() {
      closed = true;
      return Promise.resolve();
    },
  };
  return { publisher, started: started.promise, release: () => release.resolve() };
}

Deno.test("server: shutdown stops accepting but lets a request already publishing finish with 202", async () => {
  const gate = gatedPublisher();
  const server = await startCommandServer({
    hostname: "127.0.0.1",
    port: 0,
    apiKeys: ["k"],
    publisher: gate.publisher,
    metrics: createMetrics(),
    now: () => 1_700_000_000_000,
  });
  const url = `http://127.0.0.1:${server.port}/commands`;
  const inFlight = fetch(url, {
    method: "POST",
    headers: { "x-api-key": "k" },
    body: '{"Command":"raw","Data":"ENABLE_HOST_NOTIFICATIONS;web01"}',
  });
  assert.equal(
    await gate.started,
    '{"Command":"raw","Data":"[1700000000] ENABLE_HOST_NOTIFICATIONS;web01"}',
  );
  const stopping = server.shutdown();
  // A new connection is refused once the listener is closed.
  await assert.rejects(fetch(url, { method: "POST", body: "{}" }), TypeError);
  gate.release();
  const res = await inFlight;
  assert.equal(res.status, 202);
  assert.deepEqual(await res.json(), { accepted: 1 });
  await stopping;
});

Deno.test("server: refuses to start without a usable key", async () => {
  await assert.rejects(
    startCommandServer({
      hostname: "127.0.0.1",
      port: 0,
      apiKeys: [""],
      publisher: gatedPublisher().publisher,
      metrics: createMetrics(),
    }),
    RangeError,
  );
});
