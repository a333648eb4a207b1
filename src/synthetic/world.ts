/**
 * The monitored world of a run: hosts and services with states that evolve like a core's
 * (soft attempts, then hard), and the run's event clock.
 *
 * @module
 */

import { Rng } from "./rng.ts";
import {
  type CheckKind,
  HOST_CHECK,
  HOST_STATE_NAMES,
  type PluginResult,
  SERVICE_STATE_NAMES,
  SERVICES,
} from "./plugin_outputs.ts";

/** The time window, before `now`, into which a run's events fall. */
const WINDOW_US = 60_000_000;

/** Simulated check state of one object (host or service), evolving like a core's. */
interface ObjectState {
  state: number;
  /** 0 SOFT, 1 HARD. */
  stateType: number;
  attempt: number;
  lastState: number;
  lastHardState: number;
  lastStateChange: number;
  lastHardStateChange: number;
  /** `last_time_<state>` per state code. */
  lastTimeIn: number[];
  acknowledged: number;
  notificationNumber: number;
}

/** A monitored host or service. */
export interface MonitoredObject {
  readonly host: HostIdentity;
  /** `null` for the host itself. */
  readonly service: string | null;
  readonly check: CheckKind;
  /** Passive objects report `check_type` 1 and no latency. */
  readonly passive: boolean;
  readonly eventHandler: string | null;
  readonly checkPeriod: string | null;
  readonly sim: ObjectState;
}

interface HostIdentity {
  readonly name: string;
  readonly address: string;
}

interface Host extends HostIdentity {
  /** The host itself as a checked object (host checks, host status). */
  readonly object: MonitoredObject;
  readonly services: MonitoredObject[];
}

/** Epoch seconds and the microsecond part. */
export interface Instant {
  readonly sec: number;
  readonly usec: number;
}

/** The generator's state: PRNG, monitored objects, and the run's event clock. */
export class World {
  readonly rng: Rng;
  readonly hosts: Host[] = [];
  readonly services: MonitoredObject[] = [];
  readonly nowSec: number;
  readonly downtimeIdBase: number;
  #nextUs: number;
  readonly #stepUs: number;

  constructor(seed: number, nowMs: number, count: number) {
    this.rng = new Rng(seed);
    const rng = this.rng;
    this.nowSec = Math.floor(nowMs / 1000);
    const nowUs = Math.floor(nowMs) * 1000;
    // Per-run offset up to 1 s: two runs in the same millisecond with different seeds still
    // get different *_usec tie-breakers (the Go publishers do the same with a random base).
    this.#nextUs = nowUs - WINDOW_US - rng.int(0, 999_999);
    this.#stepUs = Math.max(1, Math.floor(WINDOW_US / Math.max(1, count)));
    this.downtimeIdBase = rng.int(1, 2_000_000_000);
    this.#buildHosts();
  }

  /** The next event instant: strictly increasing, one distinct microsecond per event. */
  nextInstant(): Instant {
    const us = this.#nextUs + this.rng.int(0, this.#stepUs - 1);
    this.#nextUs += this.#stepUs;
    return { sec: Math.floor(us / 1_000_000), usec: us % 1_000_000 };
  }

  #newObject(host: HostIdentity, check: CheckKind): MonitoredObject {
    const rng = this.rng;
    const now = this.nowSec;
    const isHost = check.description === "";
    const passive = !isHost && rng.chance(0.08);
    const eventHandler = rng.chance(0.1) ? "restart_service" : null;
    const checkPeriod = rng.pick(["24x7", "24x7", "24x7", "workhours", "Werktage 07:00–19:00"]);
    const states = isHost ? HOST_STATE_NAMES.length : SERVICE_STATE_NAMES.length;
    const state = isHost ? (rng.chance(0.05) ? 1 : 0) : rng.weighted([88, 6, 4, 2]);
    const lastStateChange = now - rng.int(3_600, 90 * 86_400);
    const lastTimeIn = Array.from(
      { length: states },
      (_, s) => s === state ? now - rng.int(1, 300) : rng.chance(0.5) ? 0 : lastStateChange,
    );
    const sim: ObjectState = {
      state,
      stateType: 1,
      attempt: 1,
      lastState: state,
      lastHardState: state,
      lastStateChange,
      lastHardStateChange: lastStateChange,
      lastTimeIn,
      acknowledged: 0,
      notificationNumber: state === 0 ? 0 : rng.int(1, 40),
    };
    const service = isHost ? null : check.description;
    return { host, service, check, passive, eventHandler, checkPeriod, sim };
  }

  #buildHosts(): void {
    const rng = this.rng;
    const roles = ["web", "db", "app", "mail", "proxy", "lb", "cache", "fs", "backup", "mon"];
    const domains = ["example.com", "example.net", "example.org"];
    const names = new Set<string>();
    while (names.size < 48) {
      names.add(
        `${rng.pick(roles)}-${String(rng.int(1, 199)).padStart(3, "0")}.${rng.pick(domains)}`,
      );
    }
    // openITCOCKPIT names its objects by UUID (see the downtime fixture).
    while (names.size < 56) {
      names.add(
        `${rng.hex(8)}-${rng.hex(4)}-4${rng.hex(3)}-${rng.pick(["8", "9", "a", "b"])}${
          rng.hex(3)
        }-${rng.hex(12)}`,
      );
    }
    for (const name of names) {
      const address = `10.${rng.int(0, 255)}.${rng.int(0, 255)}.${rng.int(1, 254)}`;
      const identity: HostIdentity = { name, address };
      const object = this.#newObject(identity, HOST_CHECK);
      const services: MonitoredObject[] = [];
      const pool = [...SERVICES];
      const n = rng.int(5, 10);
      for (let i = 0; i < n && pool.length > 0; i++) {
        const [check] = pool.splice(rng.int(0, pool.length - 1), 1);
        if (check !== undefined) services.push(this.#newObject(identity, check));
      }
      this.hosts.push({ name, address, object, services });
      this.services.push(...services);
    }
  }

  /**
   * Run one check of `obj` at `ts` and advance its state like a core would: a new problem
   * starts SOFT at attempt 1 and turns HARD at `max_attempts`; a recovery is immediate.
   * Now and then (always with `forceChange`, for state change events) the state changes.
   */
  check(obj: MonitoredObject, ts: number, forceChange = false): PluginResult {
    const rng = this.rng;
    const sim = obj.sim;
    const isHost = obj.service === null;
    const max = obj.check.maxAttempts;
    const states = isHost ? HOST_STATE_NAMES.length : SERVICE_STATE_NAMES.length;
    let next = sim.state;
    if (forceChange || rng.chance(0.05)) {
      next = rng.weighted(isHost ? [70, 25, 5] : [55, 20, 18, 7]);
      if (next === sim.state) next = (sim.state + 1) % states;
    }
    sim.lastState = sim.state;
    if (next !== sim.state) {
      sim.lastStateChange = ts;
      sim.state = next;
      sim.attempt = 1;
      sim.stateType = next === 0 || max === 1 ? 1 : 0;
      if (next === 0) sim.acknowledged = 0;
    } else if (next !== 0 && sim.stateType === 0) {
      sim.attempt = Math.min(max, sim.attempt + 1);
      if (sim.attempt >= max) sim.stateType = 1;
    }
    if (sim.stateType === 1 && sim.lastHardState !== sim.state) {
      sim.lastHardState = sim.state;
      sim.lastHardStateChange = ts;
      sim.notificationNumber = sim.state === 0 ? 0 : sim.notificationNumber + 1;
      if (sim.state !== 0 && rng.chance(0.3)) sim.acknowledged = 1;
    }
    sim.lastTimeIn[sim.state] = ts;
    return obj.check.result(rng, sim.state, obj.host.address);
  }
}
