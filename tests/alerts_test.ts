/**
 * The shipped Prometheus alert rules (packaging/prometheus/alerts.yml) are valid, pass their unit
 * tests (alerts_test.yml) under the real `promtool`, alert on metrics the worker exports, and are
 * the rules docs/metrics.md lists. A machine without promtool fails here: tools/dev_env.sh
 * installs it (Debian's `prometheus` package).
 */
import assert from "node:assert/strict";
import { parse } from "yaml";
import { METRICS, type MetricSpec } from "../src/metrics/catalogue.ts";

const DIR = new URL("../packaging/prometheus/", import.meta.url).pathname;
const RULES = `${DIR}alerts.yml`;

async function promtool(...args: string[]): Promise<{ ok: boolean; output: string }> {
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command("promtool", { args, cwd: DIR, stdout: "piped", stderr: "piped" })
      .output();
  } catch (err: unknown) {
    throw new Error(
      "promtool is needed to check the alert rules: install Debian's prometheus package " +
        "(tools/dev_env.sh does)",
      { cause: err },
    );
  }
  const text = new TextDecoder();
  return { ok: out.success, output: text.decode(out.stdout) + text.decode(out.stderr) };
}

interface AlertRule {
  readonly alert: string;
  readonly expr: string;
}

async function alertRules(): Promise<AlertRule[]> {
  const doc = parse(await Deno.readTextFile(RULES)) as {
    groups: { rules: AlertRule[] }[];
  };
  return doc.groups.flatMap((g) => g.rules);
}

Deno.test("alerts: promtool accepts the rules", async () => {
  const { ok, output } = await promtool("check", "rules", RULES);
  assert.ok(ok, output);
});

Deno.test("alerts: the rules pass their promtool unit tests", async () => {
  const { ok, output } = await promtool("test", "rules", "alerts_test.yml");
  assert.ok(ok, output);
  assert.match(output, /SUCCESS/);
});

Deno.test("alerts: every rule has a unit test, and every metric a rule reads is one the worker exports", async () => {
  const tests = await Deno.readTextFile(`${DIR}alerts_test.yml`);
  const exported = new Set<string>();
  for (const raw of Object.values(METRICS)) {
    const m: MetricSpec = raw;
    exported.add(m.name);
    if (m.type === "histogram") {
      for (const s of ["_bucket", "_sum", "_count"]) exported.add(m.name + s);
    }
  }
  // Prometheus' own series of every target: what still speaks of a worker that stopped.
  exported.add("up");
  for (const rule of await alertRules()) {
    assert.match(tests, new RegExp(`alertname: ${rule.alert}\\n`), `${rule.alert} is tested`);
    const names = rule.expr.match(/\b(?:(?:statusengine|process)_[a-z_]+|up(?=\{))/g) ?? [];
    assert.ok(names.length > 0, rule.alert);
    for (const name of names) assert.ok(exported.has(name), `${rule.alert}: ${name} is exported`);
  }
});

Deno.test("alerts: docs/metrics.md lists exactly the shipped rules", async () => {
  const docs = await Deno.readTextFile(new URL("../docs/metrics.md", import.meta.url));
  const section = docs.slice(docs.indexOf("## Alerts"), docs.indexOf("## Reference"));
  const listed = [...section.matchAll(/^\| `(Statusengine\w+)`/gm)].map((m) => m[1]).sort();
  const shipped = (await alertRules()).map((r) => r.alert).sort();
  assert.deepEqual(listed, shipped);
});

Deno.test("alerts: the rules find the workers by the scrape job docs/metrics.md tells operators to use", async () => {
  const docs = await Deno.readTextFile(new URL("../docs/metrics.md", import.meta.url));
  const section = docs.slice(docs.indexOf('<a id="scraping"></a>'), docs.indexOf("## Reference"));
  const jobNames = [...section.matchAll(/job_name: (\S+)/g)].map((m) => m[1] ?? "");
  assert.ok(jobNames.length > 0, "docs/metrics.md shows a scrape configuration");
  const selectors = new Set<string>();
  for (const rule of await alertRules()) {
    for (const m of rule.expr.matchAll(/\bup\{job=~"([^"]+)"\}/g)) selectors.add(m[1] ?? "");
  }
  assert.deepEqual([...selectors], ["statusengine.*"], "one job selector for every rule");
  // Prometheus anchors a label regex at both ends.
  for (const selector of selectors) {
    const re = new RegExp(`^(?:${selector})$`);
    for (const name of [...jobNames, "statusengine"]) assert.match(name, re);
  }
});
