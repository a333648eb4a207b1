import assert from "node:assert/strict";
import {
  parsePerfdata as parseWithThresholds,
  PERFDATA_THRESHOLDS,
  type PerfdataMetric,
  perfdataRows,
  perfdataThresholds,
  plainLabel,
  positionalDecimal,
} from "./perfdata.ts";

/** Label, value and unit only: the cases below pin the MySQL columns; thresholds have their own test. */
function parsePerfdata(s: string): PerfdataMetric[] {
  return parseWithThresholds(s).map(({ label, value, unit }) => ({ label, value, unit }));
}

function m(label: string, value: number, unit: string): PerfdataMetric {
  return { label, value, unit };
}

Deno.test("parsePerfdata: the docs/perfdata.md#parsing examples parse to the documented gauges", () => {
  assert.deepEqual(parsePerfdata("users=0;20;50;0"), [m("users", 0, "")]);
  assert.deepEqual(parsePerfdata("swap=0MB;0;0;0;0"), [m("swap", 0, "MB")]);
  assert.deepEqual(
    parsePerfdata("rta=0.084000ms;100.000000;500.000000;0.000000 pl=0%;20;60;0"),
    [m("rta", 0.084, "ms"), m("pl", 0, "%")],
  );
  assert.deepEqual(parsePerfdata("'response time'=0.5s;1;2;0"), [m("'response time'", 0.5, "s")]);
  assert.deepEqual(parsePerfdata('"response time"=0.5s;1;2;0'), [m("'response time'", 0.5, "s")]);
  assert.deepEqual(parsePerfdata("temp=3,7C;;;"), [m("temp", 3.7, "C")]);
  assert.deepEqual(parsePerfdata("temp=-1,5C;;;"), [m("temp", -1.5, "C")]);
  assert.deepEqual(parsePerfdata("pl=0%%;20;60;0"), [m("pl", 0, "%")]);
  assert.deepEqual(parsePerfdata("users=0;20;50;0 broken=U;;;"), [m("users", 0, "")]);
});

Deno.test("parsePerfdata: every row of the malformed-input table behaves as specified", () => {
  const cases: [string, PerfdataMetric[]][] = [
    ["foo=1", [m("foo", 1, "")]],
    ["'foo bar'=1ms", [m("'foo bar'", 1, "ms")]],
    ['"foo bar"=1ms', [m("'foo bar'", 1, "ms")]],
    ["neg=-7,48C;;;;", [m("neg", -7.48, "C")]],
    ["pct=50%%", [m("pct", 50, "%")]],
    ["a=1  b=2", [m("a", 1, ""), m("b", 2, "")]],
    ["dup=1 dup=2", [m("dup", 1, ""), m("dup", 2, "")]],
    ["1=5 2=6 x=7", [m("1", 5, ""), m("2", 6, ""), m("x", 7, "")]],
    ["u=U;1;2", []],
    ["plus=+5", []],
    ["dots=1.2.3", []],
    ["x=", []],
    ["x=;1;2", []],
    ["x=-", []],
    ["noeq", []],
    ["'a=b'=1", []],
    ["sci=1.5e3", [m("sci", 1.5, "e3")]],
    ["time=5seconds_and_more_text", [m("time", 5, "seconds_and_more_text")]],
    ["tab=1\tother=2", [m("tab", 1, "\tother=2")]],
    ["trail=3ms\n", [m("trail", 3, "ms")]],
    ["lbl='unterminated 5", []],
    // More digits than a double holds: Infinity, which MySQL refuses (1264) and no backend writes.
    [`huge=${"9".repeat(400)}B small=-${"9".repeat(400)} ok=1`, [m("ok", 1, "")]],
  ];
  for (const [input, want] of cases) {
    assert.deepEqual(parsePerfdata(input), want, JSON.stringify(input));
  }
});

Deno.test("parsePerfdata: `.5` and `5.` are numbers and `--1` is not (docs/perfdata.md#algorithm)", () => {
  assert.deepEqual(parsePerfdata("a=.5 b=5. c=--1 d=-.25"), [
    m("a", 0.5, ""),
    m("b", 5, ""),
    m("d", -0.25, ""),
  ]);
});

Deno.test("parsePerfdata: surrounding whitespace is trimmed with PHP's set, inner tabs are not separators (docs/tables.md#perfdata-whitespace)", () => {
  assert.deepEqual(parsePerfdata(" \t\r\n\0\x0Ba=1ms \t\r\n\0\x0B"), [m("a", 1, "ms")]);
  assert.deepEqual(parsePerfdata("   "), []);
  assert.deepEqual(parsePerfdata(""), []);
  // NBSP is not in the trim set, so it stays part of the unit (legacy parity).
  assert.deepEqual(parsePerfdata("a=1\u00A0"), [m("a", 1, "\u00A0")]);
});

Deno.test("parsePerfdata: one bad gauge never hides the good ones around it", () => {
  assert.deepEqual(parsePerfdata("a=1 junk b=U c=2;;; d=1.2.3 e=3"), [
    m("a", 1, ""),
    m("c", 2, ""),
    m("e", 3, ""),
  ]);
});

Deno.test("parsePerfdata: a quote inside a token switches quote mode and spaces in quotes do not split", () => {
  assert.deepEqual(parsePerfdata("'disk C:\\ used'=5GB;8;9 x=1"), [
    m("'disk C:\\ used'", 5, "GB"),
    m("x", 1, ""),
  ]);
  assert.deepEqual(parsePerfdata("a'b c'=1"), [m("a'b c'", 1, "")]);
});

// Speed is measured in decode_bench.ts, not asserted here.
Deno.test("parsePerfdata: a string of 200,000 unit-less gauges yields every gauge", () => {
  const input = Array.from({ length: 200_000 }, (_, i) => `g${i}=${i}`).join(" ");
  const out = parsePerfdata(input);
  assert.equal(out.length, 200_000);
  assert.deepEqual(out[199_999], { label: "g199999", value: 199_999, unit: "" });
});

Deno.test("perfdataRows: timestamp is milliseconds and timestamp_unix seconds of start_time (D5)", () => {
  assert.deepEqual(
    perfdataRows(
      "demo.statusengine.org",
      "PING",
      1785470664,
      parseWithThresholds("rta=0.084000ms;100.000000;500.000000;0.000000 pl=0%;20;60;0"),
    ),
    [
      {
        table: "statusengine_perfdata",
        row: {
          hostname: "demo.statusengine.org",
          service_description: "PING",
          label: "rta",
          timestamp: 1785470664000,
          timestamp_unix: 1785470664,
          value: 0.084,
          unit: "ms",
          [PERFDATA_THRESHOLDS]: { warn: 100, crit: 500, min: 0, max: null },
        },
      },
      {
        table: "statusengine_perfdata",
        row: {
          hostname: "demo.statusengine.org",
          service_description: "PING",
          label: "pl",
          timestamp: 1785470664000,
          timestamp_unix: 1785470664,
          value: 0,
          unit: "%",
          [PERFDATA_THRESHOLDS]: { warn: 20, crit: 60, min: 0, max: null },
        },
      },
    ],
  );
});

Deno.test("parsePerfdata: warn, crit, min and max are kept when they are plain numbers, ranges are not", () => {
  const [a, b, c, d] = parseWithThresholds(
    "a=1ms;2;3;0;10 b=5;10:;@1:2;; c=7 d=1,5C;2,5;;-1",
  );
  assert.deepEqual(a?.thresholds, { warn: 2, crit: 3, min: 0, max: 10 });
  assert.equal(b?.thresholds, undefined, "ranges and empty fields are not numbers");
  assert.equal(c?.thresholds, undefined);
  assert.deepEqual(d?.thresholds, { warn: 2.5, crit: null, min: -1, max: null });
  const rows = perfdataRows("h", "s", 1, parseWithThresholds("a=1;2 c=7"));
  assert.deepEqual(rows.map((r) => perfdataThresholds(r.row)), [
    { warn: 2, crit: null, min: null, max: null },
    null,
  ]);
  // The row's string keys stay the table's columns.
  assert.deepEqual(Object.keys(rows[0]?.row ?? {}), [
    "hostname",
    "service_description",
    "label",
    "timestamp",
    "timestamp_unix",
    "value",
    "unit",
  ]);
});

Deno.test("plainLabel: a quoted label loses its quotes and reads '' as '; any other label is kept", () => {
  for (
    const [label, plain] of [
      ["'memory used'", "memory used"],
      ["'it''s'", "it's"],
      ["''", ""],
      ["'", "'"],
      ["'a", "'a"],
      ["a'b", "a'b"],
      ["rta", "rta"],
    ]
  ) assert.equal(plainLabel(label as string), plain, label);
});

Deno.test("perfdata values are written in the shortest positional form, never with an exponent (docs/perfdata.md#line-format)", () => {
  assert.equal(positionalDecimal(0.069), "0.069");
  assert.equal(positionalDecimal(0), "0");
  assert.equal(positionalDecimal(-1.5), "-1.5");
  assert.equal(positionalDecimal(123456789012), "123456789012");
  assert.equal(positionalDecimal(1e-7), "0.0000001");
  assert.equal(positionalDecimal(-1.25e-8), "-0.0000000125");
  assert.equal(positionalDecimal(1e21), "1000000000000000000000");
  assert.equal(positionalDecimal(1.5e22), "15000000000000000000000");
  for (const v of [1e-7, 3.14e-10, 2.5e21, 1.7976931348623157e308]) {
    assert.equal(Number(positionalDecimal(v)), v, `round trip of ${v}`);
  }
});
