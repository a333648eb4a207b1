/**
 * Realistic synthetic events for the twelve consumed queues, for the `publish` tool, load tests
 * and the decoder tests. Pure: no I/O, no clock of its own (the caller passes `now`), and a
 * seeded PRNG, so the same seed and `now` always give the same events.
 *
 * What "realistic" means here (docs/tables.md, A.1–A.12):
 * - every payload field of the queue, with the envelope `type`/`flags`/`attr`/`timestamp`/
 *   `timestamp_usec` in the broker's key order;
 * - a small monitored world: host names like `web-017.example.com` and openITCOCKPIT-style
 *   UUIDs, services such as `Disk Usage /var`, `Datenträger C:`, `Прочее`, `監視 HTTP`, each
 *   object with a state that evolves like a core's (soft attempts, then hard), plugin outputs
 *   and perfdata strings that the E.6 grammar parses without skipping a gauge, and now and
 *   then a multi-line long output of a few KB;
 * - host and service variants of every queue that carries both, with the discriminators of
 *   A.12; downtimes as consistent lifecycles (ADD→START→STOP→DELETE, and ADD→DELETE before the
 *   window began); core restarts as `{"object_type":102,"timestamp":0}`.
 *
 * Time and key uniqueness: event `i` of a run happens at a distinct microsecond inside the
 * minute before `now` (offset by up to one second derived from the seed), so status events
 * are never stale (D.2) and every history key (object, time, `*_usec`) is unique within a run;
 * runs at different times, or with different seeds, do not collide in practice. Downtime ids
 * start at a seed-derived base.
 *
 * @module
 */

import { QUEUE_NAMES, type QueueName } from "../events/mod.ts";

/** A JSON value as the generator builds it. */
export type JsonValue =
  | string
  | number
  | boolean
  | null
  | readonly JsonValue[]
  | { readonly [key: string]: JsonValue };

/** One event: envelope plus payload object (or the envelope-less core-restart message). */
export interface SyntheticEvent {
  readonly [key: string]: JsonValue;
}

/** Options of {@linkcode syntheticEvents}. */
export interface SyntheticOptions {
  /** PRNG seed (any safe integer); default: a random one, so runs differ. */
  readonly seed?: number;
  /** "Now" in epoch milliseconds; events fall into the minute before it. Default `Date.now()`. */
  readonly now?: number;
}

/** Payload shape of a job (A.2). */
export type JobForm = "bulk" | "single";

/** Options of {@linkcode jobsFor}. */
export interface JobOptions {
  /** Bulk (`{"messages":[…],"format":"none"}`) or one event per job; default {@linkcode defaultForm}. */
  readonly form?: JobForm;
  /** Events per bulk job (ignored for the single form); default {@linkcode DEFAULT_EVENTS_PER_JOB}. */
  readonly eventsPerJob?: number;
}

/** Events per bulk job when nothing else is said: the Go publishers' value (docs/operations.md#publish). */
export const DEFAULT_EVENTS_PER_JOB = 100;

/**
 * The four queues the broker's sample configuration leaves unbatched (A.2, A.4); the other
 * eight are published in the bulk form by default. Notifications are bulk here because the
 * fixture, captured from a real broker, is.
 */
export const SINGLE_FORM_QUEUES: readonly QueueName[] = Object.freeze([
  "statusngin_acknowledgements",
  "statusngin_contactnotificationmethod",
  "statusngin_downtimes",
  "statusngin_core_restart",
]);

/** The time window, before `now`, into which a run's events fall. */
const WINDOW_US = 60_000_000;

/**
 * The default form of a queue's jobs.
 *
 * @param queue One of the twelve queues.
 * @returns `"single"` for the four unbatched queues, else `"bulk"`.
 */
export function defaultForm(queue: QueueName): JobForm {
  return SINGLE_FORM_QUEUES.includes(queue) ? "single" : "bulk";
}

/**
 * One event as job text, written the way the broker writes it: `/` escaped as `\/` (A.3).
 * `/` only ever occurs inside JSON strings, so the replacement cannot touch the structure.
 *
 * @param event The event.
 * @returns JSON text.
 */
export function encodeEvent(event: SyntheticEvent): string {
  return JSON.stringify(event).replaceAll("/", "\\/");
}

// ---------------------------------------------------------------------------------------------
// PRNG

/** mulberry32: tiny, fast, and good enough to vary test data; not for cryptography. */
class Rng {
  #state: number;

  constructor(seed: number) {
    // Fold the high bits of a large seed in, so seeds that differ only above 2^32 differ.
    this.#state = (seed ^ Math.floor(seed / 0x1_0000_0000)) | 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    this.#state = (this.#state + 0x6d2b79f5) | 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 0x1_0000_0000;
  }

  /** Integer in [min, max], both inclusive. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  /** Double in [min, max), with full precision (A.3: up to 17 significant digits). */
  float(min: number, max: number): number {
    return min + this.next() * (max - min);
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    const item = items[Math.floor(this.next() * items.length)];
    if (item === undefined) throw new RangeError("Cannot pick from an empty list");
    return item;
  }

  /** Index chosen with the given relative weights. */
  weighted(weights: readonly number[]): number {
    let total = 0;
    for (const w of weights) total += w;
    let r = this.next() * total;
    for (let i = 0; i < weights.length; i++) {
      r -= weights[i] ?? 0;
      if (r < 0) return i;
    }
    return weights.length - 1;
  }

  hex(digits: number): string {
    let s = "";
    for (let i = 0; i < digits; i++) s += "0123456789abcdef".charAt(this.int(0, 15));
    return s;
  }
}

// ---------------------------------------------------------------------------------------------
// The monitored world

const SERVICE_STATE_NAMES = ["OK", "WARNING", "CRITICAL", "UNKNOWN"] as const;
const HOST_STATE_NAMES = ["UP", "DOWN", "UNREACHABLE"] as const;

/** A check result as the plugin printed it. */
interface PluginResult {
  readonly output: string;
  readonly perfData: string;
  readonly longOutput: string;
}

/** One kind of check: a service of the catalogue below, or the host check. */
interface CheckKind {
  /** Service description; `""` for the host check. */
  readonly description: string;
  readonly commandName: string;
  readonly commandLine: string;
  readonly timeout: number;
  /**
   * Whole seconds between check start and end. Constant per check kind on purpose: with
   * `start_time = end_time − duration`, two results of the same description share
   * (`start_time`, `timestamp_usec`) only if they share the event instant, which never happens.
   * The service tables' keys start with `service_description` and lack the host (A.7 caveat).
   */
  readonly duration: number;
  readonly checkInterval: number;
  readonly retryInterval: number;
  readonly maxAttempts: number;
  readonly result: (rng: Rng, state: number, address: string) => PluginResult;
}

function fixed(value: number, digits: number): string {
  return value.toFixed(digits);
}

/** Value inside the band of the state: below warn (OK), warn..crit, above crit. */
function banded(rng: Rng, state: number, warn: number, crit: number, max: number): number {
  if (state === 0) return rng.float(0, warn * 0.9);
  if (state === 1) return rng.float(warn, crit);
  return rng.float(crit, max);
}

function unknown(text: string): PluginResult {
  return { output: `UNKNOWN - ${text}`, perfData: "", longOutput: "" };
}

function processList(rng: Rng): string {
  const target = rng.int(2_000, 6_000);
  const names = [
    "/usr/sbin/nginx -g daemon off;",
    "/usr/lib/postgresql/16/bin/postgres -D /var/lib/postgresql/16/main",
    "/usr/bin/java -Xmx2g -jar /opt/app/app.jar --spring.profiles.active=prod",
    "/usr/sbin/sshd -D",
    "php-fpm: pool www",
    "/usr/bin/python3 /opt/statusengine/bin/export.py --queue=statusngin_hostchecks",
    "/usr/sbin/cron -f",
    "/usr/local/bin/node /srv/überwachung/server.js",
  ];
  const lines = ["  PID USER     %CPU %MEM COMMAND"];
  let length = lines[0]?.length ?? 0;
  while (length < target) {
    const line = `${String(rng.int(300, 65_000)).padStart(5)} ${
      rng.pick(["root", "www-data", "postgres", "naemon", "app"]).padEnd(8)
    } ${fixed(rng.float(0, 40), 1).padStart(4)} ${fixed(rng.float(0, 12), 1).padStart(4)} ${
      rng.pick(names)
    }`;
    lines.push(line);
    length += line.length + 1;
  }
  return lines.join("\n");
}

function updateList(rng: Rng, count: number): string {
  const titles = [
    "Kumulatives Sicherheitsupdate für Windows Server 2022 (x64)",
    "Sicherheitsupdate für Microsoft .NET Framework 4.8.1 – größere Korrekturen",
    "Update für Microsoft Defender Antivirus-Antischadsoftwareplattform",
    "Definitionsupdate für Microsoft Defender Antivirus",
    "Накопительное обновление для Windows Server 2019",
    "Windows Server 2022 向けの累積的な更新プログラム",
  ];
  const lines: string[] = [];
  for (let i = 0; i < count; i++) {
    lines.push(
      `KB${rng.int(5_000_000, 5_049_999)} – ${rng.pick(titles)} – ${
        fixed(rng.float(0.5, 900), 1).replace(".", ",")
      } MB`,
    );
  }
  return lines.join("\n");
}

/** The service catalogue. Each host runs a subset of it. */
const SERVICES: readonly CheckKind[] = [
  {
    description: "PING",
    commandName: "check_ping!100.0,20%!500.0,60%",
    commandLine: "$USER1$/check_ping -H $HOSTADDRESS$ -w $ARG1$ -c $ARG2$ -p 5",
    timeout: 60,
    duration: 4,
    checkInterval: 5,
    retryInterval: 1,
    maxAttempts: 4,
    result(rng, state) {
      if (state === 3) return unknown("check_ping: Invalid hostname/address");
      const rta = state === 0 ? rng.float(0.02, 20) : banded(rng, state, 100, 500, 900);
      const pl = state === 0 ? 0 : state === 1 ? rng.int(20, 59) : 100;
      const name = SERVICE_STATE_NAMES[state] ?? "UNKNOWN";
      return {
        output: pl === 100
          ? `PING CRITICAL - Packet loss = 100%`
          : `PING ${name} - Packet loss = ${pl}%, RTA = ${fixed(rta, 2)} ms`,
        perfData: `rta=${
          fixed(pl === 100 ? 0 : rta, 6)
        }ms;100.000000;500.000000;0.000000 pl=${pl}%;20;60;0`,
        longOutput: "",
      };
    },
  },
  {
    description: "Current Load",
    commandName: "check_local_load!5.0,4.0,3.0!10.0,6.0,4.0",
    commandLine: "$USER1$/check_load -w $ARG1$ -c $ARG2$",
    timeout: 60,
    duration: 0,
    checkInterval: 1,
    retryInterval: 1,
    maxAttempts: 4,
    result(rng, state) {
      if (state === 3) return unknown("Error opening /proc/loadavg");
      const l1 = banded(rng, state, 5, 10, 40);
      const l5 = l1 * rng.float(0.6, 1.1);
      const l15 = l5 * rng.float(0.6, 1.1);
      const name = SERVICE_STATE_NAMES[state] ?? "UNKNOWN";
      return {
        output: `${name} - load average: ${fixed(l1, 2)}, ${fixed(l5, 2)}, ${fixed(l15, 2)}`,
        perfData: `load1=${fixed(l1, 3)};5.000;10.000;0; load5=${
          fixed(l5, 3)
        };4.000;6.000;0; load15=${fixed(l15, 3)};3.000;4.000;0;`,
        longOutput: "",
      };
    },
  },
  {
    description: "Current Users",
    commandName: "check_local_users!20!50",
    commandLine: "$USER1$/check_users -w $ARG1$ -c $ARG2$",
    timeout: 60,
    duration: 0,
    checkInterval: 5,
    retryInterval: 1,
    maxAttempts: 4,
    result(rng, state) {
      if (state === 3) return unknown("Could not read utmp");
      const users = Math.floor(banded(rng, state, 20, 50, 80));
      return {
        output: `USERS ${SERVICE_STATE_NAMES[state]} - ${users} users currently logged in`,
        perfData: `users=${users};20;50;0`,
        longOutput: "",
      };
    },
  },
  {
    description: "Disk Usage /var",
    commandName: "check_local_disk!20%!10%!/var",
    commandLine: "$USER1$/check_disk -w $ARG1$ -c $ARG2$ -p $ARG3$",
    timeout: 60,
    duration: 0,
    checkInterval: 10,
    retryInterval: 2.5,
    maxAttempts: 3,
    result(rng, state) {
      if (state === 3) return unknown("DISK UNKNOWN - /var is not accessible: Permission denied");
      const total = 51_200;
      const usedPct = banded(rng, state, 80, 90, 100);
      const used = Math.round(total * usedPct / 100);
      const free = total - used;
      return {
        output: `DISK ${SERVICE_STATE_NAMES[state]} - free space: /var ${free} MB (${
          Math.round(100 - usedPct)
        }% inode=${rng.int(80, 99)}%);`,
        perfData: `'/var'=${used}MB;40960;46080;0;${total}`,
        longOutput: "",
      };
    },
  },
  {
    description: "Swap Usage",
    commandName: "check_local_swap!20!10",
    commandLine: "$USER1$/check_swap -w $ARG1$ -c $ARG2$",
    timeout: 60,
    duration: 0,
    checkInterval: 5,
    retryInterval: 1,
    maxAttempts: 4,
    result(rng, state) {
      if (state === 3) return unknown("SWAP UNKNOWN - no swap configured");
      const total = 2_048;
      const freePct = state === 0
        ? rng.int(25, 100)
        : state === 1
        ? rng.int(11, 19)
        : rng.int(0, 9);
      const free = Math.round(total * freePct / 100);
      return {
        output: `SWAP ${
          SERVICE_STATE_NAMES[state]
        } - ${freePct}% free (${free} MB out of ${total} MB)`,
        perfData: `swap=${free}MB;409;204;0;${total}`,
        longOutput: "",
      };
    },
  },
  {
    description: "HTTP",
    commandName: "check_http!-S -u /health",
    commandLine: "$USER1$/check_http -I $HOSTADDRESS$ $ARG1$",
    timeout: 30,
    duration: 1,
    checkInterval: 1,
    retryInterval: 0.5,
    maxAttempts: 3,
    result(rng, state) {
      if (state === 3) return unknown("HTTP UNKNOWN - Invalid HTTP response received from host");
      const time = banded(rng, state, 1, 2, 10);
      const size = rng.int(400, 90_000);
      const status = state === 2 ? "HTTP/1.1 503 Service Unavailable" : "HTTP/1.1 200 OK";
      return {
        output: `HTTP ${SERVICE_STATE_NAMES[state]}: ${status} - ${size} bytes in ${
          fixed(time, 3)
        } second response time`,
        perfData: `time=${fixed(time, 6)}s;1.000000;2.000000;0.000000 size=${size}B;;;0`,
        longOutput: "",
      };
    },
  },
  {
    description: "Memory",
    commandName: "check_memory!80!90",
    commandLine: "$USER1$/check_mem -w $ARG1$ -c $ARG2$",
    timeout: 60,
    duration: 0,
    checkInterval: 5,
    retryInterval: 1,
    maxAttempts: 4,
    result(rng, state) {
      if (state === 3) return unknown("cannot read /proc/meminfo");
      const pct = banded(rng, state, 80, 90, 100);
      return {
        output: `MEMORY ${SERVICE_STATE_NAMES[state]} - ${fixed(pct, 1)}% used`,
        perfData: `'memory used'=${fixed(pct, 1)}%;80;90;0;100 'memory total'=16384MB;;;0;`,
        longOutput: "",
      };
    },
  },
  {
    description: "Datenträger C:",
    commandName: "check_nrpe!check_drivesize!drive=C:",
    commandLine: "$USER1$/check_nrpe -H $HOSTADDRESS$ -c $ARG1$ -a $ARG2$",
    timeout: 60,
    duration: 2,
    checkInterval: 10,
    retryInterval: 2,
    maxAttempts: 3,
    result(rng, state) {
      if (state === 3) return unknown("Datenträger C: konnte nicht gelesen werden");
      const pct = banded(rng, state, 80, 90, 100);
      const shown = fixed(pct, 1).replace(".", ",");
      const text = state === 0
        ? `Datenträger C: ${shown} % belegt (${
          fixed(rng.float(5, 200), 1).replace(".", ",")
        } GB frei)`
        : `Datenträger C: größer als ${state === 1 ? 80 : 90} % belegt (${shown} %)`;
      return {
        output: `${SERVICE_STATE_NAMES[state]} - ${text}`,
        // Comma decimal separator, as German Windows agents print it (E.6.1).
        perfData: `'C:\\ Used Space'=${shown}%;80;90;0;100`,
        longOutput: "",
      };
    },
  },
  {
    description: "Прочее",
    commandName: "check_queue!100!200",
    commandLine: "$USER1$/check_queue --warning $ARG1$ --critical $ARG2$",
    timeout: 60,
    duration: 0,
    checkInterval: 5,
    retryInterval: 1,
    maxAttempts: 4,
    result(rng, state) {
      if (state === 3) return unknown("Прочее: нет ответа от брокера");
      const n = Math.floor(banded(rng, state, 100, 200, 500));
      return {
        output: state === 0
          ? `OK - Прочее: в очереди ${n} сообщений, всё в порядке`
          : `${SERVICE_STATE_NAMES[state]} - Прочее: в очереди ${n} сообщений`,
        perfData: `'очередь'=${n};100;200;0`,
        longOutput: "",
      };
    },
  },
  {
    description: "監視 HTTP",
    commandName: "check_http!-u /監視",
    commandLine: "$USER1$/check_http -I $HOSTADDRESS$ $ARG1$",
    timeout: 30,
    duration: 1,
    checkInterval: 2,
    retryInterval: 1,
    maxAttempts: 3,
    result(rng, state) {
      if (state === 3) return unknown("監視: 無効な応答");
      const time = banded(rng, state, 1, 2, 10);
      return {
        output: `HTTP ${SERVICE_STATE_NAMES[state]}: 監視ページ 応答時間 ${fixed(time, 3)} 秒`,
        perfData: `time=${fixed(time, 6)}s;1.000000;2.000000;0.000000`,
        longOutput: "",
      };
    },
  },
  {
    description: "Interface eth0",
    commandName: "check_snmp_int!eth0",
    commandLine: "$USER1$/check_snmp_int.pl -H $HOSTADDRESS$ -n $ARG1$ -f -k",
    timeout: 30,
    duration: 1,
    checkInterval: 5,
    retryInterval: 1,
    maxAttempts: 3,
    result(rng, state) {
      if (state === 3) return unknown("No response from remote host 'eth0'");
      const name = state === 0 ? "OK" : SERVICE_STATE_NAMES[state];
      return {
        output: `${name} - eth0:${state === 2 ? "DOWN" : "UP"} (in=${rng.int(0, 900)}kB/s, out=${
          rng.int(0, 900)
        }kB/s)`,
        perfData: `'eth0_in_octet'=${rng.int(0, 2 ** 40)}c 'eth0_out_octet'=${
          rng.int(0, 2 ** 40)
        }c`,
        longOutput: "",
      };
    },
  },
  {
    description: "Processes",
    commandName: "check_local_procs!250!400!RSZDT",
    commandLine: "$USER1$/check_procs -w $ARG1$ -c $ARG2$ -s $ARG3$",
    timeout: 60,
    duration: 0,
    checkInterval: 5,
    retryInterval: 1,
    maxAttempts: 4,
    result(rng, state) {
      if (state === 3) return unknown("Unable to read output");
      const n = Math.floor(banded(rng, state, 250, 400, 900));
      return {
        output: `PROCS ${SERVICE_STATE_NAMES[state]}: ${n} processes with STATE = RSZDT`,
        perfData: `procs=${n};250;400;0;`,
        // Multi-line long outputs of a few KB, now and then.
        longOutput: rng.chance(0.3) ? processList(rng) : "",
      };
    },
  },
  {
    description: "Windows Updates",
    commandName: "check_nrpe!check_updates",
    commandLine: "$USER1$/check_nrpe -H $HOSTADDRESS$ -c $ARG1$",
    timeout: 120,
    duration: 7,
    checkInterval: 60,
    retryInterval: 10,
    maxAttempts: 2,
    result(rng, state) {
      if (state === 3) return unknown("Windows Update-Dienst antwortet nicht");
      const n = state === 0 ? 0 : state === 1 ? rng.int(1, 9) : rng.int(10, 40);
      const longOutput = n > 0 && rng.chance(0.5) ? updateList(rng, Math.max(n, 25)) : "";
      return {
        output: `${SERVICE_STATE_NAMES[state]} - ${n} Updates ausstehend`,
        perfData: `'pending updates'=${n};1;10;0`,
        longOutput,
      };
    },
  },
  {
    description: "NTP Time",
    commandName: "check_ntp_time!0.5!1",
    commandLine: "$USER1$/check_ntp_time -H pool.ntp.org -w $ARG1$ -c $ARG2$",
    timeout: 30,
    duration: 0,
    checkInterval: 15,
    retryInterval: 5,
    maxAttempts: 3,
    result(rng, state) {
      if (state === 3) return unknown("NTP UNKNOWN: No response from NTP server");
      const offset = banded(rng, state, 0.5, 1, 30) * (rng.chance(0.5) ? -1 : 1);
      return {
        output: `NTP ${SERVICE_STATE_NAMES[state]}: Offset ${offset.toPrecision(6)} secs`,
        perfData: `offset=${offset.toPrecision(6)}s;0.500000;1.000000;`,
        longOutput: "",
      };
    },
  },
  {
    description: "Kaffeemaschine",
    commandName: "check_coffee!20!10",
    commandLine: "$USER1$/check_coffee --min-level $ARG1$ --critical $ARG2$",
    timeout: 10,
    duration: 0,
    checkInterval: 1,
    retryInterval: 1,
    maxAttempts: 2,
    result(rng, state) {
      if (state === 3) return unknown("Kaffeemaschine ☕ antwortet nicht 🤷");
      const level = state === 0 ? rng.int(21, 100) : state === 1 ? rng.int(11, 20) : rng.int(0, 10);
      return {
        output: `${SERVICE_STATE_NAMES[state]} - Kaffeemaschine ☕ Füllstand ${level} % ${
          state === 0 ? "🙂" : "🔥"
        }`,
        perfData: `'Füllstand'=${level}%;20;10;0;100`,
        longOutput: "",
      };
    },
  },
];

const HOST_CHECK: CheckKind = {
  description: "",
  commandName: "check-host-alive",
  commandLine: "$USER1$/check_ping -H $HOSTADDRESS$ -w 3000.0,80% -c 5000.0,100% -p 5",
  timeout: 30,
  duration: 4,
  checkInterval: 5,
  retryInterval: 1,
  maxAttempts: 10,
  result(rng, state, address) {
    if (state === 0) {
      const rta = rng.float(0.02, 30);
      return {
        output: `PING OK - Packet loss = 0%, RTA = ${fixed(rta, 2)} ms`,
        perfData: `rta=${fixed(rta, 6)}ms;3000.000000;5000.000000;0.000000 pl=0%;80;100;0`,
        longOutput: "",
      };
    }
    return {
      output: state === 1
        ? `CRITICAL - Host Unreachable (${address})`
        : `CRITICAL - Network Unreachable (${address})`,
      perfData: `rta=5000.000000ms;3000.000000;5000.000000;0.000000 pl=100%;80;100;0`,
      longOutput: "",
    };
  },
};

const CONTACTS = [
  "Daniel Z",
  "Jürgen Müller",
  "admin",
  "Анна Иванова",
  "山田 太郎",
  "286a2700-006a-4d7d-a6fe-6df5b3533ad2",
] as const;

const COMMENTS = [
  "I will take a look at this",
  "In maintenance",
  "Wird untersucht – Ticket #4711, Lüfter getauscht",
  "Работаем над этим",
  "調査中です",
  "Planned reboot after kernel update",
] as const;

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
interface MonitoredObject {
  readonly host: HostIdentity;
  /** Service description, `null` for the host itself. */
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

/** One instant of a run: epoch seconds and the microsecond part. */
interface Instant {
  readonly sec: number;
  readonly usec: number;
}

/** The generator's state: PRNG, monitored objects, and the run's event clock. */
class World {
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

  randomHost(): Host {
    return this.rng.pick(this.hosts);
  }

  randomService(): MonitoredObject {
    return this.rng.pick(this.services);
  }

  #newSim(isHost: boolean): ObjectState {
    const rng = this.rng;
    const now = this.nowSec;
    const states = isHost ? HOST_STATE_NAMES.length : SERVICE_STATE_NAMES.length;
    const state = isHost ? (rng.chance(0.05) ? 1 : 0) : rng.weighted([88, 6, 4, 2]);
    const lastStateChange = now - rng.int(3_600, 90 * 86_400);
    const lastTimeIn: number[] = [];
    for (let s = 0; s < states; s++) {
      lastTimeIn.push(s === state ? now - rng.int(1, 300) : rng.chance(0.5) ? 0 : lastStateChange);
    }
    return {
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
  }

  #newObject(host: HostIdentity, check: CheckKind): MonitoredObject {
    const rng = this.rng;
    const isHost = check.description === "";
    return {
      host,
      service: isHost ? null : check.description,
      check,
      passive: !isHost && rng.chance(0.08),
      eventHandler: rng.chance(0.1) ? "restart_service" : null,
      checkPeriod: rng.pick(["24x7", "24x7", "24x7", "workhours", "Werktage 07:00–19:00"]),
      sim: this.#newSim(isHost),
    };
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

// ---------------------------------------------------------------------------------------------
// Events per queue

function envelope(
  type: number,
  at: Instant,
  key: string,
  payload: SyntheticEvent,
  attr = 0,
): SyntheticEvent {
  return { type, flags: 0, attr, timestamp: at.sec, timestamp_usec: at.usec, [key]: payload };
}

function statusPayload(w: World, obj: MonitoredObject, ts: number): SyntheticEvent {
  const rng = w.rng;
  const r = w.check(obj, ts);
  const sim = obj.sim;
  const isHost = obj.service === null;
  const interval = obj.check.checkInterval;
  const lastCheck = ts - rng.int(0, 3);
  const problem = sim.state !== 0 && sim.stateType === 1;
  const lastNotification = problem ? sim.lastHardStateChange + rng.int(0, 60) : 0;
  const times = sim.lastTimeIn;
  const identity: SyntheticEvent = isHost
    ? { name: obj.host.name }
    : { host_name: obj.host.name, description: obj.service ?? "" };
  const lastTimes: SyntheticEvent = isHost
    ? {
      last_time_up: times[0] ?? 0,
      last_time_down: times[1] ?? 0,
      last_time_unreachable: times[2] ?? 0,
    }
    : {
      last_time_ok: times[0] ?? 0,
      last_time_warning: times[1] ?? 0,
      last_time_critical: times[2] ?? 0,
      last_time_unknown: times[3] ?? 0,
    };
  return {
    ...identity,
    plugin_output: r.output,
    long_plugin_output: r.longOutput,
    event_handler: obj.eventHandler,
    perf_data: r.perfData,
    check_command: obj.check.commandName,
    check_period: obj.checkPeriod,
    current_state: sim.state,
    has_been_checked: 1,
    should_be_scheduled: 1,
    current_attempt: sim.attempt,
    max_attempts: obj.check.maxAttempts,
    last_check: lastCheck,
    next_check: lastCheck +
      Math.round((sim.stateType === 0 ? obj.check.retryInterval : interval) * 60),
    check_type: obj.passive ? 1 : 0,
    last_state_change: sim.lastStateChange,
    last_hard_state_change: sim.lastHardStateChange,
    last_hard_state: sim.lastHardState,
    ...lastTimes,
    state_type: sim.stateType,
    last_notification: lastNotification,
    next_notification: problem ? lastNotification + 7_200 : 0,
    no_more_notifications: 0,
    notifications_enabled: rng.chance(0.95) ? 1 : 0,
    problem_has_been_acknowledged: sim.acknowledged,
    // In status payloads this is 0 none, 1 normal, 2 sticky (A.6).
    acknowledgement_type: sim.acknowledged === 1 ? rng.int(1, 2) : 0,
    current_notification_number: problem ? sim.notificationNumber : 0,
    accept_passive_checks: 1,
    event_handler_enabled: obj.eventHandler === null ? 0 : 1,
    checks_enabled: obj.passive ? 0 : 1,
    flap_detection_enabled: 1,
    is_flapping: rng.chance(0.02) ? 1 : 0,
    percent_state_change: rng.chance(0.8) ? 0 : rng.float(0, 40),
    latency: obj.passive ? 0 : rng.float(0.001, 1.2),
    execution_time: obj.check.duration + rng.float(0.001, 0.999),
    scheduled_downtime_depth: rng.chance(0.03) ? 1 : 0,
    process_performance_data: 1,
    obsess: 1,
    modified_attributes: rng.pick([0, 0, 0, 1, 19, 31]),
    check_interval: interval,
    retry_interval: obj.check.retryInterval,
  };
}

function checkPayload(w: World, obj: MonitoredObject, ts: number): SyntheticEvent {
  const rng = w.rng;
  const check = obj.check;
  let r = w.check(obj, ts);
  const sim = obj.sim;
  const isHost = obj.service === null;
  let earlyTimeout = 0;
  let executionTime = check.duration + rng.float(0.0001, 0.9999);
  if (!isHost && rng.chance(0.005)) {
    earlyTimeout = 1;
    executionTime = check.timeout + rng.float(0, 0.05);
    r = {
      output: `(Service check timed out after ${fixed(executionTime, 2)} seconds)`,
      perfData: "",
      longOutput: "",
    };
  }
  const identity: SyntheticEvent = isHost
    ? { host_name: obj.host.name }
    : { host_name: obj.host.name, service_description: obj.service ?? "" };
  return {
    ...identity,
    command_line: check.commandLine,
    command_name: check.commandName,
    output: r.output,
    long_output: r.longOutput,
    perf_data: r.perfData,
    check_type: obj.passive ? 1 : 0,
    current_attempt: sim.attempt,
    max_attempts: check.maxAttempts,
    state_type: sim.stateType,
    state: sim.state,
    timeout: check.timeout,
    // Constant duration per check kind keeps the service keys unique (see CheckKind.duration).
    start_time: ts - check.duration,
    end_time: ts,
    early_timeout: earlyTimeout,
    execution_time: executionTime,
    latency: obj.passive ? 0 : rng.float(0.001, 1.2),
    return_code: isHost ? (sim.state === 0 ? 0 : 2) : sim.state,
  };
}

function* hostStatusEvents(w: World): Generator<SyntheticEvent> {
  for (;;) {
    const at = w.nextInstant();
    yield envelope(1201, at, "hoststatus", statusPayload(w, w.randomHost().object, at.sec));
  }
}

function* serviceStatusEvents(w: World): Generator<SyntheticEvent> {
  for (;;) {
    const at = w.nextInstant();
    yield envelope(1202, at, "servicestatus", statusPayload(w, w.randomService(), at.sec));
  }
}

function* hostCheckEvents(w: World): Generator<SyntheticEvent> {
  for (;;) {
    const at = w.nextInstant();
    yield envelope(801, at, "hostcheck", checkPayload(w, w.randomHost().object, at.sec));
  }
}

function* serviceCheckEvents(w: World): Generator<SyntheticEvent> {
  for (;;) {
    const at = w.nextInstant();
    yield envelope(701, at, "servicecheck", checkPayload(w, w.randomService(), at.sec));
  }
}

function* perfdataEvents(w: World): Generator<SyntheticEvent> {
  for (;;) {
    const at = w.nextInstant();
    const obj = w.randomService();
    const r = w.check(obj, at.sec);
    yield envelope(701, at, "servicecheck", {
      host_name: obj.host.name,
      service_description: obj.service ?? "",
      perf_data: r.perfData,
      start_time: at.sec - obj.check.duration,
    });
  }
}

function* stateChangeEvents(w: World): Generator<SyntheticEvent> {
  for (;;) {
    const at = w.nextInstant();
    const obj = w.rng.chance(0.25) ? w.randomHost().object : w.randomService();
    const r = w.check(obj, at.sec, true);
    const sim = obj.sim;
    yield envelope(1801, at, "statechange", {
      host_name: obj.host.name,
      service_description: obj.service,
      output: r.output,
      // The broker copies output into long_output (A.9).
      long_output: r.output,
      statechange_type: obj.service === null ? 0 : 1,
      state: sim.state,
      state_type: sim.stateType,
      current_attempt: sim.attempt,
      max_attempts: obj.check.maxAttempts,
      last_state: sim.lastState,
      last_hard_state: sim.lastHardState,
    });
  }
}

const LOG_INFO_LINES = [
  "Auto-save of retention data completed successfully.",
  "Event broker module '/opt/statusengine/lib/libstatusengine.so' initialized successfully.",
  "Successfully launched command file worker with pid 1490327",
  "LOG VERSION: 2.0",
] as const;

function* logEntryEvents(w: World): Generator<SyntheticEvent> {
  const rng = w.rng;
  for (;;) {
    const at = w.nextInstant();
    const kind = rng.weighted([30, 10, 8, 4, 8, 6, 6, 4]);
    let dataType: number;
    let data: string;
    const host = w.randomHost();
    const svc = rng.pick(host.services);
    const r = w.check(kind === 1 || kind === 3 ? host.object : svc, at.sec);
    const state = kind === 1 || kind === 3 ? host.object.sim : svc.sim;
    const stateType = state.stateType === 1 ? "HARD" : "SOFT";
    switch (kind) {
      case 0: {
        dataType = [8192, 32768, 65536, 16384][state.state] ?? 8192;
        data = `SERVICE ALERT: ${host.name};${svc.service};${
          SERVICE_STATE_NAMES[state.state]
        };${stateType};${state.attempt};${r.output}`;
        break;
      }
      case 1: {
        dataType = [1024, 2048, 4096][state.state] ?? 1024;
        data = `HOST ALERT: ${host.name};${
          HOST_STATE_NAMES[state.state]
        };${stateType};${state.attempt};${r.output}`;
        break;
      }
      case 2: {
        dataType = 1048576;
        data = `SERVICE NOTIFICATION: ${rng.pick(CONTACTS)};${host.name};${svc.service};${
          SERVICE_STATE_NAMES[state.state]
        };notify-service-by-email;${r.output}`;
        break;
      }
      case 3: {
        dataType = 524288;
        data = `HOST NOTIFICATION: ${rng.pick(CONTACTS)};${host.name};${
          HOST_STATE_NAMES[state.state]
        };notify-host-by-email;${r.output}`;
        break;
      }
      case 4: {
        dataType = 512;
        data = `EXTERNAL COMMAND: SCHEDULE_FORCED_SVC_CHECK;${host.name};${svc.service};${at.sec}`;
        break;
      }
      case 5: {
        dataType = 131072;
        data = `PASSIVE SERVICE CHECK: ${host.name};${svc.service};${state.state};${r.output}`;
        break;
      }
      case 6: {
        dataType = 2;
        data =
          `Warning: The check of service '${svc.service}' on host '${host.name}' looks like it was orphaned (results never came back; last_check=${
            at.sec - 900
          }).  I'm scheduling an immediate check of the service...`;
        break;
      }
      default: {
        dataType = 262144;
        data = rng.pick(LOG_INFO_LINES);
      }
    }
    yield envelope(300, at, "logentry", { entry_time: at.sec, data_type: dataType, data });
  }
}

function* notificationEvents(w: World): Generator<SyntheticEvent> {
  const rng = w.rng;
  for (;;) {
    const at = w.nextInstant();
    const obj = rng.chance(0.3) ? w.randomHost().object : w.randomService();
    const r = w.check(obj, at.sec);
    // 0 normal, 1 acknowledgement, 5/6 downtime start/end, 8 custom (A.11.1).
    const reason = rng.pick([0, 0, 0, 0, 1, 5, 6, 8]);
    const withAuthor = reason === 1 || reason === 8;
    yield envelope(601, at, "notification_data", {
      host_name: obj.host.name,
      service_description: obj.service,
      output: r.output,
      long_output: r.output,
      ack_author: withAuthor ? rng.pick(CONTACTS) : null,
      ack_data: withAuthor ? rng.pick(COMMENTS) : null,
      notification_type: obj.service === null ? 0 : 1,
      // start = envelope second: unique (host, start_time, start_time_usec) per event.
      start_time: at.sec,
      end_time: at.sec,
      reason_type: reason,
      state: obj.sim.state,
      escalated: rng.chance(0.05) ? 1 : 0,
      // The broker drops rounds that reached nobody (A.4).
      contacts_notified: rng.int(1, 3),
    });
  }
}

function* contactNotificationEvents(w: World): Generator<SyntheticEvent> {
  const rng = w.rng;
  for (;;) {
    const obj = rng.chance(0.3) ? w.randomHost().object : w.randomService();
    const contact = rng.pick(CONTACTS);
    const command = obj.service === null ? "host-notify-by-email" : rng.pick([
      "service-notify-by-email",
      "service-notify-by-sms",
      "52c9c3e2-4a00-40a4-8e75-db4649eba846",
    ]);
    const reason = rng.pick([0, 0, 0, 1, 8]);
    const withAuthor = reason !== 0;
    const author = withAuthor ? rng.pick(CONTACTS) : null;
    const comment = withAuthor ? rng.pick(COMMENTS) : null;
    const args = rng.chance(0.1) ? "--priority=high" : null;
    const first = w.nextInstant();
    const r = w.check(obj, first.sec);
    // Every delivery is reported twice: 604 when the command starts, 605 when it ends (A.11.2).
    for (const type of [604, 605]) {
      const at = type === 604 ? first : w.nextInstant();
      yield envelope(type, at, "contactnotificationmethod", {
        host_name: obj.host.name,
        service_description: obj.service,
        output: r.output,
        ack_author: author,
        ack_data: comment,
        contact_name: contact,
        command_name: command,
        command_args: args,
        reason_type: reason,
        state: obj.sim.state,
        // The 605 row's key (object, start_time, start_time_usec) is unique per event when
        // start_time is the event's own second.
        start_time: at.sec,
        end_time: at.sec,
      });
    }
  }
}

function* acknowledgementEvents(w: World): Generator<SyntheticEvent> {
  const rng = w.rng;
  for (;;) {
    const at = w.nextInstant();
    const isHost = rng.chance(0.3);
    const obj = isHost ? w.randomHost().object : w.randomService();
    const state = isHost ? rng.int(1, 2) : rng.int(1, 3);
    yield envelope(1700, at, "acknowledgement", {
      host_name: obj.host.name,
      service_description: obj.service,
      author_name: rng.pick(CONTACTS),
      comment_data: rng.pick(COMMENTS),
      // Here the object kind: 0 host, 1 service (A.11.3).
      acknowledgement_type: isHost ? 0 : 1,
      state,
      is_sticky: rng.chance(0.3) ? 1 : 0,
      persistent_comment: rng.chance(0.5) ? 1 : 0,
      notify_contacts: rng.chance(0.8) ? 1 : 0,
    });
  }
}

/** Downtime envelope `type` values (C.1). */
const DT_ADD = 1100;
const DT_DELETE = 1101;
const DT_START = 1103;
const DT_STOP = 1104;

function* downtimeEvents(w: World): Generator<SyntheticEvent> {
  const rng = w.rng;
  let n = 0;
  for (;;) {
    const isHost = rng.chance(0.3);
    const obj = isHost ? w.randomHost().object : w.randomService();
    const id = w.downtimeIdBase + n++;
    const duration = rng.pick([120, 600, 1_800, 3_600, 7_200]);
    const lead = rng.int(0, 900);
    const variant = rng.weighted([6, 2, 2]); // runs out, cancelled early, deleted before start
    const at0 = w.nextInstant();
    // The lifecycle is laid out backwards from the instant of its ADD so that every event of
    // it lies in the past; its envelope times are consistent with the window (C.3).
    let entryTime: number;
    let start: number;
    let end: number;
    let fixedWindow = 1;
    if (variant === 2) {
      entryTime = at0.sec - lead;
      start = at0.sec + rng.int(600, 86_400);
      end = start + duration;
    } else {
      const stopAt = at0.sec;
      start = stopAt - (variant === 0 ? duration : rng.int(60, duration - 1));
      end = start + duration;
      entryTime = start - lead;
      fixedWindow = rng.chance(0.85) ? 1 : 0;
    }
    const payload: SyntheticEvent = {
      "host_name": obj.host.name,
      "service_description": obj.service,
      "author_name": rng.pick(CONTACTS),
      "comment_data": rng.pick(COMMENTS),
      // 2 host, 1 service: the reverse of the other queues' 0/1 (A.12).
      "downtime_type": isHost ? 2 : 1,
      "entry_time": entryTime,
      "start_time": start,
      "end_time": end,
      "triggered_by": 0,
      "downtime_id": id,
      fixed: fixedWindow,
      duration: fixedWindow === 1 ? end - start : Math.max(60, Math.floor(duration / 2)),
    };
    const events: [type: number, sec: number, attr: number][] = variant === 2
      ? [[DT_ADD, entryTime, 0], [DT_DELETE, at0.sec, 0]]
      : [
        [DT_ADD, entryTime, 0],
        [DT_START, start, 0],
        [DT_STOP, variant === 0 ? end : at0.sec, variant === 0 ? 1 : 2],
        [DT_DELETE, variant === 0 ? end : at0.sec, 0],
      ];
    let first = true;
    for (const [type, sec, attr] of events) {
      const at = first ? at0 : w.nextInstant();
      first = false;
      yield envelope(type, { sec, usec: at.usec }, "downtime", payload, attr);
    }
  }
}

function* coreRestartEvents(): Generator<SyntheticEvent> {
  for (;;) yield { object_type: 102, timestamp: 0 };
}

const GENERATORS: Readonly<Record<QueueName, (w: World) => Generator<SyntheticEvent>>> = {
  "statusngin_hoststatus": hostStatusEvents,
  "statusngin_servicestatus": serviceStatusEvents,
  "statusngin_hostchecks": hostCheckEvents,
  "statusngin_servicechecks": serviceCheckEvents,
  "statusngin_service_perfdata": perfdataEvents,
  "statusngin_statechanges": stateChangeEvents,
  "statusngin_logentries": logEntryEvents,
  "statusngin_notifications": notificationEvents,
  "statusngin_contactnotificationmethod": contactNotificationEvents,
  "statusngin_acknowledgements": acknowledgementEvents,
  "statusngin_downtimes": downtimeEvents,
  "statusngin_core_restart": coreRestartEvents,
};

function checkCount(what: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`Cannot generate jobs: ${what} must be a positive integer, got ${value}`);
  }
}

/**
 * A fresh random seed, for callers that want runs to differ and to print the seed so a run can
 * be repeated.
 *
 * @returns A seed in [0, 2^32).
 */
export function randomSeed(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0] ?? 0;
}

/**
 * Lazily generate `count` realistic events for a queue. Nothing is buffered: a caller can
 * stream a million events through {@linkcode jobsFor} in constant memory.
 *
 * @param queue One of the twelve queues.
 * @param count Number of events, ≥ 1. Downtime lifecycles and 604/605 pairs are cut at `count`.
 * @param options Seed and "now" (epoch ms).
 * @returns An iterator of events; the same seed and `now` give the same events.
 * @throws {RangeError} For an unknown queue, a bad count or a seed that is not a safe integer.
 *
 * @example
 * ```ts
 * import { syntheticEvents } from "./synthetic.ts";
 * const [ev] = syntheticEvents("statusngin_hostchecks", 1, { seed: 1, now: 1785470668000 });
 * console.assert(ev?.type === 801);
 * ```
 */
export function* syntheticEvents(
  queue: QueueName,
  count: number,
  options: SyntheticOptions = {},
): Generator<SyntheticEvent> {
  if (!QUEUE_NAMES.includes(queue)) {
    throw new RangeError(`Cannot generate events for queue "${queue}": not a consumed queue`);
  }
  checkCount("count", count);
  const seed = options.seed ?? randomSeed();
  if (!Number.isSafeInteger(seed)) {
    throw new RangeError(`Cannot generate events: seed must be a safe integer, got ${seed}`);
  }
  const now = options.now ?? Date.now();
  if (!Number.isFinite(now)) {
    throw new RangeError(`Cannot generate events: now must be epoch milliseconds, got ${now}`);
  }
  const world = new World(seed, now, count);
  let n = 0;
  for (const event of GENERATORS[queue](world)) {
    yield event;
    if (++n >= count) return;
  }
}

/**
 * Turn events into job payloads, lazily: bulk jobs of `eventsPerJob` events (the last one may
 * be smaller) or one job per event.
 *
 * @param queue The queue the jobs are for (decides the default form).
 * @param events Events, e.g. from {@linkcode syntheticEvents}.
 * @param options Form and events per bulk job.
 * @returns An iterator of job payload strings.
 * @throws {RangeError} When `eventsPerJob` is not a positive integer.
 *
 * @example
 * ```ts
 * import { jobsFor, syntheticEvents } from "./synthetic.ts";
 * const q = "statusngin_servicechecks";
 * const jobs = [...jobsFor(q, syntheticEvents(q, 250, { seed: 7 }), { eventsPerJob: 100 })];
 * console.assert(jobs.length === 3 && jobs[0]?.startsWith('{"messages":['));
 * ```
 */
export function* jobsFor(
  queue: QueueName,
  events: Iterable<SyntheticEvent>,
  options: JobOptions = {},
): Generator<string> {
  const form = options.form ?? defaultForm(queue);
  const perJob = options.eventsPerJob ?? DEFAULT_EVENTS_PER_JOB;
  checkCount("eventsPerJob", perJob);
  if (form === "single") {
    for (const event of events) yield encodeEvent(event);
    return;
  }
  let parts: string[] = [];
  for (const event of events) {
    parts.push(encodeEvent(event));
    if (parts.length >= perJob) {
      yield bulkJob(parts);
      parts = [];
    }
  }
  if (parts.length > 0) yield bulkJob(parts);
}

/**
 * A bulk job around already encoded events (A.2).
 *
 * @param encodedEvents Event JSON texts.
 * @returns `{"messages":[…],"format":"none"}`.
 */
export function bulkJob(encodedEvents: readonly string[]): string {
  return `{"messages":[${encodedEvents.join(",")}],"format":"none"}`;
}
