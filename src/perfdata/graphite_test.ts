import assert from "node:assert/strict";
import { carbonLine, metricPath, sanitizeSegment } from "./graphite.ts";
import { illegalCharactersPattern } from "../util/illegal_characters.ts";

Deno.test("graphite: path segments are sanitised per code point, keeping '.', '-' and '^' (docs/perfdata.md#graphite-path)", () => {
  assert.equal(
    metricPath("statusengine", "host.example.com", "Disk Usage /var", "used bytes"),
    "statusengine.host.example.com.Disk_Usage__var.used_bytes",
  );
  assert.equal(
    metricPath("statusengine", "groesse-example", "Prüfung", "'response time'"),
    "statusengine.groesse-example.Pr_fung._response_time_",
  );
  assert.equal(sanitizeSegment("my prefix!"), "my_prefix_");
  assert.equal(sanitizeSegment("a^b"), "a^b");
  assert.equal(sanitizeSegment("監視😀"), "___", "a character outside the BMP is one _");
});

Deno.test("graphite: a line is path, value and integer seconds", () => {
  assert.equal(carbonLine("a.b", 0.5, 1785470664.9), "a.b 0.5 1785470664\n");
});

Deno.test("graphite: illegalCharactersPattern takes the bare and the PHP-delimited form, and refuses what cannot work", () => {
  const legacy = illegalCharactersPattern("/[^a-zA-Z^0-9\\-\\.]/");
  assert.equal(sanitizeSegment("Disk Usage /var^x.y-z", legacy), "Disk_Usage__var^x.y-z");
  const bare = illegalCharactersPattern("[^a-z]");
  assert.equal(sanitizeSegment("abC1", bare), "ab__");
  const insensitive = illegalCharactersPattern("/[^a-z]/i");
  assert.equal(sanitizeSegment("abC1", insensitive), "abC_");
  // Used twice in a row: the global pattern carries no state between calls.
  assert.equal(sanitizeSegment("abC1", insensitive), "abC_");
  assert.throws(() => illegalCharactersPattern("[a-"), SyntaxError);
  assert.throws(() => illegalCharactersPattern("x*"), /matches the empty string/);
});
