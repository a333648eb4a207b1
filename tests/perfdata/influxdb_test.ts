import assert from "node:assert/strict";
import { InfluxDbClient, partialWriteDropped } from "../../src/perfdata/influxdb.ts";
import type { DropReason } from "../../src/perfdata/sink.ts";
import { startInfluxd } from "../helpers/tsdb.ts";

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

const row = (label: string, seconds: number) => ({
  hostname: "web01",
  service_description: "PING",
  label,
  value: 1,
  timestamp: seconds * 1000,
  timestamp_unix: seconds,
  unit: "",
});

Deno.test("influxdb: a partial write (points beyond the retention policy) counts only the points InfluxDB dropped", async () => {
  await using influx = await startInfluxd("partial");
  await influx.query(
    `CREATE RETENTION POLICY "hour" ON "partial" DURATION 1h REPLICATION 1 DEFAULT`,
  );
  const { o, observer } = counting();
  const client = new InfluxDbClient({
    url: `${influx.url}/write?db=partial`,
    batchSize: 4,
    observer,
    statsIntervalMs: 0,
  });
  const now = Math.floor(Date.now() / 1000);
  // A backlog drained after an outage: its oldest check is beyond the one hour InfluxDB keeps.
  client.offer([row("old", now - 2 * 86_400), row("a", now), row("b", now), row("c", now)]);
  await client.close(10_000);
  const stored = await influx.query(`SELECT "label", "value" FROM "perfdata"`);
  assert.deepEqual(stored.map((r) => r["label"]).sort(), ["a", "b", "c"]);
  assert.equal(o.written, 3, "the points InfluxDB took are written");
  assert.deepEqual([...o.dropped], [["out_of_order", 1]]);
});

Deno.test("influxdb: only a partial write that counts its dropped points is one (as InfluxDB 1.6 answers)", () => {
  const answer = (error: string) => JSON.stringify({ error });
  assert.deepEqual(
    partialWriteDropped(answer("partial write: points beyond retention policy dropped=7")),
    { points: 7, reason: "out_of_order" },
  );
  assert.deepEqual(
    partialWriteDropped(
      answer(
        'partial write: field type conflict: input field "value" on measurement "perfdata" is type integer, already exists as type float dropped=2',
      ),
    ),
    { points: 2, reason: "out_of_order" },
  );
  // Unparsable lines are not in dropped=0 but named one per line; the others were stored.
  assert.deepEqual(
    partialWriteDropped(
      answer(
        "partial write: unable to parse 'm,t=e value= 1': missing field value\n" +
          "unable to parse 'm,t=f value=1 1796655268000': time outside range dropped=0",
      ),
    ),
    { points: 2, reason: "rejected" },
  );
  assert.equal(partialWriteDropped(answer("partial write: something else dropped=0")), undefined);
  assert.equal(partialWriteDropped(answer('database not found: "x"')), undefined);
});

Deno.test("influxdb: a partial write of lines InfluxDB could not parse counts the points it stored as written", async () => {
  await using influx = await startInfluxd("unparsed");
  const { o, observer } = counting();
  const client = new InfluxDbClient({
    url: `${influx.url}/write?db=unparsed`,
    batchSize: 4,
    observer,
    statsIntervalMs: 0,
  });
  const now = Math.floor(Date.now() / 1000);
  // A check time in milliseconds (a broken clock or broker) is outside the nanosecond range
  // InfluxDB can store: it refuses that line and stores the others of the request.
  client.offer([row("a", now), row("ms", now * 1000), row("b", now), row("c", now)]);
  await client.close(10_000);
  const stored = await influx.query(`SELECT "label", "value" FROM "perfdata"`);
  assert.deepEqual(stored.map((r) => r["label"]).sort(), ["a", "b", "c"]);
  assert.equal(o.written, 3, "the points InfluxDB took are written");
  assert.deepEqual([...o.dropped], [["rejected", 1]]);
});
