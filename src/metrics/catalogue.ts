/**
 * Every metric the worker exports, declared once (docs/operations.md#metrics, D10). Names, types,
 * label names and values are an interface dashboards and alerts depend on; HELP texts are free.
 * Pre-created zero series are declared by label *set* (`queues`, `tables`, …); the layers that own
 * the values supply them, since this module imports nothing else of ours. The metrics table of
 * docs/metrics.md is rendered from it here (tools/gen_config_reference.ts writes and checks it).
 *
 * @module
 */

export type MetricType = "counter" | "gauge" | "histogram";

/**
 * Label-value sets a metric can be pre-created over (docs/operations.md#label-sets), the keys of
 * {@link PRECREATED}; `none`: the series appear on first use.
 */
export type LabelSet = keyof typeof PRECREATED;

export interface MetricSpec {
  readonly name: string;
  readonly type: MetricType;
  readonly help: string;
  /** Default none. */
  readonly labels?: readonly string[];
  /** Pre-created series; default `none`. Unlabelled metrics export 0 by themselves. */
  readonly precreate?: LabelSet;
  /** Instead of `precreate`: the series deliberately appear later, as docs/metrics.md tells. */
  readonly notPrecreated?: string;
  /** Histogram buckets (prom-client's defaults when absent). */
  readonly buckets?: readonly number[];
  /** Gauges that start at 1 instead of 0 (availability, docs/operations.md#zero-series). */
  readonly initial?: number;
  /** Read from the worker's own process at every scrape (src/metrics/registry.ts). */
  readonly process?: ProcessField;
}

/** What a `process_*` metric reads of the worker's process (src/metrics/registry.ts). */
export type ProcessField =
  | "cpuSeconds"
  | "residentMemoryBytes"
  | "virtualMemoryBytes"
  | "openFds"
  | "maxFds"
  | "startTimeSeconds";

/** The most common label and pre-creation pairs of the rows below. */
const PER_QUEUE = { labels: ["queue_name"], precreate: "queues" } as const;
const PER_LISTENER = { labels: ["listener"], precreate: "listeners" } as const;
const PER_BACKEND = { labels: ["backend"], precreate: "perfdata_backends" } as const;
const PER_BATCHED_TABLE = { labels: ["table"], precreate: "batched_tables" } as const;

/** The fields of a {@link MetricSpec} besides its name, type and help. */
type Extra = Omit<MetricSpec, "name" | "type" | "help">;

/** The row builder of one metric type, e.g. `counter(name, help, { labels: ["table"] })`. */
function ofType<const T extends MetricType>(type: T) {
  return <const N extends string, const X extends Extra = Record<never, never>>(
    name: N,
    help: string,
    extra?: X,
  ) => ({ name, type, help, ...extra }) as { name: N; type: T; help: string } & X;
}

const counter = ofType("counter");
const gauge = ofType("gauge");
const histogram = ofType("histogram");

/** The catalogue. Keys are the handles' names in code. */
export const METRICS = {
  // --- ingestion -----------------------------------------------------------
  queueMessagesReceived: counter(
    "statusengine_queue_messages_received_total",
    "Jobs taken from the broker, counted before decoding.",
    PER_QUEUE,
  ),
  queuePayloadsRepaired: counter(
    "statusengine_queue_payloads_repaired_total",
    "Jobs whose payload was not valid UTF-8 and was repaired (invalid bytes read as Windows-1252).",
    PER_QUEUE,
  ),
  queueEventsDiscardedStale: counter(
    "statusengine_queue_events_discarded_stale_total",
    "Status events dropped for being older than --status-max-age (clock skew if it climbs steadily) or than the cutoff of the last core-restart sweep.",
    { labels: ["queue_name"], precreate: "status_queues" },
  ),
  queueJobsInFlight: gauge(
    "statusengine_queue_jobs_in_flight",
    "Jobs being handled now; pinned at statusengine_queue_window means the queue is falling behind.",
    PER_QUEUE,
  ),
  queueWindow: gauge(
    "statusengine_queue_window",
    "Jobs the queue may hold in flight now: the adaptive window, which grows while its tables' writers hold less than two batches and shrinks while MySQL is slow (1 for statusngin_downtimes).",
    PER_QUEUE,
  ),
  queueHandlerDuration: histogram(
    "statusengine_queue_handler_duration_seconds",
    "Time from receiving a job until its rows were committed (D1) and it was answered.",
    PER_QUEUE,
  ),
  queueEventLag: histogram(
    "statusengine_queue_event_lag_seconds",
    "How far MySQL is behind the core: when a status or check job's rows are committed, the age of the newest event in them (worker clock minus the event's time).",
    {
      labels: ["queue_name"],
      precreate: "event_lag_queues",
      buckets: [0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600],
    },
  ),
  queueConnected: gauge(
    "statusengine_queue_connected",
    "1 while every job server connection of the queue is up and registered, 0 after a loss.",
    // A 0 would report every starting worker as disconnected (docs/operations.md#connection-metrics).
    { labels: ["queue_name"], notPrecreated: "appears at the first real connection" },
  ),
  queueBacklog: gauge(
    "statusengine_queue_backlog",
    "Jobs waiting at the broker that no worker has taken yet (gearmand: queued minus running, summed over the job servers; RabbitMQ: ready messages), read every 10 s apart from consumption; absent while not known (a job server or the broker cannot be asked, or this worker does not consume the queue now).",
    // Before the first reading the backlog is unknown, not 0.
    { labels: ["queue_name"], notPrecreated: "appears at the first reading, absent while unknown" },
  ),
  queueReconnects: counter(
    "statusengine_queue_reconnects_total",
    "Broker connections of the queue re-established after a loss.",
    PER_QUEUE,
  ),
  queueJobsRetried: counter(
    "statusengine_queue_jobs_retried_total",
    "Failed attempts of a job that is tried again on the same connection (MySQL held, dead-letter file failing, ...).",
    PER_QUEUE,
  ),
  queueStalled: gauge(
    "statusengine_queue_stalled",
    "1 while jobs wait at the broker and the queue, with room to take them, has taken none for 60 s, or while every slot holds a job and none finished for 60 s although MySQL took writes.",
    PER_QUEUE,
  ),
  queueJobs: counter(
    "statusengine_queue_jobs_total",
    "Job deliveries by outcome: completed (acknowledged), abandoned (left for redelivery).",
    { labels: ["queue_name", "result"], precreate: "queues_x_results" },
  ),
  queueJobsGivenBack: counter(
    "statusengine_queue_jobs_given_back_total",
    "Jobs in flight handed back to the broker for another worker to take (docs/retries.md#give-back): mysql_unavailable = MySQL could not take writes for --mysql-give-back-after and another worker consumes the queue.",
    { labels: ["queue_name", "reason"], precreate: "queues_x_give_back_reasons" },
  ),
  queueDowntimeUpdatesUnmatched: counter(
    "statusengine_queue_downtime_updates_unmatched_total",
    "Downtime START/STOP events that could not be recorded because a DELETE before the downtime's window had already removed it (docs/downtimes.md); a START/STOP whose ADD is missing or late creates the rows and is not counted.",
  ),
  deadLetters: counter(
    "statusengine_dead_letters_total",
    "Payloads or rows dead-lettered instead of written to MySQL (D7), counted once the record is in the dead-letter file.",
    { labels: ["queue_name", "reason"], precreate: "queues_x_dead_letter_reasons" },
  ),
  deadLetterWriteErrors: counter(
    "statusengine_dead_letter_write_errors_total",
    "Failed appends to the dead-letter file (full, unwritable, or no answer for 5 s); the job waits and is retried, /readyz fails until one succeeds.",
  ),
  // --- MySQL ---------------------------------------------------------------
  dbEventsWritten: counter(
    "statusengine_db_events_written_total",
    "Rows in successful statements (batched tables) or successful statements (downtime tables).",
    { labels: ["table"], precreate: "tables" },
  ),
  dbFlushes: counter(
    "statusengine_db_flushes_total",
    "Successful bulk statements; events_written / flushes is the average batch size.",
    PER_BATCHED_TABLE,
  ),
  dbBatchFlushDuration: histogram(
    "statusengine_db_batch_flush_duration_seconds",
    "Duration of each flush attempt including its retries, per table.",
    PER_BATCHED_TABLE,
  ),
  dbBatchSizeAtFlush: histogram(
    "statusengine_db_batch_size_at_flush",
    "Rows in each flush attempt.",
    { buckets: [1, 5, 10, 25, 50, 100, 250, 500, 700, 1400] },
  ),
  dbBatchRetries: counter(
    "statusengine_db_batch_retries_total",
    "Re-executions after a deadlock (1213), lock wait timeout (1205) or re-prepare (1615).",
  ),
  mysqlConflicts: counter(
    "statusengine_mysql_conflicts_total",
    "Statements that failed on a lock conflict and were sent again: kind deadlock (1213: a deadlock, or on Galera a certification failure or brute-force abort by another node's commit) lock_wait_timeout (1205) or reprepare (1615: DDL on the table during the statement, e.g. cleanup's partition changes).",
    { labels: ["table", "kind"] },
  ),
  dbConnectionRetries: counter(
    "statusengine_db_connection_retries_total",
    "Re-attempts while MySQL could not take writes: unreachable, read-only, full, privileges, timeout (measures outage length).",
  ),
  dbAvailable: gauge(
    "statusengine_db_available",
    "1 while MySQL takes writes; 0 while the pipeline holds rows because it cannot (unreachable, read-only, full, privileges, statement timeout), and while the start waits for MySQL.",
    { initial: 1 },
  ),
  mysqlHostInUse: gauge(
    "statusengine_mysql_host_in_use",
    "1 for the host of --mysql-url the worker's connections go to, 0 for the other hosts of the list (docs/running.md#mysql-hosts).",
    { labels: ["host"] },
  ),
  rabbitmqHostInUse: gauge(
    "statusengine_rabbitmq_host_in_use",
    "1 for the broker of --rabbitmq-url the worker consumes from, 0 for the other brokers of the list (docs/running.md#rabbitmq-hosts).",
    { labels: ["host"] },
  ),
  mysqlHostSwitches: counter(
    "statusengine_mysql_host_switches_total",
    "Moves to another host of --mysql-url: away from a host that stopped answering, and back to an earlier one that answers again.",
  ),
  dbValuesAdjusted: counter(
    "statusengine_db_values_adjusted_total",
    "Values changed to fit their column: truncated strings, nulls for NOT NULL columns (D6).",
    { labels: ["table", "reason"], precreate: "batched_tables_x_adjust_reasons" },
  ),
  // --- Graphite --------------------------------------------------------------
  graphiteMetricsWritten: counter(
    "statusengine_graphite_metrics_written_total",
    "Metrics whose TCP write to Carbon succeeded.",
  ),
  graphiteFlushes: counter("statusengine_graphite_flushes_total", "Successful writes to Carbon."),
  graphiteMetricsDropped: counter(
    "statusengine_graphite_metrics_dropped_total",
    "Metrics lost because a dial or write to Carbon failed.",
  ),
  graphiteAvailable: gauge(
    "statusengine_graphite_available",
    "1 while writes to Carbon succeed, 0 while metrics are being dropped.",
    { initial: 1 },
  ),
  // --- perfdata backends (docs/perfdata.md#metrics) ------------------------------------
  // One set for Graphite, InfluxDB and remote write, labelled by backend; the graphite_* series
  // above stay for the dashboards built on them. A backend's series exist while it is configured.
  perfdataPointsWritten: counter(
    "statusengine_perfdata_points_written_total",
    "Perfdata points the backend accepted.",
    PER_BACKEND,
  ),
  perfdataDropped: counter(
    "statusengine_perfdata_dropped_total",
    "Perfdata points that never reached the backend, by reason (buffer_full, write_failed, rejected, out_of_order). MySQL is not affected by any of them.",
    { labels: ["backend", "reason"], precreate: "perfdata_backends" },
  ),
  perfdataBackendAvailable: gauge(
    "statusengine_perfdata_backend_available",
    "1 while writes to the backend succeed (also before the first), 0 while its points are being dropped.",
    PER_BACKEND,
  ),
  perfdataWriteRetries: counter(
    "statusengine_perfdata_write_retries_total",
    "Writes sent again after a network error, a timeout, HTTP 429 or 5xx.",
    PER_BACKEND,
  ),
  // --- external commands and WebSocket (docs/operations.md#metrics) -------------------
  // Dashboards built for the Go worker rely on these. The command series are pre-created only
  // while /commands is served, so a worker without command keys advertises no such endpoint.
  commandsReceived: counter(
    "statusengine_commands_received_total",
    "External commands published to statusngin_cmd (a bulk of 50 counts 50), per command.",
    { labels: ["command"], precreate: "commands" },
  ),
  commandsRejected: counter(
    "statusengine_commands_rejected_total",
    "POST /commands requests refused with 400, 401, 403 or 413, per reason.",
    { labels: ["reason"], precreate: "command_reject_reasons" },
  ),
  commandsPublished: counter(
    "statusengine_commands_published_total",
    "Broker messages published for POST /commands (one per accepted request).",
  ),
  commandsPublishErrors: counter(
    "statusengine_commands_publish_errors_total",
    "Valid POST /commands requests the broker did not confirm: 503 (not reached) or 504 (sent, unconfirmed).",
  ),
  inOrderLockHeld: gauge(
    "statusengine_in_order_lock_held",
    "1 while this worker holds the in-order lease (a row of statusengine_worker_leases) and consumes statusngin_downtimes; exactly one worker per node should show 1, across every server of a Galera cluster.",
  ),
  inOrderLeaseTakeovers: counter(
    "statusengine_in_order_lease_takeovers_total",
    "In-order leases this worker took over from a holder that had not renewed for the whole term (it died, or lost the database); a lease released on stop is not counted.",
  ),
  // --- statusengine_tasks (the UI's task queue) --------------------------------
  tasksSubmitted: counter(
    "statusengine_tasks_submitted_total",
    "Tasks of statusengine_tasks submitted to the core (broker or command file) and deleted.",
  ),
  tasksRejected: counter(
    "statusengine_tasks_rejected_total",
    "Tasks deleted without being run: unknown type, or refused by the /commands validation.",
  ),
  tasksSubmitErrors: counter(
    "statusengine_tasks_submit_errors_total",
    "Failed task submissions; the task stays and is retried on the next poll.",
  ),
  websocketClientsActive: gauge("statusengine_websocket_clients_active", "Connected /ws clients."),
  websocketMessagesBroadcasted: counter(
    "statusengine_websocket_messages_broadcasted_total",
    "Events written to a /ws client's connection (per recipient). Each event offered to a client is counted once: here or in statusengine_websocket_messages_dropped_total.",
  ),
  websocketFramesSent: counter(
    "statusengine_websocket_frames_sent_total",
    "Frames (one per job) written to a /ws client's connection.",
  ),
  websocketMessagesDropped: counter(
    "statusengine_websocket_messages_dropped_total",
    "Events one /ws client did not get: its send buffer (256 frames, 16 MiB) was full, or it was closed (disconnect, write timeout, shutdown) with frames still unsent, in its buffer or handed to its socket and not yet written.",
  ),
  websocketSlowClientsClosed: counter(
    "statusengine_websocket_slow_clients_closed_total",
    "/ws clients the hub closed (1008) for not reading: losing frames while their socket took none for 2 s, or no write progress at all for 10 s.",
  ),
  websocketPublishDropped: counter(
    "statusengine_websocket_publish_dropped_total",
    "Events dropped because the /ws hub's 1024-frame inbound buffer was full: no client got them. Alert.",
  ),
  // --- HTTP listeners ----------------------------------------------------------
  // One series per listener, pre-created while it is served.
  httpConnectionsOpen: gauge(
    "statusengine_http_connections_open",
    "Connections a listener holds now (requests in progress, open /ws streams); at most 512 per listener.",
    PER_LISTENER,
  ),
  httpConnectionsRefused: counter(
    "statusengine_http_connections_refused_total",
    "Connections closed right after accepting because the listener already held its cap of 512.",
    PER_LISTENER,
  ),
  httpHeaderTimeouts: counter(
    "statusengine_http_header_timeouts_total",
    "Connections closed because their first request head did not arrive within 10 s.",
    PER_LISTENER,
  ),
  // --- other -----------------------------------------------------------------
  pipelineErrors: counter(
    "statusengine_pipeline_errors_total",
    "Errors per component (mysql: a failed statement; queue: an undecodable payload; …).",
    { labels: ["component"], precreate: "components" },
  ),
  // --- the process ------------------------------------------------------------
  // The standard names of Prometheus' process collectors, so stock dashboards and alerts work.
  processCpuSeconds: counter(
    "process_cpu_seconds_total",
    "User and system CPU time the worker used, in seconds.",
    { process: "cpuSeconds" },
  ),
  processResidentMemory: gauge(
    "process_resident_memory_bytes",
    "Resident memory of the worker; a steady climb under a steady load is a leak.",
    { process: "residentMemoryBytes" },
  ),
  processVirtualMemory: gauge(
    "process_virtual_memory_bytes",
    "Virtual memory of the worker (from /proc: absent unless the worker may read it, which Deno allows only under --allow-all).",
    { process: "virtualMemoryBytes" },
  ),
  processOpenFds: gauge(
    "process_open_fds",
    "Open file descriptors (connections, files); from /proc, absent unless the worker may read it (--allow-all).",
    { process: "openFds" },
  ),
  processMaxFds: gauge(
    "process_max_fds",
    "The limit of open file descriptors; from /proc, absent unless the worker may read it (--allow-all).",
    { process: "maxFds" },
  ),
  processStartTime: gauge(
    "process_start_time_seconds",
    "When the worker started, in Unix seconds; changes() of it counts restarts.",
    { process: "startTimeSeconds" },
  ),
  buildInfo: gauge(
    "statusengine_build_info",
    "Build identity; always 1. revision repeats commit under the Go worker's label name.",
    { labels: ["version", "deno_version", "commit", "revision"] },
  ),
} as const satisfies Record<string, MetricSpec>;

export type MetricKey = keyof typeof METRICS;

/** `pipeline_errors_total` components (docs/operations.md#label-sets). */
export const COMPONENTS = [
  "mysql",
  "websocket",
  "graphite",
  "queue",
  "command",
  "influxdb",
  "prometheus",
] as const;

export const METRICS_BEGIN = "<!-- BEGIN METRICS REFERENCE -->";
export const METRICS_END = "<!-- END METRICS REFERENCE -->";

/** Each label set and how docs/metrics.md describes its pre-created series. */
const PRECREATED = {
  queues: "all 12 queues",
  "status_queues": "the 2 status queues only",
  "event_lag_queues": "the 2 status and 2 check queues",
  "queues_x_results": "12 queues × completed/abandoned",
  "queues_x_dead_letter_reasons": "12 queues × every reason",
  "queues_x_give_back_reasons": "12 queues × every reason",
  tables: "all 19 written tables",
  "batched_tables": "the 14 batched tables",
  "batched_tables_x_adjust_reasons": "14 tables × every reason",
  components: COMPONENTS.join(", "),
  commands: "every command name, while /commands is served",
  "command_reject_reasons": "every reject reason, while /commands is served",
  listeners: "metrics, websocket, commands: each while it is served",
  // Created by the daemon for each configured perfdata backend (with every drop reason).
  "perfdata_backends":
    "graphite, influxdb, prometheus, each while configured (dropped: × every reason)",
  none: "—",
} as const;

/** The table as Markdown, wrapped in deno-fmt-ignore so formatting cannot make it stale. */
export function renderMetricsReference(): string {
  const out = [
    "<!-- deno-fmt-ignore-start -->",
    "<!-- Generated by tools/gen_config_reference.ts from src/metrics/catalogue.ts; do not edit. -->",
    "",
    "| Metric | Type | Labels | Pre-created series | Meaning |",
    "|---|---|---|---|---|",
  ];
  for (const raw of Object.values(METRICS)) {
    const m: MetricSpec = raw;
    const start = m.initial === undefined ? "" : ` (starts at ${m.initial})`;
    const labels = m.labels?.map((l) => `\`${l}\``).join(", ") || "—";
    const pre = m.notPrecreated === undefined
      ? PRECREATED[m.precreate ?? "none"] + start
      : `deliberately none (${m.notPrecreated})`;
    out.push(`| \`${m.name}\` | ${m.type} | ${labels} | ${pre} | ${m.help} |`);
  }
  out.push("<!-- deno-fmt-ignore-end -->", "");
  return out.join("\n");
}
