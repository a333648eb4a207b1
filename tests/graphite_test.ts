/**
 * Perfdata routing end to end (gearmand → worker → MariaDB and/or Carbon), with
 * a Carbon stand-in written here that records the plaintext lines it receives:
 * the three routes, and Carbon unreachable, stalled, gone and back (F1, F6).
 */
import assert from "node:assert/strict";
import { illegalCharactersPattern } from "../src/util/illegal_characters.ts";
import { createScratchDatabase, type ScratchDatabase } from "./helpers/mysql.ts";
import { startGearmand } from "./helpers/gearmand.ts";
import { waitFor } from "./helpers/wait.ts";
import {
  createSchema,
  jobsAtGearmand,
  metricValue,
  publish,
  startTestWorker,
  testConfig,
} from "./helpers/worker.ts";
import type { PerfdataBackend } from "../src/daemon/mod.ts";

type PerfdataRoute = "mysql" | "graphite" | "both";
const ROUTES: Record<PerfdataRoute, PerfdataBackend[]> = {
  mysql: ["mysql"],
  graphite: ["graphite"],
  both: ["mysql", "graphite"],
};

const Q = "statusngin_service_perfdata";
const FIXTURE = Deno.readTextFileSync(
  new URL(`../src/events/testdata/${Q}.job`, import.meta.url),
);

/** The lines the fixture must produce with prefix "se" (timestamps: the events' start_time). */
const FIXTURE_LINES = [
  "se.localhost.Current_Users.users 0 1785470660",
  "se.localhost.Swap_Usage.swap 0 1785470666",
  "se.demo.statusengine.org.PING.rta 0.084 1785470664",
  "se.demo.statusengine.org.PING.pl 0 1785470664",
];

/** A Carbon plaintext listener that records complete lines; optionally never reads. */
interface Carbon extends AsyncDisposable {
  readonly port: number;
  readonly addr: string;
  lines(): string[];
  /** Close the listener and every accepted connection. */
  close(): Promise<void>;
}

function startCarbon(options: { port?: number; stalled?: boolean } = {}): Carbon {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: options.port ?? 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  const received: string[] = [];
  const conns = new Set<Deno.Conn>();
  const readers: Promise<void>[] = [];
  const accepting = (async () => {
    try {
      for await (const conn of listener) {
        conns.add(conn);
        if (options.stalled) continue; // accept, never read: the socket buffers fill up
        readers.push((async () => {
          const decoder = new TextDecoder();
          let partial = "";
          const buf = new Uint8Array(65536);
          try {
            for (;;) {
              const n = await conn.read(buf);
              if (n === null) break;
              partial += decoder.decode(buf.subarray(0, n), { stream: true });
              const parts = partial.split("\n");
              partial = parts.pop() ?? "";
              received.push(...parts);
            }
          } catch {
            // closed by close()
          }
        })());
      }
    } catch {
      // listener closed
    }
  })();
  let closed: Promise<void> | undefined;
  const close = () => {
    closed ??= (async () => {
      listener.close();
      for (const c of conns) {
        try {
          c.close();
        } catch {
          // already closed
        }
      }
      await accepting;
      await Promise.all(readers);
    })();
    return closed;
  };
  return {
    port,
    addr: `127.0.0.1:${port}`,
    lines: () => [...received],
    close,
    [Symbol.asyncDispose]: close,
  };
}

async function perfdataRows(db: ScratchDatabase): Promise<number> {
  const [row] = await db.query<{ n: number }[]>(
    "SELECT COUNT(*) AS n FROM statusengine_perfdata",
  );
  return Number(row?.n);
}

async function setup(route: PerfdataRoute, carbonAddr: string, illegalCharacters?: RegExp) {
  const gearmand = await startGearmand();
  const db = await createScratchDatabase();
  await createSchema(db.url);
  const worker = await startTestWorker(testConfig({
    gearmanServers: [gearmand.addr],
    mysqlUrl: db.url,
    queues: [Q],
    perfdataBackends: ROUTES[route],
    graphite: {
      addr: carbonAddr,
      prefix: "se",
      batchSize: 100,
      ...(illegalCharacters === undefined ? {} : { illegalCharacters }),
    },
  }));
  return {
    gearmand,
    db,
    worker,
    async [Symbol.asyncDispose]() {
      await worker.stop();
      await gearmand.stop();
      await db.drop();
    },
  };
}

for (
  const [route, mysqlRows, carbonLines] of [
    ["both", 4, FIXTURE_LINES],
    ["graphite", 0, FIXTURE_LINES],
    ["mysql", 4, []],
  ] as const
) {
  Deno.test(
    `graphite: route ${route} sends the fixture's metrics to ${
      route === "mysql" ? "MySQL only" : route === "graphite" ? "Carbon only" : "MySQL and Carbon"
    } (F1, F4, F5)`,
    async () => {
      await using carbon = startCarbon();
      await using env = await setup(route, carbon.addr);
      await publish(env.gearmand.addr, Q, [FIXTURE]);
      await waitFor(async () => (await jobsAtGearmand(env.gearmand.addr, Q)) === 0, {
        message: "job acknowledged",
      });
      if (carbonLines.length > 0) {
        await waitFor(() => carbon.lines().length >= carbonLines.length, {
          message: "lines at Carbon",
        });
      } else {
        // The job is acknowledged, so any offer to Graphite has happened; the shutdown flush
        // writes whatever Graphite would hold. Nothing flushed then means nothing was sent.
        await env.worker.stop();
        assert.equal(
          await metricValue(env.worker, "statusengine_graphite_flushes_total"),
          0,
          "the mysql route never flushes to Carbon",
        );
      }
      assert.deepEqual(carbon.lines(), [...carbonLines]);
      assert.equal(await perfdataRows(env.db), mysqlRows);
      assert.equal(
        await metricValue(env.worker, "statusengine_graphite_metrics_written_total"),
        carbonLines.length,
      );
      assert.equal(await metricValue(env.worker, "statusengine_graphite_available"), 1);
    },
  );
}

Deno.test("graphite: Carbon unreachable: MySQL rows are all written, the metrics are dropped and counted, availability 0 (F6)", async () => {
  // A port nothing listens on: bind, note it, close.
  const gone = startCarbon();
  const addr = gone.addr;
  await gone.close();
  await using env = await setup("both", addr);
  const jobs = 50;
  await publish(env.gearmand.addr, Q, Array.from({ length: jobs }, () => FIXTURE));
  await waitFor(async () => (await perfdataRows(env.db)) === jobs * 4, {
    message: "every perfdata row in MySQL",
  });
  await waitFor(
    async () =>
      (await metricValue(env.worker, "statusengine_graphite_metrics_dropped_total")) ===
        jobs * 4,
    { message: "every metric counted as dropped" },
  );
  assert.equal(await metricValue(env.worker, "statusengine_graphite_available"), 0);
  assert.equal(await metricValue(env.worker, "statusengine_graphite_metrics_written_total"), 0);
  assert.ok(
    (await metricValue(env.worker, "statusengine_pipeline_errors_total", {
      component: "graphite",
    })) >= 1,
  );
});

Deno.test("graphite: a Carbon that accepts but never reads does not hold up MySQL (F6)", async () => {
  await using carbon = startCarbon({ stalled: true });
  await using env = await setup("both", carbon.addr);
  // Enough lines to fill the socket buffers many times over.
  const big = JSON.parse(FIXTURE);
  const template = big.messages[2];
  big.messages = Array.from({ length: 200 }, (_, i) => {
    const m = structuredClone(template);
    m.servicecheck.service_description = `PING ${"x".repeat(200)} ${i}`;
    return m;
  });
  const jobs = 200;
  await publish(env.gearmand.addr, Q, Array.from({ length: jobs }, () => JSON.stringify(big)));
  // Every job commits (2 metrics per event) while Carbon's writes are stuck.
  await waitFor(async () => (await perfdataRows(env.db)) === jobs * 200 * 2, {
    message: "every perfdata row in MySQL",
    timeoutMs: 60_000,
  });
  await waitFor(async () => (await jobsAtGearmand(env.gearmand.addr, Q)) === 0, {
    message: "every job acknowledged",
  });
  assert.ok(
    (await metricValue(env.worker, "statusengine_graphite_metrics_dropped_total")) > 0,
    "metrics beyond the bounded buffer are dropped, not queued",
  );
});

Deno.test("graphite: Carbon goes away and comes back: drops while it is gone, then writes again on a new connection (F6)", async () => {
  let carbon = startCarbon();
  const port = carbon.port;
  await using env = await setup("both", carbon.addr);
  const written = () => metricValue(env.worker, "statusengine_graphite_metrics_written_total");
  const dropped = () => metricValue(env.worker, "statusengine_graphite_metrics_dropped_total");
  const available = () => metricValue(env.worker, "statusengine_graphite_available");
  // Publish one job (4 metrics) and wait until Graphite has written or dropped its metrics.
  const publishAndFlush = async () => {
    const before = (await written()) + (await dropped());
    await publish(env.gearmand.addr, Q, [FIXTURE]);
    await waitFor(async () => (await written()) + (await dropped()) >= before + 4, {
      message: "the job's metrics written or dropped",
    });
  };

  await publish(env.gearmand.addr, Q, [FIXTURE]);
  await waitFor(() => carbon.lines().length === 4, { message: "first lines" });
  await carbon.close();

  // Writing into a socket the peer closed may succeed once (the kernel takes the bytes, the
  // RST comes back later); keep publishing until a failure is seen and counted.
  await waitFor(async () => {
    await publishAndFlush();
    return (await dropped()) > 0 && (await available()) === 0;
  }, { message: "drops while Carbon is gone", timeoutMs: 20_000 });
  const writtenWhileGone = await written();

  carbon = startCarbon({ port });
  try {
    await waitFor(async () => {
      await publishAndFlush();
      return carbon.lines().length >= 4 && (await available()) === 1;
    }, { message: "lines at the restarted Carbon", timeoutMs: 20_000 });
    assert.ok((await written()) > writtenWhileGone);
    for (const line of carbon.lines()) assert.match(line, /^se\.\S+ \d+(\.\d+)? \d+$/);
  } finally {
    await carbon.close();
  }
});

// The Statusengine UI rebuilds Graphite keys with graphite_illegal_characters; a worker that
// ignored a customised expression wrote metrics under keys the UI never finds.
Deno.test("graphite: --graphite-illegal-characters decides which characters of each segment become _", async () => {
  await using carbon = startCarbon();
  // Also "." and "-" become "_": the legacy expression without them, in the PHP form.
  await using env = await setup("graphite", carbon.addr, illegalCharactersPattern("/[^a-z0-9]/i"));
  await publish(env.gearmand.addr, Q, [FIXTURE]);
  await waitFor(() => carbon.lines().length >= FIXTURE_LINES.length, {
    message: "lines at Carbon",
  });
  assert.deepEqual(carbon.lines(), [
    "se.localhost.Current_Users.users 0 1785470660",
    "se.localhost.Swap_Usage.swap 0 1785470666",
    "se.demo_statusengine_org.PING.rta 0.084 1785470664",
    "se.demo_statusengine_org.PING.pl 0 1785470664",
  ]);
});
