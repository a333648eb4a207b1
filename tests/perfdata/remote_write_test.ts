/**
 * Remote write's isolation of refused samples against a small model of Prometheus' appender
 * (docs/perfdata.md#refused-samples): a request with one sample the server cannot take appends
 * nothing.
 */
import assert from "node:assert/strict";
import protobuf from "protobufjs";
import SnappyJS from "snappyjs";
import { RemoteWriteClient } from "../../src/perfdata/remote_write.ts";
import type { DropReason } from "../../src/perfdata/sink.ts";

const WriteRequest = protobuf.Root.fromJSON({
  nested: {
    W: { fields: { ts: { rule: "repeated", type: "T", id: 1 } } },
    T: {
      fields: {
        labels: { rule: "repeated", type: "L", id: 1 },
        samples: { rule: "repeated", type: "S", id: 2 },
      },
    },
    L: { fields: { name: { type: "string", id: 1 }, value: { type: "string", id: 2 } } },
    S: { fields: { value: { type: "double", id: 1 }, timestamp: { type: "int64", id: 2 } } },
  },
}).lookupType("W");

interface Decoded {
  ts: {
    labels: { name: string; value: string }[];
    samples: { value: number; timestamp: number }[];
  }[];
}

/**
 * A receiver with Prometheus' rule: a sample older than its series' newest, or another value at
 * that time, refuses the whole request (400) and nothing of it is appended.
 */
function fakePrometheus(seed: Map<string, [number, number][]> = new Map()) {
  /** Series (its `label` label) → appended samples [timestamp, value]. */
  const stored = seed;
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (req) => {
    const wire = SnappyJS.uncompress(new Uint8Array(await req.arrayBuffer())) as Uint8Array;
    const w = WriteRequest.toObject(WriteRequest.decode(wire), { longs: Number }) as Decoded;
    const next = new Map([...stored].map(([k, v]) => [k, [...v]]));
    for (const t of w.ts) {
      const key = t.labels.find((l) => l.name === "label")?.value ?? "";
      const samples = next.get(key) ?? [];
      for (const s of t.samples) {
        const newest = samples.at(-1);
        if (newest !== undefined && s.timestamp < newest[0]) {
          return new Response("out of order sample", { status: 400 });
        }
        if (newest !== undefined && s.timestamp === newest[0]) {
          if (s.value !== newest[1]) {
            return new Response("duplicate sample for timestamp", { status: 400 });
          }
          continue;
        }
        samples.push([s.timestamp, s.value]);
      }
      next.set(key, samples);
    }
    for (const [k, v] of next) stored.set(k, v);
    return new Response(null, { status: 204 });
  });
  return { url: `http://127.0.0.1:${server.addr.port}/api/v1/write`, stored, server };
}

function counting() {
  const o = { written: 0, dropped: new Map<DropReason, number>() };
  return {
    o,
    observer: {
      written: (n: number) => void (o.written += n),
      dropped: (n: number, r: DropReason) => void o.dropped.set(r, (o.dropped.get(r) ?? 0) + n),
      available: () => {},
      retried: () => {},
      failed: () => {},
    },
  };
}

const row = (host: string, label: string, seconds: number, value: number) => ({
  hostname: host,
  service_description: "svc",
  label,
  value,
  timestamp: seconds * 1000,
  timestamp_unix: seconds,
  unit: "",
});

Deno.test("remote write: of two values at one time the last is kept, also when a stale sample elsewhere makes the request be halved", async () => {
  // Another writer already put x at 20 s: x at 10 s is refused, and the worker does not know why.
  const prom = fakePrometheus(new Map([["x", [[20_000, 1]]]]));
  const { o, observer } = counting();
  const client = new RemoteWriteClient({
    url: prom.url,
    batchSize: 3,
    observer,
    statsIntervalMs: 0,
  });
  const host = "halving-keeps-the-last";
  client.offer([row(host, "x", 10, 7), row(host, "s", 5, 1), row(host, "s", 5, 2)]);
  await client.close(10_000);
  await prom.server.shutdown();
  assert.deepEqual(prom.stored.get("s"), [[5_000, 2]], "the last value at 5 s, as unhalved");
  assert.equal(o.written, 1);
  assert.equal(o.dropped.get("out_of_order"), 2);
});
