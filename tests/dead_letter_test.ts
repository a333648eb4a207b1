/**
 * The dead-letter file under a running worker (gearmand → worker → MariaDB):
 * a full disk behind the file, its recovery, and logrotate's `create` and
 * `copytruncate` while jobs keep arriving (D7).
 */
import assert from "node:assert/strict";
import { createScratchDatabase } from "./helpers/mysql.ts";
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
import type { RunningWorker } from "../src/daemon/mod.ts";
import { fixture } from "./helpers/fixture_rows.ts";
import { registrySum } from "./helpers/metric_registry.ts";

const Q = "statusngin_hostchecks";

function deadLettersCounted(worker: RunningWorker): Promise<number> {
  return registrySum(worker.metrics, "statusengine_dead_letters_total");
}

async function records(path: string): Promise<{ payload: string; queue: string }[]> {
  const bytes = await Deno.readFile(path);
  assert.equal(bytes.indexOf(0), -1, "no NUL bytes in the file");
  return new TextDecoder().decode(bytes).split("\n").filter((l) => l !== "").map((l) =>
    JSON.parse(l)
  );
}

function goodJob(host: string): string {
  const doc = JSON.parse(fixture(Q));
  doc.messages[0].hostcheck.host_name = host;
  return JSON.stringify(doc);
}

Deno.test("dead letters: a full dead-letter file fails /readyz and counts write errors, not dead letters; once writable every record is written once, and rotation (create, copytruncate) is followed", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  const dir = await Deno.makeTempDir({ prefix: "se-dl-" });
  try {
    const path = `${dir}/dead.ndjson`;
    // A full disk: every write to /dev/full fails with ENOSPC.
    await Deno.symlink("/dev/full", path);
    await using worker = await startTestWorker(testConfig({
      gearmanServers: [gearmand.addr],
      mysqlUrl: db.url,
      deadLetterFile: path,
      queues: [Q],
      metrics: { hostname: "127.0.0.1", port: 0 },
    }));
    const readyz = async () => {
      const res = await fetch(`http://127.0.0.1:${worker.metricsPort}/readyz`);
      return { status: res.status, text: await res.text() };
    };
    assert.equal((await readyz()).status, 200);

    await publish(gearmand.addr, Q, ["not json 1", "not json 2", "not json 3"]);
    await waitFor(
      async () => (await metricValue(worker, "statusengine_dead_letter_write_errors_total")) >= 6,
      { timeoutMs: 30_000, message: "every bad job to fail its dead-letter write twice" },
    );
    const notReady = await readyz();
    assert.equal(notReady.status, 503);
    assert.match(notReady.text, /dead-letter file cannot be written/);
    assert.equal(await deadLettersCounted(worker), 0, "failed attempts are not dead letters");
    assert.equal(await jobsAtGearmand(gearmand.addr, Q), 3, "the bad jobs are not acknowledged");

    // Jobs that need no dead letter still flow past the stuck ones.
    await publish(gearmand.addr, Q, [goodJob("ok-1"), goodJob("ok-2")]);
    await waitFor(async () => {
      const rows = await db.query<unknown[]>(
        "SELECT 1 FROM statusengine_hostchecks WHERE hostname LIKE 'ok-%'",
      );
      return rows.length === 2;
    }, { timeoutMs: 30_000, message: "the good jobs committed" });

    // Space is back: the path is a regular file again.
    await Deno.remove(path);
    await waitFor(async () => (await jobsAtGearmand(gearmand.addr, Q)) === 0, {
      timeoutMs: 30_000,
      message: "the bad jobs dead-lettered and acknowledged",
    });
    assert.equal((await readyz()).status, 200);
    assert.deepEqual((await records(path)).map((r) => r.payload).sort(), [
      "not json 1",
      "not json 2",
      "not json 3",
    ]);
    assert.equal(await deadLettersCounted(worker), 3, "one per record written");

    // logrotate `create`: the file is renamed and an empty one created in its place.
    await Deno.rename(path, `${path}.1`);
    await Deno.writeTextFile(path, "");
    await publish(gearmand.addr, Q, ["not json 4"]);
    await waitFor(async () => (await deadLettersCounted(worker)) === 4, { timeoutMs: 30_000 });
    assert.deepEqual((await records(path)).map((r) => r.payload), ["not json 4"]);
    assert.equal((await records(`${path}.1`)).length, 3, "nothing more went to the rotated file");

    // logrotate `copytruncate`: copied, then truncated in place.
    await Deno.copyFile(path, `${path}.2`);
    await Deno.truncate(path, 0);
    await publish(gearmand.addr, Q, ["not json 5"]);
    await waitFor(async () => (await deadLettersCounted(worker)) === 5, { timeoutMs: 30_000 });
    assert.deepEqual((await records(path)).map((r) => r.payload), ["not json 5"]);
    assert.equal((await readyz()).status, 200);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** A tmpfs of `size` mounted on a new temporary directory; unmounted and removed on dispose. */
async function smallFilesystem(size: string): Promise<string & AsyncDisposable> {
  const dir = await Deno.makeTempDir({ prefix: "se-dl-fs-" });
  const mount = await new Deno.Command("mount", {
    args: ["-t", "tmpfs", "-o", `size=${size}`, "tmpfs", dir],
    stderr: "piped",
  }).output();
  if (!mount.success) {
    await Deno.remove(dir);
    throw new Error(
      `this test mounts a ${size} tmpfs to fill it for real and needs the right to mount ` +
        `(root): ${new TextDecoder().decode(mount.stderr).trim()}`,
    );
  }
  return Object.assign(dir, {
    async [Symbol.asyncDispose]() {
      await new Deno.Command("umount", { args: [dir] }).output();
      await Deno.remove(dir, { recursive: true });
    },
  }) as unknown as string & AsyncDisposable;
}

Deno.test("dead letters: a real file system that fills up in the middle of a record leaves no torn or extra record; the records in the file equal statusengine_dead_letters_total", async () => {
  await using gearmand = await startGearmand();
  await using db = await createScratchDatabase();
  await createSchema(db.url);
  // 64 KiB, 56 of them taken by a filler file: two 4 KiB pages are left, room for one
  // record of about 5 KB and half of the next.
  await using fs = await smallFilesystem("64k");
  const path = `${fs}/dead.ndjson`;
  await Deno.writeFile(`${fs}/filler`, new Uint8Array(56 * 1024));
  await using worker = await startTestWorker(testConfig({
    gearmanServers: [gearmand.addr],
    mysqlUrl: db.url,
    deadLetterFile: path,
    queues: [Q],
  }));
  const bad = [1, 2, 3].map((n) => `not json ${n} ${"y".repeat(5000)}`);
  await publish(gearmand.addr, Q, bad);
  await waitFor(
    async () => (await metricValue(worker, "statusengine_dead_letter_write_errors_total")) >= 3,
    { timeoutMs: 30_000, message: "the disk to fill and writes to fail" },
  );
  assert.equal(await deadLettersCounted(worker), 1, "one record fitted");
  assert.deepEqual((await records(path)).map((r) => r.payload), [bad[0]], "no torn record");
  // Space is back.
  await Deno.remove(`${fs}/filler`);
  await waitFor(async () => (await jobsAtGearmand(gearmand.addr, Q)) === 0, {
    timeoutMs: 30_000,
    message: "the bad jobs dead-lettered and acknowledged",
  });
  const written = await records(path);
  assert.deepEqual(written.map((r) => r.payload).sort(), [...bad].sort(), "each record once");
  assert.equal(await deadLettersCounted(worker), written.length);
});
