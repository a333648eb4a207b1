/**
 * The dead-letter file over random orders (docs/testing.md#property-tests-every-order-from-a-seed):
 * bursts of writes not awaited, logrotate `create` and plain renames, `copytruncate`, SIGHUP
 * reopens, and restarts onto a file a killed worker left with a torn last line. Whatever the
 * order, every record whose write resolved is one readable line, exactly once, across the file
 * and its rotated copies; only the torn parts are unreadable.
 */
import assert from "node:assert/strict";
import { DeadLetterFile } from "../../src/pipeline/dead_letter.ts";
import { seededRandom } from "../helpers/seeded_random.ts";

const SEEDS = Array.from({ length: 25 }, (_, i) => i + 1);
const STEPS = 40;
/** What a worker killed mid-record leaves: the start of a record, no newline. */
const TORN = '{"time":"2026-01-01T00:00:00.000Z","queue":"q","reason":"not_json","payl';

async function endsMidLine(path: string): Promise<boolean> {
  const text = await Deno.readTextFile(path).catch(() => "");
  return text !== "" && !text.endsWith("\n");
}

async function run(seed: number, dir: string): Promise<void> {
  const rnd = seededRandom(seed);
  const path = `${dir}/dead.ndjson`;
  let file = new DeadLetterFile(path);
  const pending: Promise<void>[] = [];
  let written = 0;
  let rotations = 0;
  let torn = 0;
  const settleAll = () => Promise.all(pending.splice(0));
  for (let step = 0; step < STEPS; step++) {
    switch (rnd(7)) {
      case 0:
      case 1: // a burst of dead letters, not awaited
        for (let k = 1 + rnd(4); k > 0; k--) {
          pending.push(file.write({
            queue: "q",
            reason: "not_json",
            error: "e",
            payload: `p${written++}`,
          }));
        }
        break;
      case 2: { // logrotate: renamed, with or without `create`
        await Deno.rename(path, `${path}.${++rotations}`).catch((err: unknown) => {
          if (!(err instanceof Deno.errors.NotFound)) throw err;
        });
        // `create` makes the new file only if the worker has not made it yet: writes in flight may
        // already have reopened the path, and truncating that file would lose their records.
        if (rnd(2) === 0) {
          await Deno.writeTextFile(path, "", { createNew: true }).catch((err: unknown) => {
            if (!(err instanceof Deno.errors.AlreadyExists)) throw err;
          });
        }
        break;
      }
      case 3: // SIGHUP
        pending.push(file.reopen());
        break;
      case 4: // logrotate `copytruncate`, between writes (a write in between is logrotate's loss)
        await settleAll();
        await Deno.copyFile(path, `${path}.${++rotations}`).catch((err: unknown) => {
          if (!(err instanceof Deno.errors.NotFound)) throw err;
        });
        await Deno.truncate(path, 0).catch((err: unknown) => {
          if (!(err instanceof Deno.errors.NotFound)) throw err;
        });
        break;
      case 5: // the worker killed in the middle of a record, and started again
        await settleAll();
        await file.close();
        // Its part started on a line of its own, as every record does.
        await Deno.writeTextFile(path, (await endsMidLine(path)) ? `\n${TORN}` : TORN, {
          append: true,
        });
        torn++;
        file = new DeadLetterFile(path);
        break;
      case 6: // let some writes finish
        if (pending.length > 0) await pending[rnd(pending.length)];
        break;
    }
  }
  await settleAll();
  await file.close();

  const payloads: string[] = [];
  let unreadable = 0;
  for await (const entry of Deno.readDir(dir)) {
    for (const line of (await Deno.readTextFile(`${dir}/${entry.name}`)).split("\n")) {
      if (line === "") continue;
      try {
        payloads.push((JSON.parse(line) as { payload: string }).payload);
      } catch {
        unreadable++;
      }
    }
  }
  const expected = Array.from({ length: written }, (_, i) => `p${i}`);
  const byNumber = (a: string, b: string) => Number(a.slice(1)) - Number(b.slice(1));
  assert.deepEqual(
    payloads.sort(byNumber),
    expected,
    `seed ${seed}: every record written is readable exactly once`,
  );
  assert.equal(unreadable, torn, `seed ${seed}: only the torn parts are unreadable`);
}

Deno.test("dead-letter file: over random orders of writes, rotations, reopens and restarts onto a torn line, every record written is readable exactly once", async () => {
  for (const seed of SEEDS) {
    const dir = await Deno.makeTempDir({ prefix: "se-dl-order-" });
    try {
      await run(seed, dir);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  }
});
