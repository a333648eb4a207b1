/**
 * The downtime tables end the same whatever order, and however often, the jobs of one downtime
 * are applied (docs/downtimes.md): the property and its lifecycles are in
 * tests/helpers/downtime_order.ts, shared with the run on two Galera nodes (tests/clusters_test.ts).
 */
import { checkEveryOrder } from "./helpers/downtime_order.ts";

Deno.test("downtimes: every order and repetition of one downtime's jobs ends in the rows of the order the core emitted them", async () => {
  await checkEveryOrder({ concurrent: false });
});

// The queue is still handled one job at a time; this shows the rows no longer depend on it.
Deno.test("downtimes: the jobs of one downtime handled all at once end in the same rows as in order", async () => {
  await checkEveryOrder({ concurrent: true });
});
