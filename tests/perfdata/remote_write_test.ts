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
import { seededRandom } from "../helpers/seeded_random.ts";

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
  /** Series (`hostname/label`) → appended samples [timestamp, value]. */
  const stored = seed;
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (req) => {
    const wire = SnappyJS.uncompress(new Uint8Array(await req.arrayBuffer())) as Uint8Array;
    const w = WriteRequest.toObject(WriteRequest.decode(wire), { longs: Number }) as Decoded;
    const next = new Map([...stored].map(([k, v]) => [k, [...v]]));
    for (const t of w.ts) {
      const label = (name: string) => t.labels.find((l) => l.name === name)?.value ?? "";
      const key = `${label("hostname")}/${label("label")}`;
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
  const host = "halving-keeps-the-last";
  const prom = fakePrometheus(new Map([[`${host}/x`, [[20_000, 1]]]]));
  const { o, observer } = counting();
  const client = new RemoteWriteClient({
    url: prom.url,
    batchSize: 3,
    observer,
    statsIntervalMs: 0,
  });
  client.offer([row(host, "x", 10, 7), row(host, "s", 5, 1), row(host, "s", 5, 2)]);
  await client.close(10_000);
  await prom.server.shutdown();
  assert.deepEqual(
    prom.stored.get(`${host}/s`),
    [[5_000, 2]],
    "the last value at 5 s, as unhalved",
  );
  assert.equal(o.written, 1);
  assert.equal(o.dropped.get("out_of_order"), 2);
});

Deno.test("remote write: property: whatever the order of a batch and its stale samples, the server ends with what an ideal sender would leave", async () => {
  const seed = 20261207;
  const rnd = seededRandom(seed);
  const prom = fakePrometheus();
  try {
    for (let round = 0; round < 60; round++) {
      const host = `property-${seed}-${round}`;
      const key = (label: string) => `${host}/${label}`;
      prom.stored.clear();
      // Four series; the server already holds a sample of some (another writer), at 20 s.
      const labels = ["a", "b", "c", "d"];
      const seeded = new Map<string, [number, number]>();
      for (const label of labels) {
        if (rnd(2) === 0) seeded.set(label, [20_000, rnd(3)]);
      }
      for (const [label, sample] of seeded) prom.stored.set(key(label), [sample]);
      // Up to 24 samples at 15..26 s with values 0..2, in any order; at most three older than
      // the server's newest (the halving's budget isolates eight).
      const rows: ReturnType<typeof row>[] = [];
      let stale = 0;
      for (let i = 1 + rnd(24); i > 0; i--) {
        const label = labels[rnd(labels.length)] as string;
        let seconds = 15 + rnd(12);
        if (seconds < 20 && seeded.has(label) && ++stale > 3) seconds = 21;
        rows.push(row(host, label, seconds, rnd(3)));
      }
      // The model: per series, the last value at each time, appended when not older than the
      // server's newest (the same value at that time is taken and changes nothing).
      const expected = new Map<string, [number, number][]>();
      let accepted = 0;
      for (const label of labels) {
        const last = new Map<number, number>();
        for (const r of rows) if (r.label === label) last.set(r.timestamp, r.value);
        const held = seeded.get(label);
        const samples: [number, number][] = held === undefined ? [] : [held];
        for (const [t, v] of [...last].sort(([x], [y]) => x - y)) {
          if (held !== undefined && (t < held[0] || (t === held[0] && v !== held[1]))) continue;
          accepted++;
          if (held === undefined || t > held[0]) samples.push([t, v]);
        }
        if (samples.length > 0) expected.set(key(label), samples);
      }
      const { o, observer } = counting();
      const client = new RemoteWriteClient({
        url: prom.url,
        batchSize: rows.length,
        observer,
        statsIntervalMs: 0,
      });
      client.offer(rows);
      await client.close(10_000);
      const what = `seed ${seed}, round ${round}: ${
        JSON.stringify(rows.map((r) => [r.label, r.timestamp_unix, r.value]))
      } onto ${JSON.stringify([...seeded])}`;
      assert.deepEqual(new Map([...prom.stored].filter(([, v]) => v.length > 0)), expected, what);
      assert.equal(o.written, accepted, what);
      assert.equal(o.written + (o.dropped.get("out_of_order") ?? 0), rows.length, what);
    }
  } finally {
    await prom.server.shutdown();
  }
});
