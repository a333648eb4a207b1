/**
 * The plugin-output catalogue: the services a synthetic host runs and what their plugins print
 * in each state (outputs, multi-line long outputs, perfdata strings that the perfdata parser
 * parses without skipping a gauge), plus the host check.
 *
 * @module
 */

import type { Rng } from "./rng.ts";

export const SERVICE_STATE_NAMES = ["OK", "WARNING", "CRITICAL", "UNKNOWN"] as const;
export const HOST_STATE_NAMES = ["UP", "DOWN", "UNREACHABLE"] as const;

/** A check result as the plugin printed it. */
export interface PluginResult {
  readonly output: string;
  readonly perfData: string;
  readonly longOutput: string;
}

/** One kind of check: a service of the catalogue below, or the host check. */
export interface CheckKind {
  /** Service description; `""` for the host check. */
  readonly description: string;
  readonly commandName: string;
  readonly commandLine: string;
  readonly timeout: number;
  /**
   * Whole seconds between check start and end. Constant per check kind on purpose: with `start_time
   * = end_time − duration`, two results of the same description share (`start_time`,
   * `timestamp_usec`) only if they share the event instant, which never happens. The service
   * tables' keys start with `service_description` and lack the host (docs/tables.md#check-queues).
   */
  readonly duration: number;
  readonly checkInterval: number;
  readonly retryInterval: number;
  readonly maxAttempts: number;
  readonly result: (rng: Rng, state: number, address: string) => PluginResult;
}

/** Value inside the band of the state: below warn (OK), warn..crit, above crit. */
function banded(rng: Rng, state: number, warn: number, crit: number, max: number): number {
  if (state === 0) return rng.float(0, warn * 0.9);
  if (state === 1) return rng.float(warn, crit);
  return rng.float(crit, max);
}

/** A service of the catalogue as written below: its plugin's text for UNKNOWN, and the rest. */
interface ServiceDefinition extends Pick<CheckKind, "description" | "commandName" | "commandLine"> {
  /** The numbers of {@linkcode CheckKind}, one service per line. */
  readonly schedule: readonly [
    timeout: number,
    duration: number,
    checkInterval: number,
    retryInterval: number,
    maxAttempts: number,
  ];
  /** What the plugin prints when it cannot check at all (state 3). */
  readonly unknown: string;
  /** The result in states 0 to 2 (`name`: OK, WARNING, CRITICAL); no long output unless it says. */
  readonly result: (rng: Rng, state: number, name: string) => Omit<PluginResult, "longOutput"> & {
    readonly longOutput?: string;
  };
}

function service(
  { unknown: unknownText, result, schedule, ...kind }: ServiceDefinition,
): CheckKind {
  const [timeout, duration, checkInterval, retryInterval, maxAttempts] = schedule;
  const times = { timeout, duration, checkInterval, retryInterval, maxAttempts };
  return {
    ...kind,
    ...times,
    result(rng, state) {
      if (state === 3) return { output: `UNKNOWN - ${unknownText}`, perfData: "", longOutput: "" };
      const r = result(rng, state, SERVICE_STATE_NAMES[state] ?? "UNKNOWN");
      return { output: r.output, perfData: r.perfData, longOutput: r.longOutput ?? "" };
    },
  };
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
    } ${rng.float(0, 40).toFixed(1).padStart(4)} ${rng.float(0, 12).toFixed(1).padStart(4)} ${
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
  return Array.from(
    { length: count },
    () =>
      `KB${rng.int(5_000_000, 5_049_999)} – ${rng.pick(titles)} – ${
        rng.float(0.5, 900).toFixed(1).replace(".", ",")
      } MB`,
  ).join("\n");
}

/** The services, as their plugins print them. */
const SERVICE_DEFINITIONS: readonly ServiceDefinition[] = [
  {
    description: "PING",
    commandName: "check_ping!100.0,20%!500.0,60%",
    commandLine: "$USER1$/check_ping -H $HOSTADDRESS$ -w $ARG1$ -c $ARG2$ -p 5",
    schedule: [60, 4, 5, 1, 4],
    unknown: "check_ping: Invalid hostname/address",
    result(rng, state, name) {
      const rta = state === 0 ? rng.float(0.02, 20) : banded(rng, state, 100, 500, 900);
      const pl = state === 0 ? 0 : state === 1 ? rng.int(20, 59) : 100;
      return {
        output: pl === 100
          ? `PING CRITICAL - Packet loss = 100%`
          : `PING ${name} - Packet loss = ${pl}%, RTA = ${rta.toFixed(2)} ms`,
        perfData: `rta=${
          (pl === 100 ? 0 : rta).toFixed(6)
        }ms;100.000000;500.000000;0.000000 pl=${pl}%;20;60;0`,
      };
    },
  },
  {
    description: "Current Load",
    commandName: "check_local_load!5.0,4.0,3.0!10.0,6.0,4.0",
    commandLine: "$USER1$/check_load -w $ARG1$ -c $ARG2$",
    schedule: [60, 0, 1, 1, 4],
    unknown: "Error opening /proc/loadavg",
    result(rng, state, name) {
      const l1 = banded(rng, state, 5, 10, 40);
      const l5 = l1 * rng.float(0.6, 1.1);
      const l15 = l5 * rng.float(0.6, 1.1);
      return {
        output: `${name} - load average: ${l1.toFixed(2)}, ${l5.toFixed(2)}, ${l15.toFixed(2)}`,
        perfData: `load1=${l1.toFixed(3)};5.000;10.000;0; load5=${
          l5.toFixed(3)
        };4.000;6.000;0; load15=${l15.toFixed(3)};3.000;4.000;0;`,
      };
    },
  },
  {
    description: "Current Users",
    commandName: "check_local_users!20!50",
    commandLine: "$USER1$/check_users -w $ARG1$ -c $ARG2$",
    schedule: [60, 0, 5, 1, 4],
    unknown: "Could not read utmp",
    result(rng, state, name) {
      const users = Math.floor(banded(rng, state, 20, 50, 80));
      return {
        output: `USERS ${name} - ${users} users currently logged in`,
        perfData: `users=${users};20;50;0`,
      };
    },
  },
  {
    description: "Disk Usage /var",
    commandName: "check_local_disk!20%!10%!/var",
    commandLine: "$USER1$/check_disk -w $ARG1$ -c $ARG2$ -p $ARG3$",
    schedule: [60, 0, 10, 2.5, 3],
    unknown: "DISK UNKNOWN - /var is not accessible: Permission denied",
    result(rng, state, name) {
      const total = 51_200;
      const usedPct = banded(rng, state, 80, 90, 100);
      const used = Math.round(total * usedPct / 100);
      const free = total - used;
      return {
        output: `DISK ${name} - free space: /var ${free} MB (${Math.round(100 - usedPct)}% inode=${
          rng.int(80, 99)
        }%);`,
        perfData: `'/var'=${used}MB;40960;46080;0;${total}`,
      };
    },
  },
  {
    description: "Swap Usage",
    commandName: "check_local_swap!20!10",
    commandLine: "$USER1$/check_swap -w $ARG1$ -c $ARG2$",
    schedule: [60, 0, 5, 1, 4],
    unknown: "SWAP UNKNOWN - no swap configured",
    result(rng, state, name) {
      const total = 2_048;
      const freePct = state === 0
        ? rng.int(25, 100)
        : state === 1
        ? rng.int(11, 19)
        : rng.int(0, 9);
      const free = Math.round(total * freePct / 100);
      return {
        output: `SWAP ${name} - ${freePct}% free (${free} MB out of ${total} MB)`,
        perfData: `swap=${free}MB;409;204;0;${total}`,
      };
    },
  },
  {
    description: "HTTP",
    commandName: "check_http!-S -u /health",
    commandLine: "$USER1$/check_http -I $HOSTADDRESS$ $ARG1$",
    schedule: [30, 1, 1, 0.5, 3],
    unknown: "HTTP UNKNOWN - Invalid HTTP response received from host",
    result(rng, state, name) {
      const time = banded(rng, state, 1, 2, 10);
      const size = rng.int(400, 90_000);
      const status = state === 2 ? "HTTP/1.1 503 Service Unavailable" : "HTTP/1.1 200 OK";
      return {
        output: `HTTP ${name}: ${status} - ${size} bytes in ${
          time.toFixed(3)
        } second response time`,
        perfData: `time=${time.toFixed(6)}s;1.000000;2.000000;0.000000 size=${size}B;;;0`,
      };
    },
  },
  {
    description: "Memory",
    commandName: "check_memory!80!90",
    commandLine: "$USER1$/check_mem -w $ARG1$ -c $ARG2$",
    schedule: [60, 0, 5, 1, 4],
    unknown: "cannot read /proc/meminfo",
    result(rng, state, name) {
      const pct = banded(rng, state, 80, 90, 100);
      return {
        output: `MEMORY ${name} - ${pct.toFixed(1)}% used`,
        perfData: `'memory used'=${pct.toFixed(1)}%;80;90;0;100 'memory total'=16384MB;;;0;`,
      };
    },
  },
  {
    description: "Datenträger C:",
    commandName: "check_nrpe!check_drivesize!drive=C:",
    commandLine: "$USER1$/check_nrpe -H $HOSTADDRESS$ -c $ARG1$ -a $ARG2$",
    schedule: [60, 2, 10, 2, 3],
    unknown: "Datenträger C: konnte nicht gelesen werden",
    result(rng, state, name) {
      const pct = banded(rng, state, 80, 90, 100);
      const shown = pct.toFixed(1).replace(".", ",");
      const text = state === 0
        ? `Datenträger C: ${shown} % belegt (${
          rng.float(5, 200).toFixed(1).replace(".", ",")
        } GB frei)`
        : `Datenträger C: größer als ${state === 1 ? 80 : 90} % belegt (${shown} %)`;
      return {
        output: `${name} - ${text}`,
        // Comma decimal separator, as German Windows agents print it (docs/perfdata.md#format).
        perfData: `'C:\\ Used Space'=${shown}%;80;90;0;100`,
      };
    },
  },
  {
    description: "Прочее",
    commandName: "check_queue!100!200",
    commandLine: "$USER1$/check_queue --warning $ARG1$ --critical $ARG2$",
    schedule: [60, 0, 5, 1, 4],
    unknown: "Прочее: нет ответа от брокера",
    result(rng, state, name) {
      const n = Math.floor(banded(rng, state, 100, 200, 500));
      return {
        output: state === 0
          ? `OK - Прочее: в очереди ${n} сообщений, всё в порядке`
          : `${name} - Прочее: в очереди ${n} сообщений`,
        perfData: `'очередь'=${n};100;200;0`,
      };
    },
  },
  {
    description: "監視 HTTP",
    commandName: "check_http!-u /監視",
    commandLine: "$USER1$/check_http -I $HOSTADDRESS$ $ARG1$",
    schedule: [30, 1, 2, 1, 3],
    unknown: "監視: 無効な応答",
    result(rng, state, name) {
      const time = banded(rng, state, 1, 2, 10);
      return {
        output: `HTTP ${name}: 監視ページ 応答時間 ${time.toFixed(3)} 秒`,
        perfData: `time=${time.toFixed(6)}s;1.000000;2.000000;0.000000`,
      };
    },
  },
  {
    description: "Interface eth0",
    commandName: "check_snmp_int!eth0",
    commandLine: "$USER1$/check_snmp_int.pl -H $HOSTADDRESS$ -n $ARG1$ -f -k",
    schedule: [30, 1, 5, 1, 3],
    unknown: "No response from remote host 'eth0'",
    result(rng, state, name) {
      return {
        output: `${name} - eth0:${state === 2 ? "DOWN" : "UP"} (in=${rng.int(0, 900)}kB/s, out=${
          rng.int(0, 900)
        }kB/s)`,
        perfData: `'eth0_in_octet'=${rng.int(0, 2 ** 40)}c 'eth0_out_octet'=${
          rng.int(0, 2 ** 40)
        }c`,
      };
    },
  },
  {
    description: "Processes",
    commandName: "check_local_procs!250!400!RSZDT",
    commandLine: "$USER1$/check_procs -w $ARG1$ -c $ARG2$ -s $ARG3$",
    schedule: [60, 0, 5, 1, 4],
    unknown: "Unable to read output",
    result(rng, state, name) {
      const n = Math.floor(banded(rng, state, 250, 400, 900));
      return {
        output: `PROCS ${name}: ${n} processes with STATE = RSZDT`,
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
    schedule: [120, 7, 60, 10, 2],
    unknown: "Windows Update-Dienst antwortet nicht",
    result(rng, state, name) {
      const n = state === 0 ? 0 : state === 1 ? rng.int(1, 9) : rng.int(10, 40);
      const longOutput = n > 0 && rng.chance(0.5) ? updateList(rng, Math.max(n, 25)) : "";
      return {
        output: `${name} - ${n} Updates ausstehend`,
        perfData: `'pending updates'=${n};1;10;0`,
        longOutput,
      };
    },
  },
  {
    description: "NTP Time",
    commandName: "check_ntp_time!0.5!1",
    commandLine: "$USER1$/check_ntp_time -H pool.ntp.org -w $ARG1$ -c $ARG2$",
    schedule: [30, 0, 15, 5, 3],
    unknown: "NTP UNKNOWN: No response from NTP server",
    result(rng, state, name) {
      const offset = banded(rng, state, 0.5, 1, 30) * (rng.chance(0.5) ? -1 : 1);
      return {
        output: `NTP ${name}: Offset ${offset.toPrecision(6)} secs`,
        perfData: `offset=${offset.toPrecision(6)}s;0.500000;1.000000;`,
      };
    },
  },
  {
    description: "Kaffeemaschine",
    commandName: "check_coffee!20!10",
    commandLine: "$USER1$/check_coffee --min-level $ARG1$ --critical $ARG2$",
    schedule: [10, 0, 1, 1, 2],
    unknown: "Kaffeemaschine ☕ antwortet nicht 🤷",
    result(rng, state, name) {
      const level = state === 0 ? rng.int(21, 100) : state === 1 ? rng.int(11, 20) : rng.int(0, 10);
      return {
        output: `${name} - Kaffeemaschine ☕ Füllstand ${level} % ${state === 0 ? "🙂" : "🔥"}`,
        perfData: `'Füllstand'=${level}%;20;10;0;100`,
      };
    },
  },
];

/** The service catalogue. Each host runs a subset of it. */
export const SERVICES: readonly CheckKind[] = SERVICE_DEFINITIONS.map(service);

export const HOST_CHECK: CheckKind = {
  description: "",
  commandName: "check-host-alive",
  commandLine: "$USER1$/check_ping -H $HOSTADDRESS$ -w 3000.0,80% -c 5000.0,100% -p 5",
  timeout: 30,
  duration: 4,
  checkInterval: 5,
  retryInterval: 1,
  maxAttempts: 10,
  result(rng, state, address) {
    // A host that does not answer: 100 % loss at the critical round-trip time.
    const rta = state === 0 ? rng.float(0.02, 30) : 5000;
    return {
      output: state === 0
        ? `PING OK - Packet loss = 0%, RTA = ${rta.toFixed(2)} ms`
        : `CRITICAL - ${state === 1 ? "Host" : "Network"} Unreachable (${address})`,
      perfData: `rta=${rta.toFixed(6)}ms;3000.000000;5000.000000;0.000000 pl=${
        state === 0 ? 0 : 100
      }%;80;100;0`,
      longOutput: "",
    };
  },
};
