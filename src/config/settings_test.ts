import assert from "node:assert/strict";
import { parseValue } from "./values.ts";
import { LEGACY_TRANSLATIONS, legacyKeysOf } from "./legacy.ts";
import {
  COMMAND_NAMES,
  type CommandName,
  defaultOf,
  derivedEnvName,
  derivedYamlKey,
  envNameOf,
  RETENTION_RULES,
  rowsFor,
  SETTING_ROWS,
  settingKeyOf,
  type SettingsFor,
  yamlKeyOf,
} from "./settings.ts";

// Without this test a row could quietly get an env name or YAML key that does not follow from
// its flag, and operators who derive one from the other (docs/operations.md#cleanup-settings)
// would set a variable nobody reads. Every deviation must be listed here, with its reason.
Deno.test("settings: env and YAML names derive from the flag, except the documented ones", () => {
  const envExceptions: Record<string, string> = {
    // The Go worker's names, kept for existing deployments.
    "enable-openitcockpit-tweaks": "ENABLE_OPENITCOCKPIT_TWEAKS",
    "command-api-keys": "STATUSENGINE_API_COMMAND_KEYS",
  };
  const yamlExceptions: Record<string, string> = {
    // The Go key; node_name is the legacy PHP key and loses against it.
    "node-name": "nodename",
  };
  for (const row of SETTING_ROWS) {
    if (row.env !== false) {
      assert.equal(envNameOf(row), envExceptions[row.flag] ?? derivedEnvName(row.flag), row.flag);
    }
    if (row.yaml !== false) {
      assert.equal(yamlKeyOf(row), yamlExceptions[row.flag] ?? derivedYamlKey(row.flag), row.flag);
    }
  }
  // The exceptions stay reachable under the derived name too.
  for (const flag of Object.keys(envExceptions)) {
    const row = SETTING_ROWS.find((r) => r.flag === flag);
    assert.ok(row?.envAliases?.includes(derivedEnvName(flag)), flag);
  }
});

Deno.test("settings: flags are kebab-case and every spelling is unique per command", () => {
  for (const command of COMMAND_NAMES) {
    const flags = new Set<string>();
    const envs = new Set<string>();
    const yamls = new Set<string>();
    const keys = new Set<string>();
    for (const row of rowsFor(command)) {
      for (const flag of [row.flag, ...(row.flagAliases ?? [])]) {
        assert.match(flag, /^[a-z][a-z0-9]*(-[a-z0-9]+)*$/, flag);
        assert.ok(!flags.has(flag), `${command}: flag ${flag} twice`);
        assert.ok(!["help", "h", "version"].includes(flag), flag);
        flags.add(flag);
      }
      const env = envNameOf(row);
      for (const name of env === undefined ? [] : [env, ...(row.envAliases ?? [])]) {
        assert.ok(!envs.has(name), `${command}: env ${name} twice`);
        envs.add(name);
      }
      const yaml = yamlKeyOf(row);
      const allYaml = yaml === undefined ? [] : [yaml, ...legacyKeysOf(row.flag)];
      for (const key of allYaml) {
        assert.ok(!yamls.has(key), `${command}: YAML key ${key} twice`);
        yamls.add(key);
      }
      if (row.feeds === undefined) {
        const key = settingKeyOf(row);
        assert.ok(!keys.has(key), `${command}: settings key ${key} twice`);
        keys.add(key);
      }
    }
  }
});

// A default that its own parser rejects would only show up when nobody sets the value.
Deno.test("settings: every default parses with its own row's parser", () => {
  for (const command of COMMAND_NAMES) {
    for (const row of rowsFor(command)) {
      const fallback = defaultOf(row, command);
      if (fallback === undefined) continue;
      const parsed = parseValue(row, fallback, "text");
      assert.ok(parsed.ok, `${command} ${row.flag}: ${parsed.ok ? "" : parsed.problem}`);
    }
  }
});

Deno.test("settings: required settings have no default and input-only rows feed real rows", () => {
  for (const row of SETTING_ROWS) {
    if (row.required === true) assert.equal(row.default, undefined, row.flag);
    if (row.secret === true) assert.notEqual(row.env, false, `${row.flag} needs an env var`);
    for (const feed of row.feeds ?? []) {
      const target = SETTING_ROWS.find((r) => r.flag === feed.target);
      assert.ok(target !== undefined, `${row.flag} feeds unknown ${feed.target}`);
      assert.equal(target.feeds, undefined);
      for (const command of row.commands) assert.ok(target.commands.includes(command));
    }
  }
});

Deno.test("settings: the typed key is the camelCase flag plus the unit", () => {
  const byFlag = (flag: string) => {
    const row = SETTING_ROWS.find((r) => r.flag === flag);
    if (row === undefined) throw new Error(flag);
    return settingKeyOf(row);
  };
  assert.equal(byFlag("mysql-batch-size"), "mysqlBatchSize");
  assert.equal(byFlag("status-max-age"), "statusMaxAgeMs");
  assert.equal(byFlag("age-host-notifications-log"), "ageHostNotificationsLogDays");
  assert.equal(byFlag("gearman-max-concurrent-jobs-per-queue"), "gearmanMaxConcurrentJobsPerQueue");
  assert.equal(byFlag("mysql-url-a"), "mysqlUrlA");

  // Type level: these lines only compile while SettingsFor follows the table.
  const run: Pick<
    SettingsFor<"run">,
    "mysqlBatchSize" | "gearmanAddr" | "statusMaxAgeMs" | "consumer" | "config" | "apiKeys"
  > = {
    mysqlBatchSize: 100,
    gearmanAddr: ["127.0.0.1:4730"],
    statusMaxAgeMs: 300_000,
    consumer: "rabbitmq",
    config: undefined,
    apiKeys: [],
  };
  const publishForm: SettingsFor<"publish">["form"] = undefined;
  const cleanup: SettingsFor<"cleanup">["agePerfdataDays"] = 90;
  // @ts-expect-error mysql-dsn is input-only: it has no key of its own
  const dsn: SettingsFor<"run">["mysqlDsn"] = "";
  // @ts-expect-error run has no retention settings
  const age: SettingsFor<"run">["ageHostchecksDays"] = 1;
  // @ts-expect-error the consumer is an enum, not any string
  const consumer: SettingsFor<"run">["consumer"] = "kafka";
  const none: Record<keyof SettingsFor<"version">, never> = {};
  assert.ok([run, publishForm, cleanup, dsn, age, consumer, none].length > 0);
});

// The brief's minimum set per command; a row dropped from the table by accident fails here.
Deno.test("settings: each command offers at least its specified settings", () => {
  const ages = [
    "hostchecks",
    "servicechecks",
    "host-acknowledgements",
    "service-acknowledgements",
    "host-notifications",
    "service-notifications",
    "host-notifications-log",
    "service-notifications-log",
    "host-statehistory",
    "service-statehistory",
    "host-downtimes",
    "service-downtimes",
    "logentries",
    "perfdata",
  ].map((n) => `age-${n}`);
  const expected: Record<CommandName, string[]> = {
    run: [
      "gearman-addr",
      "gearman-max-concurrent-jobs-per-queue",
      "gearman-reconnect-interval",
      "drain-timeout",
      "shutdown-flush-timeout",
      "consumer",
      "rabbitmq-url",
      "rabbitmq-prefetch",
      "rabbitmq-reconnect-interval",
      "mysql-url",
      "mysql-dsn",
      "mysql-max-open-conns",
      "mysql-batch-size",
      "status-max-age",
      "node-name",
      "dead-letter-file",
      "perfdata-backends",
      "perfdata-route",
      "graphite-addr",
      "graphite-prefix",
      "graphite-batch-size",
      "metrics-port",
      "metrics-host",
      "metrics-listen-addr",
      "listen-addr",
      "api-keys",
      "command-api-keys",
      "command-listen-addr",
      "command-allow",
      "enable-openitcockpit-tweaks",
      "log-level",
      "log-format",
      "config",
    ],
    cleanup: [
      "mysql-url",
      "mysql-dsn",
      "cleanup-batch-size",
      "cleanup-batch-pause",
      ...ages,
      "log-level",
      "log-format",
      "config",
    ],
    schema: ["mysql-url", "mysql-dsn", "check", "create-database"],
    status: [
      "gearman-addr",
      "consumer",
      "rabbitmq-url",
      "mysql-url",
      "mysql-dsn",
      "metrics-url",
      "json",
    ],
    publish: [
      "queue",
      "count",
      "events-per-job",
      "form",
      "from-file",
      "gearman-addr",
      "consumer",
      "rabbitmq-url",
    ],
    losstest: [
      "mode",
      "run-id",
      "count",
      "gearman-addr",
      "consumer",
      "rabbitmq-url",
      "mysql-url",
      "mysql-dsn",
    ],
    verify: ["mysql-url-a", "mysql-url-b", "tables", "limit", "ignore-columns"],
    "dead-letters": [
      "action",
      "file",
      "dead-letter-file",
      "json",
      "mysql-url",
      "mysql-dsn",
      "mysql-batch-size",
      "status-max-age",
      "node-name",
      "perfdata-backends",
      "config",
    ],
    config: ["json"],
    version: [],
  };
  for (const command of COMMAND_NAMES) {
    const flags = rowsFor(command).map((r) => r.flag);
    for (const flag of expected[command]) assert.ok(flags.includes(flag), `${command} --${flag}`);
  }
  assert.deepEqual(rowsFor("version"), []);
});

Deno.test("settings: the documented defaults are pinned", () => {
  const expected: [CommandName, string, string][] = [
    ["run", "gearman-addr", "127.0.0.1:4730"],
    // The hard cap of the adaptive window since issue 14 (the Go worker's fixed cap was 8).
    ["run", "gearman-max-concurrent-jobs-per-queue", "64"],
    ["run", "gearman-reconnect-interval", "2s"],
    ["run", "drain-timeout", "30s"],
    ["run", "shutdown-flush-timeout", "10s"],
    ["run", "consumer", "gearman"],
    ["run", "rabbitmq-url", "amqp://statusengine:statusengine@127.0.0.1:5672/"],
    ["run", "rabbitmq-prefetch", "100"],
    ["run", "rabbitmq-reconnect-interval", "2s"],
    ["run", "mysql-url", "mysql://root@127.0.0.1:3306/statusengine"],
    // 14 tables × 2 writers + 1 since issue 14 (the Go worker's default was 25).
    ["run", "mysql-max-open-conns", "32"],
    ["run", "mysql-writers-per-table", "2"],
    ["run", "mysql-batch-size", "100"],
    ["run", "status-max-age", "5m"],
    ["run", "node-name", "statusengine"],
    ["run", "dead-letter-file", "/var/lib/statusengine-worker/statusengine-dead-letters.ndjson"],
    ["run", "perfdata-backends", "mysql"],
    ["run", "graphite-addr", "127.0.0.1:2003"],
    ["run", "graphite-prefix", "statusengine"],
    ["run", "graphite-batch-size", "100"],
    ["run", "metrics-port", "9105"],
    ["run", "metrics-host", "127.0.0.1"],
    ["run", "listen-addr", "127.0.0.1:8080"],
    ["run", "command-listen-addr", "127.0.0.1:8081"],
    ["run", "enable-openitcockpit-tweaks", "false"],
    ["run", "log-level", "info"],
    ["run", "log-format", "text"],
    ["cleanup", "cleanup-batch-size", "5000"],
    ["cleanup", "cleanup-batch-pause", "0s"],
    ["schema", "check", "false"],
    ["schema", "create-database", "true"],
    ["publish", "count", "1000"],
    ["publish", "events-per-job", "100"],
    ["losstest", "count", "10000"],
    ["verify", "limit", "5000"],
  ];
  for (const [command, flag, fallback] of expected) {
    const row = rowsFor(command).find((r) => r.flag === flag);
    assert.ok(row !== undefined, flag);
    assert.equal(defaultOf(row, command), fallback, `${command} --${flag}`);
  }
});

// Order, tables, columns and defaults are the legacy worker's, so an
// existing config.yml carries over value for value.
Deno.test("settings: retention rules keep the legacy worker's tables, columns, defaults and order", () => {
  const expected: [string, string, string, number][] = [
    ["statusengine_hostchecks", "start_time", "age_hostchecks", 5],
    ["statusengine_servicechecks", "start_time", "age_servicechecks", 5],
    ["statusengine_host_acknowledgements", "entry_time", "age_host_acknowledgements", 60],
    ["statusengine_service_acknowledgements", "entry_time", "age_service_acknowledgements", 60],
    ["statusengine_host_notifications", "start_time", "age_host_notifications", 60],
    ["statusengine_service_notifications", "start_time", "age_service_notifications", 60],
    ["statusengine_host_notifications_log", "start_time", "age_host_notifications_log", 60],
    ["statusengine_service_notifications_log", "start_time", "age_service_notifications_log", 60],
    ["statusengine_host_statehistory", "state_time", "age_host_statehistory", 365],
    ["statusengine_service_statehistory", "state_time", "age_service_statehistory", 365],
    ["statusengine_host_downtimehistory", "entry_time", "age_host_downtimes", 60],
    ["statusengine_service_downtimehistory", "entry_time", "age_service_downtimes", 60],
    ["statusengine_logentries", "entry_time", "age_logentries", 5],
    ["statusengine_perfdata", "timestamp_unix", "age_perfdata", 90],
    // The PHP worker's cleanup also emptied the task queue of leftovers (age_tasks).
    ["statusengine_tasks", "entry_time", "age_tasks", 5],
    // The worker's own tombstones of ended downtimes (docs/downtimes.md).
    ["statusengine_downtime_tombstones", "end_time", "age_downtime_tombstones", 60],
  ];
  assert.equal(RETENTION_RULES.length, expected.length);
  RETENTION_RULES.forEach((rule, i) => {
    const [table, column, yaml, days] = expected[i] ?? ["", "", "", 0];
    assert.equal(rule.table, table);
    assert.equal(rule.column, column);
    const row = SETTING_ROWS.find((r) => r.flag === rule.flag);
    assert.ok(row !== undefined);
    assert.equal(yamlKeyOf(row), yaml);
    assert.equal(row.default, String(days));
    assert.equal(rule.key, settingKeyOf(row));
  });
});

// Help and the reference read the legacy keys from the translations; a translation whose
// target is no setting would be a migration nobody can see.
Deno.test("settings: every legacy translation produces a setting", () => {
  for (const t of LEGACY_TRANSLATIONS) {
    assert.ok(SETTING_ROWS.some((row) => row.flag === t.target), t.target);
  }
});
