/**
 * The outage log lines of {@link DbAvailability} on a fake clock. Before, a MySQL outage was only
 * ever logged as a warning, so `journalctl -p err` stayed empty while writes were stalled for hours.
 */
import assert from "node:assert/strict";
import { DbAvailability } from "../../src/mysql/availability.ts";
import { type LogLine, withLogs } from "../helpers/logs.ts";

const DOWN = new Error("connect ECONNREFUSED 127.0.0.1:3306");
/** Names the held statement; a table's outage ends at the latest when it holds none. */
const WRITER = {};

function at(level: string, logs: readonly LogLine[]): string[] {
  return logs.filter((l) => l.level === level).map((l) => l.message);
}

Deno.test("availability: writes held for a minute are an error with context, then a summary a minute, and a warning when they end", async () => {
  await withLogs((logs) => {
    let clock = 0;
    const availability = new DbAvailability(undefined, {
      mysql: "mysql://se:****@db1:3306/statusengine",
      held: () => ({ jobs: 7, rows: 42 }),
      now: () => clock,
    });
    // The writers retry every 5 s; the first minute stays at warn.
    for (; clock < 60_000; clock += 5_000) {
      availability.unreachable("statusengine_servicechecks", DOWN, WRITER);
      availability.unreachable("statusengine_hostchecks", DOWN, WRITER);
    }
    assert.deepEqual(at("error", logs), [], "no error within the first minute");
    assert.ok(at("warn", logs).length > 0, "the first minute is logged as warnings");

    availability.unreachable("statusengine_servicechecks", DOWN, WRITER);
    const errors = logs.filter((l) => l.level === "error");
    assert.equal(errors.length, 1, "one error once the minute is over");
    assert.equal(
      errors[0]?.message,
      "db: MySQL has not taken writes for a minute, writes are stalled",
    );
    assert.deepEqual(
      { ...errors[0]?.properties, since: undefined },
      {
        mysql: "mysql://se:****@db1:3306/statusengine",
        since: undefined,
        down_for_s: 60,
        tables: 2,
        jobs_held: 7,
        rows_held: 42,
        error: DOWN.message,
      },
    );
    assert.match(String(errors[0]?.properties.since), /^\d{4}-\d\d-\d\dT/);

    // Retries within the next minute add no error; the idle probe's ticks keep the summary on time.
    for (clock += 5_000; clock < 120_000; clock += 5_000) {
      availability.unreachable("statusengine_hostchecks", DOWN, WRITER);
    }
    assert.equal(at("error", logs).length, 1, "one error per minute");
    availability.probed(DOWN);
    assert.deepEqual(at("error", logs).slice(1), [
      "db: MySQL still cannot take writes, writes are stalled",
    ]);

    clock += 1_000;
    availability.reachable("statusengine_servicechecks", availability.now(), WRITER);
    assert.equal(at("warn", logs).filter((m) => m.includes("stall is over")).length, 0);
    availability.reachable("statusengine_hostchecks", availability.now(), WRITER);
    const over = logs.filter((l) => l.message.includes("the write stall is over"));
    assert.equal(over.length, 1);
    assert.equal(over[0]?.level, "warn");
    assert.equal(over[0]?.properties.down_for_s, 121);
    assert.equal(availability.available, true);
    return Promise.resolve();
  });
});

Deno.test("availability: an outage shorter than a minute, or of the idle probe alone, is never an error", async () => {
  await withLogs((logs) => {
    let clock = 0;
    const availability = new DbAvailability(undefined, { now: () => clock });
    availability.unreachable("statusengine_servicechecks", DOWN, WRITER);
    clock = 59_000;
    availability.unreachable("statusengine_servicechecks", DOWN, WRITER);
    availability.reachable("statusengine_servicechecks", availability.now(), WRITER);
    // A new outage starts its own minute.
    clock = 100_000;
    availability.unreachable("statusengine_servicechecks", DOWN, WRITER);
    availability.reachable("statusengine_servicechecks", availability.now(), WRITER);
    // Nothing held: an idle worker whose probe fails for long is unavailable, not stalled.
    for (; clock < 400_000; clock += 5_000) availability.probed(DOWN);
    availability.probed(undefined);
    assert.deepEqual(at("error", logs), []);
    assert.ok(
      !logs.some((l) => /writes are stalled|write stall/.test(l.message)),
      "no stall was logged",
    );
    return Promise.resolve();
  });
});

Deno.test("availability: a statement sent before the table's outage began, answered after it, does not end the outage", () => {
  let clock = 0;
  const availability = new DbAvailability(undefined, { now: () => clock });
  // The table's two writers send a statement each; MySQL stops taking writes between them on the
  // server, and the failure of one is handled before the success of the other.
  const [held, other] = [{}, {}];
  const firstSent = availability.now();
  clock = 10;
  availability.unreachable("statusengine_hostchecks", DOWN, held);
  clock = 12;
  availability.reachable("statusengine_hostchecks", firstSent, other);
  assert.equal(availability.available, false, "still held: that statement predates the outage");
  clock = 20;
  const retrySent = availability.now();
  clock = 25;
  availability.reachable("statusengine_hostchecks", retrySent, held);
  assert.equal(availability.available, true, "a statement sent during the outage ends it");
});

Deno.test("availability: one writer giving up does not end the outage while the table's other writer still holds", () => {
  let clock = 0;
  const availability = new DbAvailability(undefined, { now: () => clock });
  // Both writers hold; the jobs of one are given back to the broker (another worker takes them).
  const [givenBack, holding] = [{}, {}];
  availability.unreachable("statusengine_hostchecks", DOWN, givenBack);
  clock = 5;
  availability.unreachable("statusengine_hostchecks", DOWN, holding);
  clock = 8;
  availability.abandon("statusengine_hostchecks", givenBack);
  assert.equal(availability.available, false, "the other writer still holds its rows");
  assert.equal(availability.holdingForMs, 8, "the stall clock did not start over");
  availability.abandon("statusengine_hostchecks", holding);
  assert.equal(availability.available, true, "nothing is held any more");
});

// The idle probe's bound follows the statements: a MySQL that commits in 1.5 s is slow, not down,
// and its probe (connect and query) takes longer than one statement; a fast one keeps 2 s.
Deno.test("availability: the idle probe waits 2 s after fast statements, four statements' time after slow ones", () => {
  let clock = 0;
  const availability = new DbAvailability(undefined, { now: () => clock });
  for (let i = 0; i < 50; i++) {
    const sentAt = clock;
    clock += 5;
    availability.reachable("statusengine_logentries", sentAt, WRITER);
  }
  assert.equal(availability.probeTimeoutMs, 2_000);
  for (let i = 0; i < 50; i++) {
    const sentAt = clock;
    clock += 1_500;
    availability.reachable("statusengine_logentries", sentAt, WRITER);
  }
  assert.ok(Math.abs(availability.probeTimeoutMs - 6_000) < 10, `${availability.probeTimeoutMs}`);
});
