import assert from "node:assert/strict";
import protobuf from "protobufjs";
import SnappyJS from "snappyjs";
import { parsePerfdata, perfdataRows } from "../events/perfdata.ts";
import { escapeMeasurement, escapeTag, influxLine, influxWriteUrl } from "./influxdb.ts";
import { influxUrlProblem } from "../config/mod.ts";
import { encodeWriteRequest, type RemotePoint, remotePoint } from "./remote_write.ts";
import { authorization } from "./http.ts";

function rows(perfData: string, host = "h", service = "s", startTime = 1700000000) {
  return perfdataRows(host, service, startTime, parsePerfdata(perfData)).map((r) => r.row);
}

Deno.test("influxdb: line protocol escapes every reserved character and keeps the rest", () => {
  assert.equal(escapeTag("a b,c=d"), "a\\ b\\,c\\=d");
  assert.equal(escapeTag("multi\nline\r"), "multi\\ line\\ ", "a line break becomes a space");
  assert.equal(escapeTag("q\"u'o"), "q\"u'o");
  assert.equal(escapeTag("C:\\ used"), "C:/\\ used", "a backslash before an escape cannot be kept");
  assert.equal(escapeTag("end\\"), "end/");
  assert.equal(escapeTag("mid\\dle"), "mid\\dle");
  assert.equal(escapeTag("Küche ☃"), "Küche\\ ☃");
  assert.equal(escapeMeasurement("per fdata,x=1"), "per\\ fdata\\,x=1");
});

Deno.test("influxdb: one point per gauge with tags, thresholds as fields and the check's seconds", () => {
  const [a, b] = rows("rta=0.084ms;100;500;0 users=3", "web 01", "PING");
  assert.equal(
    influxLine("perfdata", a ?? {}),
    "perfdata,hostname=web\\ 01,label=rta,service_description=PING,unit=ms value=0.084,warn=100,crit=500,min=0 1700000000",
  );
  assert.equal(
    influxLine("perfdata", b ?? {}),
    "perfdata,hostname=web\\ 01,label=users,service_description=PING value=3 1700000000",
  );
  // Rows whose labels keep the plugin's quotes (for MySQL and Graphite) give the plain label.
  const [quoted] = rows("'memory used'=5MB", "h", "s");
  assert.equal(quoted?.["label"], "'memory used'");
  assert.equal(
    influxLine("perfdata", quoted ?? {}, true),
    "perfdata,hostname=h,label=memory\\ used,service_description=s,unit=MB value=5 1700000000",
  );
  const [tiny] = rows("x=0.0000001");
  assert.match(influxLine("m", tiny ?? {}) ?? "", / value=0\.0000001 /);
});

Deno.test("influxdb: the URL picks the 1.x or 2.x API and must name a database or bucket", () => {
  assert.equal(influxUrlProblem("http://i:8086/write?db=se"), null);
  assert.equal(influxUrlProblem("https://i/api/v2/write?org=o&bucket=b"), null);
  assert.match(influxUrlProblem("http://i:8086/write") ?? "", /names no database/);
  assert.match(influxUrlProblem("http://i:8086/api/v2/write?org=o") ?? "", /names no bucket/);
  assert.match(influxUrlProblem("http://i:8086/query?db=x") ?? "", /neither/);
  assert.equal(
    influxWriteUrl("http://i:8086/api/v2/write?org=o&bucket=b"),
    "http://i:8086/api/v2/write?org=o&bucket=b&precision=s",
  );
});

Deno.test("http: a token wins over a user, basic authentication is base64 of user:password (UTF-8)", () => {
  assert.equal(authorization("Token", { token: "t", user: "u" }), "Token t");
  assert.equal(
    authorization("Bearer", { token: "", user: "ü", password: "p" }),
    `Basic ${btoa(String.fromCharCode(...new TextEncoder().encode("ü:p")))}`,
  );
  assert.equal(authorization("Bearer", { user: "", password: "" }), undefined);
});

Deno.test("remote write: a batch decodes back to series with sorted labels, samples in time order, duplicates left out", () => {
  const points = [
    ...rows("b=2 a=1", "h", "s", 1700000001),
    ...rows("a=0 a=5", "h", "s", 1700000000),
  ].map((r) => remotePoint(r) as RemotePoint);
  const { bytes, duplicates } = encodeWriteRequest(points);
  assert.equal(duplicates, 1);
  // Through snappy and back, as a receiver does.
  const decoded = decodeWriteRequest(SnappyJS.uncompress(SnappyJS.compress(bytes)) as Uint8Array);
  const byLabel = new Map(
    decoded.ts.map((t) => [t.labels.find((l) => l.name === "label")?.value, t]),
  );
  assert.deepEqual(byLabel.get("a")?.labels.map((l) => l.name), [
    "__name__",
    "hostname",
    "label",
    "service_description",
  ]);
  assert.deepEqual(byLabel.get("a")?.samples, [
    { value: 5, timestamp: 1700000000000 },
    { value: 1, timestamp: 1700000001000 },
  ]);
  assert.deepEqual(byLabel.get("b")?.samples, [{ value: 2, timestamp: 1700000001000 }]);
});

Deno.test("remote write: label text arrives exactly (UTF-8, long values), a lone surrogate as U+FFFD", () => {
  const long = "x".repeat(200) + "é";
  const point = (hostname: string, label: string, timestampUnix: number) =>
    remotePoint({
      hostname,
      service_description: long,
      label,
      unit: "",
      value: -0.5,
      timestamp_unix: timestampUnix,
    }) as RemotePoint;
  const { ts } = decodeWriteRequest(
    encodeWriteRequest([
      point("ü-host 😀", 'C:\\ used %\n"q"', 1700000000),
      // Not valid UTF-8 as it stands; receivers refuse invalid label text.
      point("lone\ud800", "rta", -5),
    ]).bytes,
  );
  assert.deepEqual(ts.map((t) => Object.fromEntries(t.labels.map((l) => [l.name, l.value]))), [
    {
      __name__: "statusengine_perfdata_value",
      hostname: "ü-host 😀",
      label: 'C:\\ used %\n"q"',
      service_description: long,
    },
    {
      __name__: "statusengine_perfdata_value",
      hostname: "lone\ufffd",
      label: "rta",
      service_description: long,
    },
  ]);
  assert.deepEqual(ts.map((t) => t.samples), [
    [{ value: -0.5, timestamp: 1700000000000 }],
    [{ value: -0.5, timestamp: -5000 }],
  ]);
});

/** A remote-write request decoded with protobufjs from a schema written out again here. */
function decodeWriteRequest(wire: Uint8Array) {
  const root = protobuf.Root.fromJSON({
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
  });
  const W = root.lookupType("W");
  return W.toObject(W.decode(wire), { longs: Number }) as {
    ts: {
      labels: { name: string; value: string }[];
      samples: { value: number; timestamp: number }[];
    }[];
  };
}
