import assert from "node:assert/strict";
import {
  type Dial,
  gearmanCommandPublisher,
  type PublishLink,
  RetryingPublisher,
} from "./publisher.ts";
import { hasCode, WorkerError } from "../util/errors.ts";

/** A scripted transport: each dial and each send consumes the next outcome. */
class FakeBroker {
  dials = 0;
  closes = 0;
  /** What the broker queued. */
  readonly sent: string[] = [];
  /**
   * Outcome of each successive send: "ok"; "refused" (known not queued); "lost" (queued, the
   * connection lost before the confirm); "hang" (written, never confirmed).
   */
  readonly sends: ("ok" | "refused" | "lost" | "hang")[] = [];
  /** Outcome of each successive dial. */
  readonly dialOutcomes: ("ok" | "fail" | "hang")[] = [];
  inFlight = 0;
  maxInFlight = 0;

  readonly dial: Dial = async (signal) => {
    this.dials++;
    const outcome = this.dialOutcomes.shift() ?? "ok";
    if (outcome === "fail") throw new Error("connection refused");
    if (outcome === "hang") await hang(signal);
    const link: PublishLink = {
      send: async (body, sendSignal) => {
        this.inFlight++;
        this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
        try {
          const what = this.sends.shift() ?? "ok";
          await Promise.resolve();
          if (what === "refused") {
            throw new WorkerError("not_queued", "broker closed the connection");
          }
          if (what === "hang") await hang(sendSignal);
          this.sent.push(body);
          if (what === "lost") throw new Error("connection lost before the confirm");
        } finally {
          this.inFlight--;
        }
      },
      close: () => {
        this.closes++;
        return Promise.resolve();
      },
    };
    return link;
  };
}

function hang(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) => {
    if (signal.aborted) reject(signal.reason);
    signal.addEventListener("abort", () => reject(signal.reason), { once: true });
  });
}

function publisherFor(broker: FakeBroker, budgetMs = 5_000): RetryingPublisher {
  return new RetryingPublisher({ backend: "gearman", target: "fake", dial: broker.dial, budgetMs });
}

Deno.test("publisher: connects on the first publish and reuses the connection", async () => {
  const broker = new FakeBroker();
  await using publisher = publisherFor(broker);
  assert.equal(broker.dials, 0, "no connection before the first request");
  await publisher.publish("a");
  await publisher.publish("b");
  assert.equal(broker.dials, 1);
  assert.deepEqual(broker.sent, ["a", "b"]);
});

Deno.test("publisher: a send that queued nothing closes the connection and is retried once on a fresh one", async () => {
  const broker = new FakeBroker();
  await using publisher = publisherFor(broker);
  await publisher.publish("a");
  broker.sends.push("refused");
  await publisher.publish("b");
  assert.equal(broker.dials, 2);
  assert.equal(broker.closes, 1);
  assert.deepEqual(broker.sent, ["a", "b"]);
});

Deno.test("publisher: a send whose confirm was lost is not retried: command_unconfirmed, queued once", async () => {
  const broker = new FakeBroker();
  await using publisher = publisherFor(broker);
  broker.sends.push("lost");
  await assert.rejects(publisher.publish("a"), (err: unknown) => {
    assert.ok(hasCode(err, "command_unconfirmed"), String(err));
    assert.match(err.message, /connection lost before the confirm.*may have been queued/);
    return true;
  });
  assert.deepEqual(broker.sent, ["a"]);
  assert.equal(broker.dials, 1);
  assert.equal(broker.closes, 1, "the link is not trusted again");
  await publisher.publish("b");
  assert.deepEqual(broker.sent, ["a", "b"]);
});

Deno.test("publisher: a second failure is a command_publish error and leaves no connection behind", async () => {
  const broker = new FakeBroker();
  await using publisher = publisherFor(broker);
  broker.sends.push("refused", "refused");
  await assert.rejects(publisher.publish("a"), (err: unknown) => {
    assert.ok(hasCode(err, "command_publish"), String(err));
    assert.match(err.message, /statusngin_cmd.*broker closed the connection/);
    return true;
  });
  assert.equal(broker.dials, 2);
  assert.equal(broker.closes, 2);
  // The next request starts over with a fresh connection.
  await publisher.publish("b");
  assert.equal(broker.dials, 3);
  assert.deepEqual(broker.sent, ["b"]);
});

Deno.test("publisher: a refused connection is retried once, then fails", async () => {
  const broker = new FakeBroker();
  await using publisher = publisherFor(broker);
  broker.dialOutcomes.push("fail", "fail");
  await assert.rejects(publisher.publish("a"), (err: unknown) => hasCode(err, "command_publish"));
  assert.equal(broker.dials, 2);
  broker.dialOutcomes.push("fail");
  await publisher.publish("b");
  assert.deepEqual(broker.sent, ["b"]);
});

Deno.test("publisher: a broker that never answers fails within the budget, not a hang", async () => {
  const broker = new FakeBroker();
  await using publisher = publisherFor(broker, 50);
  broker.sends.push("hang", "hang");
  // Written: the broker may still take it, and it is not sent a second time.
  await assert.rejects(publisher.publish("a"), (err: unknown) => {
    assert.ok(hasCode(err, "command_unconfirmed"), String(err));
    assert.match(err.message, /the 50 ms budget ran out.*may have been queued/);
    return true;
  });
  assert.equal(broker.dials, 1);
  broker.dialOutcomes.push("hang");
  await assert.rejects(publisher.publish("b"), (err: unknown) => {
    assert.ok(hasCode(err, "command_publish"), String(err));
    assert.match(err.message, /gave up after the 50 ms budget/);
    return true;
  });
});

Deno.test("publisher: publishes run one at a time, in order", async () => {
  const broker = new FakeBroker();
  await using publisher = publisherFor(broker);
  await Promise.all(["a", "b", "c", "d"].map((b) => publisher.publish(b)));
  assert.equal(broker.maxInFlight, 1);
  assert.deepEqual(broker.sent, ["a", "b", "c", "d"]);
  assert.equal(broker.dials, 1, "concurrent first requests share one connection");
});

Deno.test("publisher: time waiting behind a stuck publish counts against the budget", async () => {
  const broker = new FakeBroker();
  await using publisher = publisherFor(broker, 50);
  broker.sends.push("hang", "hang");
  const first = publisher.publish("stuck");
  const second = publisher.publish("queued");
  await assert.rejects(first, (err: unknown) => hasCode(err, "command_unconfirmed"));
  // Written or not depends on whether its turn came in the last moments of its budget.
  await assert.rejects(
    second,
    (err: unknown) => hasCode(err, "command_publish", "command_unconfirmed"),
  );
  assert.deepEqual(broker.sent, []);
});

Deno.test("publisher: close is idempotent and later publishes fail without dialling", async () => {
  const broker = new FakeBroker();
  const publisher = publisherFor(broker);
  await publisher.publish("a");
  await Promise.all([publisher.close(), publisher.close()]);
  assert.equal(broker.closes, 1);
  await assert.rejects(publisher.publish("b"), /publisher is closed/);
  assert.equal(broker.dials, 1);
});

Deno.test("gearman publisher: a job server that accepts but never answers fails within the budget", async () => {
  // A listener that takes the connection and the SUBMIT_JOB_BG but never sends JOB_CREATED.
  using listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const held: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const conn of listener) held.push(conn);
  })();
  const publisher = gearmanCommandPublisher(
    [`127.0.0.1:${(listener.addr as Deno.NetAddr).port}`],
    { budgetMs: 200 },
  );
  try {
    await assert.rejects(publisher.publish("{}"), (err: unknown) => {
      // The job was written: it may be queued once the server answers, so no "nothing queued".
      assert.ok(hasCode(err, "command_unconfirmed"), String(err));
      assert.match(err.message, /via gearman 127\.0\.0\.1:\d+ .*\(the 200 ms budget ran out\)/);
      return true;
    });
  } finally {
    await publisher.close();
    listener.close();
    await accepting.catch(() => {});
    for (const conn of held) conn.close();
  }
});

Deno.test("gearman publisher: servers are tried in order and the first that accepts is used", async () => {
  using listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  const accepted = listener.accept();
  // Port 1 on loopback refuses; the second server takes the connection.
  const publisher = gearmanCommandPublisher(["127.0.0.1:1", `127.0.0.1:${port}`], {
    budgetMs: 100,
  });
  try {
    await assert.rejects(
      publisher.publish("{}"),
      (err: unknown) => hasCode(err, "command_unconfirmed"),
    );
    using conn = await accepted;
    assert.ok(conn.remoteAddr !== undefined);
  } finally {
    await publisher.close();
  }
});
