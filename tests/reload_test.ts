/**
 * SIGHUP on a running worker process (logrotate's postrotate sends it): the worker keeps
 * running, reopens the dead-letter file at its configured path, re-reads the log level and
 * logs what it did. Real gearmand and MariaDB.
 */
import assert from "node:assert/strict";
import { startGearmand } from "./helpers/gearmand.ts";
import { createScratchDatabase } from "./helpers/mysql.ts";
import { createSchema, publish } from "./helpers/worker.ts";
import {
  startWorkerProcess,
  startWorkerWithHungDeadLetter,
  type WorkerProcess,
} from "./helpers/worker_process.ts";
import { waitFor } from "./helpers/wait.ts";

const QUEUE = "statusngin_hostchecks";
const HOSTCHECKS_JOB = Deno.readTextFileSync(
  new URL("../src/events/testdata/statusngin_hostchecks.job", import.meta.url),
);

/**
 * A worker process for SIGHUP to reload, on a gearmand and a scratch database of its own, reading
 * a config file that sets log_level: info. With `hungDeadLetter`, consuming QUEUE alone, its
 * dead-letter write never returns and one job waits for it (startWorkerWithHungDeadLetter).
 * Disposing it stops the worker and removes the rest.
 */
async function reloadableWorker(hungDeadLetter = false): Promise<
  {
    readonly worker: WorkerProcess;
    readonly gearmanAddr: string;
    /** The config file the worker reads, to edit before a SIGHUP. */
    readonly config: string;
  } & AsyncDisposable
> {
  await using stack = new AsyncDisposableStack();
  const dir = await Deno.makeTempDir({ prefix: "se-reload-" });
  stack.defer(() => Deno.remove(dir, { recursive: true }));
  const config = `${dir}/config.yml`;
  await Deno.writeTextFile(config, "log_level: info\n");
  const args = ["--config", config];
  let worker: WorkerProcess;
  let gearmanAddr: string;
  if (hungDeadLetter) {
    const hung = stack.use(await startWorkerWithHungDeadLetter(QUEUE, args));
    [worker, gearmanAddr] = [hung, hung.gearmanAddr];
  } else {
    const gearmand = stack.use(await startGearmand());
    const db = stack.use(await createScratchDatabase());
    await createSchema(db.url);
    worker = stack.use(
      await startWorkerProcess({ gearmanAddr: gearmand.addr, mysqlUrl: db.url, args }),
    );
    gearmanAddr = gearmand.addr;
  }
  const owned = stack.move();
  return { worker, gearmanAddr, config, [Symbol.asyncDispose]: () => owned.disposeAsync() };
}

async function linesOf(path: string): Promise<string[]> {
  try {
    return (await Deno.readTextFile(path)).split("\n").filter((l) => l !== "");
  } catch (err: unknown) {
    if (err instanceof Deno.errors.NotFound) return [];
    throw err;
  }
}

Deno.test("reload: SIGHUP reopens the dead-letter file, re-reads the log level, logs it and never exits", async () => {
  await using reloadable = await reloadableWorker();
  const { worker, gearmanAddr, config } = reloadable;
  let exited = false;
  void worker.status.then(() => (exited = true));
  const path = `${worker.dir}/dead-letters.ndjson`;
  const rotated = `${path}.1`;

  await publish(gearmanAddr, QUEUE, ["not json before the rotation"]);
  await waitFor(async () => (await linesOf(path)).length === 1, {
    message: "the first dead letter is written",
  });

  // logrotate without copytruncate: move the file, then HUP.
  await Deno.rename(path, rotated);
  await Deno.writeTextFile(config, "log_level: debug\n");
  worker.kill("SIGHUP");
  await waitFor(() => worker.lines().some((l) => l.includes("reload: done")), {
    message: "the reload is logged",
  });
  assert.equal(exited, false, `the worker exited on SIGHUP:\n${worker.stderr()}`);
  const logs = worker.lines().join("\n");
  assert.match(logs, /SIGHUP received/);
  assert.match(logs, /dead-letter file reopened.*dead-letters\.ndjson/);
  assert.match(logs, /log_level=info->debug/);
  // Reopened at once: the path names a new, empty file before any new dead letter.
  assert.deepEqual(await linesOf(path), []);
  await Deno.stat(path);

  await publish(gearmanAddr, QUEUE, ["not json after the rotation"]);
  await waitFor(async () => (await linesOf(path)).length === 1, {
    message: "the next dead letter goes to the new file at the configured path",
  });
  assert.match((await linesOf(path))[0] ?? "", /after the rotation/);
  assert.equal((await linesOf(rotated)).length, 1);
  assert.match((await linesOf(rotated))[0] ?? "", /before the rotation/);
  // The new level is in force: a flushed batch is logged at debug after the reload.
  await publish(gearmanAddr, QUEUE, [HOSTCHECKS_JOB]);
  await waitFor(
    () => {
      const lines = worker.lines();
      const reloaded = lines.findIndex((l) => l.includes("reload: done"));
      return lines.slice(reloaded).some((l) => l.includes("level=debug"));
    },
    { message: "debug lines after the reload" },
  );

  worker.kill("SIGTERM");
  assert.equal((await worker.status).code, 0, worker.stderr());
});

// The warnings of the file read again were dropped: a key misspelt while editing the file
// (log_levle) was ignored on SIGHUP without a word, where a start names it.
Deno.test("reload: SIGHUP logs the warnings of the file read again, such as a misspelt key", async () => {
  await using reloadable = await reloadableWorker();
  const { worker, config } = reloadable;
  await Deno.writeTextFile(config, "log_levle: debug\n");
  worker.kill("SIGHUP");
  await waitFor(() => worker.lines().some((l) => l.includes("reload: done")), {
    message: "the reload is logged",
  });
  const lines = worker.lines();
  const received = lines.findIndex((l) => l.includes("SIGHUP received"));
  assert.ok(
    lines.slice(received).some((l) =>
      /level=warn/.test(l) && /log_levle.*did you mean log_level\?/.test(l)
    ),
    lines.join("\n"),
  );
  worker.kill("SIGTERM");
  assert.equal((await worker.status).code, 0, worker.stderr());
});

// The reopen waits behind the file's pending writes: with one that never returns (a hung mount)
// the reload never got past it, and every later SIGHUP queued behind: a log level switched to
// debug to look into the hang was never applied, and nothing said why.
Deno.test("reload: SIGHUP while a dead-letter write never returns still applies the settings and says the file did not answer", async () => {
  await using reloadable = await reloadableWorker(true);
  const { worker, config } = reloadable;
  await Deno.writeTextFile(config, "log_level: debug\n");
  worker.kill("SIGHUP");
  await waitFor(() => worker.lines().some((l) => l.includes("reload: done")), {
    timeoutMs: 20_000,
    message: "the reload is done",
  }).catch((err: unknown) => {
    throw new Error(`${err}\n${worker.lines().slice(-5).join("\n")}`);
  });
  const logs = worker.lines().join("\n");
  assert.match(logs, /cannot reopen the dead-letter file.*does not answer/);
  assert.match(logs, /log_level=info->debug/);
  worker.kill("SIGTERM");
  assert.equal((await worker.status).code, 0, worker.stderr());
});

// The command removed its SIGHUP listener once the shutdown was complete, before the process
// exited: a SIGHUP in between ended it by the default action, status SIGHUP instead of 0 (in
// about three stops of four). Three stops, so that the window is hit.
Deno.test("reload: SIGHUPs until the process is gone leave a graceful stop's exit status 0", async () => {
  for (let stop = 1; stop <= 3; stop++) {
    await using reloadable = await reloadableWorker();
    const { worker } = reloadable;
    worker.kill("SIGTERM");
    // As fast as a shell sends them, until the process is gone (reaped: kill fails).
    const hangups = new Deno.Command("sh", {
      args: ["-c", `while kill -HUP ${worker.pid} 2>/dev/null; do :; done`],
    }).spawn();
    const status = await worker.status;
    await hangups.status;
    assert.deepEqual(
      { stop, code: status.code, signal: status.signal },
      { stop, code: 0, signal: null },
      worker.lines().filter((l) => !/SIGHUP received|reload:/.test(l)).slice(-3).join("\n"),
    );
  }
});
