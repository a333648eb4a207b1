/**
 * The daemon's validated configuration, independent of how settings were obtained, so tests can
 * run a complete worker in-process and `run` only maps settings onto it.
 *
 * @module
 */
import type { PERFDATA_BACKENDS, SettingsFor } from "../config/mod.ts";
import type { QueueName } from "../events/mod.ts";
import type { HttpLimits } from "../http/mod.ts";
import type { SubmitMethod } from "../tasks/task_manager.ts";
import type { InfluxDbSettings } from "../perfdata/influxdb.ts";
import type { RemoteWriteSettings } from "../perfdata/remote_write.ts";
import type { QueueDeclareMode } from "../amqp/session.ts";

/** Where perfdata can go (`--perfdata-backends`, docs/perfdata.md#routing). */
export type PerfdataBackend = (typeof PERFDATA_BACKENDS)[number];

/**
 * Settings of `run` the daemon takes as they are, under their own keys: the settings table says
 * what each means (docs/configuration.md), so a new one is its row plus its name here.
 */
export const SETTINGS_AS_IS = [
  "drainTimeoutMs",
  "shutdownFlushTimeoutMs",
  "mysqlUrl",
  "mysqlMaxOpenConns",
  "mysqlStatementTimeoutMs",
  "mysqlFailbackAfterMs",
  "mysqlGiveBackAfterMs",
  "mysqlWritersPerTable",
  "nodeName",
  "perfdataLabelQuotes",
] as const satisfies readonly (keyof SettingsFor<"run">)[];

/** An HTTP listener that needs an API key; port 0 picks a free port (tests). */
interface KeyedListener {
  readonly hostname: string;
  readonly port: number;
  readonly apiKeys: readonly string[];
}

/** Whether `listener` is served: configured, with at least one non-empty key. */
export function served(listener: KeyedListener | null | undefined): listener is KeyedListener {
  return listener?.apiKeys.some((k) => k !== "") ?? false;
}

/** Everything the daemon needs, already validated. */
export interface WorkerConfig extends Pick<SettingsFor<"run">, (typeof SETTINGS_AS_IS)[number]> {
  /** Queue backend (`--consumer`); default `gearman`. */
  readonly consumer?: "gearman" | "rabbitmq";
  readonly gearmanServers: readonly string[];
  /** `--gearman-max-concurrent-jobs-per-queue` (RabbitMQ's cap is the prefetch). */
  readonly maxJobsPerQueue: number;
  /** Payload bytes in flight across all queues (`--max-in-flight-bytes`); default 256 MiB. */
  readonly maxInFlightBytes?: number;
  /** Jobs above this size are dead-lettered unread; default `MAX_JOB_SIZE` (tests shrink it). */
  readonly maxJobSize?: number;
  /** A queue that takes no waiting job this long is stalled; 0 disables; default 60 s (tests). */
  readonly queueStallTimeoutMs?: number;
  /** Required when {@link consumer} is `rabbitmq`. */
  readonly rabbitmq?: {
    /** AMQP URL; the password never reaches a log line. */
    readonly url: string;
    /** Unacknowledged deliveries per queue (docs/consumption.md#rabbitmq-channels). */
    readonly prefetch: number;
    /** Declare queues durable; the consumer and the command publisher use the same flags. */
    readonly durableQueues: boolean;
    /** `--rabbitmq-declare`; default `declare`. */
    readonly declare?: QueueDeclareMode;
  };
  /** Pause between attempts to rebuild a lost broker connection (both backends). */
  readonly reconnectIntervalMs: number;
  /** Gearman heartbeat; default 15 s of silence and 5 s for the answer (tests shorten them). */
  readonly heartbeatIntervalMs?: number;
  readonly heartbeatTimeoutMs?: number;
  readonly batchSize: number;
  readonly statusMaxAgeSeconds: number;
  /** NDJSON path, or null when disabled by an explicit empty value. */
  readonly deadLetterFile: string | null;
  /** Where perfdata goes; none = nowhere (the queue is still consumed). */
  readonly perfdataBackends: readonly PerfdataBackend[];
  /** docs/perfdata.md#graphite-path */
  readonly graphite: {
    readonly addr: string;
    readonly prefix: string;
    readonly batchSize: number;
    /** `--graphite-illegal-characters`; default the legacy set. */
    readonly illegalCharacters?: RegExp;
  };
  /** Needed when {@link perfdataBackends} holds `influxdb` (docs/perfdata.md#influxdb). */
  readonly influxdb?: InfluxDbSettings;
  /** Needed when {@link perfdataBackends} holds `prometheus` (docs/perfdata.md#prometheus). */
  readonly prometheusRemoteWrite?: RemoteWriteSettings;
  readonly openItcockpit: boolean;
  /** null disables the metrics listener (`--metrics-port 0`). */
  readonly metrics: { readonly hostname: string; readonly port: number } | null;
  /** Queues to consume; default all twelve. */
  readonly queues?: readonly QueueName[];
  /**
   * Consume the in-order queues only while holding the in-order lease (docs/downtimes.md#galera),
   * so several workers can share a job server. Absent or null: always (one worker per node).
   */
  readonly inOrderLock?: {
    /** Lease renewal and read interval; default `IN_ORDER_LOCK_POLL_MS` (1 s). */
    readonly pollMs?: number;
  } | null;
  /** Interval of the periodic summaries; default 30 s. */
  readonly statsIntervalMs?: number;
  /** Time between two readings of the backlog at the broker; default 10 s (tests shorten it). */
  readonly queueBacklogIntervalMs?: number;
  /** `POST /commands` (docs/operations.md#commands), its own keys; absent, null or keyless = off. */
  readonly commands?:
    | KeyedListener & {
      /** `raw` commands that pass (`--command-allow`); default the built-in list. */
      readonly allow?: readonly string[];
    }
    | null;
  /** Connection cap and timeouts of every HTTP listener; defaults of `listen` (tests shrink them). */
  readonly http?: HttpLimits;
  /** The UI's task queue (`--check-for-commands`); absent or null = not read. */
  readonly tasks?: {
    readonly intervalMs: number;
    readonly submitMethod: SubmitMethod;
    /** The core's external command file, for `cmd`. */
    readonly externalCommandFile: string;
    /** `raw` commands that pass (`--command-allow`, as for `/commands`); default the built-in list. */
    readonly allow?: readonly string[];
  } | null;
  /** `GET /ws` (docs/operations.md#ws); absent, null or without keys = not served. */
  readonly websocket?: KeyedListener | null;
  /** Settings that differ from their defaults, by flag name, secrets masked, for the start-up log. */
  readonly changedSettings?: Readonly<Record<string, string>>;
}
