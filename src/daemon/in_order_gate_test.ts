/**
 * The gate's admission of new in-order jobs: open while the lock is held, waiting while the
 * holder takes its lock again, refused once another worker took it.
 */
import assert from "node:assert/strict";
import { Admission } from "./consumers.ts";
import { hasCode } from "../util/errors.ts";

async function settled(p: Promise<void>): Promise<"resolved" | "rejected" | "pending"> {
  const marker = Symbol("pending");
  const result = await Promise.race([
    p.then(() => "resolved" as const, () => "rejected" as const),
    new Promise<typeof marker>((r) => setTimeout(() => r(marker), 0)),
  ]);
  return result === marker ? "pending" : result;
}

Deno.test("in-order gate: a job waits while the lock is taken again, and goes on once it is ours", async () => {
  const admission = new Admission();
  const signal = new AbortController().signal;
  assert.equal(await settled(admission.admit(signal)), "resolved");
  admission.hold();
  const waiting = admission.admit(signal);
  assert.equal(await settled(waiting), "pending");
  admission.open();
  assert.equal(await settled(waiting), "resolved");
  assert.equal(admission.state, "open");
});

Deno.test("in-order gate: once another worker took the lock, waiting and new jobs are refused", async () => {
  const admission = new Admission();
  const signal = new AbortController().signal;
  admission.hold();
  const waiting = admission.admit(signal);
  admission.close();
  await assert.rejects(waiting, (err: unknown) => hasCode(err, "in_order_lock_lost"));
  await assert.rejects(
    admission.admit(signal),
    (err: unknown) => hasCode(err, "in_order_lock_lost"),
  );
  // A late "regained" does not reopen a consumer that is being stopped.
  admission.open();
  assert.equal(admission.state, "closed");
});

Deno.test("in-order gate: a waiting job gives up when its delivery is aborted (drain deadline)", async () => {
  const admission = new Admission();
  const controller = new AbortController();
  admission.hold();
  const waiting = admission.admit(controller.signal);
  controller.abort(new Error("drain deadline"));
  await assert.rejects(waiting, /drain deadline/);
  assert.equal(admission.state, "waiting");
});
