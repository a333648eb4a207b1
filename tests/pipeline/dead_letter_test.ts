/**
 * The dead-letter file on a real file system: logrotate's `create` and
 * `copytruncate`, a removed file or directory, a full disk (/dev/full behind
 * the path), a write torn half-way by a file size limit; and what
 * DeadLetters counts and reports for each.
 */
import assert from "node:assert/strict";
import { DeadLetterFile, DeadLetters } from "../../src/pipeline/dead_letter.ts";
import type { DeadLetterRecord } from "../../src/mysql/dead_letter_sink.ts";
import { createMetrics, type Metrics } from "../../src/metrics/registry.ts";
import { registrySum } from "../helpers/metric_registry.ts";

const QUEUE = "statusngin_hostchecks";

function record(n: number): DeadLetterRecord {
  return { queue: QUEUE, reason: "not_json", error: "not JSON", payload: `bad-${n}` };
}

/** The payloads of the records in a file, in order; a line that is not JSON becomes `<torn>`. */
async function payloads(path: string): Promise<string[]> {
  const text = await Deno.readTextFile(path);
  assert.ok(text === "" || text.endsWith("\n"), "the file ends with a complete line");
  return text.split("\n").filter((l) => l !== "").map((l) => {
    try {
      return (JSON.parse(l) as { payload: string }).payload;
    } catch {
      return "<torn>";
    }
  });
}

function counted(metrics: Metrics): Promise<number> {
  return registrySum(metrics, "statusengine_dead_letters_total");
}

async function writeErrors(metrics: Metrics): Promise<number> {
  return (await metrics.deadLetterWriteErrors.get()).values[0]?.value ?? 0;
}

async function tempDir(): Promise<string & AsyncDisposable> {
  const dir = await Deno.makeTempDir({ prefix: "se-dl-" });
  return Object.assign(dir, {
    [Symbol.asyncDispose]: () => Deno.remove(dir, { recursive: true }).catch(() => {}),
  }) as unknown as string & AsyncDisposable;
}

Deno.test("dead-letter file: after logrotate `create` (renamed, new file at the path) records go to the new file", async () => {
  await using dir = await tempDir();
  const path = `${dir}/dead.ndjson`;
  const file = new DeadLetterFile(path);
  try {
    await file.open();
    await file.write(record(1));
    await Deno.rename(path, `${path}.1`);
    await Deno.writeTextFile(path, ""); // logrotate's `create`
    await file.write(record(2));
    await Deno.rename(path, `${path}.2`); // and a rotation without `create`
    await file.write(record(3));
  } finally {
    await file.close();
  }
  assert.deepEqual(await payloads(`${path}.1`), ["bad-1"]);
  assert.deepEqual(await payloads(`${path}.2`), ["bad-2"]);
  assert.deepEqual(await payloads(path), ["bad-3"]);
});

Deno.test("dead-letter file: after logrotate `copytruncate` the next record starts at offset 0, no hole", async () => {
  await using dir = await tempDir();
  const path = `${dir}/dead.ndjson`;
  const file = new DeadLetterFile(path);
  try {
    await file.write(record(1));
    await file.write(record(2));
    await Deno.copyFile(path, `${path}.1`);
    await Deno.truncate(path, 0);
    await file.write(record(3));
  } finally {
    await file.close();
  }
  assert.deepEqual(await payloads(`${path}.1`), ["bad-1", "bad-2"]);
  const bytes = await Deno.readFile(path);
  assert.equal(bytes.indexOf(0), -1, "no NUL bytes where the old content was");
  assert.deepEqual(await payloads(path), ["bad-3"]);
});

Deno.test("dead-letter file: a removed directory fails the write until it exists again; DeadLetters counts only what was written", async () => {
  await using dir = await tempDir();
  const path = `${dir}/sub/dead.ndjson`;
  await Deno.mkdir(`${dir}/sub`);
  const metrics = createMetrics();
  const letters = new DeadLetters(new DeadLetterFile(path), metrics);
  try {
    await letters.write(record(1));
    await Deno.remove(`${dir}/sub`, { recursive: true });
    await assert.rejects(letters.write(record(2)));
    await assert.rejects(letters.write(record(2)));
    assert.equal(letters.writable, false);
    assert.equal(await writeErrors(metrics), 2);
    assert.equal(await counted(metrics), 1, "failed attempts are not dead letters");
    await Deno.mkdir(`${dir}/sub`);
    await letters.write(record(2));
    assert.equal(letters.writable, true);
    assert.equal(await counted(metrics), 2);
    assert.equal(await writeErrors(metrics), 2);
  } finally {
    await letters.close();
  }
  assert.deepEqual(await payloads(path), ["bad-2"]);
});

Deno.test("dead-letter file: a full disk (/dev/full) fails every write and makes DeadLetters unwritable until space is back", async () => {
  await using dir = await tempDir();
  const path = `${dir}/dead.ndjson`;
  await Deno.symlink("/dev/full", path);
  const metrics = createMetrics();
  const letters = new DeadLetters(new DeadLetterFile(path), metrics);
  try {
    for (let i = 0; i < 3; i++) await assert.rejects(letters.write(record(1)), /dead-letter/);
    assert.equal(letters.writable, false);
    assert.equal(await writeErrors(metrics), 3);
    assert.equal(await counted(metrics), 0);
    // Space is back: the path is a regular file again.
    await Deno.remove(path);
    await letters.write(record(1));
    assert.equal(letters.writable, true);
    assert.equal(await counted(metrics), 1);
  } finally {
    await letters.close();
  }
  assert.deepEqual(await payloads(path), ["bad-1"]);
});

Deno.test("dead-letter file: disabled (no file), records are still counted", async () => {
  const metrics = createMetrics();
  const letters = new DeadLetters(null, metrics);
  await letters.write(record(1));
  assert.equal(letters.writable, true);
  assert.equal(await counted(metrics), 1);
});

// The disk fills up in the middle of a record: the part written is cut back
// off, so the file holds only whole records and the retry of that record is
// its only copy. A file size limit (RLIMIT_FSIZE, set with prlimit on a child
// process that ignores SIGXFSZ) makes the write stop half-way, as a full disk
// does (tests/dead_letter_test.ts fills a real tmpfs).
Deno.test("dead-letter file: a write torn half-way by a full disk is cut back off; its retry is the only copy", async () => {
  await using dir = await tempDir();
  const path = `${dir}/dead.ndjson`;
  const script = `${dir}/child.ts`;
  const module = new URL("../../src/pipeline/dead_letter.ts", import.meta.url).href;
  await Deno.writeTextFile(
    script,
    `import { DeadLetterFile } from ${JSON.stringify(module)};
Deno.addSignalListener("SIGXFSZ", () => {});
const prlimit = async (v: string) => {
  const out = await new Deno.Command("prlimit", { args: ["--pid", String(Deno.pid), "--fsize=" + v + ":"] }).output();
  if (!out.success) throw new Error("prlimit failed: " + new TextDecoder().decode(out.stderr));
};
const file = new DeadLetterFile(Deno.args[0]);
const rec = (payload: string) => ({ queue: "q", reason: "not_json", error: "e", payload });
await file.write(rec("first"));
const size = (await Deno.stat(Deno.args[0])).size;
await prlimit(String(size + 40));
let failed = false;
await file.write(rec("x".repeat(500))).catch(() => (failed = true));
const afterFailure = (await Deno.stat(Deno.args[0])).size;
await prlimit("unlimited");
await file.write(rec("x".repeat(500)));
await file.write(rec("third"));
if (afterFailure !== size) throw new Error("the failed write left " + (afterFailure - size) + " bytes");
await file.close();
console.log(failed ? "torn" : "not torn");
`,
  );
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-all",
      `--config=${new URL("../../deno.json", import.meta.url).pathname}`,
      script,
      path,
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stdout = new TextDecoder().decode(out.stdout).trim();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  assert.equal(stdout, "torn", "the second write failed half-way");
  assert.deepEqual(await payloads(path), ["first", "x".repeat(500), "third"]);
});

// A worker killed in the middle of a record (SIGKILL, OOM, power loss) leaves its part as a last
// line without a newline. The next worker, or the same one reopening the path on SIGHUP, once
// appended its first record to that line: a record counted as written but unreadable, its job
// acknowledged. The file is looked at when opened; a record never shares a line with a torn one.
Deno.test("dead-letter file: a file that ends in the middle of a line (a worker killed mid-record) gets the next record on a line of its own, after a restart and after a reopen", async () => {
  await using dir = await tempDir();
  const path = `${dir}/dead.ndjson`;
  const torn = JSON.stringify({ queue: QUEUE, reason: "not_json", payload: "bad-0" }).slice(0, 30);
  await Deno.writeTextFile(path, JSON.stringify(record(-1)) + "\n" + torn);
  const file = new DeadLetterFile(path);
  try {
    await file.open();
    await file.write(record(1));
    // Torn again (a second worker killed mid-record), then SIGHUP: the reopened file is looked at too.
    await Deno.writeTextFile(path, torn, { append: true });
    await file.reopen();
    await file.write(record(2));
  } finally {
    await file.close();
  }
  assert.deepEqual(await payloads(path), ["bad--1", "<torn>", "bad-1", "<torn>", "bad-2"]);
});

// A torn part that cannot be cut back (the file is append-only, `chattr +a`, so ftruncate fails)
// stays as a torn last line. The next record starts with a newline; if that one is torn too and
// cut back off, the file is back to ending on the first torn part. It once counted as ending on
// a whole line after that cut, and the next record was glued to the torn part, unreadable.
Deno.test("dead-letter file: after a torn part that could not be cut back, a second torn write cut back off still leaves the next record on a line of its own", async () => {
  await using dir = await tempDir();
  const path = `${dir}/dead.ndjson`;
  const script = `${dir}/child.ts`;
  const module = new URL("../../src/pipeline/dead_letter.ts", import.meta.url).href;
  await Deno.writeTextFile(
    script,
    `import { DeadLetterFile } from ${JSON.stringify(module)};
Deno.addSignalListener("SIGXFSZ", () => {});
const run = async (cmd: string, args: string[]) => {
  const out = await new Deno.Command(cmd, { args }).output();
  if (!out.success) throw new Error(cmd + " failed: " + new TextDecoder().decode(out.stderr));
};
const prlimit = (v: string) => run("prlimit", ["--pid", String(Deno.pid), "--fsize=" + v + ":"]);
const path = Deno.args[0];
const file = new DeadLetterFile(path);
const rec = (payload: string) => ({ queue: "q", reason: "not_json", error: "e", payload });
const size = () => Deno.stat(path).then((s) => s.size);
await file.write(rec("first"));
const first = await size();
await run("chattr", ["+a", path]);
await prlimit(String(first + 40));
await file.write(rec("x".repeat(500))).then(() => { throw new Error("not torn"); }, () => {});
if ((await size()) !== first + 40) throw new Error("the torn part was cut back despite chattr +a");
await run("chattr", ["-a", path]);
await prlimit(String(first + 80));
await file.write(rec("y".repeat(500))).then(() => { throw new Error("not torn"); }, () => {});
if ((await size()) !== first + 40) throw new Error("the second torn part was not cut back");
await prlimit("unlimited");
await file.write(rec("y".repeat(500)));
await file.write(rec("third"));
await file.close();
console.log("done");
`,
  );
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-all",
      `--config=${new URL("../../deno.json", import.meta.url).pathname}`,
      script,
      path,
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  await new Deno.Command("chattr", { args: ["-a", path] }).output(); // lets the directory go
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  assert.equal(new TextDecoder().decode(out.stdout).trim(), "done");
  assert.deepEqual(await payloads(path), ["first", "<torn>", "y".repeat(500), "third"]);
});
