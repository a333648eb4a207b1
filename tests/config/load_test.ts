import assert from "node:assert/strict";
import { ConfigError } from "../../src/config/values.ts";
import { hasCode, type WorkerError } from "../../src/util/errors.ts";
import { loadSettings, parseCommandLine } from "../../src/config/load.ts";
import { type CommandName, QUEUE_NAMES } from "../../src/config/settings.ts";
import { rejection } from "../helpers/capture.ts";

const PATH = "/etc/statusengine/config.yml";

interface Input {
  argv?: string[];
  env?: Record<string, string>;
  /** Content of the config file; named through STATUSENGINE_CONFIG unless argv names one. */
  file?: string;
}

function load<C extends CommandName>(command: C, input: Input = {}) {
  const env = { ...(input.env ?? {}) };
  if (input.file !== undefined && env.STATUSENGINE_CONFIG === undefined) {
    env.STATUSENGINE_CONFIG = PATH;
  }
  return loadSettings(command, {
    argv: input.argv ?? [],
    env,
    readTextFile: (path) => {
      if (path === PATH && input.file !== undefined) return Promise.resolve(input.file);
      return Promise.reject(new Deno.errors.NotFound(`No such file or directory: '${path}'`));
    },
  });
}

async function refuses(
  promise: Promise<unknown>,
  expected: { setting?: string; source?: string; message?: RegExp },
): Promise<ConfigError> {
  const caught = await rejection(promise);
  assert.ok(caught instanceof ConfigError, `expected a ConfigError, got ${String(caught)}`);
  assert.equal(caught.exitCode, 1);
  if (expected.setting !== undefined) assert.equal(caught.setting, expected.setting);
  if (expected.source !== undefined) assert.equal(caught.source, expected.source);
  if (expected.message !== undefined) assert.match(caught.message, expected.message);
  return caught;
}

async function usage(promise: Promise<unknown>, message?: RegExp): Promise<WorkerError> {
  const caught = await rejection(promise);
  assert.ok(hasCode(caught, "usage"), `expected a usage error, got ${String(caught)}`);
  assert.ok(!caught.message.includes("\n"), "one line");
  assert.match(caught.message, /--help/);
  if (message !== undefined) assert.match(caught.message, message);
  return caught;
}

// ---- precedence ------------------------------------------------------------------------------

interface PrecedenceCase {
  kind: string;
  command: CommandName;
  key: string;
  flag: string[];
  env: Record<string, string>;
  yaml: string;
  expected: { flag: unknown; env: unknown; file: unknown; default: unknown };
  sources: { flag: string; env: string; file: string };
}

const PRECEDENCE: PrecedenceCase[] = [
  {
    kind: "string",
    command: "run",
    key: "nodeName",
    flag: ["--node-name", "from-flag"],
    env: { STATUSENGINE_NODE_NAME: "from-env" },
    yaml: "nodename: from-file\n",
    expected: { flag: "from-flag", env: "from-env", file: "from-file", default: "statusengine" },
    sources: {
      flag: "flag --node-name",
      env: "env STATUSENGINE_NODE_NAME",
      file: `file ${PATH} key nodename`,
    },
  },
  {
    kind: "integer",
    command: "run",
    key: "mysqlBatchSize",
    flag: ["--mysql-batch-size", "10"],
    env: { STATUSENGINE_MYSQL_BATCH_SIZE: "20" },
    yaml: "mysql_batch_size: 30\n",
    expected: { flag: 10, env: 20, file: 30, default: 100 },
    sources: {
      flag: "flag --mysql-batch-size",
      env: "env STATUSENGINE_MYSQL_BATCH_SIZE",
      file: `file ${PATH} key mysql_batch_size`,
    },
  },
  {
    kind: "boolean",
    command: "run",
    key: "enableOpenitcockpitTweaks",
    flag: ["--enable-openitcockpit-tweaks"],
    env: { ENABLE_OPENITCOCKPIT_TWEAKS: "false" },
    yaml: "enable_openitcockpit_tweaks: true\n",
    expected: { flag: true, env: false, file: true, default: false },
    sources: {
      flag: "flag --enable-openitcockpit-tweaks",
      env: "env ENABLE_OPENITCOCKPIT_TWEAKS",
      file: `file ${PATH} key enable_openitcockpit_tweaks`,
    },
  },
  {
    kind: "duration",
    command: "run",
    key: "statusMaxAgeMs",
    flag: ["--status-max-age", "1m"],
    env: { STATUSENGINE_STATUS_MAX_AGE: "2m30s" },
    yaml: "status_max_age: 250ms\n",
    expected: { flag: 60_000, env: 150_000, file: 250, default: 300_000 },
    sources: {
      flag: "flag --status-max-age",
      env: "env STATUSENGINE_STATUS_MAX_AGE",
      file: `file ${PATH} key status_max_age`,
    },
  },
  {
    kind: "host:port list",
    command: "run",
    key: "gearmanAddr",
    flag: ["--gearman-addr", "a.example:4730, b.example:4731"],
    env: { STATUSENGINE_GEARMAN_ADDR: "c.example:4730" },
    yaml: "gearman_addr:\n  - d.example:4730\n  - '[::1]:4730'\n",
    expected: {
      flag: ["a.example:4730", "b.example:4731"],
      env: ["c.example:4730"],
      file: ["d.example:4730", "[::1]:4730"],
      default: ["127.0.0.1:4730"],
    },
    sources: {
      flag: "flag --gearman-addr",
      env: "env STATUSENGINE_GEARMAN_ADDR",
      file: `file ${PATH} key gearman_addr`,
    },
  },
  {
    kind: "key list",
    command: "run",
    key: "apiKeys",
    flag: ["--api-keys", "k1,,k2 "],
    env: { STATUSENGINE_API_KEYS: "k3" },
    yaml: "api_keys: [k4, k5]\n",
    expected: { flag: ["k1", "k2"], env: ["k3"], file: ["k4", "k5"], default: [] },
    sources: {
      flag: "flag --api-keys",
      env: "env STATUSENGINE_API_KEYS",
      file: `file ${PATH} key api_keys`,
    },
  },
];

for (const c of PRECEDENCE) {
  Deno.test(`loadSettings: flag beats env beats file beats default (${c.kind})`, async () => {
    const all = await load(c.command, { argv: c.flag, env: c.env, file: c.yaml });
    const envFile = await load(c.command, { env: c.env, file: c.yaml });
    const fileOnly = await load(c.command, { file: c.yaml });
    const none = await load(c.command);
    const get = (r: { settings: object }) => (r.settings as Record<string, unknown>)[c.key];
    assert.deepEqual(get(all), c.expected.flag);
    assert.equal(all.sources[c.key]?.text, c.sources.flag);
    assert.deepEqual(get(envFile), c.expected.env);
    assert.equal(envFile.sources[c.key]?.text, c.sources.env);
    assert.deepEqual(get(fileOnly), c.expected.file);
    assert.equal(fileOnly.sources[c.key]?.text, c.sources.file);
    assert.deepEqual(get(none), c.expected.default);
    assert.equal(none.sources[c.key]?.text, "default");
  });
}

Deno.test("loadSettings: an empty environment variable falls through to the file", async () => {
  const { settings, sources } = await load("run", {
    env: { STATUSENGINE_MYSQL_BATCH_SIZE: "", STATUSENGINE_NODE_NAME: "" },
    file: "mysql_batch_size: 30\n",
  });
  assert.equal(settings.mysqlBatchSize, 30);
  assert.equal(sources.mysqlBatchSize?.text, `file ${PATH} key mysql_batch_size`);
  assert.equal(settings.nodeName, "statusengine");
});

Deno.test("loadSettings: a file key without a value (a bare key:) says that the default is used", async () => {
  // A template that rendered "nodename:" empty would otherwise run as node "statusengine" without
  // a word, sharing rows with every other node left at the default.
  const { settings, sources, warnings } = await load("run", {
    file: "nodename:\nmysql_url: ~\ndead_letter_file: null\nmysql_batch_size: 30\n",
  });
  assert.equal(settings.nodeName, "statusengine");
  assert.equal(sources.nodeName?.text, "default");
  for (const key of ["nodename", "mysql_url", "dead_letter_file"]) {
    assert.equal(
      warnings.filter((w) => w.includes(`key ${key} has no value`)).length,
      1,
      `${key}\n${warnings.join("\n")}`,
    );
  }
  assert.ok(!warnings.some((w) => w.includes("mysql_batch_size")), warnings.join("\n"));
});

Deno.test("loadSettings: a bare key of a setting that feeds two others is warned about once", async () => {
  // metrics_listen_addr feeds metrics-host and metrics-port: one key, one warning.
  const { settings, warnings } = await load("run", { file: "metrics_listen_addr:\n" });
  assert.equal(settings.metricsHost, "127.0.0.1");
  assert.equal(
    warnings.filter((w) => w.includes("key metrics_listen_addr has no value")).length,
    1,
    warnings.join("\n"),
  );
});

Deno.test("loadSettings: a file integer 0 is a real 0 and is validated (docs/operations.md#quirk-zero-integers)", async () => {
  const { settings } = await load("run", { file: "metrics_port: 0\n" });
  assert.equal(settings.metricsPort, 0);
  await refuses(load("run", { file: "mysql_batch_size: 0\n" }), {
    setting: "mysql-batch-size",
    source: `file ${PATH} key mysql_batch_size`,
  });
  const cleanup = await load("cleanup", { file: "age_perfdata: 0\n" });
  assert.equal(cleanup.settings.agePerfdataDays, 0);
});

Deno.test("loadSettings: the config file is named by --config or STATUSENGINE_CONFIG", async () => {
  const viaFlag = await loadSettings("run", {
    argv: ["--config", "/x.yml"],
    env: { STATUSENGINE_CONFIG: "/y.yml" },
    readTextFile: (path) => Promise.resolve(path === "/x.yml" ? "nodename: x\n" : "nodename: y\n"),
  });
  assert.equal(viaFlag.settings.nodeName, "x");
  assert.equal(viaFlag.settings.config, "/x.yml");
  const none = await loadSettings("run", {
    argv: [],
    env: {},
    readTextFile: () => Promise.reject(new Error("must not be read")),
  });
  assert.equal(none.settings.config, undefined);
});

Deno.test("loadSettings: every value of every source is validated, even when overridden", async () => {
  await refuses(
    load("run", { argv: ["--mysql-batch-size", "100"], file: "mysql_batch_size: 900\n" }),
    { setting: "mysql-batch-size", source: `file ${PATH} key mysql_batch_size` },
  );
  await refuses(
    load("run", {
      argv: ["--status-max-age", "1m"],
      env: { STATUSENGINE_STATUS_MAX_AGE: "forever" },
    }),
    { setting: "status-max-age", source: "env STATUSENGINE_STATUS_MAX_AGE" },
  );
});

Deno.test("loadSettings: other commands' keys in the shared file are known, not read, and not warned about", async () => {
  const { warnings } = await load("run", {
    file: "age_hostchecks: -5\ncleanup_batch_size: x\nnode_name: n1\ncheck_for_commands: 1\n" +
      "use_redis: 0\nelasticsearch_address: x\nmysql:\n  host: db\n",
  });
  assert.deepEqual(warnings.filter((w) => w.includes("unknown key")), []);
  const cleanup = await load("cleanup", {
    file: "mysql_batch_size: 100\nmetrics_port: 9999\nconsumer: rabbitmq\n",
  });
  assert.deepEqual(cleanup.warnings, []);
});

// A misspelled key used to fall back to the default without a word.
Deno.test("loadSettings: a misspelled YAML key warns once, naming the file, the key and the nearest known key", async () => {
  const { settings, warnings } = await load("run", {
    file: "mysql_batchsize: 500\nmetrics_prot: 9999\nsome_other_tool: 1\n",
  });
  assert.equal(settings.mysqlBatchSize, 100);
  assert.deepEqual(warnings, [
    `Ignoring unknown key "mysql_batchsize" in ${PATH} (did you mean mysql_batch_size?): no ` +
    "setting has this key, so it has no effect",
    `Ignoring unknown key "metrics_prot" in ${PATH} (did you mean metrics_port?): no setting ` +
    "has this key, so it has no effect",
    `Ignoring unknown key "some_other_tool" in ${PATH}: no setting has this key, so it has no ` +
    "effect",
  ]);
  // Fields of the legacy blocks too.
  const legacy = await load("run", { file: "mysql:\n  usrname: se\n  host: db\n" });
  assert.match(
    legacy.warnings.join("\n"),
    /unknown key "mysql\.usrname" .*\(did you mean mysql\.username\?\)/,
  );
  // The same for a command that reads only a few of the file's keys.
  const cleanup = await load("cleanup", { file: "age_hostcheck: 3\n" });
  assert.match(cleanup.warnings.join("\n"), /"age_hostcheck".*did you mean age_hostchecks\?/);
});

// A misspelled ignored legacy key ("query_handlr") is not told "did you mean query_handler?", a
// key that does nothing but draw its own warning: the hint would lead to another ignored key.
Deno.test("loadSettings: a misspelled key is only ever told the name of a key that has an effect", async () => {
  const { warnings } = await load("run", {
    file: "query_handlr: 1\ngearman_max_concurent_jobs: 8\nsyslog_enable: 1\n" +
      "mysql:\n  encodng: utf8\n  hots: db\nrabbitmq:\n  exchage: x\n",
  });
  // Each unknown key with its suggestion: only a key that is read (mysql.host), never a legacy
  // key without effect, a retired key or an ignored block field.
  const suggestions = Object.fromEntries(
    warnings.flatMap((w) => {
      const m = /unknown key "([^"]+)" in \S+(?: \(did you mean (\S+)\?\))?:/.exec(w);
      return m === null ? [] : [[m[1], m[2] ?? null]];
    }),
  );
  assert.deepEqual(suggestions, {
    "query_handlr": null,
    "gearman_max_concurent_jobs": null,
    "syslog_enable": null,
    "rabbitmq.exchage": null,
    "mysql.encodng": null,
    "mysql.hots": "mysql.host",
  });
});

Deno.test("parseCommandLine/loadSettings: a misspelled flag or command gets the nearest name", async () => {
  await assert.rejects(
    load("run", { argv: ["--gearman-adr", "x:1"] }),
    (err: unknown) =>
      hasCode(err, "usage") &&
      /"--gearman-adr".*did you mean --gearman-addr\?/.test(err.message),
  );
  await assert.rejects(
    load("run", { argv: ["--age-tasks", "3"] }),
    (err: unknown) => hasCode(err, "usage") && /a flag of cleanup, not of run/.test(err.message),
  );
  assert.throws(
    () => parseCommandLine(["clenaup"]),
    (err: unknown) => hasCode(err, "usage") && /did you mean cleanup\?/.test(err.message),
  );
});

// An invalid queue name used to list the twelve names twice (problem and accepted form), or,
// for --queues, not at all.
Deno.test("loadSettings: an invalid queue name lists the queue names exactly once", async () => {
  for (
    const [command, argv] of [
      ["publish", ["--queue", "statusngin_hoststatu"]],
      ["run", ["--queues", "statusngin_hoststatu"]],
      ["run", ["--exclude-queues", "statusngin_x,foo"]],
    ] as const
  ) {
    const err = await refuses(load(command, { argv: [...argv] }), {});
    for (const queue of QUEUE_NAMES) {
      const count = err.message.split(new RegExp(`\\b${queue}\\b`)).length - 1;
      // The mistyped value itself is a prefix of a name, not the name.
      assert.equal(count, 1, `${argv.join(" ")}: ${queue} ${count} times in ${err.message}`);
    }
  }
});

Deno.test("parseCommandLine: --help before a command shows that command's help", () => {
  for (const argv of [["--help", "cleanup"], ["-h", "cleanup"], ["help", "cleanup"]]) {
    const line = parseCommandLine(argv);
    assert.equal(line.help, true, argv.join(" "));
    assert.equal(line.command, "cleanup", argv.join(" "));
    assert.equal(line.commandGiven, true, argv.join(" "));
  }
});

Deno.test("loadSettings: each setting's source tells its kind (flag, env, file, legacy key, default, none) and names it", async () => {
  const { sources } = await load("run", {
    argv: ["--log-level", "debug"],
    env: { STATUSENGINE_NODE_NAME: "n1" },
    file: "mysql_batch_size: 200\nmysql:\n  host: db\n",
  });
  assert.deepEqual(sources.logLevel, { kind: "flag", text: "flag --log-level" });
  assert.deepEqual(sources.nodeName, { kind: "env", text: "env STATUSENGINE_NODE_NAME" });
  assert.deepEqual(sources.mysqlBatchSize, {
    kind: "file",
    text: `file ${PATH} key mysql_batch_size`,
  });
  assert.deepEqual(sources.mysqlUrl, { kind: "legacy", text: `file ${PATH} key mysql` });
  assert.deepEqual(sources.drainTimeoutMs, { kind: "default", text: "default" });
  assert.deepEqual(sources.queues, { kind: "default", text: "default" });
  assert.deepEqual(sources.config, { kind: "env", text: "env STATUSENGINE_CONFIG" });
  const bare = await load("run");
  assert.deepEqual(bare.sources.config, { kind: "none", text: "none" });
});

// ---- refusals: values that do not parse -----------------------------------------------------

interface Refusal {
  what: string;
  command?: CommandName;
  argv?: string[];
  env?: Record<string, string>;
  file?: string;
  setting: string;
  source: string;
  message?: RegExp;
}

const REFUSALS: Refusal[] = [
  // integers
  {
    what: "integer from a flag",
    argv: ["--mysql-batch-size", "ten"],
    setting: "mysql-batch-size",
    source: "flag --mysql-batch-size",
    message: /"ten" is not an integer.*accepted: integer 1\.\.700/,
  },
  {
    what: "integer from env",
    env: { STATUSENGINE_MYSQL_MAX_OPEN_CONNS: "25x" },
    setting: "mysql-max-open-conns",
    source: "env STATUSENGINE_MYSQL_MAX_OPEN_CONNS",
  },
  {
    what: "integer as a YAML string",
    file: 'mysql_batch_size: "100"\n',
    setting: "mysql-batch-size",
    source: `file ${PATH} key mysql_batch_size`,
    message: /expected an integer, got the string "100"/,
  },
  {
    what: "integer as a YAML float",
    file: "rabbitmq_prefetch: 1.5\n",
    setting: "rabbitmq-prefetch",
    source: `file ${PATH} key rabbitmq_prefetch`,
  },
  // batch size range, never clamped
  {
    what: "batch size 0 from a flag",
    argv: ["--mysql-batch-size=0"],
    setting: "mysql-batch-size",
    source: "flag --mysql-batch-size",
    message: /0 is outside 1\.\.700/,
  },
  {
    what: "batch size 701 from env",
    env: { STATUSENGINE_MYSQL_BATCH_SIZE: "701" },
    setting: "mysql-batch-size",
    source: "env STATUSENGINE_MYSQL_BATCH_SIZE",
    message: /701 is outside 1\.\.700/,
  },
  {
    what: "batch size 701 from the file",
    file: "mysql_batch_size: 701\n",
    setting: "mysql-batch-size",
    source: `file ${PATH} key mysql_batch_size`,
  },
  {
    what: "graphite batch size 1001",
    argv: ["--graphite-batch-size", "1001"],
    setting: "graphite-batch-size",
    source: "flag --graphite-batch-size",
  },
  {
    what: "concurrency 0 from a flag",
    argv: ["--gearman-max-concurrent-jobs-per-queue", "0"],
    setting: "gearman-max-concurrent-jobs-per-queue",
    source: "flag --gearman-max-concurrent-jobs-per-queue",
    message: /0 is below 1/,
  },
  {
    what: "concurrency 0 from the file",
    file: "gearman_max_concurrent_jobs_per_queue: 0\n",
    setting: "gearman-max-concurrent-jobs-per-queue",
    source: `file ${PATH} key gearman_max_concurrent_jobs_per_queue`,
  },
  // durations
  {
    what: "duration without unit from a flag",
    argv: ["--status-max-age", "300"],
    setting: "status-max-age",
    source: "flag --status-max-age",
    message: /without a unit.*accepted: Go duration/,
  },
  {
    what: "duration from env",
    env: { STATUSENGINE_GEARMAN_RECONNECT_INTERVAL: "2 seconds" },
    setting: "gearman-reconnect-interval",
    source: "env STATUSENGINE_GEARMAN_RECONNECT_INTERVAL",
  },
  {
    what: "duration as a YAML number",
    file: "status_max_age: 300\n",
    setting: "status-max-age",
    source: `file ${PATH} key status_max_age`,
    message: /has no unit/,
  },
  {
    what: "negative status max age from a flag",
    argv: ["--status-max-age=-1s"],
    setting: "status-max-age",
    source: "flag --status-max-age",
    message: /negative/,
  },
  {
    what: "negative status max age from env",
    env: { STATUSENGINE_STATUS_MAX_AGE: "-5m" },
    setting: "status-max-age",
    source: "env STATUSENGINE_STATUS_MAX_AGE",
  },
  {
    what: "negative status max age from the file",
    file: "status_max_age: -1m\n",
    setting: "status-max-age",
    source: `file ${PATH} key status_max_age`,
  },
  {
    what: "zero reconnect interval",
    argv: ["--gearman-reconnect-interval", "0"],
    setting: "gearman-reconnect-interval",
    source: "flag --gearman-reconnect-interval",
    message: /greater than 0/,
  },
  // enums: an unknown log level refuses, no silent fallback to info
  {
    what: "log level from a flag",
    argv: ["--log-level", "verbose"],
    setting: "log-level",
    source: "flag --log-level",
    message: /"verbose" is not one of debug, info, warn, error/,
  },
  {
    what: "log level from env",
    env: { STATUSENGINE_LOG_LEVEL: "trace" },
    setting: "log-level",
    source: "env STATUSENGINE_LOG_LEVEL",
  },
  {
    what: "log format from the file",
    file: "log_format: logfmt\n",
    setting: "log-format",
    source: `file ${PATH} key log_format`,
  },
  {
    what: "consumer from env",
    env: { STATUSENGINE_CONSUMER: "kafka" },
    setting: "consumer",
    source: "env STATUSENGINE_CONSUMER",
  },
  {
    what: "perfdata route from the file",
    file: "perfdata_route: influx\n",
    setting: "perfdata-route",
    source: `file ${PATH} key perfdata_route`,
  },
  {
    what: "perfdata backends from the file",
    file: "perfdata_backends: [mysql, influx]\n",
    setting: "perfdata-backends",
    source: `file ${PATH} key perfdata_backends`,
  },
  // booleans: Go spellings only, no silent ignoring
  {
    what: "boolean from a flag",
    argv: ["--enable-openitcockpit-tweaks=yes"],
    setting: "enable-openitcockpit-tweaks",
    source: "flag --enable-openitcockpit-tweaks",
    message: /"yes" is not a boolean/,
  },
  {
    what: "boolean from env",
    env: { ENABLE_OPENITCOCKPIT_TWEAKS: "on" },
    setting: "enable-openitcockpit-tweaks",
    source: "env ENABLE_OPENITCOCKPIT_TWEAKS",
  },
  {
    what: "boolean as a YAML string",
    file: 'enable_openitcockpit_tweaks: "true"\n',
    setting: "enable-openitcockpit-tweaks",
    source: `file ${PATH} key enable_openitcockpit_tweaks`,
    message: /expected true or false, got the string "true"/,
  },
  {
    what: "boolean flag of schema",
    command: "schema",
    argv: ["--check=maybe"],
    setting: "check",
    source: "flag --check",
  },
  // host:port
  {
    what: "host:port without port from a flag",
    argv: ["--graphite-addr", "carbon.example"],
    setting: "graphite-addr",
    source: "flag --graphite-addr",
    message: /has no port/,
  },
  {
    what: "host:port with a bad port from env",
    env: { STATUSENGINE_LISTEN_ADDR: "127.0.0.1:99999" },
    setting: "listen-addr",
    source: "env STATUSENGINE_LISTEN_ADDR",
  },
  {
    what: "host:port without host from the file",
    file: "graphite_addr: ':2003'\n",
    setting: "graphite-addr",
    source: `file ${PATH} key graphite_addr`,
  },
  {
    what: "host:port list with a bad entry",
    argv: ["--gearman-addr", "a:4730,b"],
    setting: "gearman-addr",
    source: "flag --gearman-addr",
  },
  {
    what: "host:port list naming a server twice",
    env: { STATUSENGINE_GEARMAN_ADDR: "a:4730,a:4730" },
    setting: "gearman-addr",
    source: "env STATUSENGINE_GEARMAN_ADDR",
  },
  {
    what: "host:port list as a YAML mapping",
    file: "gearman_addr:\n  host: a\n",
    setting: "gearman-addr",
    source: `file ${PATH} key gearman_addr`,
    message: /got a mapping/,
  },
  {
    what: "empty host:port list",
    argv: ["--gearman-addr", " , "],
    setting: "gearman-addr",
    source: "flag --gearman-addr",
  },
  // retention ages
  {
    what: "negative age from a flag",
    command: "cleanup",
    argv: ["--age-hostchecks", "-1"],
    setting: "age-hostchecks",
    source: "flag --age-hostchecks",
    message: /-1 is below 0/,
  },
  {
    what: "negative age from env",
    command: "cleanup",
    env: { STATUSENGINE_AGE_PERFDATA: "-5" },
    setting: "age-perfdata",
    source: "env STATUSENGINE_AGE_PERFDATA",
  },
  {
    what: "negative age from the file",
    command: "cleanup",
    file: "age_logentries: -1\n",
    setting: "age-logentries",
    source: `file ${PATH} key age_logentries`,
  },
  {
    what: "non-numeric age from env",
    command: "cleanup",
    env: { STATUSENGINE_AGE_HOST_STATEHISTORY: "365d" },
    setting: "age-host-statehistory",
    source: "env STATUSENGINE_AGE_HOST_STATEHISTORY",
  },
  {
    what: "cleanup batch size 0",
    command: "cleanup",
    file: "cleanup_batch_size: 0\n",
    setting: "cleanup-batch-size",
    source: `file ${PATH} key cleanup_batch_size`,
  },
  // strings
  {
    what: "empty node name from a flag",
    argv: ["--node-name="],
    setting: "node-name",
    source: "flag --node-name",
    message: /must not be empty/,
  },
  {
    what: "node name as a YAML list",
    file: "nodename: [a, b]\n",
    setting: "node-name",
    source: `file ${PATH} key nodename`,
  },
  {
    what: "node name longer than the column",
    argv: ["--node-name", "n".repeat(256)],
    setting: "node-name",
    source: "flag --node-name",
  },
  // tool settings
  {
    what: "losstest run id with %",
    command: "losstest",
    argv: ["publish", "--run-id", "a%b"],
    setting: "run-id",
    source: "flag --run-id",
  },
  {
    what: "losstest run id with _",
    command: "losstest",
    argv: ["publish", "--run-id", "a_b"],
    setting: "run-id",
    source: "flag --run-id",
  },
  {
    what: "losstest run id with \\",
    command: "losstest",
    argv: ["publish", "--run-id", "a\\b"],
    setting: "run-id",
    source: "flag --run-id",
  },
  {
    what: "losstest run id with '",
    command: "losstest",
    argv: ["publish", "--run-id", "a'b"],
    setting: "run-id",
    source: "flag --run-id",
  },
  {
    what: "losstest mode",
    command: "losstest",
    argv: ["destroy", "--run-id", "x"],
    setting: "mode",
    source: "argument 1",
  },
  {
    what: "publish queue outside the twelve",
    command: "publish",
    argv: ["--queue", "statusngin_cmd"],
    setting: "queue",
    source: "flag --queue",
  },
  {
    what: "publish count 0",
    command: "publish",
    argv: ["--queue", "statusngin_hoststatus", "--count", "0"],
    setting: "count",
    source: "flag --count",
  },
  {
    what: "verify table name",
    command: "verify",
    argv: ["--mysql-url-a", "mysql://a@h/a", "--mysql-url-b", "mysql://b@h/b", "--tables", "x"],
    setting: "tables",
    source: "flag --tables",
  },
  {
    what: "verify ignored column of three parts",
    command: "verify",
    argv: [
      "--mysql-url-a",
      "mysql://a@h/a",
      "--mysql-url-b",
      "mysql://b@h/b",
      "--ignore-columns",
      "db.statusengine_hoststatus.output",
    ],
    setting: "ignore-columns",
    source: "flag --ignore-columns",
  },
  {
    what: "status metrics URL",
    command: "status",
    argv: ["--metrics-url", "ftp://h/metrics"],
    setting: "metrics-url",
    source: "flag --metrics-url",
  },
];

for (const r of REFUSALS) {
  Deno.test(`loadSettings: refuses a bad value, naming setting and source (${r.what})`, async () => {
    await refuses(load(r.command ?? "run", r), {
      setting: r.setting,
      source: r.source,
      ...(r.message === undefined ? {} : { message: r.message }),
    });
  });
}

// ---- refusals: retired keys, conflicts, the file itself -------------------------------------

Deno.test("loadSettings: the retired YAML key refuses with any value, 0 and empty included", async () => {
  for (const value of ["64", "0", "", "null"]) {
    const err = await refuses(load("run", { file: `gearman_max_concurrent_jobs: ${value}\n` }), {
      setting: "gearman-max-concurrent-jobs",
      source: `file ${PATH} key gearman_max_concurrent_jobs`,
    });
    assert.match(err.message, /gearman_max_concurrent_jobs_per_queue/);
    assert.match(err.message, /multiplied by 12/);
  }
});

Deno.test("loadSettings: the retired env var refuses even when empty", async () => {
  for (const value of ["64", ""]) {
    const err = await refuses(
      load("run", { env: { STATUSENGINE_GEARMAN_MAX_CONCURRENT_JOBS: value } }),
      {
        setting: "gearman-max-concurrent-jobs",
        source: "env STATUSENGINE_GEARMAN_MAX_CONCURRENT_JOBS",
      },
    );
    assert.match(err.message, /STATUSENGINE_GEARMAN_MAX_CONCURRENT_JOBS_PER_QUEUE/);
  }
});

Deno.test("loadSettings: the retired key is checked before any other value", async () => {
  await refuses(
    load("run", { file: "mysql_batch_size: 0\ngearman_max_concurrent_jobs: 8\n" }),
    { setting: "gearman-max-concurrent-jobs" },
  );
});

Deno.test("loadSettings: the retired key does not concern cleanup, which shares the file", async () => {
  const { settings } = await load("cleanup", { file: "gearman_max_concurrent_jobs: 64\n" });
  assert.equal(settings.cleanupBatchSize, 5000);
});

// ---- former settings that are constants now ---------------------------------------------------

Deno.test("loadSettings: a former setting now fixed warns once, naming every place, and starts", async () => {
  const { settings, warnings } = await load("run", {
    argv: ["--max-job-size", "128MiB", "-http-max-connections=64", "--node-name", "n1"],
    env: { STATUSENGINE_MAX_JOB_SIZE: "1GiB" },
    file: "max_job_size: 2MiB\ninfluxdb_measurement: metrics\n",
  });
  // The value after the fixed flag is skipped, not taken as an argument.
  assert.equal(settings.nodeName, "n1");
  const about = (flag: string) => warnings.filter((w) => w.includes(`${flag} is no longer`));
  assert.deepEqual(about("max-job-size"), [
    `Ignoring flag --max-job-size, env STATUSENGINE_MAX_JOB_SIZE, file ${PATH} key max_job_size: ` +
    "max-job-size is no longer a setting: the value is now fixed at 64MiB because the broker " +
    "module's jobs are a few hundred KiB; a larger one is a fault and is dead-lettered unread so " +
    "that it cannot wedge its queue",
  ]);
  assert.equal(about("http-max-connections").length, 1);
  assert.match(
    about("http-max-connections")[0] ?? "",
    /^Ignoring flag --http-max-connections: .* fixed at 512 because/,
  );
  assert.match(
    about("influxdb-measurement")[0] ?? "",
    /key influxdb_measurement: .* fixed at perfdata/,
  );
  // Known keys: no second, "unknown key" warning for the same line of the file.
  assert.ok(!warnings.some((w) => w.includes("unknown key")), warnings.join("\n"));
  assert.equal(warnings.length, 3, warnings.join("\n"));
});

Deno.test("loadSettings: a former setting of run is an unknown flag elsewhere, and silent when not given", async () => {
  await usage(load("cleanup", { argv: ["--max-job-size", "1MiB"] }), /--max-job-size/);
  const { warnings } = await load("run", { argv: ["--mysql-batch-size", "7"] });
  assert.deepEqual(warnings, []);
  // `--max-job-size --help` asks for help, as for any flag.
  assert.equal(parseCommandLine(["run", "--max-job-size", "--help"]).help, true);
});

Deno.test("loadSettings: --mysql-url and --mysql-dsn from the same source refuse (D8)", async () => {
  const url = "mysql://a@h:3306/a";
  const dsn = "b@tcp(h:3306)/b";
  await refuses(load("run", { argv: ["--mysql-url", url, "--mysql-dsn", dsn] }), {
    setting: "mysql-url",
    source: "flag --mysql-url and flag --mysql-dsn",
  });
  await refuses(
    load("run", { env: { STATUSENGINE_MYSQL_URL: url, STATUSENGINE_MYSQL_DSN: dsn } }),
    { setting: "mysql-url", source: "env STATUSENGINE_MYSQL_URL and env STATUSENGINE_MYSQL_DSN" },
  );
  await refuses(load("cleanup", { file: `mysql_url: ${url}\nmysql_dsn: ${dsn}\n` }), {
    setting: "mysql-url",
    source: `file ${PATH} key mysql_url and file ${PATH} key mysql_dsn`,
  });
});

Deno.test("loadSettings: --mysql-url and --mysql-dsn from different sources follow precedence", async () => {
  const a = await load("run", {
    argv: ["-mysql-dsn", "dsn:pw@tcp(db:3306)/flagdb?parseTime=true"],
    env: { STATUSENGINE_MYSQL_URL: "mysql://env@h/envdb" },
  });
  assert.equal(a.settings.mysqlUrl, "mysql://dsn:pw@db:3306/flagdb");
  assert.equal(a.sources.mysqlUrl?.text, "flag -mysql-dsn");
  const b = await load("cleanup", {
    env: { STATUSENGINE_MYSQL_DSN: "statusengine:secret@tcp(127.0.0.1:3306)/statusengine_data" },
    file: "mysql_url: mysql://file@h/filedb\n",
  });
  assert.equal(b.settings.mysqlUrl, "mysql://statusengine:secret@127.0.0.1:3306/statusengine_data");
  assert.equal(b.sources.mysqlUrl?.text, "env STATUSENGINE_MYSQL_DSN");
  const c = await load("schema", { file: "mysql_dsn: u@unix(/run/mysqld/mysqld.sock)/se\n" });
  assert.equal(
    c.settings.mysqlUrl,
    "mysql://u@localhost/se?socketPath=%2Frun%2Fmysqld%2Fmysqld.sock",
  );
});

Deno.test("loadSettings: two spellings of one setting in one source refuse", async () => {
  await refuses(load("run", { argv: ["--nodename", "a", "--node-name", "b"] }), {
    setting: "node-name",
  });
  await refuses(
    load("run", { env: { STATUSENGINE_NODE_NAME: "a", STATUSENGINE_NODENAME: "b" } }),
    { setting: "node-name" },
  );
  await refuses(
    load("run", {
      env: { STATUSENGINE_API_COMMAND_KEYS: "a", STATUSENGINE_COMMAND_API_KEYS: "b" },
    }),
    { setting: "command-api-keys" },
  );
  await refuses(load("run", { argv: ["--metrics-listen-addr", ":9200", "--metrics-port", "1"] }), {
    setting: "metrics-port",
  });
  await refuses(load("losstest", { argv: ["publish", "--mode", "verify", "--run-id", "x"] }), {
    setting: "mode",
  });
});

Deno.test("loadSettings: a config file that cannot be read refuses", async () => {
  const err = await refuses(
    loadSettings("run", {
      argv: ["--config", "/nonexistent.yml"],
      env: {},
      readTextFile: () => Promise.reject(new Deno.errors.NotFound("No such file")),
    }),
    { setting: "config", source: "flag --config" },
  );
  assert.match(err.message, /Cannot read config file "\/nonexistent\.yml"/);
  await refuses(
    loadSettings("cleanup", {
      argv: [],
      env: { STATUSENGINE_CONFIG: "/etc/unreadable.yml" },
      readTextFile: () => Promise.reject(new Deno.errors.PermissionDenied("Permission denied")),
    }),
    { setting: "config", source: "env STATUSENGINE_CONFIG" },
  );
});

Deno.test("loadSettings: the real file reader is used when none is injected", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const path = `${dir}/config.yml`;
    await Deno.writeTextFile(path, "mysql_batch_size: 700\n");
    const { settings } = await loadSettings("run", { argv: ["--config", path], env: {} });
    assert.equal(settings.mysqlBatchSize, 700);
    await refuses(loadSettings("run", { argv: ["--config", `${dir}/missing.yml`], env: {} }), {
      setting: "config",
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("loadSettings: YAML that does not parse refuses with a position, not the line", async () => {
  const err = await refuses(
    load("run", { file: 'nodename: a\nmysql_dsn: "u:S3CRET@tcp(h)/db\n' }),
    { setting: "config", source: `env STATUSENGINE_CONFIG`, message: /line \d+, column \d+/ },
  );
  assert.ok(!err.message.includes("S3CRET"));
  await refuses(load("run", { file: "nodename: a\nnodename: b\n" }), {
    setting: "config",
    message: /unique/,
  });
  await refuses(load("run", { file: "- a\n- b\n" }), {
    setting: "config",
    message: /mapping/,
  });
  await refuses(load("run", { file: "a: 1\n---\nb: 2\n" }), { setting: "config" });
});

Deno.test("loadSettings: an empty YAML file means no keys", async () => {
  const { settings } = await load("run", { file: "# nothing here\n" });
  assert.equal(settings.mysqlBatchSize, 100);
});

// ---- usage errors ----------------------------------------------------------------------------

Deno.test("loadSettings: an unknown flag is a usage error (exit 2) with a hint to --help", async () => {
  const err = await usage(load("run", { argv: ["--mysql-batchsize", "7"] }), /--mysql-batchsize/);
  assert.match(err.message, /statusengine-worker run --help/);
  await usage(load("cleanup", { argv: ["--gearman-addr", "h:1"] }), /--gearman-addr/);
  await usage(load("run", { argv: ["--no-mysql-batch-size"] }));
  await usage(load("version", { argv: ["--node-name", "x"] }));
});

Deno.test("loadSettings: the retired flag is an unknown flag that names its successor", async () => {
  await usage(
    load("run", { argv: ["-gearman-max-concurrent-jobs", "64"] }),
    /--gearman-max-concurrent-jobs-per-queue/,
  );
});

Deno.test("loadSettings: malformed command lines are usage errors", async () => {
  await usage(load("run", { argv: ["--mysql-url"] }), /needs a value/);
  await usage(load("run", { argv: ["stray"] }), /Unexpected argument "stray"/);
  await usage(load("run", { argv: ["--node-name", "a", "--node-name", "b"] }), /more than once/);
  await usage(load("schema", { argv: ["--no-check=true"] }), /takes no value/);
  await usage(load("publish"), /Missing required flag --queue/);
  await usage(
    load("losstest", { argv: ["--run-id", "x"] }),
    /Missing required argument publish\|verify\|cleanup \(or --mode\)/,
  );
  await usage(
    load("losstest", { argv: ["publish", "verify", "--run-id", "x"] }),
    /Unexpected argument "verify"/,
  );
  await usage(load("verify", { argv: ["--mysql-url-a", "mysql://a@h/a"] }), /--mysql-url-b/);
});

// ---- flag syntax -----------------------------------------------------------------------------

Deno.test("loadSettings: a single leading dash on a long flag means the same flag", async () => {
  const { settings, sources } = await load("run", {
    argv: [
      "-mysql-dsn",
      "u:p@tcp(db:3306)/se",
      "-nodename",
      "node1",
      "-mysql-batch-size=700",
      "-enable-openitcockpit-tweaks",
    ],
  });
  assert.equal(settings.mysqlUrl, "mysql://u:p@db:3306/se");
  assert.equal(settings.nodeName, "node1");
  assert.equal(settings.mysqlBatchSize, 700);
  assert.equal(settings.enableOpenitcockpitTweaks, true);
  assert.equal(sources.nodeName?.text, "flag -nodename");
});

Deno.test("loadSettings: booleans take --flag, --no-flag and --flag=value", async () => {
  const off = await load("schema", { argv: ["--no-create-database", "--check"] });
  assert.equal(off.settings.createDatabase, false);
  assert.equal(off.settings.check, true);
  const explicit = await load("schema", { argv: ["--create-database=0", "--check=false"] });
  assert.equal(explicit.settings.createDatabase, false);
  assert.equal(explicit.settings.check, false);
  const defaults = await load("schema");
  assert.equal(defaults.settings.createDatabase, true);
  assert.equal(defaults.settings.check, false);
  // --no-flag beats a true value from the environment.
  const negated = await load("run", {
    argv: ["--no-enable-openitcockpit-tweaks"],
    env: { ENABLE_OPENITCOCKPIT_TWEAKS: "1" },
  });
  assert.equal(negated.settings.enableOpenitcockpitTweaks, false);
  // A boolean never swallows the next argument.
  await usage(load("status", { argv: ["--json", "true"] }), /Unexpected argument "true"/);
});

Deno.test("loadSettings: values may start with a dash and -- ends the flags", async () => {
  const { settings } = await load("run", { argv: ["--node-name", "-odd-", "--"] });
  assert.equal(settings.nodeName, "-odd-");
  const losstest = await load("losstest", { argv: ["--run-id", "r1", "--", "verify"] });
  assert.equal(losstest.settings.mode, "verify");
});

// ---- individual settings ---------------------------------------------------------------------

Deno.test("loadSettings: enums are case-insensitive and resolve to the table's spelling (docs/operations.md#quirk-enum-case)", async () => {
  const { settings } = await load("run", {
    argv: ["--consumer", "RabbitMQ", "--log-level", "WARN", "--perfdata-route", "Both"],
  });
  assert.equal(settings.consumer, "rabbitmq");
  assert.equal(settings.logLevel, "warn");
  assert.deepEqual(settings.perfdataBackends, ["mysql", "graphite"], "--perfdata-route both");
});

Deno.test("loadSettings: --metrics-listen-addr sets metrics host and port", async () => {
  const all = await load("run", { argv: ["--metrics-listen-addr", ":9200"] });
  assert.equal(all.settings.metricsHost, "", "every interface, IPv4 and IPv6");
  assert.equal(all.settings.metricsPort, 9200);
  const v6 = await load("run", { file: "metrics_listen_addr: '[::1]:9300'\n" });
  assert.equal(v6.settings.metricsHost, "::1");
  assert.equal(v6.settings.metricsPort, 9300);
  assert.equal(v6.sources.metricsPort?.text, `file ${PATH} key metrics_listen_addr`);
  const mixed = await load("run", {
    env: { STATUSENGINE_METRICS_PORT: "0" },
    file: "metrics_listen_addr: 10.0.0.1:9300\n",
  });
  assert.equal(mixed.settings.metricsHost, "10.0.0.1");
  assert.equal(mixed.settings.metricsPort, 0);
  const wildcard = await load("run", { argv: ["--metrics-listen-addr", "[::]:9400"] });
  assert.equal(wildcard.settings.metricsHost, "::");
  // `::1:9600` could be host ::1 port 9600 or host ::1:9600 with no port.
  await refuses(load("run", { argv: ["--metrics-listen-addr", "::1:9600"] }), {
    setting: "metrics-listen-addr",
    message: /brackets around the IPv6 address \(\[::1\]:port\)/,
  });
});

Deno.test("loadSettings: every interface for /metrics is an explicit empty --metrics-host, or :port in the environment", async () => {
  assert.equal((await load("run", { argv: ["--metrics-host="] })).settings.metricsHost, "");
  assert.equal((await load("run", { file: 'metrics_host: ""\n' })).settings.metricsHost, "");
  // An empty variable counts as not set (docs/metrics.md names the variable that does it).
  const env = (vars: Record<string, string>) => load("run", { env: vars });
  assert.equal((await env({ STATUSENGINE_METRICS_HOST: "" })).settings.metricsHost, "127.0.0.1");
  const listen = await env({ STATUSENGINE_METRICS_LISTEN_ADDR: ":9105" });
  assert.equal(listen.settings.metricsHost, "");
  assert.equal(listen.settings.metricsPort, 9105);
});

Deno.test("loadSettings: the dead-letter file is disabled only by an explicit empty value", async () => {
  assert.equal((await load("run", { argv: ["--dead-letter-file="] })).settings.deadLetterFile, "");
  assert.equal((await load("run", { file: 'dead_letter_file: ""\n' })).settings.deadLetterFile, "");
  assert.equal(
    (await load("run", { env: { STATUSENGINE_DEAD_LETTER_FILE: "" } })).settings.deadLetterFile,
    "/var/lib/statusengine-worker/statusengine-dead-letters.ndjson",
  );
});

Deno.test("loadSettings: node name also comes from the Go spellings", async () => {
  assert.equal((await load("run", { argv: ["--nodename", "a"] })).settings.nodeName, "a");
  assert.equal(
    (await load("run", { env: { STATUSENGINE_NODENAME: "b" } })).settings.nodeName,
    "b",
  );
});

Deno.test("loadSettings: command API keys keep the Go env name STATUSENGINE_API_COMMAND_KEYS (docs/operations.md#quirk-env-names)", async () => {
  const { settings, sources } = await load("run", {
    env: { STATUSENGINE_API_COMMAND_KEYS: "a-secret,another" },
  });
  assert.deepEqual(settings.commandApiKeys, ["a-secret", "another"]);
  assert.equal(sources.commandApiKeys?.text, "env STATUSENGINE_API_COMMAND_KEYS");
});

Deno.test("loadSettings: tool commands resolve their flags and defaults", async () => {
  const publish = await load("publish", { argv: ["--queue", "statusngin_downtimes"] });
  assert.deepEqual(
    { ...publish.settings },
    {
      config: undefined,
      logLevel: "info",
      logFormat: "text",
      gearmanAddr: ["127.0.0.1:4730"],
      consumer: "gearman",
      rabbitmqUrl: "amqp://statusengine:statusengine@127.0.0.1:5672/",
      rabbitmqDurableQueues: false,
      rabbitmqDeclare: "declare",
      queue: "statusngin_downtimes",
      count: 1000,
      eventsPerJob: 100,
      form: undefined,
      fromFile: undefined,
    },
  );
  const viaRabbit = await load("losstest", {
    argv: ["publish", "--run-id", "r-1", "--consumer", "rabbitmq"],
    env: { STATUSENGINE_RABBITMQ_URL: "amqp://u:p@mq:5672/se" },
  });
  assert.equal(viaRabbit.settings.consumer, "rabbitmq");
  assert.equal(viaRabbit.settings.rabbitmqUrl, "amqp://u:p@mq:5672/se");
  const losstest = await load("losstest", { argv: ["cleanup", "--run-id", "r-1"] });
  assert.equal(losstest.settings.mode, "cleanup");
  assert.equal(losstest.settings.count, 10000);
  assert.equal(losstest.settings.runId, "r-1");
  const verify = await load("verify", {
    argv: ["--tables", "statusengine_hoststatus,statusengine_hoststatus", "--limit", "10"],
    env: { STATUSENGINE_MYSQL_URL_A: "mysql://a@h/a", STATUSENGINE_MYSQL_URL_B: "mysql://b@h/b" },
  });
  assert.deepEqual(verify.settings.tables, ["statusengine_hoststatus"]);
  assert.equal(verify.settings.limit, 10);
  assert.deepEqual(verify.settings.ignoreColumns, []);
  // A column of every table, and one of one table, as verify reads them.
  const ignoring = await load("verify", {
    argv: ["--ignore-columns", "output,statusengine_servicechecks.perfdata"],
    env: { STATUSENGINE_MYSQL_URL_A: "mysql://a@h/a", STATUSENGINE_MYSQL_URL_B: "mysql://b@h/b" },
  });
  assert.deepEqual(ignoring.settings.ignoreColumns, [
    "output",
    "statusengine_servicechecks.perfdata",
  ]);
  const version = await load("version");
  assert.deepEqual(version.settings, {});
});

Deno.test("loadSettings: publish and losstest read the worker's config file; verify reads none", async () => {
  const file = "gearman_addr: gm:4730\nmysql_url: mysql://se@db/se\nage_hostchecks: 3\n";
  const publish = await load("publish", { argv: ["--queue", "statusngin_hoststatus"], file });
  assert.deepEqual(publish.settings.gearmanAddr, ["gm:4730"]);
  assert.equal(publish.sources.gearmanAddr?.text, `file ${PATH} key gearman_addr`);
  // Their own settings have no key: a worker's file cannot change what a test run publishes.
  assert.equal(publish.settings.count, 1000);
  assert.deepEqual(publish.warnings, []);
  const losstest = await load("losstest", { argv: ["verify", "--run-id", "r"], file });
  assert.equal(losstest.settings.mysqlUrl, "mysql://se@db/se");
  await usage(load("verify", { argv: ["--config", "/x.yml"] }));
  const verify = await load("verify", {
    env: {
      STATUSENGINE_CONFIG: "/does/not/exist.yml",
      STATUSENGINE_MYSQL_URL_A: "mysql://a@h/a",
      STATUSENGINE_MYSQL_URL_B: "mysql://b@h/b",
    },
  });
  assert.equal(verify.settings.limit, 5000);
});

// ---- secrets ---------------------------------------------------------------------------------

// D8: whatever goes wrong, the password or key must not reach the message, the raw value or
// the warnings, because all three end up in the journal.
Deno.test("loadSettings: secrets never appear in errors or warnings", async () => {
  const secret = "S3CRET";
  const attempts: { command?: CommandName; input: Input }[] = [
    { input: { argv: ["--mysql-url", `mysql://u:${secret}@/db`] } },
    { input: { argv: ["--mysql-url", `mysql://u:${secret}@h`] } },
    { input: { argv: ["--mysql-url", `postgres://u:${secret}@h/db`] } },
    { input: { argv: ["--mysql-url", `mysql://u:${secret}/x@h:1/db?`] } },
    { input: { env: { STATUSENGINE_MYSQL_DSN: `u:${secret}@tcp(h:3306` } } },
    { input: { env: { STATUSENGINE_MYSQL_DSN: `u:${secret}@tcp(h:3306)/` } } },
    { input: { env: { STATUSENGINE_MYSQL_DSN: `u:${secret}@tcp(h:3306)/db?tls=x` } } },
    { input: { file: `rabbitmq_url: amqp://u:${secret}@\n` } },
    { input: { file: `rabbitmq_url: 12345\n` } },
    { input: { file: `api_keys: [${secret}, 12345]\n` } },
    { input: { file: `api_keys: {${secret}: 1}\n` } },
    { input: { file: `command_api_keys: ${secret}\nmysql: {password: [${secret}]}\n` } },
    { input: { argv: ["--mysql-url", `mysql://u:${secret}@h/db`, "--mysql-dsn", "x@tcp(h)/d"] } },
    { input: { file: `mysql:\n  password: ${secret}\n  port: nope\n` } },
    { input: { file: `rabbitmq:\n  password: ${secret}\n  port: 0\n` } },
    { command: "verify", input: { argv: ["--mysql-url-a", `mysql://u:${secret}@h`] } },
    { input: { env: { STATUSENGINE_RABBITMQ_URL: `http://u:${secret}@h/` } } },
  ];
  for (const { command, input } of attempts) {
    const caught = await rejection(load(command ?? "run", input));
    assert.ok(caught instanceof ConfigError, `${JSON.stringify(input)} should refuse`);
    assert.ok(!caught.message.includes(secret), caught.message);
    assert.ok(!(caught.rawValue ?? "").includes(secret), caught.rawValue);
    assert.ok(!caught.message.includes("12345"), caught.message);
  }
  const { warnings } = await load("run", {
    env: { STATUSENGINE_MYSQL_DSN: `u:${secret}@tcp(h:3306)/db?charset=latin1&x=y` },
    file: `mysql_url: mysql://u:${secret}@h/db\nrabbitmq:\n  password: ${secret}\n  exchange: e\n`,
  });
  assert.ok(warnings.length > 0);
  for (const warning of warnings) assert.ok(!warning.includes(secret), warning);
});

// ---- parseCommandLine ------------------------------------------------------------------------

Deno.test("parseCommandLine: the command defaults to run and the rest is its arguments", () => {
  assert.deepEqual(parseCommandLine([]), {
    command: "run",
    commandGiven: false,
    rest: [],
    help: false,
    version: false,
  });
  assert.deepEqual(parseCommandLine(["-config", "/etc/statusengine/config.yml"]), {
    command: "run",
    commandGiven: false,
    rest: ["-config", "/etc/statusengine/config.yml"],
    help: false,
    version: false,
  });
  const cleanup = parseCommandLine(["cleanup", "--age-perfdata", "0"]);
  assert.equal(cleanup.command, "cleanup");
  assert.equal(cleanup.commandGiven, true);
  assert.deepEqual(cleanup.rest, ["--age-perfdata", "0"]);
});

Deno.test("parseCommandLine: --help, -h, help <command> and --version are recognised", () => {
  assert.equal(parseCommandLine(["--help"]).help, true);
  assert.equal(parseCommandLine(["-h"]).help, true);
  assert.equal(parseCommandLine(["--help"]).commandGiven, false);
  const helpCleanup = parseCommandLine(["help", "cleanup"]);
  assert.equal(helpCleanup.help, true);
  assert.equal(helpCleanup.command, "cleanup");
  assert.equal(parseCommandLine(["schema", "--unknown", "-h"]).help, true);
  assert.equal(parseCommandLine(["losstest", "--count", "--help"]).help, true);
  assert.equal(parseCommandLine(["--version"]).version, true);
  assert.equal(parseCommandLine(["-version"]).version, true);
  assert.equal(parseCommandLine(["cleanup", "--version"]).version, true);
  assert.equal(parseCommandLine(["run", "--node-name", "--version"]).version, false);
  assert.equal(parseCommandLine(["run", "--", "--help"]).help, false);
});

Deno.test("parseCommandLine: an unknown command is a usage error with a hint", () => {
  assert.throws(() => parseCommandLine(["frobnicate"]), (err: unknown) => {
    assert.ok(hasCode(err, "usage"));
    assert.match(err.message, /Unknown command "frobnicate".*--help/);
    return true;
  });
  assert.throws(
    () => parseCommandLine(["help", "frobnicate"]),
    (err: unknown) => hasCode(err, "usage"),
  );
});

Deno.test("loadSettings: timer durations above a day refuse (setTimeout would fire at once)", async () => {
  await refuses(load("run", { argv: ["--drain-timeout", "720h"] }), {
    setting: "drain-timeout",
    message: /longer than 24h/,
  });
  const { settings } = await load("run", { argv: ["--status-max-age", "720h"] });
  assert.equal(settings.statusMaxAgeMs, 720 * 3_600_000);
});

Deno.test("loadSettings: a Go DSN given as --mysql-url is refused with a pointer to --mysql-dsn", async () => {
  await refuses(load("run", { argv: ["--mysql-url", "u:p@tcp(db:3306)/se"] }), {
    setting: "mysql-url",
    message: /looks like a Go DSN, which goes into mysql-dsn/,
  });
});

Deno.test("loadSettings: a MySQL URL the MySQL client would refuse is refused here, naming setting and source", async () => {
  // Each of these passed the settings and only failed inside `run` ("run failed: Cannot parse
  // MySQL URL"), without the source, while `config` called them fine.
  const cases: [string, RegExp][] = [
    ["mysql://u:sekret@db/se?foo=1", /unknown query parameter "foo"/],
    ["mysql://u:sekret@db/se?connectTimeout=5s", /connectTimeout/],
    ["mysql://u:sekret@db/se?ssl=yes", /ssl/],
    ["mysql://u:sekret@db/se?socketPath=", /socketPath" is empty/],
    ["mysql://u:sekret@db:0/se", /port/],
    ["mysql://:sekret@db/se", /missing user name/],
  ];
  for (const [url, message] of cases) {
    const caught = await refuses(load("run", { env: { STATUSENGINE_MYSQL_URL: url } }), {
      setting: "mysql-url",
      source: "env STATUSENGINE_MYSQL_URL",
      message,
    });
    assert.ok(!caught.message.includes("sekret"), caught.message);
  }
  // What the client takes passes, unchanged.
  const url = "mysql://u:p%40ss@db:3307/se?connectTimeout=5000&ssl=true";
  const { settings } = await load("run", { env: { STATUSENGINE_MYSQL_URL: url } });
  assert.equal(settings.mysqlUrl, url);
});

Deno.test("loadSettings: secrets on the command line draw a warning pointing at the environment", async () => {
  const { warnings } = await load("run", {
    argv: ["--api-keys", "k1", "--mysql-url", "mysql://u:pw@h/db", "--rabbitmq-url", "amqp://h/"],
  });
  assert.equal(warnings.length, 2, warnings.join("\n"));
  assert.match(warnings[0] ?? "", /mysql-url .*prefer env STATUSENGINE_MYSQL_URL/);
  assert.match(warnings[1] ?? "", /api-keys .*prefer env STATUSENGINE_API_KEYS/);
  for (const warning of warnings) assert.ok(!warning.includes("pw") && !warning.includes("k1"));
  const quiet = await load("run", { argv: ["--mysql-url", "mysql://root@h/db", "--api-keys="] });
  assert.deepEqual(quiet.warnings, []);
});

// Only URLs with a password and key lists counted: a token or password given on its own as a
// flag (influxdb-token, prometheus-remote-write-password, …) sat in /proc without a word.
Deno.test("loadSettings: a password or token given as a flag draws the /proc warning too", async () => {
  const flags: [string, string][] = [
    ["influxdb-password", "STATUSENGINE_INFLUXDB_PASSWORD"],
    ["influxdb-token", "STATUSENGINE_INFLUXDB_TOKEN"],
    ["prometheus-remote-write-bearer-token", "STATUSENGINE_PROMETHEUS_REMOTE_WRITE_BEARER_TOKEN"],
    ["prometheus-remote-write-password", "STATUSENGINE_PROMETHEUS_REMOTE_WRITE_PASSWORD"],
  ];
  for (const [flag, envName] of flags) {
    const { warnings } = await load("run", { argv: [`--${flag}`, "t0ps3cret"] });
    assert.equal(warnings.length, 1, `--${flag}: ${warnings.join("\n")}`);
    assert.match(warnings[0] ?? "", new RegExp(`^${flag} .*/proc; prefer env ${envName}$`));
    assert.ok(!warnings[0]?.includes("t0ps3cret"));
    // An explicit empty value (none) holds no secret.
    assert.deepEqual((await load("run", { argv: [`--${flag}=`] })).warnings, [], flag);
  }
});

// -mysql-dsn (the Go worker's unit files) was told to move to STATUSENGINE_MYSQL_URL, which
// refuses a DSN; the variable of the flag given takes it as it is.
Deno.test("loadSettings: the /proc warning for --mysql-dsn points at STATUSENGINE_MYSQL_DSN", async () => {
  const { warnings } = await load("run", { argv: ["-mysql-dsn", "u:pw@tcp(db:3306)/se"] });
  assert.equal(warnings.length, 1, warnings.join("\n"));
  assert.match(
    warnings[0] ?? "",
    /^mysql-dsn is given on the command line.*prefer env STATUSENGINE_MYSQL_DSN$/,
  );
});

Deno.test("loadSettings: --rabbitmq-url takes a host list from flag, env and YAML; a bad host of it refuses naming it, the password masked", async () => {
  const url = "amqp://u:Sup3rS3cret@h1:5672,h2:5673,[::1],h3/vh";
  const flag = await load("run", { argv: ["--rabbitmq-url", url] });
  assert.equal(flag.settings.rabbitmqUrl, url);
  const env = await load("status", { env: { STATUSENGINE_RABBITMQ_URL: url } });
  assert.equal(env.settings.rabbitmqUrl, url);
  const file = await load("run", { file: `rabbitmq_url: "${url}"\n` });
  assert.equal(file.settings.rabbitmqUrl, url);
  const bad = await refuses(
    load("run", { argv: ["--rabbitmq-url", "amqp://u:Sup3rS3cret@h1,h2:99999/"] }),
    { setting: "rabbitmq-url", message: /host 2 of the list, "h2:99999"/ },
  );
  assert.ok(!bad.message.includes("Sup3r"), bad.message);
});

Deno.test("loadSettings: an AMQP URL the RabbitMQ client would refuse is refused here, naming setting and source", async () => {
  // These passed the settings (and `config`) and failed only once the broker was dialled.
  const cases: [string, RegExp][] = [
    ["amqp://u:sekret@mq:0/", /port "0" out of range/],
    ["amqp://u:sekret@mq/?heartbeat=30s", /heartbeat "30s" is not a whole number of seconds/],
  ];
  for (const [url, message] of cases) {
    const caught = await refuses(load("run", { env: { STATUSENGINE_RABBITMQ_URL: url } }), {
      setting: "rabbitmq-url",
      source: "env STATUSENGINE_RABBITMQ_URL",
      message,
    });
    assert.ok(!caught.message.includes("sekret"), caught.message);
  }
  const url = "amqp://u:p%40ss@mq1:5673,mq2/%2Fmon?heartbeat=30";
  const { settings } = await load("run", { env: { STATUSENGINE_RABBITMQ_URL: url } });
  assert.equal(settings.rabbitmqUrl, url);
});

Deno.test("loadSettings: an InfluxDB URL that is no write endpoint is refused here, naming setting and source", async () => {
  // These passed the settings (and `config`) and were refused only by run, without the source.
  const cases: [string, RegExp][] = [
    ["http://u:sekret@influx:8086/write", /names no database/],
    ["http://influx:8086/api/v2/write?org=o", /names no bucket/],
    ["http://influx:8086/query?db=se", /neither/],
  ];
  for (const [url, message] of cases) {
    const caught = await refuses(load("run", { env: { STATUSENGINE_INFLUXDB_URL: url } }), {
      setting: "influxdb-url",
      source: "env STATUSENGINE_INFLUXDB_URL",
      message,
    });
    assert.ok(!caught.message.includes("sekret"), caught.message);
  }
  const url = "https://influx/api/v2/write?org=o&bucket=b";
  const { settings } = await load("run", { env: { STATUSENGINE_INFLUXDB_URL: url } });
  assert.equal(settings.influxdbUrl, url);
});

Deno.test("loadSettings: --rabbitmq-declare is declare or passive, declare by default", async () => {
  assert.equal((await load("run")).settings.rabbitmqDeclare, "declare");
  const passive = await load("losstest", {
    argv: ["publish", "--run-id", "r1"],
    env: { STATUSENGINE_RABBITMQ_DECLARE: "passive" },
  });
  assert.equal(passive.settings.rabbitmqDeclare, "passive");
  await refuses(load("run", { argv: ["--rabbitmq-declare", "create"] }), {
    setting: "rabbitmq-declare",
  });
});
