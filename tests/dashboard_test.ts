/**
 * The shipped Grafana dashboard (packaging/grafana/statusengine-worker.json) shows data: a real
 * worker process consumes status and check jobs from a real gearmand into MariaDB, a real
 * Prometheus scrapes it every second, and every query of every panel, with the dashboard's
 * variables filled in as Grafana fills them, returns at least one finite value. A renamed metric,
 * a wrong label or a PromQL typo fails here instead of on an operator's screen. The same
 * Prometheus evaluates the shipped alert rules, which must run without error and stay quiet, and
 * which must notice the worker once it stopped.
 */
import assert from "node:assert/strict";
import { createScratchDatabase } from "./helpers/mysql.ts";
import { startGearmand } from "./helpers/gearmand.ts";
import { startPrometheus } from "./helpers/prometheus.ts";
import { startCarbonCache } from "./helpers/tsdb.ts";
import { PERFDATA_QUEUE, perfdataJob, recentSeconds } from "./helpers/perfdata_env.ts";
import { startWorkerProcess } from "./helpers/worker_process.ts";
import { createSchema, publish } from "./helpers/worker.ts";
import { fixtureAged } from "./helpers/fixture_rows.ts";
import { waitFor } from "./helpers/wait.ts";
import type { QueueName } from "../src/events/queues.ts";

const DASHBOARD = new URL("../packaging/grafana/statusengine-worker.json", import.meta.url);
const ALERTS = new URL("../packaging/prometheus/alerts.yml", import.meta.url).pathname;

interface Target {
  readonly refId: string;
  readonly expr: string;
}

interface Panel {
  readonly id: number;
  readonly type: string;
  readonly title: string;
  readonly datasource?: { readonly uid: string };
  readonly targets?: readonly Target[];
  readonly panels?: readonly Panel[];
}

interface Dashboard {
  readonly uid: string;
  readonly panels: readonly Panel[];
  readonly templating: {
    readonly list: readonly {
      name: string;
      type: string;
      definition?: string;
      allValue?: string;
    }[];
  };
}

function allPanels(panels: readonly Panel[]): Panel[] {
  return panels.flatMap((p) => [p, ...allPanels(p.panels ?? [])]);
}

/** Grafana's substitution for "All workers" and a rate window a 1 s scrape fills. */
function grafanaExpr(expr: string, allInstances: string): string {
  return expr
    .replaceAll("$__rate_interval", "15s")
    .replaceAll("$instance", allInstances);
}

function finite(value: string): boolean {
  return Number.isFinite(Number(value));
}

Deno.test("dashboard: every panel uses the data source variable and has a query", async () => {
  const dashboard: Dashboard = JSON.parse(await Deno.readTextFile(DASHBOARD));
  const panels = allPanels(dashboard.panels).filter((p) => p.type !== "row");
  assert.ok(panels.length >= 10);
  const ids = allPanels(dashboard.panels).map((p) => p.id);
  assert.equal(new Set(ids).size, ids.length, "panel ids are unique");
  for (const p of panels) {
    assert.equal(p.datasource?.uid, "${datasource}", `${p.title}: data source variable`);
    assert.ok((p.targets ?? []).length > 0, `${p.title}: has a query`);
  }
  const names = dashboard.templating.list.map((v) => v.name);
  assert.deepEqual(names, ["datasource", "instance"]);
});

Deno.test("dashboard: every query returns data from a real Prometheus scraping a real worker", async () => {
  const dashboard: Dashboard = JSON.parse(await Deno.readTextFile(DASHBOARD));
  const instanceVar = dashboard.templating.list.find((v) => v.name === "instance");
  const allValue = instanceVar?.allValue ?? "";
  assert.equal(allValue, ".+");
  const queries = allPanels(dashboard.panels).flatMap((p) =>
    (p.targets ?? []).map((t) => ({ panel: p.title, refId: t.refId, expr: t.expr }))
  );

  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  // Perfdata to a real Carbon: the perfdata panels read series that exist only while a backend is
  // configured.
  await using carbon = await startCarbonCache();
  await using worker = await startWorkerProcess({
    gearmanAddr: gearmand.addr,
    mysqlUrl: db.url,
    args: ["--perfdata-backends", "graphite", "--graphite-addr", carbon.addr],
  });
  await using prometheus = await startPrometheus({
    targets: [`127.0.0.1:${worker.metricsPort}`],
    ruleFiles: [ALERTS],
  });

  // Status and check events of the present, for as long as the queries are asked: the lag,
  // duration and rate panels need observations inside their window.
  const queues: QueueName[] = [
    "statusngin_hoststatus",
    "statusngin_servicestatus",
    "statusngin_hostchecks",
    "statusngin_servicechecks",
    "statusngin_logentries",
  ];
  const stop = new AbortController();
  const traffic = (async () => {
    while (!stop.signal.aborted) {
      for (const q of queues) await publish(gearmand.addr, q, [fixtureAged(q, 2)]);
      await publish(gearmand.addr, PERFDATA_QUEUE, [
        perfdataJob([{
          host: "web1",
          service: "load",
          perfData: "load1=0.5",
          startTime: recentSeconds(),
        }]),
      ]);
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  try {
    // The worker's instance label, as the dashboard's variable query
    // label_values(statusengine_build_info, instance) lists it.
    assert.equal(
      instanceVar?.definition,
      "label_values(statusengine_build_info, instance)",
    );
    await waitFor(async () => (await prometheus.query("statusengine_build_info")).length === 1, {
      timeoutMs: 30_000,
      message: "Prometheus to scrape the worker",
    });
    const [build] = await prometheus.query("statusengine_build_info");
    assert.equal(build?.metric.instance, `127.0.0.1:${worker.metricsPort}`);

    let missing: string[] = [];
    try {
      await waitFor(async () => {
        missing = [];
        for (const q of queries) {
          const result = await prometheus.query(grafanaExpr(q.expr, allValue));
          if (!result.some((s) => finite(s.value))) {
            missing.push(`${q.panel} (${q.refId}): ${q.expr}`);
          }
        }
        return missing.length === 0;
      }, { timeoutMs: 90_000, intervalMs: 1_000, message: "every panel to show data" });
    } catch (err: unknown) {
      throw new Error(`queries without data:\n  ${missing.join("\n  ")}`, { cause: err });
    }

    // The shipped alert rules evaluate without error on the real series, and a healthy
    // worker under load sets none of them off.
    await waitFor(async () => (await prometheus.alertRules()).every((r) => r.health === "ok"), {
      timeoutMs: 30_000,
      message: "every alert rule to be evaluated",
    });
    const rules = await prometheus.alertRules();
    assert.ok(rules.length >= 15, `${rules.length} alert rules loaded`);
    for (const r of rules) {
      assert.equal(r.health, "ok", `${r.name}: ${r.lastError ?? ""}`);
      assert.equal(r.state, "inactive", `${r.name} is quiet on a healthy worker`);
    }

    // The worker stops: it exports nothing any more, and the rules that read Prometheus' own
    // series of the target (under the job name docs/metrics.md shows) see it. Their `for` is
    // minutes, so pending is what a test can wait for.
    worker.kill("SIGTERM");
    await worker.status;
    const noticed = ["StatusengineWorkerDown", "StatusengineInOrderLockUnheld"];
    await waitFor(async () => {
      const states = await prometheus.alertRules();
      return noticed.every((name) => states.some((r) => r.name === name && r.state !== "inactive"));
    }, { timeoutMs: 60_000, message: `${noticed.join(" and ")} to notice the stopped worker` });
  } finally {
    stop.abort();
    await traffic;
  }
});
