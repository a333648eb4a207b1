/**
 * What the hardened HTTP listener costs on `/metrics`: scrapes per second of
 * the worker's metrics server (node:http with the connection cap, header
 * timeout and one request per connection) against a plain `Deno.serve`
 * answering the same registry, side by side in one run (issue 12; issue 26
 * chose the server this way).
 *
 *   deno run -A bench/http_listen.ts [--requests 3000] [--concurrency 4] [--runs 3]
 *     [--listener path/to/listen.ts]
 *
 * `Deno.serve` is measured twice: with keep-alive (what it does by default)
 * and with a new connection per request (what the hardened listener always
 * does). `--listener` adds another listener module with the same `listen()`
 * (for instance an earlier version out of git, see docs/http.md) serving the
 * same handler. The clients share this process, equally for every server.
 */
import { JOB_RESULTS } from "../src/consumer/contract.ts";
import { QUEUE_NAMES, QUEUES } from "../src/events/queues.ts";
import { INVALID_REASONS } from "../src/events/types.ts";
import { COMPONENTS } from "../src/metrics/catalogue.ts";
import { createMetrics, precreateSeries } from "../src/metrics/registry.ts";
import { startMetricsServer } from "../src/http/mod.ts";
import { ADJUSTMENT_REASONS } from "../src/mysql/values.ts";
import { batchedTables, downtimeTables } from "../src/pipeline/pipeline.ts";
import { LISTENERS } from "../src/http/listen.ts";
import { COMMAND_NAMES, REJECT_REASONS } from "../src/commands/mod.ts";
import { arg, fmt, median, report } from "./_util.ts";
import type { Handler, HttpServer, ListenOptions } from "../src/http/listen.ts";

const REQUESTS = arg("--requests", 3000);
const CONCURRENCY = arg("--concurrency", 4);
const RUNS = arg("--runs", 3);

const metrics = createMetrics();
precreateSeries(metrics, {
  queues: QUEUE_NAMES,
  statusQueues: QUEUE_NAMES.filter((q) => QUEUES[q].staleFilter),
  jobResults: JOB_RESULTS,
  deadLetterReasons: [...INVALID_REASONS, "sql_rejected"],
  tables: [...batchedTables(), ...downtimeTables()].map((t) => t.name),
  batchedTables: batchedTables().map((t) => t.name),
  adjustReasons: ADJUSTMENT_REASONS,
  components: COMPONENTS,
  commands: COMMAND_NAMES,
  commandRejectReasons: REJECT_REASONS,
  listeners: LISTENERS,
});

/** Scrapes per second over `REQUESTS` requests from `CONCURRENCY` loops. */
async function scrape(port: number, newConnection: boolean): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (next++ < REQUESTS) {
      const res = await fetch(
        `http://127.0.0.1:${port}/metrics`,
        newConnection ? { headers: { connection: "close" } } : {},
      );
      if (res.status !== 200) throw new Error(`status ${res.status}`);
      await res.arrayBuffer();
    }
  }));
  return REQUESTS / ((performance.now() - started) / 1000);
}

/** A listener module to compare, given with `--listener`. */
interface ListenerModule {
  listen(options: ListenOptions, handler: Handler): Promise<HttpServer>;
}

const plain = Deno.serve(
  { hostname: "127.0.0.1", port: 0, onListen: () => {} },
  async () =>
    new Response(await metrics.registry.metrics(), {
      headers: { "content-type": metrics.registry.contentType },
    }),
);
const hardened = await startMetricsServer({
  hostname: "127.0.0.1",
  port: 0,
  registry: metrics.registry,
  listenerMetrics: metrics,
});
const otherPath = Deno.args[Deno.args.indexOf("--listener") + 1];
const other = Deno.args.includes("--listener") && otherPath !== undefined
  ? await (await import(new URL(otherPath, `file://${Deno.cwd()}/`).href) as ListenerModule)
    .listen({
      name: "metrics",
      hostname: "127.0.0.1",
      port: 0,
      onError: () => new Response("internal error\n", { status: 500 }),
    }, async () =>
      new Response(await metrics.registry.metrics(), {
        headers: { "content-type": metrics.registry.contentType },
      }))
  : undefined;

const body = await metrics.registry.metrics();
report(
  `/metrics: ${fmt(body.length)} bytes, ${fmt(REQUESTS)} scrapes × ${RUNS} runs, ` +
    `${CONCURRENCY} concurrent`,
);
const results = {
  keepAlive: [] as number[],
  perRequest: [] as number[],
  hardened: [] as number[],
  other: [] as number[],
};
// Warm-up of every server and both client modes.
await scrape(plain.addr.port, false);
await scrape(plain.addr.port, true);
await scrape(hardened.port, false);
if (other !== undefined) await scrape(other.port, false);
for (let run = 0; run < RUNS; run++) {
  results.keepAlive.push(await scrape(plain.addr.port, false));
  results.perRequest.push(await scrape(plain.addr.port, true));
  results.hardened.push(await scrape(hardened.port, false));
  if (other !== undefined) results.other.push(await scrape(other.port, false));
}
const keepAlive = median(results.keepAlive);
const perRequest = median(results.perRequest);
const ours = median(results.hardened);
report(`Deno.serve, keep-alive:               ${fmt(keepAlive)} scrapes/s`);
report(`Deno.serve, new connection each:      ${fmt(perRequest)} scrapes/s`);
report(`hardened listener (node:http):        ${fmt(ours)} scrapes/s`);
report(
  `ratio hardened / Deno.serve: ${(ours / keepAlive).toFixed(2)} (keep-alive), ` +
    `${(ours / perRequest).toFixed(2)} (new connection each)`,
);
if (other !== undefined) {
  const theirs = median(results.other);
  report(`--listener ${otherPath}: ${fmt(theirs)} scrapes/s`);
  report(`ratio hardened / --listener: ${(ours / theirs).toFixed(2)}`);
  await other.shutdown();
}
await hardened.shutdown();
await plain.shutdown();
