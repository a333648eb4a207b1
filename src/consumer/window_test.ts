/**
 * The in-flight window's rules, tick by tick, on a real queue budget with a
 * scripted pressure signal (the MySQL side is driven for real in
 * tests/window_test.ts).
 */
import assert from "node:assert/strict";
import { ByteBudget, type Grant, QueueBudget } from "./budget.ts";
import { InFlightWindow, INITIAL_WINDOW, type QueuePressure } from "./window.ts";
import { SETTING_ROWS } from "../config/settings.ts";

const STARVED: QueuePressure = { fill: 0.5, full: false, excess: 0, slow: false, statementMs: 10 };
const FED: QueuePressure = { fill: 1, full: true, excess: 0, slow: false, statementMs: 10 };
const SLOW: QueuePressure = { fill: 1, full: true, excess: 0, slow: true, statementMs: 10 };

function setup(initial: number, cap: number, bytes = 1024 * 1024 * 1024) {
  const budget = new QueueBudget("q", initial, new ByteBudget(bytes));
  let pressure = STARVED;
  let clock = 0;
  const changes: number[] = [];
  const window = new InFlightWindow(
    "q",
    budget,
    cap,
    () => pressure,
    (jobs) => changes.push(jobs),
    () => clock,
  );
  const grants: Grant[] = [];
  return {
    budget,
    window,
    changes,
    set(p: QueuePressure) {
      pressure = p;
    },
    advance(ms: number) {
      clock += ms;
    },
    /** Take every slot the budget gives, as a queue with a backlog does. */
    fill() {
      for (let g = budget.tryAcquire(); g !== undefined; g = budget.tryAcquire()) {
        g.settle(1000);
        grants.push(g);
      }
    },
    releaseAll() {
      for (const g of grants.splice(0)) g.release();
    },
  };
}

Deno.test("window: grows while every slot is used and the statements are not full, in proportion to what they lack, up to the cap", () => {
  const s = setup(8, 40);
  // How full the statements are, and the window after the tick 100 ms later.
  const ticks: [fill: number, size: number, message?: string][] = [
    [STARVED.fill, 16, "half-full statements: twice the jobs"],
    [0.8, 20, "0.8 full: a quarter more"],
    [0.99, 21, "at least one more"],
    [0, 40, "idle writers: at most twice, and capped"],
    [0, 40],
  ];
  for (const [fill, size, message] of ticks) {
    s.set({ ...STARVED, fill });
    s.fill();
    s.window.tick();
    assert.equal(s.window.size, size, message);
    s.advance(100);
  }
  assert.deepEqual(s.changes, [16, 20, 21, 40]);
});

Deno.test("window: after a change it waits two statements for the effect before changing again", () => {
  const s = setup(8, 64);
  s.fill();
  s.window.tick();
  assert.equal(s.window.size, 16);
  s.fill();
  s.advance(19);
  s.window.tick();
  assert.equal(s.window.size, 16, "within two statements of 10 ms");
  s.advance(1);
  s.window.tick();
  assert.equal(s.window.size, 32);
});

Deno.test("window: does not grow while the queue leaves slots unused (no backlog, or bytes exhausted)", () => {
  const s = setup(8, 64);
  s.window.tick();
  assert.equal(s.window.size, 8, "no job in flight");
  const bytes = setup(8, 64, 4096);
  bytes.fill();
  assert.ok(bytes.budget.inUse < 8, "the byte budget stopped the grants");
  bytes.window.tick();
  assert.equal(bytes.window.size, 8);
});

Deno.test("window: does not grow while the writers send full statements or rows wait for buffer space", () => {
  const s = setup(8, 64);
  s.fill();
  s.set(FED);
  s.window.tick();
  assert.equal(s.window.size, 8);
  s.set({ ...STARVED, full: true });
  s.window.tick();
  assert.equal(s.window.size, 8);
});

Deno.test("window: shrinks by half the excess while statements are full and jobs queue for buffer space, not below the initial window", () => {
  const s = setup(30, 64);
  s.fill();
  // The jobs waiting beyond one per writer, and the window after the tick 100 ms later.
  const ticks: [excess: number, size: number, message?: string][] = [
    [6, 27],
    [1, 26],
    [FED.excess, 26, "one job per writer waiting is no excess"],
    [40, 8, "never below the initial window for excess alone"],
    [40, 8],
  ];
  for (const [excess, size, message] of ticks) {
    s.set({ ...FED, excess });
    s.window.tick();
    assert.equal(s.window.size, size, message);
    s.advance(100);
  }
});

Deno.test("window: halves on every tick while MySQL is slow, down to one job, and grows again after", () => {
  const s = setup(40, 64);
  s.fill();
  s.set({ ...SLOW, full: false, fill: 0.2 });
  for (const expected of [20, 10, 5, 2, 1, 1]) {
    s.window.tick();
    assert.equal(s.window.size, expected);
  }
  assert.equal(s.budget.inUse, 40, "grants already held stay valid");
  assert.equal(s.budget.tryAcquire(), undefined, "no new grant above the window");
  s.releaseAll();
  s.set(STARVED);
  s.advance(100);
  s.fill();
  s.window.tick();
  assert.equal(s.window.size, 2, "grows again once MySQL keeps up");
});

Deno.test("window: the help of the hard cap states the initial window", () => {
  const row = SETTING_ROWS.find((r) => r.flag === "gearman-max-concurrent-jobs-per-queue");
  assert.match(row?.help ?? "", new RegExp(`starts at ${INITIAL_WINDOW}\\b`));
});
