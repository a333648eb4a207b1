/**
 * The legacy PHP worker's `config.yml` (docs/operations.md#legacy-config), retired keys
 * (docs/operations.md#retired-keys) and former settings now fixed, as tables; from them and the
 * settings table, which keys a config file may hold and the nearest known name for a typo. One
 * file is shared by every command that reads it, so a key is known when ANY command has it.
 *
 * @module
 */

import { closest, distance } from "fastest-levenshtein";
import { ConfigError } from "./values.ts";
import { joinHostPort } from "../util/address.ts";
import {
  derivedEnvName,
  derivedYamlKey,
  PERFDATA_BACKENDS,
  RETENTION_RULES,
  SETTING_ROWS,
  yamlKeyOf,
} from "./settings.ts";

/**
 * The legacy per-queue-group process counts, with the queues of each (the PHP worker's child
 * types); 0 meant "do not consume these queues". The misc child consumed acknowledgements,
 * contact notification methods and downtimes; no count key switches off the core restart queue.
 */
const LEGACY_WORKER_QUEUES: Readonly<Record<string, string[]>> = {
  "number_servicestatus_worker": ["statusngin_servicestatus"],
  "number_hoststatus_worker": ["statusngin_hoststatus"],
  "number_logentry_worker": ["statusngin_logentries"],
  "number_statechange_worker": ["statusngin_statechanges"],
  "number_hostcheck_worker": ["statusngin_hostchecks"],
  "number_servicecheck_worker": ["statusngin_servicechecks"],
  "number_perfdata_worker": ["statusngin_service_perfdata"],
  "number_notification_log_worker": ["statusngin_notifications"],
  "number_misc_worker": [
    "statusngin_acknowledgements",
    "statusngin_contactnotificationmethod",
    "statusngin_downtimes",
  ],
};

/** A parsed YAML mapping. */
export type YamlMapping = Readonly<Record<string, unknown>>;

/** A translated value in textual (flag) form, with its source label for messages. */
type LegacyValue = { readonly text: string; readonly source: string };

/** How one setting (`target`) is read from legacy keys. */
export type LegacyTranslation = ReturnType<typeof translation>;

/** A YAML value that is a mapping (a nested block of keys). */
export function isMapping(value: unknown): value is YamlMapping {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A key or `block.field` path counts as given unless it is absent or null (a bare `key:`). */
export function present(doc: YamlMapping, key: string): boolean {
  const dot = key.indexOf(".");
  if (dot >= 0) {
    const block = doc[key.slice(0, dot)];
    return Object.hasOwn(doc, key.slice(0, dot)) && isMapping(block) &&
      present(block, key.slice(dot + 1));
  }
  return Object.hasOwn(doc, key) && doc[key] !== null && doc[key] !== undefined;
}

/**
 * A key or `block.field` written without a value (a bare `key:`, `~`), or the fields of block
 * `key` so written, as `block.field`: what {@link present} reads as not given.
 */
export function valuelessKeys(doc: YamlMapping, key: string): string[] {
  const dot = key.indexOf(".");
  const block = dot < 0 ? doc : doc[key.slice(0, dot)];
  const name = key.slice(dot + 1);
  if (!isMapping(block) || !Object.hasOwn(block, name)) return [];
  const value = block[name];
  if (value === null) return [key];
  if (dot >= 0 || !isMapping(value)) return [];
  return Object.keys(value).filter((field) => value[field] === null).map((f) => `${key}.${f}`);
}

/** The "path" of the `SE_*` variables in place of a file path: labels name the variables. */
export const LEGACY_ENV_PATH = "the SE_* environment";

/** `mysql.host` → `SE_MYSQL_HOST`; a bare block name (`mysql`) → `SE_MYSQL_*`. */
function legacyEnvName(key: string): string {
  // The PHP worker's one name off the key path (its docs/Env.md): the MySQL user.
  if (key === "mysql.username") return "SE_MYSQL_USER";
  const name = `SE_${key.toUpperCase().replaceAll(".", "_")}`;
  return Object.hasOwn(LEGACY_BLOCK_FIELDS, key) ? `${name}_*` : name;
}

/**
 * The fields of each legacy block: read, or knowingly ignored (`mysql.encoding`: the connection
 * is always utf8mb4). Any other field is a typo; only a read field is suggested for it, since an
 * ignored one would lead to a setting that does nothing.
 */
type BlockFields = { readonly read: readonly string[]; readonly ignored: readonly string[] };
const LEGACY_BLOCK_FIELDS: Readonly<Record<"gearman" | "rabbitmq" | "mysql", BlockFields>> = {
  gearman: { read: ["address", "port"], ignored: ["timeout"] },
  rabbitmq: {
    read: ["host", "port", "user", "password", "vhost", "durable_queues"],
    ignored: ["exchange", "durable_exchange"],
  },
  mysql: { read: ["host", "port", "username", "password", "database"], ignored: ["encoding"] },
};

/** The source label of keys of a file (`file PATH key K`) or of the `SE_*` environment. */
export function keysLabel(path: string, keys: readonly string[]): string {
  if (path === LEGACY_ENV_PATH) return `env ${keys.map(legacyEnvName).join(", ")}`;
  return `file ${path} ${keys.length === 1 ? "key" : "keys"} ${keys.join(", ")}`;
}

/** What a translation reads with: its file's path, a warning sink, helpers bound to its target. */
interface Reader {
  readonly path: string;
  readonly warn: (message: string) => void;
  /** The error for an unusable value of these keys; `raw`, when given, is shown JSON-quoted. */
  readonly fail: (keys: readonly string[], problem: string, raw?: unknown) => ConfigError;
  /** The translated value, labelled with the keys it came from. */
  readonly value: (text: string, keys: readonly string[]) => LegacyValue;
}

/**
 * A table entry reading `keys` (top-level or `block.field`; help and the reference list them).
 * `translate` gives the value, or `undefined` when the document says nothing, and throws a
 * ConfigError if it is unusable; `below` (the `SE_*` document under a file) fills the keys and
 * block fields `doc` lacks. `read` gets a Reader bound to `target` and the document's path, only
 * when one of `keys` is given (for `block.field`, the block, so that a block that is no mapping
 * is refused); a bare text it returns is labelled with the keys given.
 */
function translation(
  target: string,
  keys: readonly string[],
  read: (doc: YamlMapping, r: Reader) => LegacyValue | string | undefined,
) {
  return {
    target,
    keys,
    translate(
      doc: YamlMapping,
      path: string,
      warn: (message: string) => void,
      below: YamlMapping = {},
    ): LegacyValue | undefined {
      if (!keys.some((key) => present(doc, key.split(".")[0] ?? key))) return undefined;
      // Each key from the file, else from its SE_* variable, as the PHP worker read them.
      const label = (given: readonly string[]) => {
        const inDoc = given.filter((key) => present(doc, key));
        const fromBelow = given.filter((key) => !present(doc, key));
        const parts = inDoc.length === 0 ? [] : [keysLabel(path, inDoc)];
        if (fromBelow.length > 0) parts.push(keysLabel(LEGACY_ENV_PATH, fromBelow));
        return parts.join(" and ");
      };
      const merged = underlay(doc, below);
      const value = read(merged, {
        path,
        warn,
        fail(keys, problem, raw) {
          const source = label(keys);
          return new ConfigError(`Invalid setting ${target} from ${source}: ${problem}`, {
            setting: target,
            source,
            ...(raw === undefined ? {} : { rawValue: JSON.stringify(raw) }),
          });
        },
        value: (text, keys) => ({ text, source: label(keys) }),
      });
      if (typeof value !== "string") return value;
      return { text: value, source: label(keys.filter((key) => present(merged, key))) };
    },
  };
}

/** `doc` over `below`, key by key and, within a block, field by field. */
function underlay(doc: YamlMapping, below: YamlMapping): YamlMapping {
  const out: Record<string, unknown> = { ...below };
  for (const [key, value] of Object.entries(doc)) {
    const under = below[key];
    if (isMapping(value) && isMapping(under)) out[key] = underlay(value, under);
    else if (present(doc, key) || !present(below, key)) out[key] = value;
  }
  return out;
}

/**
 * A legacy boolean as the PHP worker accepted it: YAML booleans, `1`/`0`, and the strings
 * `1 0 true false on off` (any case); `undefined` for anything else.
 */
export function legacyBoolean(value: unknown): boolean | undefined {
  if (typeof value === "boolean") return value;
  const text = typeof value === "string" ? value.trim().toLowerCase() : value;
  if (text === 1 || text === "1" || text === "true" || text === "on") return true;
  if (text === 0 || text === "0" || text === "false" || text === "off") return false;
  return undefined;
}

function booleanKey(doc: YamlMapping, key: string, r: Reader): boolean | undefined {
  if (!present(doc, key)) return undefined;
  const value = legacyBoolean(doc[key]);
  if (value !== undefined) return value;
  const accepted = "(accepted: 1, 0, true, false, on, off)";
  throw r.fail([key], `${JSON.stringify(doc[key])} is not a legacy boolean ${accepted}`, doc[key]);
}

function scalarText(value: unknown): string | undefined {
  if (typeof value === "string") return value;
  if (typeof value === "number" && Number.isFinite(value)) return String(value);
  return undefined;
}

function blockOf(doc: YamlMapping, key: string, r: Reader): YamlMapping {
  const block = doc[key];
  if (!isMapping(block)) throw r.fail([key], "expected a mapping (a nested block of keys)");
  return block;
}

/** `block.field` or a top-level `key` as text, else the legacy default; never echoes a secret. */
function field(block: YamlMapping, key: string, fallback: string, r: Reader, secret = false) {
  const name = key.slice(key.indexOf(".") + 1);
  if (!present(block, name)) return fallback;
  const text = scalarText(block[name]);
  if (text !== undefined) return text;
  const got = secret ? "" : `, got ${JSON.stringify(block[name])}`;
  throw r.fail([key], `expected a string or number${got}`);
}

function portField(block: YamlMapping, key: string, fallback: number, r: Reader): number {
  const text = field(block, key, String(fallback), r);
  const port = /^[0-9]{1,5}$/.test(text.trim()) ? Number(text.trim()) : NaN;
  if (port >= 1 && port <= 65535) return port;
  throw r.fail([key], `${JSON.stringify(text)} is not a port (1..65535)`, text);
}

const LEGACY_BULK_HINT = "set mysql_batch_size (1..700) to choose another value";
/** `mysql-batch-size` max, the Go worker's (docs/writers.md#statement-shape). */
const BATCH_CEILING = 700;

/** A legacy boolean key (top-level or `block.field`) that sets a boolean setting. */
function booleanTranslation(target: string, key: string): LegacyTranslation {
  const [head, name] = key.split(".") as [string, string | undefined];
  return translation(target, [key], (doc, r) => {
    const value = booleanKey(name === undefined ? doc : blockOf(doc, head, r), name ?? head, r);
    return value === undefined ? undefined : String(value);
  });
}

/** Legacy keys that map onto a setting (docs/operations.md#legacy-config), one entry per target. */
export const LEGACY_TRANSLATIONS: readonly LegacyTranslation[] = [
  translation("node-name", ["node_name"], (doc, r) => {
    const text = scalarText(doc.node_name);
    if (text === undefined) throw r.fail(["node_name"], "expected a string");
    return text;
  }),
  translation("consumer", ["use_gearman", "use_rabbitmq"], (doc, r) => {
    const gearmanKey = booleanKey(doc, "use_gearman", r);
    const rabbitKey = booleanKey(doc, "use_rabbitmq", r);
    // The legacy defaults are use_gearman true and use_rabbitmq false, so a file with only
    // use_rabbitmq: 1 literally asks for both; it obviously means RabbitMQ. Only two
    // explicit, equal values (or use_gearman: 0 alone) leave the backend open.
    const rabbit = rabbitKey ?? false;
    const gearman = gearmanKey ?? !rabbit;
    const keys = ["use_gearman", "use_rabbitmq"].filter((k) => present(doc, k));
    if (gearman === rabbit) {
      throw r.fail(
        keys,
        `${gearman ? "both" : "neither of"} use_gearman and use_rabbitmq enabled; exactly one ` +
          "backend is consumed: set consumer: gearman or consumer: rabbitmq",
      );
    }
    return rabbit ? "rabbitmq" : "gearman";
  }),
  translation("gearman-addr", ["gearman"], (doc, r) => {
    const block = blockOf(doc, "gearman", r);
    const host = field(block, "gearman.address", "127.0.0.1", r);
    const port = portField(block, "gearman.port", 4730, r);
    if (present(block, "timeout")) {
      r.warn(
        `Ignoring legacy key gearman.timeout in ${r.path}: it has no equivalent; dead ` +
          "connections are detected by a heartbeat (an ECHO_REQ after 15 s of silence, " +
          "answered within 5 s)",
      );
    }
    return r.value(joinHostPort(host, port), ["gearman.address", "gearman.port"]);
  }),
  translation("rabbitmq-url", ["rabbitmq"], (doc, r) => {
    const block = blockOf(doc, "rabbitmq", r);
    const host = field(block, "rabbitmq.host", "127.0.0.1", r);
    const port = portField(block, "rabbitmq.port", 5672, r);
    const user = field(block, "rabbitmq.user", "statusengine", r);
    const password = field(block, "rabbitmq.password", "statusengine", r, true);
    const vhost = field(block, "rabbitmq.vhost", "/", r);
    const extras = LEGACY_BLOCK_FIELDS.rabbitmq.ignored.filter((k) => present(block, k));
    if (extras.length > 0) {
      r.warn(
        `Ignoring legacy key(s) ${extras.map((k) => `rabbitmq.${k}`).join(", ")} in ${r.path}: ` +
          "queues are consumed by name from the default exchange",
      );
    }
    // Vhost "/" is the empty path or a bare "/" (docs/operations.md#values); any other vhost is
    // the path, with a literal slash encoded as %2F.
    const vhostPath = vhost === "/" ? "/" : `/${encodeURIComponent(vhost)}`;
    const credentials = `${encodeURIComponent(user)}:${encodeURIComponent(password)}`;
    return `amqp://${credentials}@${joinHostPort(host, port)}${vhostPath}`;
  }),
  booleanTranslation("rabbitmq-durable-queues", "rabbitmq.durable_queues"),
  booleanTranslation("check-for-commands", "check_for_commands"),
  translation("command-check-interval", ["command_check_interval"], (doc, r) => {
    const raw = doc.command_check_interval;
    const text = scalarText(raw)?.trim();
    if (text === undefined) throw r.fail(["command_check_interval"], "expected seconds", raw);
    // The PHP worker's value is whole seconds; a unit, if given, is taken as it is.
    return /^[0-9]+$/.test(text) ? `${text}s` : text;
  }),
  translation("exclude-queues", [...Object.keys(LEGACY_WORKER_QUEUES), "process_perfdata"], (
    doc,
    r,
  ) => {
    const excluded: string[] = [];
    const used: string[] = [];
    const counted: string[] = [];
    for (const [key, queues] of Object.entries(LEGACY_WORKER_QUEUES)) {
      if (!present(doc, key)) continue;
      const text = scalarText(doc[key])?.trim();
      if (text === undefined || !/^[0-9]+$/.test(text)) {
        throw r.fail([key], "expected a number of processes", doc[key]);
      }
      if (Number(text) === 0) {
        excluded.push(...queues);
        used.push(key);
      } else if (Number(text) > 1) {
        counted.push(key);
      }
    }
    if (counted.length > 0) {
      r.warn(
        `Legacy ${counted.join(", ")} in ${r.path}: there are no processes per queue group; ` +
          "the nearest knobs are gearman_max_concurrent_jobs_per_queue and rabbitmq_prefetch, " +
          "and several workers may share a job server (docs/running.md: running several workers)",
      );
    }
    // The PHP worker's default is false: only an explicit 0 is taken, as for the counts.
    if (booleanKey(doc, "process_perfdata", r) === false) {
      excluded.push("statusngin_service_perfdata");
      used.push("process_perfdata");
    }
    return excluded.length === 0 ? undefined : r.value([...new Set(excluded)].join(","), used);
  }),
  translation("mysql-url", ["mysql"], (doc, r) => {
    const block = blockOf(doc, "mysql", r);
    const host = field(block, "mysql.host", "127.0.0.1", r);
    const port = portField(block, "mysql.port", 3306, r);
    const user = encodeURIComponent(field(block, "mysql.username", "statusengine", r));
    const password = field(block, "mysql.password", "password", r, true);
    const database = encodeURIComponent(field(block, "mysql.database", "statusengine_data", r));
    // mysql.encoding is deliberately not carried over: the connection is always utf8mb4.
    const credentials = password === "" ? user : `${user}:${encodeURIComponent(password)}`;
    return `mysql://${credentials}@${joinHostPort(host, port)}/${database}`;
  }),
  translation("mysql-batch-size", ["number_of_bulk_records"], (doc, r) => {
    const raw = doc.number_of_bulk_records;
    const text = scalarText(raw)?.trim();
    const value = text !== undefined && /^[0-9]+$/.test(text) ? Number(text) : NaN;
    if (!(value >= 1)) {
      const problem = `${JSON.stringify(raw)} is not a positive integer: ${LEGACY_BULK_HINT}`;
      throw r.fail(["number_of_bulk_records"], problem, raw);
    }
    // The legacy default and example value is 1000: an unchanged legacy file must start.
    // The new key (mysql_batch_size) still refuses values above the ceiling.
    if (value > BATCH_CEILING) {
      r.warn(
        `Legacy number_of_bulk_records ${value} in ${r.path} is above the ceiling of ` +
          `${BATCH_CEILING} rows per INSERT (the maximum of mysql_batch_size); using ` +
          `${BATCH_CEILING}: ${LEGACY_BULK_HINT}`,
      );
    }
    return String(Math.min(value, BATCH_CEILING));
  }),
  translation("perfdata-backends", ["perfdata_backend"], (doc, r) => {
    const raw = doc.perfdata_backend;
    const entries = typeof raw === "string" ? [raw] : Array.isArray(raw) ? raw : undefined;
    if (entries === undefined || entries.some((e) => typeof e !== "string")) {
      throw r.fail(["perfdata_backend"], "expected a list of backend names");
    }
    const names = (entries as string[]).map((e) => e.trim().toLowerCase()).filter((e) => e !== "");
    const known: readonly string[] = PERFDATA_BACKENDS;
    const unsupported = names.filter((n) => !known.includes(n));
    const chosen = PERFDATA_BACKENDS.filter((b) => names.includes(b));
    if (unsupported.length > 0) {
      r.warn(
        `Ignoring legacy perfdata_backend entr${unsupported.length === 1 ? "y" : "ies"} ${
          unsupported.join(", ")
        } in ${r.path}: only ${PERFDATA_BACKENDS.join(", ")} are supported (perfdata_backends)` +
          (chosen.length === 0 ? "; perfdata is written nowhere" : ""),
      );
    }
    // The list as given, even when nothing of it is left: the PHP worker wrote a `[crate]`
    // installation's perfdata to CrateDB only, so the default (mysql) would fill a table it never
    // used.
    return chosen.join(",");
  }),
  translation("graphite-addr", ["graphite_address", "graphite_port"], (doc, r) => {
    const host = field(doc, "graphite_address", "localhost", r);
    const port = portField(doc, "graphite_port", 2003, r);
    return joinHostPort(host, port);
  }),
  booleanTranslation("enable-openitcockpit-tweaks", "is_openitcockpit"),
];

/**
 * The legacy keys translated into a setting, read from the translations themselves so that help
 * and the reference cannot promise a migration that does not happen.
 */
export function legacyKeysOf(flag: string): string[] {
  return LEGACY_TRANSLATIONS.flatMap((t) => t.target === flag ? t.keys : []);
}

/**
 * Legacy features without an equivalent (docs/operations.md#legacy-config): `run` warns once per
 * group (the keys of an entry, space-separated) found in the file, whatever their values, saying
 * why nothing happens. A key ending in `*` stands for every key with that prefix.
 */
const LEGACY_IGNORED: Readonly<Record<string, string>> = {
  "use_redis redis": "Redis is not supported; live status is kept in MySQL only",
  "use_crate crate": "CrateDB is not supported; history is written to MySQL only",
  "elasticsearch_*": "Elasticsearch is not supported as a perfdata backend",
  "max_bulk_delay": "there is no flush delay: rows are written as soon as the previous statement " +
    "finished, or after at most 250 ms",
  "store_live_data_in_archive_backend": "the two status tables are always written",
  "use_mysql": "MySQL is the only storage backend and is always written",
  "dump_mysql_query_parameters": "the nearest equivalent is log_level: debug",
  // query_hander: the PHP example's own spelling, which its worker read as well.
  "query_handler query_hander":
    "the query handler is not supported; tasks are submitted with submit_method broker or cmd",
  "syslog_enabled syslog_tag": "logs go to stdout (the journal under systemd); see log_format",
  "disable_http_proxy": "no HTTP proxy is ever used",
};

function isIgnoredKey(key: string, keys = Object.keys(LEGACY_IGNORED).join(" ")): boolean {
  return keys.split(" ").some((k) => k.endsWith("*") ? key.startsWith(k.slice(0, -1)) : key === k);
}

/** One warning per legacy feature group present in a file read by `run`. */
export function legacyIgnoredWarnings(doc: YamlMapping, path: string): string[] {
  return Object.entries(LEGACY_IGNORED).flatMap(([keys, reason]) => {
    const found = Object.keys(doc).filter((key) => isIgnoredKey(key, keys));
    const s = found.length === 1 ? "" : "s";
    return found.length === 0
      ? []
      : [`Ignoring legacy config.yml key${s} ${found.join(", ")} in ${path}: ${reason}`];
  });
}

/**
 * Retired settings (docs/operations.md#retired-keys): the flag is unknown now (with a hint); for
 * `run`, the YAML key present with any value, or the env var set at all, refuses to start. Both
 * names derive from `flag`; `reason` says why the old value cannot be translated.
 */
export const RETIRED: readonly { flag: string; replacement: string; reason: string }[] = [
  {
    flag: "gearman-max-concurrent-jobs",
    replacement: "gearman-max-concurrent-jobs-per-queue",
    reason: "the budget is now per queue instead of shared by all twelve queues, so the old " +
      "value would be multiplied by 12",
  },
];

/**
 * Former settings of `run`, now named constants in the module that uses them
 * (docs/operations.md#fixed-settings): `value` as the setting took it, `because` why it serves
 * every installation. An old file, unit or environment that still sets one must neither refuse
 * to start nor be ignored silently: one warning each. Flag, env var and YAML key derive from
 * `flag`; the values are pinned against the constants by `legacy_test.ts`.
 */
export const FIXED_SETTINGS: readonly { flag: string; value: string; because: string }[] = [
  {
    flag: "gearman-heartbeat-interval",
    value: "15s",
    because: "an ECHO_REQ after 15 s of silence finds a dead gearmand connection long before " +
      "TCP keep-alive would (two hours), for one small packet per idle connection",
  },
  {
    flag: "gearman-heartbeat-timeout",
    value: "5s",
    because: "gearmand answers an ECHO_REQ at once, so 5 s without any packet means the " +
      "connection is dead",
  },
  {
    flag: "max-job-size",
    value: "64MiB",
    because: "the broker module's jobs are a few hundred KiB; a larger one is a fault and is " +
      "dead-lettered unread so that it cannot wedge its queue",
  },
  {
    flag: "queue-stall-timeout",
    value: "1m",
    because: "a queue with room and waiting jobs takes one within milliseconds; a minute " +
      "without one is a hung broker link, and no slow restart comes near it",
  },
  {
    flag: "influxdb-measurement",
    value: "perfdata",
    because: "every point is perfdata; the database or bucket in influxdb_url already keeps " +
      "this worker's points apart",
  },
  {
    flag: "influxdb-batch-size",
    value: "5000",
    because: "it is InfluxDB's own advice: each write costs InfluxDB a WAL sync, so smaller " +
      "batches only limit the rate",
  },
  {
    flag: "prometheus-remote-write-batch-size",
    value: "2000",
    because: "it is Prometheus' own max_samples_per_send",
  },
  {
    flag: "http-max-connections",
    value: "512",
    because: "per listener it is far above what scrapers, /ws clients and /commands callers " +
      "open, and low enough that a flood of connections cannot use up file descriptors",
  },
];

/** For `run`: one warning per fixed setting given anyway, naming every place (never the value). */
export function fixedSettingWarnings(
  flags: readonly string[],
  doc: YamlMapping,
  path: string | undefined,
  env: Readonly<Record<string, string>>,
): string[] {
  return FIXED_SETTINGS.flatMap((fixed) => {
    const yaml = derivedYamlKey(fixed.flag);
    const envName = derivedEnvName(fixed.flag);
    const places = [
      ...(flags.includes(fixed.flag) ? [`flag --${fixed.flag}`] : []),
      ...(Object.hasOwn(env, envName) ? [`env ${envName}`] : []),
      ...(path !== undefined && Object.hasOwn(doc, yaml) ? [`file ${path} key ${yaml}`] : []),
    ];
    if (places.length === 0) return [];
    return [
      `Ignoring ${places.join(", ")}: ${fixed.flag} is no longer a setting: the value is now ` +
      `fixed at ${fixed.value} because ${fixed.because}`,
    ];
  });
}

/**
 * Legacy keys the PHP worker also read from `SE_<KEY PATH>` variables (its `docs/Env.md`:
 * `mysql.host` ← `SE_MYSQL_HOST`), limited to those that have an effect here: the translated
 * keys (a block: its read fields) and these settings' YAML keys.
 */
const LEGACY_ENV_KEYS: readonly string[] = [
  ...new Set(
    LEGACY_TRANSLATIONS.flatMap((t) => t.keys).flatMap((key) => {
      const block = LEGACY_BLOCK_FIELDS[key as keyof typeof LEGACY_BLOCK_FIELDS];
      return block === undefined ? [key] : block.read.map((field) => `${key}.${field}`);
    }),
  ),
  "graphite_prefix",
  "graphite_illegal_characters",
  "submit_method",
  "external_command_file",
  ...RETENTION_RULES.map((r) => r.yamlKey),
];

/**
 * The legacy document the `SE_*` variables describe: each set, non-empty variable at its key
 * path, as a string (`perfdata_backend` split at commas). Read below the config file as in the
 * PHP worker, and below every `STATUSENGINE_*` variable.
 */
export function legacyEnvDocument(env: Readonly<Record<string, string>>): YamlMapping {
  const doc: Record<string, unknown> = {};
  for (const key of LEGACY_ENV_KEYS) {
    const value = env[legacyEnvName(key)];
    if (value === undefined || value === "") continue;
    const [head, field] = key.split(".") as [string, string | undefined];
    const parsed = key === "perfdata_backend" ? value.split(",").map((v) => v.trim()) : value;
    const block = field === undefined ? doc : (doc[head] ??= {}) as Record<string, unknown>;
    block[field ?? head] = parsed;
  }
  return doc;
}

/** Every top-level key some command acts on: the only names suggested for a misspelled key. */
const SUPPORTED_YAML_KEYS: ReadonlySet<string> = new Set([
  // A legacy path into a block (`rabbitmq.durable_queues`) makes the block's name known.
  ...SETTING_ROWS.flatMap((row) =>
    [yamlKeyOf(row) ?? [], legacyKeysOf(row.flag).map((k) => k.split(".")[0] ?? k)].flat()
  ),
  ...LEGACY_ENV_KEYS.map((k) => k.split(".")[0] ?? k),
]);

/**
 * Every top-level key that draws no "unknown key" warning: the supported ones, plus those with
 * warnings or refusals of their own, which are never suggested (`query_handlr` is not told to
 * become `query_handler`, a key that does nothing).
 */
const KNOWN_YAML_KEYS: ReadonlySet<string> = new Set([
  ...SUPPORTED_YAML_KEYS,
  ...RETIRED.map((r) => derivedYamlKey(r.flag)),
  ...FIXED_SETTINGS.map((f) => derivedYamlKey(f.flag)),
]);

/**
 * ` (did you mean <prefix><candidate>?)` for the candidate closest to a misspelled name, when it
 * is close enough to be a likely typo; else "".
 */
export function didYouMean(name: string, candidates: Iterable<string>, prefix = ""): string {
  const list = [...candidates];
  if (list.length === 0 || name === "") return "";
  const best = closest(name, list);
  // Up to a third of the name may differ (at least two edits: a swapped pair of letters
  // counts twice), so "metrics_prot" finds metrics_port but "foo" finds nothing.
  const near = distance(name, best) <= Math.max(2, Math.floor(name.length / 3));
  return near ? ` (did you mean ${prefix}${best}?)` : "";
}

/**
 * One warning per top-level key no command knows, with the nearest known key: a typo such as
 * `mysql_batchsize: 500` must not silently fall back to the default. Never quotes values.
 */
export function unknownKeyWarnings(doc: YamlMapping, path: string): string[] {
  const warnings: string[] = [];
  const warn = (key: string, hint: string) =>
    warnings.push(
      `Ignoring unknown key ${JSON.stringify(key)} in ${path}${hint}: no setting has this key, ` +
        "so it has no effect",
    );
  for (const key of Object.keys(doc)) {
    if (KNOWN_YAML_KEYS.has(key) || isIgnoredKey(key)) continue;
    warn(key, didYouMean(key, SUPPORTED_YAML_KEYS));
  }
  // A misspelled field of a legacy block (mysql.usrname) would leave the legacy default.
  for (const [block, fields] of Object.entries(LEGACY_BLOCK_FIELDS)) {
    const value = doc[block];
    if (!isMapping(value)) continue;
    for (const field of Object.keys(value)) {
      if (fields.read.includes(field) || fields.ignored.includes(field)) continue;
      warn(`${block}.${field}`, didYouMean(field, fields.read, `${block}.`));
    }
  }
  return warnings;
}
