/**
 * Does the `/ws` stream slow the pipeline? End-to-end events/s (gearmand →
 * worker → MariaDB) with no client connected and with 50 counting clients
 * subscribed to everything, side by side in one run (issue 7).
 *
 *   deno run -A bench/websocket.ts [--events 50000] [--events-per-job 100] [--clients 50] [--runs 3]
 *
 * The clients run in a separate process (bench/_ws_clients.ts) and only count
 * frames, as a real dashboard would run elsewhere. Both cases publish the same
 * jobs while the worker consumes; the clock runs from the first submission to
 * the last completed job.
 *
 *   deno run -A bench/websocket.ts --abuse [--clients 500] [--events 15000] [--baseline DIR]
 *
 * The abuse case: the worker as its own process, `--clients` connections that
 * complete the handshake and then never read, while `--events` stream; prints
 * the worker's peak RSS (VmHWM) against the same worker with no client, the
 * events dropped, and the clients the hub closed. `--baseline DIR` runs another
 * version of the worker (unpacked with `git archive <commit> | tar -x -C DIR`)
 * side by side.
 */
import mysql from "mysql2/promise";
import { startGearmand } from "../tests/helpers/gearmand.ts";
import { createScratchDatabase } from "../tests/helpers/mysql.ts";
import { createSchema, testConfig } from "../tests/helpers/worker.ts";
import { type RunningWorker, startWorker } from "../src/daemon/mod.ts";
import { mysqlOptionsFromUrl } from "../src/util/mysql_url.ts";
import { arg, cpuSeconds, fmt, median, report, submitMany } from "./_util.ts";
import { registrySum } from "../tests/helpers/metric_registry.ts";
import { seriesSum, startWorkerProcess } from "../tests/helpers/worker_process.ts";
import { freePort } from "../tests/helpers/gearmand.ts";

const ABUSE = Deno.args.includes("--abuse");
const EVENTS = arg("--events", ABUSE ? 15_000 : 50_000);
const PER_JOB = arg("--events-per-job", 100);
const CLIENTS = arg("--clients", ABUSE ? 500 : 50);
const RUNS = arg("--runs", 3);
const QUEUE = "statusngin_hostchecks";
const TABLE = "statusengine_hostchecks";
const KEY = "bench-key";

const FIXTURES = new URL("../src/events/testdata/", import.meta.url);

function jobs(): string[] {
  const doc = JSON.parse(Deno.readTextFileSync(new URL(`${QUEUE}.job`, FIXTURES)));
  const template = doc.messages[0];
  const out: string[] = [];
  for (let j = 0; j * PER_JOB < EVENTS; j++) {
    const messages = [];
    for (let k = 0; k < PER_JOB && j * PER_JOB + k < EVENTS; k++) {
      const m = structuredClone(template);
      m.hostcheck.host_name = `bench-host-${j * PER_JOB + k}`;
      messages.push(m);
    }
    out.push(JSON.stringify({ format: "none", messages }));
  }
  return out;
}

/** `ws`: Deno WebSocket clients; `raw`: header-walking TCP readers (bench/_ws_clients.ts). */
type ClientMode = "ws" | "raw" | "stalled";

/** The counting clients' process. */
class Clients implements AsyncDisposable {
  readonly #child: Deno.ChildProcess;
  readonly #writer: WritableStreamDefaultWriter<Uint8Array>;
  readonly #lines: AsyncIterator<string>;

  /** The clients' process id, for its CPU time. */
  get pid(): number {
    return this.#child.pid;
  }

  private constructor(child: Deno.ChildProcess) {
    this.#child = child;
    this.#writer = child.stdin.getWriter();
    this.#lines = lineReader(child.stdout);
  }

  static async start(
    mode: ClientMode,
    port: number,
    count: number,
    topics: string,
  ): Promise<Clients> {
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-net",
        new URL("_ws_clients.ts", import.meta.url).pathname,
        mode,
        `ws://127.0.0.1:${port}/ws?api_key=${KEY}${topics === "" ? "" : `&topics=${topics}`}`,
        String(count),
      ],
      stdin: "piped",
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    const clients = new Clients(child);
    const first = await clients.#lines.next();
    if (first.value !== "ready") throw new Error("websocket clients did not start");
    return clients;
  }

  async totals(): Promise<{ frames: number; bytes: number }> {
    await this.#writer.write(new TextEncoder().encode("report\n"));
    const line = await this.#lines.next();
    return JSON.parse(String(line.value));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.#writer.close();
    await this.#child.status;
  }
}

async function* lineReader(stream: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  let pending = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    pending += chunk;
    let nl: number;
    while ((nl = pending.indexOf("\n")) >= 0) {
      yield pending.slice(0, nl);
      pending = pending.slice(nl + 1);
    }
  }
}

function counter(worker: RunningWorker, name: string): Promise<number> {
  return registrySum(worker.metrics, name);
}

interface Result {
  readonly eventsPerSecond: number;
  /** CPU the worker (this process) spent per 10,000 events, in ms. */
  readonly workerCpuMs: number;
  /** CPU the clients' process spent per 10,000 events, in ms. */
  readonly clientsCpuMs: number;
  readonly framesPerClient: number;
  readonly dropped: number;
}

async function run(
  url: string,
  addr: string,
  payloads: string[],
  clients: number,
  mode: ClientMode,
  topics: string,
): Promise<Result> {
  const conn = await mysql.createConnection({ ...mysqlOptionsFromUrl(url) });
  await conn.query(`TRUNCATE TABLE \`${TABLE}\``);
  await conn.end();
  const worker = await startWorker(testConfig({
    gearmanServers: [addr],
    mysqlUrl: url,
    queues: [QUEUE],
    websocket: { hostname: "127.0.0.1", port: 0, apiKeys: [KEY] },
    // The synthetic jobs are all decodable; no file is left behind in the working directory.
    deadLetterFile: null,
  }));
  try {
    await using counting = clients > 0
      ? await Clients.start(mode, worker.websocketPort ?? 0, clients, topics)
      : undefined;
    for (
      let i = 0;
      (await counter(worker, "statusengine_websocket_clients_active")) < clients;
      i++
    ) {
      if (i === 500) throw new Error("clients did not register");
      await new Promise((r) => setTimeout(r, 10));
    }
    const completed = async () =>
      (await worker.metrics.queueJobs.get()).values.find((v) =>
        v.labels["queue_name"] === QUEUE && v.labels["result"] === "completed"
      )?.value ?? 0;
    const t0 = performance.now();
    const cpu0 = cpuSeconds("self");
    const clientsCpu0 = counting === undefined ? 0 : cpuSeconds(counting.pid);
    await submitMany(addr, QUEUE, payloads.length, (i) => payloads[i] as string);
    while ((await completed()) < payloads.length) await new Promise((r) => setTimeout(r, 2));
    const seconds = (performance.now() - t0) / 1000;
    const per10k = 10_000 / (payloads.length * PER_JOB);
    const workerCpuMs = (cpuSeconds("self") - cpu0) * 1000 * per10k;
    const clientsCpuMs = counting === undefined
      ? 0
      : (cpuSeconds(counting.pid) - clientsCpu0) * 1000 * per10k;
    const dropped = await counter(worker, "statusengine_websocket_messages_dropped_total") +
      await counter(worker, "statusengine_websocket_publish_dropped_total");
    let framesPerClient = 0;
    if (counting !== undefined) {
      // Frames still in flight to the clients are not part of the pipeline's time.
      const expected = topics === "" ? clients * payloads.length - dropped / PER_JOB : 0;
      for (let i = 0; i < 1000; i++) {
        const { frames } = await counting.totals();
        framesPerClient = frames / clients;
        if (frames >= expected) break;
        await new Promise((r) => setTimeout(r, 10));
      }
    }
    return {
      eventsPerSecond: (payloads.length * PER_JOB) / seconds,
      workerCpuMs,
      clientsCpuMs,
      framesPerClient,
      dropped,
    };
  } finally {
    await worker.stop();
  }
}

/** What the abuse case measured for one worker version. */
interface AbuseResult {
  readonly idleMb: number;
  readonly peakMb: number;
  /** RSS once the hub has closed the clients it closes (12 s after the last job). */
  readonly afterMb: number;
  readonly dropped: number;
  readonly closed: number;
  readonly seconds: number;
}

function peakRss(pid: number): { rss: number; peak: number } {
  const status = Deno.readTextFileSync(`/proc/${pid}/status`);
  const kb = (key: string) =>
    Number(new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? 0);
  return { rss: kb("VmRSS") / 1024, peak: kb("VmHWM") / 1024 };
}

async function abuseRun(
  url: string,
  addr: string,
  payloads: string[],
  clients: number,
  main: string | undefined,
): Promise<AbuseResult> {
  const conn = await mysql.createConnection({ ...mysqlOptionsFromUrl(url) });
  await conn.query(`TRUNCATE TABLE \`${TABLE}\``);
  await conn.end();
  const port = freePort();
  await using worker = await startWorkerProcess({
    gearmanAddr: addr,
    mysqlUrl: url,
    listenAddr: `127.0.0.1:${port}`,
    args: ["--queues", QUEUE, "--api-keys", KEY],
    ...(main === undefined ? {} : { main }),
  });
  const metric = async (name: string) => seriesSum(await worker.metrics(), name);
  await using _stalled = clients > 0
    ? await Clients.start("stalled", port, clients, "")
    : undefined;
  for (let i = 0; (await metric("statusengine_websocket_clients_active")) < clients; i++) {
    if (i === 1000) throw new Error("clients did not register");
    await new Promise((r) => setTimeout(r, 10));
  }
  const idleMb = peakRss(worker.pid).rss;
  const t0 = performance.now();
  await submitMany(addr, QUEUE, payloads.length, (i) => payloads[i] as string);
  const completed = async () => {
    const text = await worker.metrics();
    const line = text.split("\n").find((l) =>
      l.startsWith("statusengine_queue_jobs_total") && l.includes(`queue_name="${QUEUE}"`) &&
      l.includes('result="completed"')
    );
    return Number(line?.split(" ").pop() ?? 0);
  };
  while ((await completed()) < payloads.length) await new Promise((r) => setTimeout(r, 20));
  const seconds = (performance.now() - t0) / 1000;
  // The hub keeps working after the last job: give it the write timeout and a bit to act.
  await new Promise((r) => setTimeout(r, 12_000));
  return {
    idleMb,
    peakMb: peakRss(worker.pid).peak,
    afterMb: peakRss(worker.pid).rss,
    dropped: await metric("statusengine_websocket_messages_dropped_total") +
      await metric("statusengine_websocket_publish_dropped_total"),
    closed: clients - await metric("statusengine_websocket_clients_active"),
    seconds,
  };
}

async function abuse(): Promise<void> {
  const bi = Deno.args.indexOf("--baseline");
  const baseline = bi === -1 ? undefined : Deno.args[bi + 1];
  report(
    `websocket abuse: ${fmt(EVENTS)} events in jobs of ${PER_JOB} into ${TABLE}, ${CLIENTS} ` +
      `clients that never read, worker as a process, median of ${RUNS} run(s)`,
  );
  await using gearmand = await startGearmand({ threads: 4 });
  await using db = await createScratchDatabase("se_bench");
  await createSchema(db.url);
  const payloads = jobs();
  const versions = [
    { label: "this version", main: undefined },
    ...(baseline === undefined
      ? []
      : [{ label: `baseline ${baseline}`, main: `${baseline}/main.ts` }]),
  ];
  const cases = versions.flatMap((v) => [
    { ...v, clients: 0 },
    { ...v, clients: CLIENTS },
  ]);
  const results: AbuseResult[][] = cases.map(() => []);
  for (let r = 0; r < RUNS; r++) {
    for (let k = 0; k < cases.length; k++) {
      const i = (k + r) % cases.length;
      const c = cases[i] as (typeof cases)[number];
      (results[i] as AbuseResult[]).push(
        await abuseRun(db.url, gearmand.addr, payloads, c.clients, c.main),
      );
    }
  }
  report(
    "version              | clients | idle RSS MB | peak RSS MB | RSS after MB | drain s | events dropped | clients closed",
  );
  cases.forEach((c, i) => {
    const runs = results[i] ?? [];
    const m = (f: (x: AbuseResult) => number) => median(runs.map(f));
    report(
      `${c.label.padEnd(20)} | ${String(c.clients).padStart(7)} | ${
        m((x) => x.idleMb).toFixed(0).padStart(11)
      } | ${m((x) => x.peakMb).toFixed(0).padStart(11)} | ${
        m((x) => x.afterMb).toFixed(0).padStart(12)
      } | ${m((x) => x.seconds).toFixed(1).padStart(7)} | ${
        fmt(m((x) => x.dropped)).padStart(14)
      } | ${fmt(m((x) => x.closed)).padStart(14)}`,
    );
  });
}

if (ABUSE) await abuse();
else await firehose();

async function firehose(): Promise<void> {
  report(
    `websocket: ${fmt(EVENTS)} events in jobs of ${PER_JOB} into ${TABLE}, median of ${RUNS} ` +
      `run(s); no client vs ${CLIENTS} counting clients on another topic or on every topic`,
  );
  await using gearmand = await startGearmand({ threads: 4 });
  await using db = await createScratchDatabase("se_bench");
  await createSchema(db.url);
  const payloads = jobs();
  const CASES = [
    { label: "no client", clients: 0, mode: "ws", topics: "" },
    // Dashboards watching another topic: connected, but this stream is not theirs.
    {
      label: `${CLIENTS} clients, other topic`,
      clients: CLIENTS,
      mode: "ws",
      topics: "statusngin_notifications",
    },
    { label: "1 client, all topics", clients: 1, mode: "ws", topics: "" },
    { label: `${CLIENTS} clients, all topics`, clients: CLIENTS, mode: "ws", topics: "" },
    { label: `${CLIENTS} raw readers, all`, clients: CLIENTS, mode: "raw", topics: "" },
  ] as const;
  const results: Result[][] = CASES.map(() => []);
  for (let r = 0; r < RUNS; r++) {
    // Rotate the order: whichever runs after another pays for InnoDB's background work.
    for (let k = 0; k < CASES.length; k++) {
      const i = (k + r) % CASES.length;
      const c = CASES[i] as (typeof CASES)[number];
      (results[i] as Result[]).push(
        await run(db.url, gearmand.addr, payloads, c.clients, c.mode, c.topics),
      );
    }
  }
  const base = median((results[0] ?? []).map((x) => x.eventsPerSecond));
  report(
    "case                     | end to end ev/s | vs no client | worker CPU ms/10k ev | clients CPU ms/10k ev | frames per client | events dropped",
  );
  CASES.forEach((c, i) => {
    const runs = results[i] ?? [];
    const evs = median(runs.map((x) => x.eventsPerSecond));
    const lastRun = runs[runs.length - 1];
    report(
      `${c.label.padEnd(24)} | ${fmt(evs).padStart(15)} | ${
        `${((evs / base) * 100).toFixed(0)}%`.padStart(12)
      } | ${fmt(median(runs.map((x) => x.workerCpuMs))).padStart(19)} | ${
        fmt(median(runs.map((x) => x.clientsCpuMs))).padStart(21)
      } | ${(c.clients === 0 ? "—" : fmt(lastRun?.framesPerClient ?? 0)).padStart(17)} | ${
        (c.clients === 0 ? "—" : fmt(lastRun?.dropped ?? 0)).padStart(14)
      }`,
    );
  });
}
