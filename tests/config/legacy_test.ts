import assert from "node:assert/strict";
import { rejection } from "../helpers/capture.ts";
import { ConfigError } from "../../src/config/values.ts";
import { FIXED_SETTINGS, legacyBoolean } from "../../src/config/legacy.ts";
import { loadSettings } from "../../src/config/load.ts";
import { type CommandName, SETTING_ROWS } from "../../src/config/settings.ts";
import { formatByteSize, formatGoDuration } from "../../src/config/values.ts";
import { MAX_JOB_SIZE, STALL_TIMEOUT_MS } from "../../src/consumer/consumer.ts";
import { HEARTBEAT_INTERVAL_MS, HEARTBEAT_TIMEOUT_MS } from "../../src/gearman/connection.ts";
import { MAX_CONNECTIONS } from "../../src/http/listen.ts";
import { INFLUXDB_BATCH_SIZE, INFLUXDB_MEASUREMENT } from "../../src/perfdata/influxdb.ts";
import { REMOTE_WRITE_BATCH_SIZE } from "../../src/perfdata/remote_write.ts";

const PATH = "/opt/statusengine/worker/etc/config.yml";

function load<C extends CommandName>(command: C, file: string, env: Record<string, string> = {}) {
  return loadSettings(command, {
    argv: ["--config", PATH],
    env,
    readTextFile: () => Promise.resolve(file),
  });
}

/**
 * The legacy worker's example `etc/config.yml`, reconstructed key by key: every legacy
 * key with the example's value (its default where the example gives none).
 * `number_of_bulk_records` carries the example's recommendation for MySQL (100); the legacy
 * default 1000 is covered by its own test below.
 */
const LEGACY_EXAMPLE = `
# Every node in the cluster needs a unique name
node_name: Crowbar

use_gearman: 1
gearman:
  address: 127.0.0.1
  port: 4730
  timeout: 1000

use_rabbitmq: 0
rabbitmq:
  host: 127.0.0.1
  port: 5672
  user: statusengine
  password: statusengine
  vhost: /
  exchange: statusengine
  durable_exchange: 0
  durable_queues: 0

use_redis: 0
redis:
  address: 127.0.0.1
  port: 6379
  db: 0

store_live_data_in_archive_backend: 1

use_mysql: 0
mysql:
  host: 127.0.0.1
  port: 3306
  username: statusengine
  password: password
  database: statusengine_data
  encoding: utf8

dump_mysql_query_parameters: 0

use_crate: 0
crate:
  nodes:
    - 127.0.0.1:4200
  username: crate
  password: ""

number_of_bulk_records: 100
max_bulk_delay: 5

number_servicestatus_worker: 1
number_hoststatus_worker: 1
number_logentry_worker: 1
number_statechange_worker: 1
number_hostcheck_worker: 1
number_servicecheck_worker: 1
number_perfdata_worker: 1
number_notification_log_worker: 1
number_misc_worker: 1

process_perfdata: 0
perfdata_backend:
  - crate

graphite_prefix: statusengine
graphite_illegal_characters: /[^a-zA-Z^0-9\\-\\.]/
graphite_address: localhost
graphite_port: 2003

elasticsearch_template:
  name: statusengine-metric
  number_of_shards: 2
  number_of_replicas: 0
  refresh_interval: 15s
  codec: best_compression
  enable_source: 1
elasticsearch_index: statusengine-metric-
elasticsearch_pattern: none
elasticsearch_address: 127.0.0.1
elasticsearch_port: 9200

check_for_commands: 0
command_check_interval: 15
external_command_file: /opt/naemon/var/naemon.cmd
# The example's own spelling, which the PHP worker read (next to query_handler).
query_hander: /opt/naemon/var/naemon.qh
submit_method: broker

syslog_enabled: 1
syslog_tag: statusengine-worker

age_hostchecks: 5
age_host_acknowledgements: 60
age_host_notifications: 60
age_host_statehistory: 365
age_host_downtimes: 60
age_servicechecks: 5
age_service_acknowledgements: 60
age_service_notifications: 60
age_service_statehistory: 365
age_service_downtimes: 60
age_logentries: 5
age_tasks: 1
age_perfdata: 90
age_host_notifications_log: 60
age_service_notifications_log: 60

disable_http_proxy: 1

is_openitcockpit: 0
`;

Deno.test("legacy config.yml: the PHP example resolves to the equivalent settings", async () => {
  const { settings, sources, warnings } = await load("run", LEGACY_EXAMPLE);
  assert.equal(settings.nodeName, "Crowbar");
  assert.equal(sources.nodeName?.text, `file ${PATH} key node_name`);
  assert.equal(settings.consumer, "gearman");
  assert.deepEqual(settings.gearmanAddr, ["127.0.0.1:4730"]);
  assert.equal(settings.rabbitmqUrl, "amqp://statusengine:statusengine@127.0.0.1:5672/");
  assert.equal(settings.rabbitmqDurableQueues, false);
  assert.equal(sources.rabbitmqDurableQueues?.text, `file ${PATH} key rabbitmq.durable_queues`);
  assert.equal(settings.mysqlUrl, "mysql://statusengine:password@127.0.0.1:3306/statusengine_data");
  assert.equal(settings.mysqlBatchSize, 100);
  assert.equal(sources.mysqlBatchSize?.text, `file ${PATH} key number_of_bulk_records`);
  // perfdata_backend [crate] has no supported entry: perfdata goes nowhere, as it never went to
  // MySQL (and process_perfdata: 0 does not consume the queue anyway).
  assert.deepEqual(settings.perfdataBackends, []);
  assert.equal(sources.perfdataBackends?.text, `file ${PATH} key perfdata_backend`);
  assert.equal(settings.graphitePrefix, "statusengine");
  assert.equal(settings.graphiteAddr, "localhost:2003");
  // process_perfdata: 0 — the perfdata queue is not consumed, as in the PHP worker.
  assert.deepEqual(settings.excludeQueues, ["statusngin_service_perfdata"]);
  assert.equal(sources.excludeQueues?.text, `file ${PATH} key process_perfdata`);
  assert.deepEqual(settings.queues, []);
  assert.equal(settings.checkForCommands, false);
  assert.equal(sources.checkForCommands?.text, `file ${PATH} key check_for_commands`);
  assert.equal(settings.commandCheckIntervalMs, 15_000);
  assert.equal(settings.submitMethod, "broker");
  assert.equal(settings.externalCommandFile, "/opt/naemon/var/naemon.cmd");
  assert.equal(settings.graphiteIllegalCharacters, "/[^a-zA-Z^0-9\\-\\.]/");
  assert.equal(settings.enableOpenitcockpitTweaks, false);
  assert.equal(sources.enableOpenitcockpitTweaks?.text, `file ${PATH} key is_openitcockpit`);
  // Not in the legacy file: defaults.
  assert.equal(settings.statusMaxAgeMs, 300_000);
  assert.equal(settings.gearmanMaxConcurrentJobsPerQueue, 64);

  // One warning per legacy feature group without an equivalent, none for mapped keys.
  const expected = [
    /gearman\.timeout/,
    /rabbitmq\.exchange, rabbitmq\.durable_exchange /,
    /perfdata_backend entry crate/,
    /keys use_redis, redis .*Redis/,
    /keys use_crate, crate .*CrateDB/,
    /keys elasticsearch_template, elasticsearch_index, elasticsearch_pattern, elasticsearch_address, elasticsearch_port .*Elasticsearch/,
    /key max_bulk_delay /,
    /key store_live_data_in_archive_backend /,
    /key use_mysql /,
    /key dump_mysql_query_parameters /,
    /key query_hander .*query handler is not supported/,
    /keys syslog_enabled, syslog_tag /,
    /key disable_http_proxy /,
  ];
  assert.equal(warnings.length, expected.length, warnings.join("\n"));
  for (const pattern of expected) {
    assert.equal(
      warnings.filter((w) => pattern.test(w)).length,
      1,
      `${pattern}\n${warnings.join("\n")}`,
    );
  }
  for (const warning of warnings) {
    assert.ok(!warning.includes("password"), warning);
    assert.ok(!/statusengine@|:statusengine/.test(warning), warning);
  }
});

Deno.test("legacy config.yml: cleanup reads the age_* keys of the same file", async () => {
  const { settings, warnings } = await load("cleanup", LEGACY_EXAMPLE);
  assert.equal(settings.ageHostchecksDays, 5);
  assert.equal(settings.ageHostStatehistoryDays, 365);
  assert.equal(settings.agePerfdataDays, 90);
  assert.equal(settings.ageTasksDays, 1);
  assert.equal(settings.mysqlUrl, "mysql://statusengine:password@127.0.0.1:3306/statusengine_data");
  // Only what concerns cleanup would be reported, and nothing does.
  assert.deepEqual(warnings, []);
});

// The PHP worker's default and example value is 1000; refusing it made an unchanged legacy
// file fail to start. The new key keeps refusing values above the ceiling.
Deno.test("legacy config.yml: number_of_bulk_records 1000 starts with 700 and a warning; 0 refuses", async () => {
  const file = LEGACY_EXAMPLE.replace(
    "number_of_bulk_records: 100",
    "number_of_bulk_records: 1000",
  );
  const { settings, sources, warnings } = await load("run", file);
  assert.equal(settings.mysqlBatchSize, 700);
  assert.equal(sources.mysqlBatchSize?.text, `file ${PATH} key number_of_bulk_records`);
  assert.ok(
    warnings.some((w) => /number_of_bulk_records 1000 .*ceiling of 700.*using 700/.test(w)),
    warnings.join("\n"),
  );
  let caught = await rejection(load("run", "number_of_bulk_records: 0\n"));
  assert.ok(caught instanceof ConfigError);
  assert.equal(caught.setting, "mysql-batch-size");
  assert.equal(caught.source, `file ${PATH} key number_of_bulk_records`);
  caught = await rejection(load("run", "mysql_batch_size: 1000\n"));
  assert.ok(caught instanceof ConfigError, "the new key still refuses above 700");
});

Deno.test("legacy config.yml: a new key beats its legacy key, with a warning", async () => {
  const file = `
node_name: Crowbar
nodename: new-node
number_of_bulk_records: 1000
mysql_batch_size: 700
mysql:
  host: old-db
mysql_dsn: se:pw@tcp(new-db:3306)/se
use_rabbitmq: 1
use_gearman: 0
consumer: gearman
perfdata_backend: [mysql]
perfdata_route: graphite
graphite_address: old-carbon
graphite_addr: new-carbon:2003
is_openitcockpit: 1
enable_openitcockpit_tweaks: false
gearman: {address: old-gearman}
gearman_addr: new-gearman:4730
rabbitmq: {host: old-rabbit}
rabbitmq_url: amqp://u:p@new-rabbit:5672/
`;
  const { settings, warnings } = await load("run", file);
  assert.equal(settings.nodeName, "new-node");
  assert.equal(settings.mysqlBatchSize, 700);
  assert.equal(settings.mysqlUrl, "mysql://se:pw@new-db:3306/se");
  assert.equal(settings.consumer, "gearman");
  assert.deepEqual(settings.perfdataBackends, ["graphite"]);
  assert.equal(settings.graphiteAddr, "new-carbon:2003");
  assert.equal(settings.enableOpenitcockpitTweaks, false);
  assert.deepEqual(settings.gearmanAddr, ["new-gearman:4730"]);
  assert.equal(settings.rabbitmqUrl, "amqp://u:p@new-rabbit:5672/");
  const shadowed = [
    /node_name .*nodename is set/,
    /number_of_bulk_records .*mysql_batch_size is set/,
    /mysql .*mysql_dsn is set/,
    /use_gearman, use_rabbitmq .*consumer is set/,
    /perfdata_backend .*perfdata_route is set/,
    /graphite_address .*graphite_addr is set/,
    /is_openitcockpit .*enable_openitcockpit_tweaks is set/,
    /gearman .*gearman_addr is set/,
    /rabbitmq .*rabbitmq_url is set/,
  ];
  assert.equal(warnings.length, shadowed.length, warnings.join("\n"));
  for (const pattern of shadowed) {
    assert.ok(warnings.some((w) => pattern.test(w)), `${pattern}\n${warnings.join("\n")}`);
  }
});

Deno.test("legacy config.yml: environment and flags still beat legacy keys", async () => {
  const { settings, sources } = await loadSettings("run", {
    argv: ["--config", PATH, "--nodename", "from-flag"],
    env: { STATUSENGINE_MYSQL_DSN: "u:p@tcp(env-db:3306)/db" },
    readTextFile: () => Promise.resolve("node_name: Crowbar\nmysql: {host: old-db}\n"),
  });
  assert.equal(settings.nodeName, "from-flag");
  assert.equal(settings.mysqlUrl, "mysql://u:p@env-db:3306/db");
  assert.equal(sources.mysqlUrl?.text, "env STATUSENGINE_MYSQL_DSN");
});

Deno.test("legacy config.yml: booleans may be 1/0/true/false/on/off", async () => {
  for (
    const [text, value] of [["1", true], ["on", true], ["'On'", true], ["true", true]] as const
  ) {
    const { settings } = await load("run", `is_openitcockpit: ${text}\n`);
    assert.equal(settings.enableOpenitcockpitTweaks, value, text);
  }
  for (const [text, value] of [["0", false], ["off", false], ["false", false]] as const) {
    const { settings } = await load("run", `is_openitcockpit: ${text}\n`);
    assert.equal(settings.enableOpenitcockpitTweaks, value, text);
  }
  assert.equal(legacyBoolean("yes"), undefined);
  let caught = await rejection(load("run", "is_openitcockpit: yes\n"));
  assert.ok(caught instanceof ConfigError);
  assert.equal(caught.setting, "enable-openitcockpit-tweaks");
  // The new key keeps Go's strict spellings: on/off are legacy-only (docs/operations.md#values).
  caught = await rejection(load("run", "enable_openitcockpit_tweaks: on\n"));
  assert.ok(caught instanceof ConfigError);
});

Deno.test("legacy config.yml: use_gearman and use_rabbitmq choose the consumer", async () => {
  assert.equal(
    (await load("run", "use_rabbitmq: on\nuse_gearman: off\n")).settings.consumer,
    "rabbitmq",
  );
  assert.equal((await load("run", "use_rabbitmq: true\n")).settings.consumer, "rabbitmq");
  assert.equal((await load("run", "use_gearman: 1\n")).settings.consumer, "gearman");
  assert.equal((await load("run", "use_rabbitmq: 0\n")).settings.consumer, "gearman");
  const refused = [
    "use_gearman: 1\nuse_rabbitmq: 1\n",
    "use_gearman: 0\nuse_rabbitmq: 0\n",
    "use_gearman: 0\n",
  ];
  for (const file of refused) {
    const caught = await rejection(load("run", file));
    assert.ok(caught instanceof ConfigError, file);
    assert.equal(caught.setting, "consumer");
    assert.match(caught.message, /set consumer: gearman or consumer: rabbitmq/);
  }
});

Deno.test("legacy config.yml: blocks become URLs with percent-encoding and legacy defaults", async () => {
  const { settings } = await load(
    "run",
    `
rabbitmq:
  host: rabbit.example
  user: se
  password: "p@ss/w:rd"
  vhost: /monitoring
mysql:
  host: "::1"
  password: "p@ss word"
  database: se_data
gearman:
  port: "4731"
graphite_port: 2004
`,
  );
  assert.equal(settings.rabbitmqUrl, "amqp://se:p%40ss%2Fw%3Ard@rabbit.example:5672/%2Fmonitoring");
  assert.equal(settings.mysqlUrl, "mysql://statusengine:p%40ss%20word@[::1]:3306/se_data");
  assert.deepEqual(settings.gearmanAddr, ["127.0.0.1:4731"]);
  assert.equal(settings.graphiteAddr, "localhost:2004");
});

Deno.test("legacy config.yml: perfdata_backend maps onto perfdata_backends", async () => {
  const cases: [string, string[]][] = [
    ["[mysql]", ["mysql"]],
    ["[graphite]", ["graphite"]],
    ["[mysql, graphite]", ["mysql", "graphite"]],
    ["[graphite, elasticsearch]", ["graphite"]],
    ["graphite", ["graphite"]],
    ["[Prometheus, influxdb, mysql]", ["mysql", "influxdb", "prometheus"]],
  ];
  for (const [list, backends] of cases) {
    const { settings } = await load("run", `perfdata_backend: ${list}\n`);
    assert.deepEqual(settings.perfdataBackends, backends, list);
  }
  const { warnings } = await load("run", "perfdata_backend: [mysql, crate, elasticsearch]\n");
  assert.equal(warnings.length, 1);
  assert.match(warnings[0] ?? "", /entries crate, elasticsearch/);
});

Deno.test("legacy config.yml: a perfdata_backend list without a supported entry writes perfdata nowhere, not to MySQL", async () => {
  // The PHP worker wrote such perfdata to CrateDB or Elasticsearch only; falling back to the
  // default would start filling statusengine_perfdata, which this installation never used.
  for (const list of ["[crate]", "[elasticsearch, crate]", "[]"]) {
    const file = `process_perfdata: 1\nperfdata_backend: ${list}\n`;
    const { settings, sources, warnings } = await load("run", file);
    assert.deepEqual(settings.perfdataBackends, [], list);
    assert.equal(sources.perfdataBackends?.text, `file ${PATH} key perfdata_backend`, list);
    if (list !== "[]") assert.match(warnings.join("\n"), /perfdata is written nowhere/, list);
  }
});

Deno.test("legacy config.yml: a legacy key or block field without a value is not dropped silently", async () => {
  // A config.yml template that rendered `node_name:` (or the database host) empty ran as node
  // 'statusengine' (against 127.0.0.1) without a word, as a bare key of the new names no longer does.
  const file =
    "node_name:\nmysql:\n  host:\n  database: legacy_db\nrabbitmq:\n  durable_queues: ~\n";
  const { settings, warnings } = await load("run", file);
  assert.equal(settings.nodeName, "statusengine");
  assert.equal(settings.mysqlUrl, "mysql://statusengine:password@127.0.0.1:3306/legacy_db");
  for (const key of ["node_name", "mysql.host", "rabbitmq.durable_queues"]) {
    assert.equal(
      warnings.filter((w) => w.includes(`key ${key} has no value`)).length,
      1,
      `${key}\n${warnings.join("\n")}`,
    );
  }
  assert.ok(!warnings.some((w) => w.includes("mysql.database")), warnings.join("\n"));
});

Deno.test("legacy config.yml: a malformed legacy value refuses, naming the legacy key", async () => {
  const cases: [string, string, RegExp][] = [
    ["mysql: localhost\n", "mysql-url", /key mysql: expected a mapping/],
    ["gearman:\n  port: 99999\n", "gearman-addr", /gearman\.port/],
    ["number_of_bulk_records: many\n", "mysql-batch-size", /number_of_bulk_records/],
    ["perfdata_backend: {a: 1}\n", "perfdata-backends", /perfdata_backend/],
    ["node_name: [a]\n", "node-name", /node_name/],
    ["node_name: ''\n", "node-name", /must not be empty/],
  ];
  for (const [file, setting, message] of cases) {
    const caught = await rejection(load("run", file));
    assert.ok(caught instanceof ConfigError, file);
    assert.equal(caught.setting, setting, file);
    assert.match(caught.message, message, file);
  }
});

Deno.test("legacy config.yml: rabbitmq.durable_queues sets rabbitmq_durable_queues, the new key wins", async () => {
  const on = await load("run", "rabbitmq:\n  host: mq\n  durable_queues: 1\n");
  assert.equal(on.settings.rabbitmqDurableQueues, true);
  assert.equal(on.sources.rabbitmqDurableQueues?.text, `file ${PATH} key rabbitmq.durable_queues`);
  assert.equal(on.settings.rabbitmqUrl, "amqp://statusengine:statusengine@mq:5672/");
  const absent = await load("run", "rabbitmq:\n  host: mq\n");
  assert.equal(absent.settings.rabbitmqDurableQueues, false);
  assert.equal(absent.sources.rabbitmqDurableQueues?.text, "default");
  const both = await load(
    "run",
    "rabbitmq_durable_queues: false\nrabbitmq:\n  durable_queues: 1\n",
  );
  assert.equal(both.settings.rabbitmqDurableQueues, false);
  assert.ok(both.warnings.some((w) => /rabbitmq\.durable_queues/.test(w)), both.warnings.join());
});

Deno.test("legacy SE_* environment: read below STATUSENGINE_* and below the config file, as the PHP worker did", async () => {
  const env = {
    SE_NODE_NAME: "from-se",
    SE_MYSQL_HOST: "db.example",
    SE_MYSQL_PASSWORD: "s3cret",
    SE_USE_RABBITMQ: "1",
    SE_RABBITMQ_DURABLE_QUEUES: "true",
    SE_NUMBER_OF_BULK_RECORDS: "1000",
    SE_PERFDATA_BACKEND: "mysql, graphite",
    SE_IS_OPENITCOCKPIT: "on",
  };
  const only = await loadSettings("run", { argv: [], env });
  assert.equal(only.settings.nodeName, "from-se");
  assert.equal(only.sources.nodeName?.text, "env SE_NODE_NAME");
  assert.equal(
    only.settings.mysqlUrl,
    "mysql://statusengine:s3cret@db.example:3306/statusengine_data",
  );
  assert.equal(only.sources.mysqlUrl?.text, "env SE_MYSQL_*");
  assert.equal(only.settings.consumer, "rabbitmq");
  assert.equal(only.settings.rabbitmqDurableQueues, true);
  assert.equal(only.settings.mysqlBatchSize, 700);
  assert.deepEqual(only.settings.perfdataBackends, ["mysql", "graphite"]);
  assert.equal(only.settings.enableOpenitcockpitTweaks, true);
  assert.ok(only.warnings.some((w) => /1000 in the SE_\* environment/.test(w)));
  assert.ok(only.warnings.every((w) => !w.includes("s3cret")));

  // STATUSENGINE_* wins over SE_*; the config file wins over SE_* (legacy: file > SE_*).
  const mixed = await loadSettings("run", {
    argv: ["--config", PATH],
    env: { ...env, STATUSENGINE_NODE_NAME: "from-statusengine" },
    readTextFile: () => Promise.resolve("mysql_batch_size: 50\nis_openitcockpit: 0\n"),
  });
  assert.equal(mixed.settings.nodeName, "from-statusengine");
  assert.equal(mixed.settings.mysqlBatchSize, 50);
  assert.equal(mixed.settings.enableOpenitcockpitTweaks, false);

  // cleanup reads the SE_AGE_* variables.
  const cleanup = await loadSettings("cleanup", { argv: [], env: { SE_AGE_HOSTCHECKS: "3" } });
  assert.equal(cleanup.settings.ageHostchecksDays, 3);
  assert.equal(cleanup.sources.ageHostchecksDays?.text, "env SE_AGE_HOSTCHECKS");

  // A malformed SE_* value refuses, naming the variable.
  await assert.rejects(
    loadSettings("run", { argv: [], env: { SE_IS_OPENITCOCKPIT: "maybe" } }),
    (err: unknown) => err instanceof ConfigError && /SE_IS_OPENITCOCKPIT/.test(err.message),
  );
});

// The PHP worker reads the MySQL user from SE_MYSQL_USER (its docs/Env.md and examples), not from
// SE_MYSQL_USERNAME as the key path mysql.username would give: an environment-only installation
// kept its user and silently fell back to the default one.
Deno.test("legacy SE_* environment: the MySQL user is SE_MYSQL_USER, as in the PHP worker", async () => {
  const env = { SE_MYSQL_USER: "monitor", SE_MYSQL_PASSWORD: "pw", SE_MYSQL_DATABASE: "se" };
  const { settings, sources } = await loadSettings("run", { argv: [], env });
  assert.equal(settings.mysqlUrl, "mysql://monitor:pw@127.0.0.1:3306/se");
  assert.equal(sources.mysqlUrl?.text, "env SE_MYSQL_*");
});

// The PHP worker took every key the file lacks from its SE_* variable, the fields of a block one
// by one; a file's mysql: block hid SE_MYSQL_PASSWORD, and the legacy default password was used.
Deno.test("legacy SE_* environment: fills the keys a file's legacy block or key pair lacks, field by field", async () => {
  const file = "mysql:\n  host: db.example\n  username: monitor\ngraphite_address: carbon\n";
  const env = { SE_MYSQL_PASSWORD: "s3cret", SE_MYSQL_HOST: "ignored", SE_GRAPHITE_PORT: "2013" };
  const { settings, sources } = await load("run", file, env);
  assert.equal(settings.mysqlUrl, "mysql://monitor:s3cret@db.example:3306/statusengine_data");
  assert.equal(settings.graphiteAddr, "carbon:2013");
  assert.equal(
    sources.graphiteAddr?.text,
    `file ${PATH} key graphite_address and env SE_GRAPHITE_PORT`,
  );
  // A bad value names the variable it came from, not the file.
  const bad = await rejection(load("run", file, { SE_MYSQL_PORT: "x" }));
  assert.ok(bad instanceof ConfigError);
  assert.match(bad.message, /from env SE_MYSQL_PORT: "x" is not a port/);
});

// Ignoring number_*_worker: 0 and process_perfdata: 0 made a migrated worker consume queues
// the PHP worker left alone (perfdata suddenly filled MySQL).
Deno.test("legacy config.yml: number_*_worker 0 and process_perfdata 0 exclude their queues; the new key wins", async () => {
  const { settings, sources, warnings } = await load(
    "run",
    "number_perfdata_worker: 0\nnumber_misc_worker: 0\nnumber_hoststatus_worker: 4\n" +
      "process_perfdata: 1\n",
  );
  assert.deepEqual(settings.excludeQueues, [
    "statusngin_service_perfdata",
    "statusngin_acknowledgements",
    "statusngin_contactnotificationmethod",
    "statusngin_downtimes",
  ]);
  assert.equal(
    sources.excludeQueues?.text,
    `file ${PATH} keys number_perfdata_worker, number_misc_worker`,
  );
  assert.ok(
    warnings.some((w) => /number_hoststatus_worker .*no processes per queue group/.test(w)),
  );
  const newKey = await load(
    "run",
    "exclude_queues: [statusngin_logentries]\nprocess_perfdata: 0\n",
  );
  assert.deepEqual(newKey.settings.excludeQueues, ["statusngin_logentries"]);
  assert.ok(newKey.warnings.some((w) => /Ignoring legacy key process_perfdata/.test(w)));
  await assert.rejects(load("run", "queues: [statusngin_flappings]\n"), ConfigError);
});

Deno.test("legacy: the fixed values the warnings name are the constants the code uses", () => {
  const constants: Record<string, string> = {
    "gearman-heartbeat-interval": formatGoDuration(HEARTBEAT_INTERVAL_MS),
    "gearman-heartbeat-timeout": formatGoDuration(HEARTBEAT_TIMEOUT_MS),
    "max-job-size": formatByteSize(MAX_JOB_SIZE),
    "queue-stall-timeout": formatGoDuration(STALL_TIMEOUT_MS),
    "influxdb-measurement": INFLUXDB_MEASUREMENT,
    "influxdb-batch-size": String(INFLUXDB_BATCH_SIZE),
    "prometheus-remote-write-batch-size": String(REMOTE_WRITE_BATCH_SIZE),
    "http-max-connections": String(MAX_CONNECTIONS),
  };
  assert.deepEqual(
    Object.fromEntries(FIXED_SETTINGS.map((f) => [f.flag, f.value])),
    constants,
  );
  // None of them is still a setting, so a given value could never mean anything.
  for (const f of FIXED_SETTINGS) {
    assert.ok(!SETTING_ROWS.some((row) => row.flag === f.flag), f.flag);
  }
});
