/**
 * The settings table (D8): every flag, environment variable, YAML key, default, accepted form,
 * help text and secret marker, so that parsing, `--help` and docs/configuration.md cannot
 * disagree. Env name, YAML key and typed key are derived from the flag (see {@linkcode envNameOf},
 * {@linkcode yamlKeyOf}, {@linkcode settingKeyOf}); exceptions are written in the row and pinned
 * by `settings_test.ts`. Defaults are text parsed like a flag value, so a default can never be
 * something a user could not type.
 *
 * @module
 */
import { QUEUE_NAMES } from "../events/mod.ts";
import { amqpUrlProblem } from "../util/amqp_url.ts";
import {
  DEFAULT_ILLEGAL_CHARACTERS,
  illegalCharactersPattern,
} from "../util/illegal_characters.ts";

/** Name used in usage lines and hints (the installed binary). */
export const PROGRAM_NAME = "statusengine-worker";

/** The subcommands in help order, with the one-line summary shown in the top-level help. */
const SUMMARIES = {
  run: "Run the worker: consume the twelve queues and write them to MySQL (default)",
  schema: "Create what is missing of the Statusengine schema; --check only reports differences",
  cleanup: "Retention, once: lay out weekly partitions, drop expired weeks, delete older rows",
  status: "Show gearmand or RabbitMQ queue backlogs, MySQL reachability and a worker's metrics",
  publish: "Publish synthetic events for one queue to gearmand or RabbitMQ (testing only)",
  losstest: "Publish, verify or clean up marker events proving nothing is lost on restart",
  verify: "Compare the newest rows of two Statusengine databases column by column",
  "dead-letters": "Count the dead-letter file's records, or replay them once their cause is fixed",
  config: "Show every setting of a command with its value and where it came from, and exit",
  version: "Print the build identity and exit",
} as const;

/** Name of a subcommand; `run` is the default when none is given. */
export type CommandName = keyof typeof SUMMARIES;

export const COMMANDS = Object.entries(SUMMARIES).map(([name, summary]) => ({
  name: name as CommandName,
  summary,
}));

/** `config` takes another command's whole command line, so its usage is not derived from rows. */
export const CONFIG_COMMAND_USAGE = {
  usage: "config [--json] [command] [flags of that command]",
  details: "Put config in front of a command line to see what that command would use: " +
    "config run --config /etc/statusengine/config.yml, config cleanup --config FILE, " +
    "config status --json. The command defaults to run, so config --config FILE shows the " +
    "worker's settings. config's own flag --json, before or after the command, prints one " +
    "JSON document: {command, settings: {flag: {value, source, origin, default, secret}}, " +
    "warnings}. Everything else after the command is read exactly as that command reads it, " +
    "environment and config file included (status, which takes --json itself, gets it too). Secrets are masked. The warnings are those the command would " +
    "log, on stderr; the exit status is 1 where the command would refuse to start, 2 for a " +
    "bad command line, 0 otherwise.",
} as const;

/** All command names, in help order. */
export const COMMAND_NAMES: readonly CommandName[] = COMMANDS.map((c) => c.name);

// Re-exported from its leaf module, so config depends on no other code of ours.
export { QUEUE_NAMES };

/**
 * `raw` commands refused with 403 whatever `--command-allow` says. Both spellings of shutdown
 * and restart, because Naemon maps them to the same handler; `PROCESS_FILE` makes Naemon execute
 * commands read from a file and would bypass every other rule. Applied by `src/commands/`.
 */
export const DENIED_RAW_COMMANDS: readonly string[] =
  "SHUTDOWN_PROGRAM SHUTDOWN_PROCESS RESTART_PROGRAM RESTART_PROCESS PROCESS_FILE".split(" ");

/**
 * The default of `--command-allow`: what the Statusengine UI and openITCOCKPIT send for a host
 * or service. Program-wide switches (`DISABLE_NOTIFICATIONS`, …) are left out: one request
 * would silence a whole installation.
 */
export const DEFAULT_ALLOWED_RAW_COMMANDS: readonly string[] = [
  // checks, acknowledgements, downtimes, comments, custom notifications, per-object switches
  "SCHEDULE_HOST_CHECK SCHEDULE_FORCED_HOST_CHECK SCHEDULE_SVC_CHECK SCHEDULE_FORCED_SVC_CHECK",
  "SCHEDULE_HOST_SVC_CHECKS SCHEDULE_FORCED_HOST_SVC_CHECKS PROCESS_HOST_CHECK_RESULT",
  "PROCESS_SERVICE_CHECK_RESULT ACKNOWLEDGE_HOST_PROBLEM ACKNOWLEDGE_SVC_PROBLEM",
  "REMOVE_HOST_ACKNOWLEDGEMENT REMOVE_SVC_ACKNOWLEDGEMENT SCHEDULE_HOST_DOWNTIME",
  "SCHEDULE_SVC_DOWNTIME SCHEDULE_HOST_SVC_DOWNTIME SCHEDULE_AND_PROPAGATE_HOST_DOWNTIME",
  "SCHEDULE_AND_PROPAGATE_TRIGGERED_HOST_DOWNTIME SCHEDULE_HOSTGROUP_HOST_DOWNTIME",
  "SCHEDULE_HOSTGROUP_SVC_DOWNTIME SCHEDULE_SERVICEGROUP_HOST_DOWNTIME",
  "SCHEDULE_SERVICEGROUP_SVC_DOWNTIME DEL_HOST_DOWNTIME DEL_SVC_DOWNTIME",
  "DEL_DOWNTIME_BY_HOST_NAME ADD_HOST_COMMENT ADD_SVC_COMMENT DEL_HOST_COMMENT DEL_SVC_COMMENT",
  "SEND_CUSTOM_HOST_NOTIFICATION SEND_CUSTOM_SVC_NOTIFICATION ENABLE_HOST_NOTIFICATIONS",
  "DISABLE_HOST_NOTIFICATIONS ENABLE_SVC_NOTIFICATIONS DISABLE_SVC_NOTIFICATIONS",
  "ENABLE_HOST_SVC_NOTIFICATIONS DISABLE_HOST_SVC_NOTIFICATIONS ENABLE_HOST_CHECK",
  "DISABLE_HOST_CHECK ENABLE_SVC_CHECK DISABLE_SVC_CHECK ENABLE_HOST_SVC_CHECKS",
  "DISABLE_HOST_SVC_CHECKS ENABLE_PASSIVE_HOST_CHECKS DISABLE_PASSIVE_HOST_CHECKS",
  "ENABLE_PASSIVE_SVC_CHECKS DISABLE_PASSIVE_SVC_CHECKS ENABLE_HOST_EVENT_HANDLER",
  "DISABLE_HOST_EVENT_HANDLER ENABLE_SVC_EVENT_HANDLER DISABLE_SVC_EVENT_HANDLER",
  "ENABLE_HOST_FLAP_DETECTION DISABLE_HOST_FLAP_DETECTION ENABLE_SVC_FLAP_DETECTION",
  "DISABLE_SVC_FLAP_DETECTION",
].join(" ").split(" ");

/** The `--command-allow` entry that allows every command the denylist does not refuse. */
export const ALLOW_ALL = "*";

/** How a setting's value is written and checked. */
export type Kind =
  | {
    readonly type: "string";
    /** An explicit empty value (flag or file) is a real value, e.g. "disabled". */
    readonly allowEmpty?: boolean;
    readonly forbid?: string;
    /** Longest accepted value in code points. */
    readonly maxLength?: number;
    /** Accepted form for help and errors; default "text". */
    readonly form?: string;
    /** Further validation: the problem with the value, or null when it is fine. */
    readonly check?: (value: string) => string | null;
  }
  | { readonly type: "integer"; readonly min: number; readonly max?: number }
  | { readonly type: "bytes"; readonly min: number }
  | { readonly type: "duration"; readonly allowZero: boolean; readonly maxMs?: number }
  | { readonly type: "enum"; readonly values: readonly string[] }
  // emptyDisables: empty means "no listener"; hostList: `amqp://u:p@h1,h2:5673/vhost`.
  | { readonly type: "hostPort"; readonly emptyHost: boolean; readonly emptyDisables?: boolean }
  | {
    readonly type: "url";
    readonly schemes: readonly string[];
    readonly form: string;
    readonly hostList?: boolean;
    /** Further validation: the problem with the value, or null when it is fine. */
    readonly check?: (value: string) => string | null;
  }
  | { readonly type: "boolean" | "host" | "hostPortList" | "mysqlUrl" | "mysqlDsn" }
  | { readonly type: "keyList"; readonly pattern?: RegExp; readonly patternForm?: string };

/** A row of the settings table as written in {@linkcode SETTINGS}. */
export interface SettingInput {
  /** Canonical flag name, kebab-case, without dashes. */
  readonly flag: string;
  readonly kind: Kind;
  /** One or two sentences for `--help` and the reference. */
  readonly help: string;
  /** Commands that accept this setting; default `run`. */
  readonly commands?: readonly CommandName[];
  /** Built-in default in textual form; absent = none (booleans: false). */
  readonly default?: string;
  /** Per-command defaults overriding `default`. */
  readonly commandDefaults?: Readonly<Partial<Record<CommandName, string>>>;
  readonly required?: true;
  /** Masked in help, errors, warnings and logs (D8). */
  readonly secret?: true;
  /** Env var override, or `false` for none. */
  readonly env?: string | false;
  /** YAML key override, or `false` for none. */
  readonly yaml?: string | false;
  /** Command line only: neither env var nor YAML key. */
  readonly cliOnly?: true;
  /** Further flag spellings (the Go worker's). */
  readonly flagAliases?: readonly string[];
  readonly envAliases?: readonly string[];
  /** Also taken from a positional argument, in table order among the command's positional rows. */
  readonly positional?: true;
  /**
   * Input-only row: `derive` turns its value into the text of setting `target`, and it has no key
   * of its own (`mysql-dsn` → `mysql-url`). Both given by the same source refuses.
   */
  readonly feeds?: readonly { target: string; derive: (value: string) => string }[];
  /** Unit of an integer, appended to the typed key (`ageHostchecksDays`). */
  readonly unit?: "days";
  /** Retention target of an `age-*` row; the age is measured on `column` (Unix seconds). */
  readonly retention?: { readonly table: string; readonly column: string };
}

/** A row with its derived fields filled in: what all code but the table itself reads. */
export interface SettingRow extends Omit<SettingInput, "commands" | "cliOnly"> {
  readonly commands: readonly CommandName[];
}

// Durations that become timers are capped at a day: setTimeout fires at once for delays above
// 2^31-1 ms, so "720h" would silently mean "now".
const TIMER_MAX_MS = 86_400_000;
const TIMER = { type: "duration", allowZero: false, maxMs: TIMER_MAX_MS } as const;
const TIMER_OR_ZERO = { type: "duration", allowZero: true, maxMs: TIMER_MAX_MS } as const;
const BOOLEAN = { type: "boolean" } as const;
const HTTP_URL = { type: "url", schemes: ["http", "https"] } as const;

/** A row of {@linkcode SETTINGS}, its literal types kept for {@linkcode SettingsFor}. */
function setting<
  const F extends string,
  const K extends Kind,
  const R extends Omit<SettingInput, "flag" | "kind">,
>(flag: F, kind: K, rest: R) {
  return { flag, kind, ...rest };
}

type Tool = Exclude<CommandName, "config" | "version">;
const LOG_COMMANDS = COMMAND_NAMES.filter((c) => c !== "config" && c !== "version") as Tool[];
const CONFIG_COMMANDS = LOG_COMMANDS.filter((c) => c !== "verify") as Exclude<Tool, "verify">[];
const MYSQL_COMMANDS = ["run", "schema", "cleanup", "status", "losstest", "dead-letters"] as const;
const BROKER_COMMANDS = ["run", "status", "publish", "losstest"] as const;

const QUEUE_PATTERN = new RegExp(`^(${QUEUE_NAMES.join("|")})$`);
const QUEUE_FORM = `queue names (${QUEUE_NAMES.join(", ")})`;

/** Where perfdata can go (`--perfdata-backends`). */
export const PERFDATA_BACKENDS = ["mysql", "graphite", "influxdb", "prometheus"] as const;

function regexProblem(value: string): string | null {
  try {
    illegalCharactersPattern(value);
    return null;
  } catch (err: unknown) {
    return `is not a usable regular expression: ${err instanceof Error ? err.message : err}`;
  }
}

/**
 * Null when `--influxdb-url` is one of the two write APIs, else the problem: checked with the
 * setting, so that `config` refuses what `run` would, naming the source.
 */
export function influxUrlProblem(url: string): string | null {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return "is not a URL";
  }
  const path = u.pathname.replace(/\/+$/, "");
  if (path.endsWith("/api/v2/write")) {
    return u.searchParams.get("bucket") ? null : "names no bucket (…/api/v2/write?org=…&bucket=…)";
  }
  if (path.endsWith("/write")) {
    return u.searchParams.get("db") ? null : "names no database (…/write?db=…)";
  }
  return "is neither …/write?db=… (InfluxDB 1.x) nor …/api/v2/write?org=…&bucket=… (2.x)";
}

/**
 * A validated listen address (`host:port`, `[v6]:port`) → listen options; `:port` gives the
 * hostname "", every interface of IPv4 and IPv6 (src/http/listen.ts).
 */
export function listenAddress(addr: string): { hostname: string; port: number } {
  const colon = addr.lastIndexOf(":");
  const host = addr.slice(0, colon).replace(/^\[(.*)\]$/, "$1");
  return { hostname: host, port: Number(addr.slice(colon + 1)) };
}

function age<const N extends string>(name: N, days: number, table: string, column: string) {
  return {
    flag: `age-${name}`,
    kind: { type: "integer", min: 0 },
    unit: "days",
    default: String(days),
    commands: ["cleanup"],
    retention: { table, column },
    help: `Delete rows of ${table} whose ${column} is older than this many days; 0 disables.`,
  } as const;
}

/** Headings of `--help`, each from the named flag to the next heading (rows are in topic order). */
export const SETTING_GROUPS: readonly { readonly title: string; readonly from: string }[] = [
  { title: "General", from: "config" },
  { title: "Broker", from: "consumer" },
  { title: "Queues and flow control", from: "queues" },
  { title: "Shutdown", from: "drain-timeout" },
  { title: "MySQL", from: "mysql-url" },
  { title: "Performance data: MySQL, Graphite, InfluxDB, Prometheus", from: "perfdata-backends" },
  { title: "HTTP: /metrics, /ws and /commands", from: "metrics-port" },
  { title: "Tasks from statusengine_tasks", from: "check-for-commands" },
  { title: "Cleanup", from: "cleanup-batch-size" },
  { title: "Retention (days)", from: "age-hostchecks" },
  { title: "Schema", from: "check" },
  { title: "Status", from: "metrics-url" },
  // --json serves status, config and dead-letters: a heading of its own, not under "Status".
  { title: "Output", from: "json" },
  { title: "Publishing", from: "queue" },
  { title: "Comparison", from: "mysql-url-a" },
  { title: "Dead letters", from: "action" },
];

/** The settings table (one row per setting; order is help order). */
export const SETTINGS = [
  setting("config", { type: "string", form: "path of a YAML file" }, {
    yaml: false,
    commands: CONFIG_COMMANDS,
    help: "YAML configuration file: the Go worker's flat keys and the legacy PHP config.yml " +
      "are both understood. No default location; a named file that cannot be read or " +
      "parsed refuses to start.",
  }),
  setting("log-level", { type: "enum", values: ["debug", "info", "warn", "error"] }, {
    default: "info",
    commands: LOG_COMMANDS,
    help: "Least severe level that is logged.",
  }),
  setting("log-format", { type: "enum", values: ["text", "json"] }, {
    default: "text",
    commands: LOG_COMMANDS,
    help: "Log records as key=value text or as JSON, one per line: on stdout for run, on " +
      "stderr for the other commands (their stdout is their output).",
  }),
  setting("consumer", { type: "enum", values: ["gearman", "rabbitmq"] }, {
    default: "gearman",
    commands: BROKER_COMMANDS,
    help: "Queue backend to consume from; also the broker /commands, publish and losstest " +
      "publish to and status reads backlogs from.",
  }),
  setting("gearman-addr", { type: "hostPortList" }, {
    default: "127.0.0.1:4730",
    commands: BROKER_COMMANDS,
    help: "Gearman job servers, comma-separated. The worker consumes every queue from every " +
      "server (D9). The broker module sends every message to every server it names, so listing " +
      "here two servers of one broker processes every event twice: give one server per worker, " +
      "or use the second only for failover (docs/running.md: several gearmand servers).",
  }),
  setting("gearman-max-concurrent-jobs-per-queue", { type: "integer", min: 1 }, {
    default: "64",
    help: "Most jobs of one queue handled at the same time, across all job servers: the hard " +
      "cap of the queue's adaptive window, which starts at 8 (or this, when lower), grows " +
      "while the queue's table writers hold less than two batches and shrinks while MySQL " +
      "is slow. The backlog beyond it waits at gearmand. statusngin_downtimes always uses 1.",
  }),
  setting("gearman-reconnect-interval", TIMER, {
    default: "2s",
    help: "Pause before a lost Gearman connection is dialled again.",
  }),
  setting("rabbitmq-url", {
    type: "url",
    schemes: ["amqp", "amqps"],
    form: "amqp://user:password@host:port/vhost (percent-encoded)",
    hostList: true,
    // What the broker layer would refuse only when it dials (port 0, heartbeat=30s).
    check: amqpUrlProblem,
  }, {
    default: "amqp://statusengine:statusengine@127.0.0.1:5672/",
    secret: true,
    commands: BROKER_COMMANDS,
    help: "RabbitMQ server when consumer is rabbitmq. An empty path or / is the vhost /. " +
      "Several brokers of one cluster: amqp://user:pw@host1:5672,host2:5672/vhost; the " +
      "worker connects to the first that answers and, when it loses it, to the next one " +
      "(round-robin); the tools use the first that answers.",
  }),
  setting("rabbitmq-durable-queues", BOOLEAN, {
    commands: ["run", "publish", "losstest"],
    help: "Declare the RabbitMQ queues durable. Must match the broker module's DurableQueues " +
      "(default false, as there); a mismatch refuses to start with 406 PRECONDITION_FAILED.",
  }),
  setting("rabbitmq-declare", { type: "enum", values: ["declare", "passive"] }, {
    default: "declare",
    commands: ["run", "publish", "losstest"],
    help: "How the queues are declared: declare creates a missing queue as a plain classic queue " +
      "(as the broker module does); passive only checks that it exists, for queues the operator " +
      "declared with other arguments, such as quorum queues (docs/running.md#rabbitmq-hosts).",
  }),
  setting("rabbitmq-prefetch", { type: "integer", min: 1, max: 65535 }, {
    default: "100",
    help: "Unacknowledged messages RabbitMQ may push per queue; also the hard cap of the queue's " +
      "adaptive window of messages handled at once (statusngin_downtimes: one at a time).",
  }),
  setting("rabbitmq-reconnect-interval", TIMER, {
    default: "2s",
    help: "Pause before a lost RabbitMQ connection is dialled again (and between failed " +
      "attempts).",
  }),

  setting("queues", { type: "keyList", pattern: QUEUE_PATTERN, patternForm: QUEUE_FORM }, {
    default: "",
    help: "Queues to consume, comma-separated; empty = all twelve. Several workers may share " +
      "a job server: statusngin_downtimes is consumed by one of them at a time (docs/running.md: " +
      "running several workers).",
  }),
  setting("exclude-queues", { type: "keyList", pattern: QUEUE_PATTERN, patternForm: QUEUE_FORM }, {
    default: "",
    help: "Queues not to consume, applied after --queues (their jobs wait at the broker). " +
      "Legacy number_*_worker: 0 and process_perfdata: 0 exclude their queues.",
  }),
  setting("max-in-flight-bytes", { type: "bytes", min: 1024 * 1024 }, {
    default: "256MiB",
    help: "Payload bytes of the jobs being handled, across all queues. A Gearman grab waits " +
      "while they (plus the expected size of the grabs already sent) are over it; a RabbitMQ " +
      "delivery waits unhandled in its prefetch buffer. One job is always let through, " +
      "however large. The core-restart queue's jobs (a few bytes) never wait: their receive " +
      "time dates the restart.",
  }),
  setting("drain-timeout", TIMER_OR_ZERO, {
    default: "30s",
    help: "On shutdown, how long jobs in flight may take to commit before their connections " +
      "close; whatever did not commit is redelivered by the broker (D1).",
  }),
  setting("shutdown-flush-timeout", TIMER, {
    default: "10s",
    help: "On shutdown, the budget shared by all table writers for their final flush.",
  }),
  setting("mysql-url", { type: "mysqlUrl" }, {
    default: "mysql://root@127.0.0.1:3306/statusengine",
    secret: true,
    commands: MYSQL_COMMANDS,
    help: "MySQL/MariaDB database. Percent-encode special characters in user and password; " +
      "add ?socketPath=/path for a Unix socket (the compiled binary: the distributions' usual " +
      "ones, docs/operations.md#mysql-sockets). Several servers: " +
      "mysql://user:pw@host1:3306,host2:3306/db; the worker writes to the first that answers " +
      "and moves to the next when it fails, and the tools (schema, cleanup, status, verify) " +
      "use the first that answers. Mutually exclusive with --mysql-dsn within one source.",
  }),
  setting("mysql-dsn", { type: "mysqlDsn" }, {
    secret: true,
    commands: MYSQL_COMMANDS,
    feeds: [{ target: "mysql-url", derive: (url: string) => url }],
    help: "The same database in the Go worker's DSN syntax, e.g. " +
      "user:password@tcp(host:3306)/database?parseTime=true or " +
      "user:password@unix(/run/mysqld/mysqld.sock)/database; converted to --mysql-url.",
  }),
  setting("mysql-max-open-conns", { type: "integer", min: 1 }, {
    default: "32",
    help: "Size of the MySQL connection pool; keep it above 14 × --mysql-writers-per-table " +
      "so the final flushes of all writers run in parallel.",
  }),
  setting("mysql-writers-per-table", { type: "integer", min: 1, max: 8 }, {
    default: "2",
    help: "Statements in flight at once per table, each from its own writer; rows are " +
      "shared out by a hash of their primary key, so the rows of one key keep their order.",
  }),
  setting("mysql-batch-size", { type: "integer", min: 1, max: 700 }, {
    default: "100",
    commands: ["run", "dead-letters"],
    help: "Most rows in one bulk INSERT (one prepared statement). 700 is the Go worker's " +
      "ceiling, kept so existing configurations mean the same; at 700 rows the widest table " +
      "(43 columns) binds 30,100 of a prepared statement's 65,535 placeholders.",
  }),
  setting("mysql-statement-timeout", TIMER_OR_ZERO, {
    default: "30s",
    help: "A statement (waiting for a pooled connection included) that gets no answer within " +
      "this time is abandoned and its connection closed; MySQL then counts as unavailable " +
      "(statusengine_db_available 0, /readyz fails) and the rows are held and retried, never " +
      "dead-lettered. Keep it above the slowest legitimate statement (the core-restart " +
      "DELETE on the status tables); 0 waits forever.",
  }),
  // 60 s: long enough that a server restarting (answering, then busy with crash recovery, then
  // restarted by its supervisor) is not taken back too early and left again; short enough that
  // the preferred host carries the load again within a minute.
  setting("mysql-failback-after", TIMER_OR_ZERO, {
    default: "60s",
    help: "With several hosts in --mysql-url, the worker uses another host only while an " +
      "earlier one does not answer: it moves back once the earlier host has answered every " +
      "probe for this long.",
  }),
  // 10 s: a restart of MySQL on the same host takes a few seconds and is better waited for than
  // handed to another worker; a dead host or node is given up well within the minute after which a
  // stall is an error.
  setting("mysql-give-back-after", TIMER_OR_ZERO, {
    default: "10s",
    help: "When MySQL has taken no write for this long (no host of --mysql-url answers) and " +
      "another worker consumes the same queue, the jobs this worker holds are given back to " +
      "the broker for the other worker to write (Gearman: the connection is closed; RabbitMQ: " +
      "the channels, which requeues them), and none are taken again until MySQL answers. With " +
      "no other worker the jobs are held until MySQL returns. 0 always holds.",
  }),
  setting("status-max-age", { type: "duration", allowZero: true }, {
    default: "5m",
    commands: ["run", "dead-letters"],
    help: "Host and service status events older than this are discarded (a newer snapshot " +
      "supersedes them); 0 disables the filter.",
  }),
  setting("node-name", { type: "string", maxLength: 255 }, {
    default: "statusengine",
    yaml: "nodename",
    flagAliases: ["nodename"],
    envAliases: ["STATUSENGINE_NODENAME"],
    commands: ["run", "dead-letters"],
    help: "Name of this node, written to node_name (part of the downtime tables' primary " +
      "key): keep the legacy worker's node_name when migrating.",
  }),
  setting("dead-letter-file", { type: "string", allowEmpty: true, form: "path; empty disables" }, {
    default: "/var/lib/statusengine-worker/statusengine-dead-letters.ndjson",
    commands: ["run", "dead-letters"],
    help: "NDJSON file that receives payloads which cannot be decoded or rows MySQL rejects " +
      "(D7); the default is in the packaged state directory. A relative path is relative to " +
      "the working directory. An explicit empty value (flag or file) disables it.",
  }),
  setting("enable-openitcockpit-tweaks", BOOLEAN, {
    env: "ENABLE_OPENITCOCKPIT_TWEAKS",
    envAliases: ["STATUSENGINE_ENABLE_OPENITCOCKPIT_TWEAKS"],
    help: "On a core restart, delete status rows of objects missing or disabled in " +
      "openITCOCKPIT instead of rows older than the restart.",
  }),
  setting("perfdata-backends", {
    type: "keyList",
    pattern: new RegExp(`^(${PERFDATA_BACKENDS.join("|")})$`),
    patternForm: `backends (${PERFDATA_BACKENDS.join(", ")})`,
  }, {
    default: "mysql",
    commands: ["run", "dead-letters"],
    help: "Where metrics parsed from statusngin_service_perfdata go, comma-separated; empty = " +
      "nowhere (the queue is still consumed). Only MySQL holds up a job; the others drop and " +
      "count what they cannot send (docs/perfdata.md).",
  }),
  setting("perfdata-route", { type: "enum", values: ["mysql", "graphite", "both"] }, {
    commands: ["run", "dead-letters"],
    feeds: [{
      target: "perfdata-backends",
      derive: (r: string) => r === "both" ? "mysql,graphite" : r,
    }],
    help: "The earlier form of --perfdata-backends: both = mysql,graphite.",
  }),
  setting("perfdata-label-quotes", { type: "enum", values: ["keep", "strip"] }, {
    default: "keep",
    help: "Perfdata labels in MySQL and Graphite with the plugin's quotes ('memory used', as " +
      "the PHP worker wrote them) or without (memory used, as the Go worker). InfluxDB and " +
      "remote write always get them without (docs/perfdata.md#labels).",
  }),
  setting("graphite-addr", { type: "hostPort", emptyHost: false }, {
    default: "127.0.0.1:2003",
    help: "Carbon plaintext listener; only dialled when perfdata goes to Graphite.",
  }),
  setting("graphite-prefix", { type: "string" }, {
    default: "statusengine",
    help: "First path segment of every Graphite metric; sanitised like the other segments " +
      "(--graphite-illegal-characters).",
  }),
  setting("graphite-illegal-characters", {
    type: "string",
    form: "regular expression of one character, bare or /delimited/ as in PHP",
    check: regexProblem,
  }, {
    default: DEFAULT_ILLEGAL_CHARACTERS,
    help: "Characters of the Graphite prefix, host, service and label that become _ (the legacy " +
      "graphite_illegal_characters; the Statusengine UI rebuilds keys with the same expression).",
  }),
  setting("graphite-batch-size", { type: "integer", min: 1, max: 1000 }, {
    default: "100",
    help: "Most metrics in one Carbon write (a failed write drops its batch).",
  }),
  setting("influxdb-url", {
    ...HTTP_URL,
    form: "http(s)://host:8086/write?db=NAME (1.x) or …/api/v2/write?org=ORG&bucket=NAME (2.x)",
    check: influxUrlProblem,
  }, {
    default: "http://127.0.0.1:8086/write?db=statusengine",
    secret: true,
    help: "InfluxDB write endpoint when perfdata goes to influxdb; the path picks the 1.x or " +
      "2.x API.",
  }),
  setting("influxdb-user", { type: "string", allowEmpty: true }, {
    default: "",
    help: "InfluxDB 1.x user (HTTP basic authentication); empty = none.",
  }),
  setting("influxdb-password", { type: "string", allowEmpty: true }, {
    default: "",
    secret: true,
    help: "Password of --influxdb-user.",
  }),
  setting("influxdb-token", { type: "string", allowEmpty: true }, {
    default: "",
    secret: true,
    help: "InfluxDB 2.x API token (Authorization: Token); empty = none.",
  }),
  setting("prometheus-remote-write-url", {
    ...HTTP_URL,
    form: "http(s)://host:port/api/v1/write",
  }, {
    default: "http://127.0.0.1:9090/api/v1/write",
    secret: true,
    help: "Remote-write receiver when perfdata goes to prometheus (Prometheus with " +
      "--web.enable-remote-write-receiver, VictoriaMetrics, Mimir, Thanos Receive).",
  }),
  setting("prometheus-remote-write-bearer-token", { type: "string", allowEmpty: true }, {
    default: "",
    secret: true,
    help: "Bearer token sent with remote writes; empty = none.",
  }),
  setting("prometheus-remote-write-user", { type: "string", allowEmpty: true }, {
    default: "",
    help: "User of HTTP basic authentication for remote writes; empty = none.",
  }),
  setting("prometheus-remote-write-password", { type: "string", allowEmpty: true }, {
    default: "",
    secret: true,
    help: "Password of --prometheus-remote-write-user.",
  }),
  setting("metrics-port", { type: "integer", min: 0, max: 65535 }, {
    default: "9105",
    commands: ["run", "status"],
    help: "Port of GET /metrics (Prometheus, no authentication); 0 disables the endpoint. " +
      "status reads a worker here (with --metrics-host) unless --metrics-url is given.",
  }),
  setting("metrics-host", { type: "host" }, {
    default: "127.0.0.1",
    commands: ["run", "status"],
    help: 'Address the /metrics listener binds to; empty (a flag or YAML ""; an empty variable ' +
      "is unset) lets a Prometheus on another host scrape it over IPv4 and IPv6 (0.0.0.0: IPv4 " +
      "only). /metrics has no authentication.",
  }),
  setting("metrics-listen-addr", { type: "hostPort", emptyHost: true }, {
    commands: ["run", "status"],
    feeds: [
      { target: "metrics-host", derive: (addr: string) => listenAddress(addr).hostname },
      { target: "metrics-port", derive: (addr: string) => String(listenAddress(addr).port) },
    ],
    help: "The Go worker's form of --metrics-host and --metrics-port together (:9105 = all " +
      "interfaces).",
  }),
  setting("listen-addr", { type: "hostPort", emptyHost: true, emptyDisables: true }, {
    default: "127.0.0.1:8080",
    help: "Listener of the GET /ws event stream (:port = all interfaces); empty = /ws is not " +
      "served. Only started when /ws keys exist.",
  }),
  setting("api-keys", { type: "keyList" }, {
    default: "",
    secret: true,
    help: "Keys accepted by /ws; none = the endpoint is not served. Prefer the environment " +
      "over the command line (/proc is world-readable).",
  }),
  setting("command-api-keys", { type: "keyList" }, {
    default: "",
    secret: true,
    env: "STATUSENGINE_API_COMMAND_KEYS",
    envAliases: ["STATUSENGINE_COMMAND_API_KEYS"],
    help: "Keys accepted by POST /commands; none = the endpoint is not served.",
  }),
  setting("command-listen-addr", { type: "hostPort", emptyHost: true }, {
    default: "127.0.0.1:8081",
    help: "Listener of POST /commands (only started when command keys exist).",
  }),
  setting("command-allow", {
    type: "keyList",
    // Refused at start-up rather than silently ignored when the request comes in.
    pattern: new RegExp(
      `^(?!(?:${DENIED_RAW_COMMANDS.join("|")})$)(?:[A-Za-z_]+|\\${ALLOW_ALL})$`,
      "i",
    ),
    patternForm: `external command names (letters and _, any case) or ${ALLOW_ALL}; ` +
      `${DENIED_RAW_COMMANDS.join(", ")} are always refused and cannot be allowed`,
  }, {
    default: DEFAULT_ALLOWED_RAW_COMMANDS.join(","),
    help: "External commands a raw line on POST /commands or a statusengine_tasks row may " +
      `name; any other is refused (403, or the task is deleted). ${ALLOW_ALL} allows every ` +
      `command except ${DENIED_RAW_COMMANDS.join(", ")}, which are refused whatever this says. ` +
      "An empty list allows no raw command. The default is what the Statusengine UI and " +
      "openITCOCKPIT send for hosts and services.",
  }),
  setting("check-for-commands", BOOLEAN, {
    // Only the legacy key: its PHP file spells the value 0/1, which the YAML boolean refuses.
    yaml: false,
    help: "Run the tasks the Statusengine UI writes into statusengine_tasks for this node " +
      "(reschedule, acknowledge, downtime, passive result), as the PHP worker did.",
  }),
  setting("command-check-interval", TIMER, {
    default: "10s",
    yaml: false,
    help: "How often statusengine_tasks is read (legacy: whole seconds).",
  }),
  setting("submit-method", { type: "enum", values: ["broker", "cmd"] }, {
    default: "broker",
    help: "How tasks reach the core: broker = published to statusngin_cmd like POST /commands; " +
      "cmd = appended to --external-command-file. The query handler (qhandler) is not supported.",
  }),
  setting("external-command-file", { type: "string", form: "path of the core's command FIFO" }, {
    default: "/opt/naemon/var/naemon.cmd",
    help: "The monitoring core's external command file, used with --submit-method cmd; never " +
      "created. The compiled binary may write only the usual cores' command files " +
      "(docs/operations.md#command-files); another one refuses the start.",
  }),
  setting("cleanup-batch-size", { type: "integer", min: 1 }, {
    default: "5000",
    commands: ["cleanup"],
    help: "Rows per DELETE statement.",
  }),
  setting("cleanup-batch-pause", TIMER_OR_ZERO, {
    default: "0s",
    commands: ["cleanup"],
    help: "Pause after a DELETE batch of a table that deleted rows, before the next one.",
  }),
  setting("dry-run", BOOLEAN, {
    cliOnly: true,
    commands: ["cleanup"],
    help: "Change nothing: print per table the partitions that would be added and dropped and " +
      "the rows that would be deleted (with --repair-partitions: the repair steps).",
  }),
  setting("repair-partitions", BOOLEAN, {
    cliOnly: true,
    commands: ["cleanup"],
    help: "Only repair: split the rows a p_max partition holds into weekly partitions, a few " +
      "weeks per step (resumable; writes to the table wait during each step). Deletes nothing.",
  }),
  age("hostchecks", 5, "statusengine_hostchecks", "start_time"),
  age("servicechecks", 5, "statusengine_servicechecks", "start_time"),
  age("host-acknowledgements", 60, "statusengine_host_acknowledgements", "entry_time"),
  age("service-acknowledgements", 60, "statusengine_service_acknowledgements", "entry_time"),
  age("host-notifications", 60, "statusengine_host_notifications", "start_time"),
  age("service-notifications", 60, "statusengine_service_notifications", "start_time"),
  age("host-notifications-log", 60, "statusengine_host_notifications_log", "start_time"),
  age("service-notifications-log", 60, "statusengine_service_notifications_log", "start_time"),
  age("host-statehistory", 365, "statusengine_host_statehistory", "state_time"),
  age("service-statehistory", 365, "statusengine_service_statehistory", "state_time"),
  age("host-downtimes", 60, "statusengine_host_downtimehistory", "entry_time"),
  age("service-downtimes", 60, "statusengine_service_downtimehistory", "entry_time"),
  age("logentries", 5, "statusengine_logentries", "entry_time"),
  age("perfdata", 90, "statusengine_perfdata", "timestamp_unix"),
  age("tasks", 5, "statusengine_tasks", "entry_time"),
  // The worker's own tombstones of ended downtimes (docs/downtimes.md): needed only while a
  // late or repeated job of that downtime may still arrive.
  age("downtime-tombstones", 60, "statusengine_downtime_tombstones", "end_time"),
  setting("check", BOOLEAN, {
    cliOnly: true,
    commands: ["schema"],
    help: "Only compare the database with the schema and report differences; change nothing.",
  }),
  setting("create-database", BOOLEAN, {
    default: "true",
    cliOnly: true,
    commands: ["schema"],
    help: "Create the database named in the URL when it does not exist.",
  }),
  setting("metrics-url", { ...HTTP_URL, form: "http://host:port/metrics" }, {
    commands: ["status"],
    help: "/metrics of a running worker to include in the report; default the local worker's " +
      "from --metrics-host and --metrics-port (none when the port is 0).",
  }),
  setting("json", BOOLEAN, {
    cliOnly: true,
    commands: ["status", "config", "dead-letters"],
    help: "Print the output as one JSON document.",
  }),
  setting("queue", { type: "enum", values: QUEUE_NAMES }, {
    required: true,
    cliOnly: true,
    commands: ["publish"],
    help: "Queue to publish to.",
  }),
  setting("mode", { type: "enum", values: ["publish", "verify", "cleanup"] }, {
    required: true,
    positional: true,
    cliOnly: true,
    commands: ["losstest"],
    help: "publish the marker events, verify that every one arrived, or clean up the run's " +
      "rows; given as the first argument (or --mode).",
  }),
  setting("run-id", {
    type: "string",
    forbid: "%_\\'",
    maxLength: 64,
    form: "text without % _ \\ '",
  }, {
    required: true,
    cliOnly: true,
    commands: ["losstest"],
    help: "Identifier shared by the publish, verify and cleanup steps of one run; becomes " +
      "part of a LIKE pattern.",
  }),
  setting("count", { type: "integer", min: 1 }, {
    default: "1000",
    commandDefaults: { losstest: "10000" },
    cliOnly: true,
    commands: ["publish", "losstest"],
    help: "Number of events to publish. losstest verify checks the number the run recorded: " +
      "leave it out there (a different --count is refused).",
  }),
  setting("events-per-job", { type: "integer", min: 1 }, {
    default: "100",
    cliOnly: true,
    commands: ["publish"],
    help: "Events in one bulk job.",
  }),
  setting("form", { type: "enum", values: ["bulk", "single"] }, {
    cliOnly: true,
    commands: ["publish"],
    help: "Payload shape; default the queue's own (bulk for the eight bulk queues, single for " +
      "the four single-event queues). Both are accepted by the worker (D3).",
  }),
  setting("from-file", { type: "string", form: "path of an NDJSON file" }, {
    cliOnly: true,
    commands: ["publish"],
    help: "Publish the events of this NDJSON file (one event per line) instead of synthetic ones.",
  }),
  setting("mysql-url-a", { type: "mysqlUrl" }, {
    required: true,
    secret: true,
    yaml: false,
    commands: ["verify"],
    help: "First database (e.g. written by the legacy worker).",
  }),
  setting("mysql-url-b", { type: "mysqlUrl" }, {
    required: true,
    secret: true,
    yaml: false,
    commands: ["verify"],
    help: "Second database (e.g. written by this worker).",
  }),
  setting("tables", {
    type: "keyList",
    pattern: /^statusengine_[a-z0-9_]+$/,
    patternForm: "statusengine_* table names",
  }, {
    cliOnly: true,
    commands: ["verify"],
    help: "Tables to compare, comma-separated; default the sixteen status, check, state " +
      "history, notification, acknowledgement and downtime tables.",
  }),
  setting("limit", { type: "integer", min: 1 }, {
    default: "5000",
    cliOnly: true,
    commands: ["verify"],
    help: "Newest rows compared per table.",
  }),
  setting("ignore-columns", {
    type: "keyList",
    pattern: /^([A-Za-z0-9_]+\.)?[A-Za-z0-9_]+$/,
    patternForm: "column names or table.column",
  }, {
    default: "",
    cliOnly: true,
    commands: ["verify"],
    help: "Columns left out of the comparison, comma-separated: a column name leaves it out of " +
      "every table, table.column out of that table only.",
  }),
  setting("action", { type: "enum", values: ["summary", "replay"] }, {
    required: true,
    positional: true,
    cliOnly: true,
    commands: ["dead-letters"],
    help: "summary counts the records by table and reason; replay writes them into MySQL " +
      "again, the way the worker does; given as the first argument (or --action).",
  }),
  setting("file", { type: "string", form: "path of a dead-letter file" }, {
    positional: true,
    cliOnly: true,
    commands: ["dead-letters"],
    help: "The dead-letter file to read; given as the second argument. summary defaults to " +
      "--dead-letter-file; replay needs it named (move the file aside first: the worker " +
      "keeps appending to its file).",
  }),
] as const satisfies readonly SettingInput[];

// ---- derivations -----------------------------------------------------------------------------

/** Union of the literal row types of {@linkcode SETTINGS}. */
export type Rows = (typeof SETTINGS)[number];

/** `mysql-batch-size` → `mysqlBatchSize`, at type level. */
export type Camel<S extends string> = S extends `${infer Head}-${infer Tail}`
  ? `${Head}${Capitalize<Camel<Tail>>}`
  : S;

/** Suffix of a row's typed key: `Ms` for durations, `Days` for day counts. */
export type UnitSuffix<R> = R extends { readonly kind: { readonly type: "duration" } } ? "Ms"
  : R extends { readonly unit: "days" } ? "Days"
  : "";

/** Typed key of a row: camelCase flag plus unit suffix. */
export type SettingKey<R> = R extends { readonly flag: infer F extends string }
  ? `${Camel<F>}${UnitSuffix<R>}`
  : never;

/** Value type of a kind: number, boolean, enum literal union, `string[]` or string. */
export type KindValue<K> = K extends { readonly type: "integer" | "duration" | "bytes" } ? number
  : K extends { readonly type: "boolean" } ? boolean
  : K extends { readonly type: "enum"; readonly values: readonly (infer E)[] } ? E
  : K extends { readonly type: "hostPortList" | "keyList" } ? string[]
  : string;

/** Value type of a row: `T`, or `T | undefined` without default and not required. */
export type RowValue<R> = R extends { readonly kind: infer K } ? R extends
    | { readonly default: string }
    | { readonly required: true }
    | { readonly kind: { readonly type: "boolean" } } ? KindValue<K>
  : KindValue<K> | undefined
  : never;

/** Commands of a row, as a union (`run` when the row names none). */
export type CommandsOf<R> = R extends { readonly commands: readonly (infer C)[] } ? C : "run";

/**
 * The resolved settings of one command: one key per row of that command (input-only rows
 * excluded), keyed by {@linkcode SettingKey}, valued by {@linkcode RowValue}.
 */
export type SettingsFor<C extends CommandName> = {
  [
    R in Rows as R extends { readonly feeds: unknown } ? never
      : C extends CommandsOf<R> ? SettingKey<R>
      : never
  ]: RowValue<R>;
};

/** The keys of `S` that start with `P` and a capital letter, without the prefix. */
export type SettingsGroup<S, P extends string> = {
  [
    K in keyof S as K extends `${P}${infer Rest}`
      ? Rest extends Capitalize<Rest> ? Uncapitalize<Rest> : never
      : never
  ]: S[K];
};

/**
 * The settings of one topic as the object the code of that topic takes, so that a new row of
 * the topic (`--influxdb-…`) reaches it without a line of plumbing per setting.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { settingsGroup } from "./settings.ts";
 * const s = { influxdbUrl: "http://i/write?db=x", influxdbUser: "u", nodeName: "n" };
 * assert.deepEqual(settingsGroup(s, "influxdb"), { url: "http://i/write?db=x", user: "u" });
 * ```
 */
export function settingsGroup<S extends object, P extends string>(
  settings: S,
  prefix: P,
): SettingsGroup<S, P> {
  const group: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(settings)) {
    const first = key.charAt(prefix.length);
    if (!key.startsWith(prefix) || first === "" || first !== first.toUpperCase()) continue;
    group[first.toLowerCase() + key.slice(prefix.length + 1)] = value;
  }
  return group as SettingsGroup<S, P>;
}

/** The table with the derived fields filled in, for code that walks it without literal types. */
export const SETTING_ROWS: readonly SettingRow[] = SETTINGS.map((input: SettingInput) => {
  const { cliOnly, ...row } = input;
  const fallback = row.default ?? (row.kind.type === "boolean" ? "false" : undefined);
  return {
    ...row,
    commands: row.commands ?? ["run"],
    ...(fallback === undefined ? {} : { default: fallback }),
    ...(cliOnly === true ? { env: false, yaml: false } : {}),
  };
});

/** `STATUSENGINE_<UPPER_SNAKE of the flag>` unless the row overrides it; `undefined`: none. */
export function envNameOf(row: SettingRow): string | undefined {
  return row.env === false ? undefined : row.env ?? derivedEnvName(row.flag);
}

/** The env var and its aliases; none without an env var. */
export function envNamesOf(row: SettingRow): string[] {
  const name = envNameOf(row);
  return name === undefined ? [] : [name, ...(row.envAliases ?? [])];
}

/** The env name the derivation rule gives for a flag. */
export function derivedEnvName(flag: string): string {
  return `STATUSENGINE_${flag.toUpperCase().replaceAll("-", "_")}`;
}

/** snake_case of the flag unless the row overrides it; `undefined`: no YAML key. */
export function yamlKeyOf(row: SettingRow): string | undefined {
  return row.yaml === false ? undefined : row.yaml ?? derivedYamlKey(row.flag);
}

/** The YAML key the derivation rule gives for a flag. */
export function derivedYamlKey(flag: string): string {
  return flag.replaceAll("-", "_");
}

/**
 * Key of the row in the resolved settings object (runtime twin of {@linkcode SettingKey}):
 * camelCase flag plus `Ms` for durations or `Days` for day counts.
 */
export function settingKeyOf(row: Pick<SettingInput, "flag" | "kind" | "unit">): string {
  const camel = row.flag.replace(/-([a-z0-9])/g, (_m, c: string) => c.toUpperCase());
  if (row.kind.type === "duration") return `${camel}Ms`;
  if (row.unit === "days") return `${camel}Days`;
  return camel;
}

/** The rows a command accepts, input-only rows included, in table order. */
export function rowsFor(command: CommandName): SettingRow[] {
  return SETTING_ROWS.filter((row) => row.commands.includes(command));
}

/** Default of a row for a command, in textual form: per-command, else the row's, else none. */
export function defaultOf(row: SettingRow, command: CommandName): string | undefined {
  return row.commandDefaults?.[command] ?? row.default;
}

/** The `--help` heading of a row ({@linkcode SETTING_GROUPS}). */
export function groupOf(row: SettingRow): string {
  let title = "General";
  for (const candidate of SETTING_ROWS) {
    title = SETTING_GROUPS.find((g) => g.from === candidate.flag)?.title ?? title;
    if (candidate === row) return title;
  }
  return title;
}

/** One retention rule of `cleanup`, in processing order (docs/operations.md#cleanup-tables). */
export type RetentionRule = NonNullable<SettingInput["retention"]> & {
  /** Key in `SettingsFor<"cleanup">` holding the age in days. */
  readonly key: string;
  readonly flag: string;
  /** YAML key (`age_hostchecks` …), the legacy worker's name for the setting. */
  readonly yamlKey: string;
  readonly defaultDays: number;
};

/** The sixteen retention rules, derived from the `age-*` rows, in processing order. */
export const RETENTION_RULES: readonly RetentionRule[] = SETTING_ROWS.flatMap((row) =>
  row.retention === undefined ? [] : [{
    ...row.retention,
    key: settingKeyOf(row),
    flag: row.flag,
    yamlKey: yamlKeyOf(row) ?? "",
    defaultDays: Number(row.default),
  }]
);
