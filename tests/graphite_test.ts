/**
 * Perfdata to Graphite end to end against a real carbon-cache (gearmand → worker → MariaDB and/or
 * Carbon), read back from the whisper files it writes: the three routes, hostile names, Carbon
 * unreachable, paused (accepts, never reads), killed and back (docs/perfdata.md: routing, the
 * Graphite path and line format, no backend holds up MySQL).
 */
import assert from "node:assert/strict";
import { illegalCharactersPattern } from "../src/util/illegal_characters.ts";
import { freePort } from "./helpers/gearmand.ts";
import { waitFor } from "./helpers/wait.ts";
import { jobsAtGearmand, publish } from "./helpers/worker.ts";
import { type CarbonCache, startCarbonCache } from "./helpers/tsdb.ts";
import {
  type Check,
  hostileChecks,
  PERFDATA_QUEUE as Q,
  perfdataEnv,
  perfdataJob,
  recentSeconds,
} from "./helpers/perfdata_env.ts";
import type { PerfdataBackend } from "../src/daemon/mod.ts";

type PerfdataRoute = "mysql" | "graphite" | "both";
const ROUTES: Record<PerfdataRoute, PerfdataBackend[]> = {
  mysql: ["mysql"],
  graphite: ["graphite"],
  both: ["mysql", "graphite"],
};

/** The checks of src/events/testdata/statusngin_service_perfdata.job, at time `t`. */
function fixtureChecks(t: number): Check[] {
  return [
    { host: "localhost", service: "Current Users", perfData: "users=0;20;50;0", startTime: t },
    { host: "localhost", service: "Swap Usage", perfData: "swap=0MB;0;0;0;0", startTime: t },
    {
      host: "demo.statusengine.org",
      service: "PING",
      perfData: "rta=0.084000ms;100.000000;500.000000;0.000000 pl=0%;20;60;0",
      startTime: t,
    },
  ];
}

/** The paths and values the fixture's checks must produce with prefix "se". */
const FIXTURE_POINTS: [string, number][] = [
  ["se.localhost.Current_Users.users", 0],
  ["se.localhost.Swap_Usage.swap", 0],
  ["se.demo.statusengine.org.PING.rta", 0.084],
  ["se.demo.statusengine.org.PING.pl", 0],
];

function setup(route: PerfdataRoute, carbonAddr: string, illegalCharacters?: RegExp) {
  return perfdataEnv(ROUTES[route], {
    graphite: {
      addr: carbonAddr,
      prefix: "se",
      batchSize: 100,
      ...(illegalCharacters === undefined ? {} : { illegalCharacters }),
    },
  });
}

/** Wait until carbon-cache has written `value` at `t` into the whisper file of `path`. */
async function readBack(carbon: CarbonCache, path: string, t: number, value: number) {
  let points: [number, number][] = [];
  await waitFor(async () => {
    points = await carbon.fetch(path, t - 1, t + 1);
    return points.some(([at]) => at === t);
  }, { message: `${path} at ${t} in carbon-cache's whisper file`, timeoutMs: 30_000 });
  assert.deepEqual(points.filter(([at]) => at === t), [[t, value]], path);
}

/** Every whisper file below the storage directory, as dotted paths. */
async function whisperPaths(carbon: CarbonCache): Promise<string[]> {
  const out: string[] = [];
  const walk = async (dir: string, prefix: string[]) => {
    for await (const e of Deno.readDir(dir)) {
      if (e.isDirectory) await walk(`${dir}/${e.name}`, [...prefix, e.name]);
      else if (e.name.endsWith(".wsp")) out.push([...prefix, e.name.slice(0, -4)].join("."));
    }
  };
  await walk(carbon.storageDir, []).catch((err: unknown) => {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  });
  return out.sort();
}

for (
  const [route, mysqlRows, carbonPoints] of [
    ["both", 4, FIXTURE_POINTS],
    ["graphite", 0, FIXTURE_POINTS],
    ["mysql", 4, []],
  ] as const
) {
  Deno.test(
    `graphite: route ${route} sends the fixture's metrics to ${
      route === "mysql" ? "MySQL only" : route === "graphite" ? "Carbon only" : "MySQL and Carbon"
    } (docs/perfdata.md#routing)`,
    async () => {
      await using carbon = await startCarbonCache();
      await using env = await setup(route, carbon.addr);
      const t = recentSeconds();
      await publish(env.gearmand.addr, Q, [perfdataJob(fixtureChecks(t))]);
      await waitFor(async () => (await jobsAtGearmand(env.gearmand.addr, Q)) === 0, {
        message: "job acknowledged",
      });
      if (carbonPoints.length > 0) {
        for (const [path, value] of carbonPoints) await readBack(carbon, path, t, value);
      } else {
        // The job is acknowledged, so any offer to Graphite has happened; the shutdown flush
        // writes whatever Graphite would hold. Nothing flushed then means nothing was sent.
        await env.worker.stop();
        assert.equal(
          await env.metric("statusengine_graphite_flushes_total"),
          0,
          "the mysql route never flushes to Carbon",
        );
      }
      assert.deepEqual(await whisperPaths(carbon), carbonPoints.map(([p]) => p).sort());
      assert.equal(await env.mysqlRows(), mysqlRows);
      assert.equal(
        await env.metric("statusengine_graphite_metrics_written_total"),
        carbonPoints.length,
      );
      assert.equal(await env.metric("statusengine_graphite_available"), 1);
    },
  );
}

Deno.test("graphite: hostile names arrive at carbon-cache sanitised, one _ per character (docs/perfdata.md#graphite-path)", async () => {
  await using carbon = await startCarbonCache();
  await using env = await setup("graphite", carbon.addr);
  const t = recentSeconds();
  await publish(env.gearmand.addr, Q, [perfdataJob(hostileChecks(t))]);
  // Every character outside [a-zA-Z0-9.^-] (space, comma, =, quotes, backslash, line break,
  // ö, ☃) is one _; "." survives and adds a level, as in the legacy worker.
  await readBack(carbon, "se.web_01_dc_eu.Disk__C____usage._C___used___", t, 42.5);
  await readBack(carbon, "se.k_ln-_.example.Temperatur___K_che._temp__inner_", t, -3.7);
  await readBack(carbon, "se.k_ln-_.example.Temperatur___K_che.x", t, 0.0000001);
  await readBack(carbon, "se.trailing_.back_slash.a", t, 1);
  assert.equal((await whisperPaths(carbon)).length, 4);
  assert.equal(
    await env.metric("statusengine_perfdata_points_written_total", { backend: "graphite" }),
    4,
  );
});

Deno.test("graphite: Carbon unreachable: MySQL rows are all written, the metrics are dropped and counted, availability 0 (docs/perfdata.md#no-backend-holds-up-mysql)", async () => {
  await using env = await setup("both", `127.0.0.1:${freePort()}`);
  const jobs = 50;
  const t = recentSeconds();
  await publish(
    env.gearmand.addr,
    Q,
    Array.from({ length: jobs }, () => perfdataJob(fixtureChecks(t))),
  );
  await waitFor(async () => (await env.mysqlRows()) === jobs * 4, {
    message: "every perfdata row in MySQL",
  });
  await waitFor(
    async () => (await env.metric("statusengine_graphite_metrics_dropped_total")) === jobs * 4,
    { message: "every metric counted as dropped" },
  );
  assert.equal(await env.metric("statusengine_graphite_available"), 0);
  assert.equal(await env.metric("statusengine_graphite_metrics_written_total"), 0);
  assert.ok(
    (await env.metric("statusengine_pipeline_errors_total", { component: "graphite" })) >= 1,
  );
  assert.equal(
    (await env.metric("statusengine_perfdata_dropped_total", {
      backend: "graphite",
      reason: "write_failed",
    })) +
      (await env.metric("statusengine_perfdata_dropped_total", {
        backend: "graphite",
        reason: "buffer_full",
      })),
    jobs * 4,
    "the backend-labelled counter agrees",
  );
});

Deno.test("graphite: a carbon-cache that accepts but never reads (paused) does not hold up MySQL (docs/perfdata.md#no-backend-holds-up-mysql)", async () => {
  await using carbon = await startCarbonCache();
  await using env = await setup("both", carbon.addr);
  carbon.pause();
  try {
    // Enough lines to fill the socket buffers many times over.
    const t = recentSeconds();
    const jobs = 200;
    const payloads = Array.from(
      { length: jobs },
      () =>
        perfdataJob(Array.from({ length: 200 }, (_, i) => ({
          host: "demo.statusengine.org",
          service: `PING ${"x".repeat(200)} ${i}`,
          perfData: "rta=0.084000ms;100;500;0 pl=0%;20;60;0",
          startTime: t,
        }))),
    );
    await publish(env.gearmand.addr, Q, payloads);
    // Every job commits (2 metrics per check) while Carbon's writes are stuck.
    await waitFor(async () => (await env.mysqlRows()) === jobs * 200 * 2, {
      message: "every perfdata row in MySQL",
      timeoutMs: 60_000,
    });
    await waitFor(async () => (await jobsAtGearmand(env.gearmand.addr, Q)) === 0, {
      message: "every job acknowledged",
    });
    assert.ok(
      (await env.metric("statusengine_graphite_metrics_dropped_total")) > 0,
      "metrics beyond the bounded buffer are dropped, not queued",
    );
  } finally {
    carbon.resume();
  }
});

Deno.test("graphite: carbon-cache killed and started again: drops while it is gone, then writes again on a new connection (docs/perfdata.md#no-backend-holds-up-mysql)", async () => {
  let carbon = await startCarbonCache();
  const port = Number(carbon.addr.split(":")[1]);
  try {
    await using env = await setup("both", carbon.addr);
    const written = () => env.metric("statusengine_graphite_metrics_written_total");
    const dropped = () => env.metric("statusengine_graphite_metrics_dropped_total");
    const available = () => env.metric("statusengine_graphite_available");
    // Publish one job (4 metrics) and wait until Graphite has written or dropped its metrics.
    const publishAndFlush = async (t: number) => {
      const before = (await written()) + (await dropped());
      await publish(env.gearmand.addr, Q, [perfdataJob(fixtureChecks(t))]);
      await waitFor(async () => (await written()) + (await dropped()) >= before + 4, {
        message: "the job's metrics written or dropped",
      });
    };

    const t = recentSeconds();
    await publishAndFlush(t);
    await readBack(carbon, "se.localhost.Current_Users.users", t, 0);
    await carbon.kill();
    await carbon.stop();

    // Writing into a socket the peer closed may succeed once (the kernel takes the bytes, the
    // RST comes back later); keep publishing until a failure is seen and counted.
    await waitFor(async () => {
      await publishAndFlush(t);
      return (await dropped()) > 0 && (await available()) === 0;
    }, { message: "drops while Carbon is gone", timeoutMs: 20_000 });
    const writtenWhileGone = await written();

    carbon = await startCarbonCache({ port });
    const later = t + 5;
    await waitFor(async () => {
      await publishAndFlush(later);
      return (await available()) === 1 && (await written()) > writtenWhileGone;
    }, { message: "writes to the restarted carbon-cache", timeoutMs: 20_000 });
    await readBack(carbon, "se.demo.statusengine.org.PING.rta", later, 0.084);
  } finally {
    await carbon.stop();
  }
});

// The Statusengine UI rebuilds Graphite keys with graphite_illegal_characters; a worker that
// ignored a customised expression wrote metrics under keys the UI never finds.
Deno.test("graphite: --graphite-illegal-characters decides which characters of each segment become _", async () => {
  await using carbon = await startCarbonCache();
  // Also "." and "-" become "_": the legacy expression without them, in the PHP form.
  await using env = await setup("graphite", carbon.addr, illegalCharactersPattern("/[^a-z0-9]/i"));
  const t = recentSeconds();
  await publish(env.gearmand.addr, Q, [perfdataJob(fixtureChecks(t))]);
  await readBack(carbon, "se.demo_statusengine_org.PING.rta", t, 0.084);
  await readBack(carbon, "se.demo_statusengine_org.PING.pl", t, 0);
  await readBack(carbon, "se.localhost.Current_Users.users", t, 0);
  await readBack(carbon, "se.localhost.Swap_Usage.swap", t, 0);
});
