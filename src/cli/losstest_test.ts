import assert from "node:assert/strict";
import { decodeJob } from "../events/decode.ts";
import {
  compressRanges,
  expectedCount,
  formatRanges,
  HOSTCHECK_TEMPLATE,
  lossMarker,
  LossTally,
  losstestJobs,
  markerPrefix,
  parseLossMarker,
  runIdProblem,
  runLosstestCommand,
  verifyRows,
} from "./losstest.ts";

function collect(): {
  out: string[];
  err: string[];
  io: { out(l: string): void; err(l: string): void };
} {
  const out: string[] = [];
  const err: string[] = [];
  return { out, err, io: { out: (l) => out.push(l), err: (l) => err.push(l) } };
}

Deno.test("losstest: markers are lt-<run>-<seq> and parse back only for their own run", () => {
  assert.equal(lossMarker("r1", 0), "lt-r1-0");
  assert.equal(lossMarker("2026-07-31.a", 299_999), "lt-2026-07-31.a-299999");
  assert.equal(markerPrefix("r1"), "lt-r1-");
  assert.equal(parseLossMarker("r1", "lt-r1-42"), 42);
  assert.equal(parseLossMarker("r1", "lt-r1-0"), 0);
  // Another run whose id extends ours, other hosts, non-canonical numbers.
  assert.equal(parseLossMarker("r1", "lt-r1-x-5"), undefined);
  assert.equal(parseLossMarker("r1", "lt-r10-5"), undefined);
  assert.equal(parseLossMarker("r1", "lt-r1-007"), undefined);
  assert.equal(parseLossMarker("r1", "lt-r1-"), undefined);
  assert.equal(parseLossMarker("r1", "localhost"), undefined);
});

Deno.test("losstest: run ids with LIKE metacharacters or quotes are refused", () => {
  for (const id of ["a%b", "a_b", "a\\b", "a'b", "%", "_"]) {
    assert.match(runIdProblem(id) ?? "", /LIKE pattern/, id);
  }
  assert.match(runIdProblem("") ?? "", /empty/);
  assert.match(runIdProblem("a\nb") ?? "", /control character/);
  assert.match(runIdProblem("x".repeat(201)) ?? "", /longer than 200/);
  for (const id of ["r1", "2026-07-31", "shutdown.test-3", "größer"]) {
    assert.equal(runIdProblem(id), undefined, id);
  }
});

Deno.test("losstest: a refused run id is a usage error (exit 2) before any service is contacted", async () => {
  const { err, io } = collect();
  const code = await runLosstestCommand({
    mode: "verify",
    runId: "bad_id",
    count: 10,
    gearmanAddr: [],
    mysqlUrl: "mysql://nobody@127.0.0.1:1/none",
  }, io);
  assert.equal(code, 2);
  assert.match(err.join("\n"), /run id "bad_id" contains "_"/);
});

Deno.test("losstest: compressRanges joins consecutive numbers and tolerates repeats", () => {
  assert.deepEqual(compressRanges([]), []);
  assert.deepEqual(compressRanges([5]), [[5, 5]]);
  assert.deepEqual(compressRanges([0, 1, 2, 2, 3, 7, 9, 10]), [[0, 3], [7, 7], [9, 10]]);
  assert.throws(() => compressRanges([3, 1]), RangeError);
});

Deno.test("losstest: formatRanges prints a-b and single numbers, as in docs/operations.md#losstest", () => {
  assert.equal(formatRanges([[0, 99], [250, 250], [4000, 4099]]), "0-99, 250, 4000-4099");
  assert.equal(formatRanges([]), "");
});

Deno.test("losstest: formatRanges prints at most 20 ranges, then how many more", () => {
  const ranges = Array.from({ length: 25 }, (_, i) => [i * 10, i * 10 + 1] as const);
  const text = formatRanges(ranges);
  const parts = text.split(", ");
  assert.equal(parts.length, 21);
  assert.equal(parts[0], "0-1");
  assert.equal(parts[19], "190-191");
  assert.equal(parts[20], "... (5 more ranges)");
  assert.equal(formatRanges(ranges.slice(0, 21)).split(", ").at(-1), "... (1 more range)");
  assert.equal(formatRanges(ranges.slice(0, 20)).split(", ").length, 20);
});

Deno.test("losstest: verifyRows reports missing ranges, duplicates and rows outside the run", () => {
  const found = [...Array(1000).keys()].filter((s) => !(s < 100 || s === 250 || s >= 900));
  const r = verifyRows([...found, 500, 500, 1000, 1001], 1000);
  assert.equal(r.count, 1000);
  assert.equal(r.rows, found.length + 4);
  assert.equal(r.distinct, 799);
  assert.equal(r.missing, 201);
  assert.equal(r.duplicates, 2);
  assert.equal(r.outOfRange, 2);
  assert.deepEqual(r.missingRanges, [[0, 99], [250, 250], [900, 999]]);
  assert.equal(formatRanges(r.missingRanges), "0-99, 250, 900-999");
});

Deno.test("losstest: verifyRows of a complete run has nothing missing", () => {
  const r = verifyRows([...Array(300).keys()].reverse(), 300);
  assert.equal(r.missing, 0);
  assert.equal(r.duplicates, 0);
  assert.deepEqual(r.missingRanges, []);
});

Deno.test("losstest: LossTally counts grouped rows (hostname with COUNT(*) > 1) as duplicates", () => {
  const t = new LossTally(3);
  t.add(0, 3);
  t.add(1);
  const r = t.report();
  assert.equal(r.rows, 4);
  assert.equal(r.distinct, 2);
  assert.equal(r.duplicates, 2);
  assert.deepEqual(r.missingRanges, [[2, 2]]);
  assert.throws(() => new LossTally(0), RangeError);
});

Deno.test("losstest: the template is the fixture's first message", () => {
  const fixture = JSON.parse(
    Deno.readTextFileSync(
      new URL("../events/testdata/statusngin_hostchecks.job", import.meta.url),
    ),
  ) as { messages: unknown[] };
  assert.deepEqual(HOSTCHECK_TEMPLATE, fixture.messages[0]);
});

Deno.test("losstest: jobs carry 100 events each with unique markers and unique keys, and decode", () => {
  const now = 1_785_470_668_000;
  const jobs = [...losstestJobs("r1", 250, { now })];
  assert.deepEqual(jobs.map((j) => j.events), [100, 100, 50]);
  const keys = new Set<string>();
  const hosts: string[] = [];
  for (const job of jobs) {
    const decoded = decodeJob("statusngin_hostchecks", String(job.payload), {
      nodeName: "N",
      nowSeconds: now / 1000,
      statusMaxAgeSeconds: 300,
    });
    assert.equal(decoded.kind, "rows");
    if (decoded.kind !== "rows") continue;
    assert.equal(decoded.rows.length, job.events);
    for (const { row } of decoded.rows) {
      hosts.push(String(row["hostname"]));
      keys.add(`${row["start_time"]}|${row["start_time_usec"]}`);
      // Every event records the run's size, which verify reads back.
      assert.equal(row["output"], `losstest run r1: event ${hosts.length - 1} of 250`);
      assert.ok(Number(row["start_time"]) <= now / 1000);
    }
  }
  assert.deepEqual(hosts, [...Array(250).keys()].map((s) => `lt-r1-${s}`));
  // Even without the marker no two events would merge: start time/usec differ too.
  assert.equal(keys.size, 250);
});

Deno.test("losstest: verify expects the recorded count, refuses a disagreeing or missing one", () => {
  assert.deepEqual(expectedCount("r", [300], undefined), {
    count: 300,
    note: "as published (recorded in the run's events)",
  });
  assert.deepEqual(expectedCount("r", [], 50), { count: 50, note: "as given by --count" });
  const narrow = expectedCount("r", [300], 10);
  assert.ok("problem" in narrow && narrow.code === 2, JSON.stringify(narrow));
  const unknown = expectedCount("r", [], undefined);
  assert.ok("problem" in unknown && /--count/.test(unknown.problem), JSON.stringify(unknown));
  const twice = expectedCount("r", [100, 300], undefined);
  assert.ok("problem" in twice && /losstest cleanup/.test(twice.problem), JSON.stringify(twice));
});
