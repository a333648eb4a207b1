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

/** The catalogue. Keys are the handles' names in code. */
export const METRICS = {
  // --- ingestion -----------------------------------------------------------
  queueMessagesReceived: {
    name: "statusengine_queue_messages_received_total",
    type: "counter",
    help: "Jobs taken from the broker, counted before decoding.",
    ...PER_QUEUE,
  },
  queuePayloadsRepaired: {
    name: "statusengine_queue_payloads_repaired_total",
    type: "counter",
    help:
      "Jobs whose payload was not valid UTF-8 and was repaired (invalid bytes read as Windows-1252).",
    ...PER_QUEUE,
  },
  queueEventsDiscardedStale: {
    name: "statusengine_queue_events_discarded_stale_total",
    type: "counter",
    help:
      "Status events dropped for being older than --status-max-age (clock skew if it climbs steadily).",
    labels: ["queue_name"],
    precreate: "status_queues",
  },
  queueJobsInFlight: {
    name: "statusengine_queue_jobs_in_flight",
    type: "gauge",
    help:
      "Jobs being handled now; pinned at statusengine_queue_window means the queue is falling behind.",
    ...PER_QUEUE,
  },
  queueWindow: {
    name: "statusengine_queue_window",
    type: "gauge",
    help:
      "Jobs the queue may hold in flight now: the adaptive window, which grows while its tables' writers hold less than two batches and shrinks while MySQL is slow (1 for statusngin_downtimes).",
    ...PER_QUEUE,
  },
  queueHandlerDuration: {
    name: "statusengine_queue_handler_duration_seconds",
    type: "histogram",
    help: "Time from receiving a job until its rows were committed (D1) and it was answered.",
    ...PER_QUEUE,
  },
  queueEventLag: {
    name: "statusengine_queue_event_lag_seconds",
    type: "histogram",
    help: "How far MySQL is behind the core: when a status or check job's rows are committed, " +
      "the age of the newest event in them (worker clock minus the event's time).",
    labels: ["queue_name"],
    precreate: "event_lag_queues",
    buckets: [0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600],
  },
  queueConnected: {
    name: "statusengine_queue_connected",
    type: "gauge",
    help: "1 while every job server connection of the queue is up and registered, 0 after a loss.",
    labels: ["queue_name"],
    // Deliberately not pre-created: a 0 would report every starting worker as
    // disconnected (docs/operations.md#connection-metrics).
    precreate: "none",
  },
  queueBacklog: {
    name: "statusengine_queue_backlog",
    type: "gauge",
    help: "Jobs waiting at the broker that no worker has taken yet (gearmand: queued minus " +
      "running, summed over the job servers; RabbitMQ: ready messages), read every 10 s " +
      "apart from consumption; absent while not known (a job server or the broker cannot be " +
      "asked, or this worker does not consume the queue now).",
    labels: ["queue_name"],
    // Not pre-created: before the first reading the backlog is unknown, not 0.
    precreate: "none",
  },
  queueReconnects: {
    name: "statusengine_queue_reconnects_total",
    type: "counter",
    help: "Broker connections of the queue re-established after a loss.",
    ...PER_QUEUE,
  },
  queueJobsRetried: {
    name: "statusengine_queue_jobs_retried_total",
    type: "counter",
    help:
      "Failed attempts of a job that is tried again on the same connection (MySQL held, dead-letter file failing, ...).",
    ...PER_QUEUE,
  },
  queueStalled: {
    name: "statusengine_queue_stalled",
    type: "gauge",
    help:
      "1 while jobs wait at the broker and the queue, with room to take them, has taken none for 60 s.",
    ...PER_QUEUE,
  },
  queueJobs: {
    name: "statusengine_queue_jobs_total",
    type: "counter",
    help: "Job deliveries by outcome: completed (acknowledged), abandoned (left for redelivery).",
    labels: ["queue_name", "result"],
    precreate: "queues_x_results",
  },
  queueJobsGivenBack: {
    name: "statusengine_queue_jobs_given_back_total",
    type: "counter",
    help:
      "Jobs in flight handed back to the broker for another worker to take (docs/retries.md#give-back): mysql_unavailable = MySQL could not take writes for --mysql-give-back-after and another worker consumes the queue.",
    labels: ["queue_name", "reason"],
    precreate: "queues_x_give_back_reasons",
  },
  queueDowntimeUpdatesUnmatched: {
    name: "statusengine_queue_downtime_updates_unmatched_total",
    type: "counter",
    help:
      "Downtime START/STOP events that could not be recorded because a DELETE before the downtime's window had already removed it (docs/downtimes.md); a START/STOP whose ADD is missing or late creates the rows and is not counted.",
  },
  deadLetters: {
    name: "statusengine_dead_letters_total",
    type: "counter",
    help:
      "Payloads or rows dead-lettered instead of written to MySQL (D7), counted once the record is in the dead-letter file.",
    labels: ["queue_name", "reason"],
    precreate: "queues_x_dead_letter_reasons",
  },
  deadLetterWriteErrors: {
    name: "statusengine_dead_letter_write_errors_total",
    type: "counter",
    help:
      "Failed appends to the dead-letter file (full, unwritable); the job waits and is retried, /readyz fails until one succeeds.",
  },
  // --- MySQL ---------------------------------------------------------------
  dbEventsWritten: {
    name: "statusengine_db_events_written_total",
    type: "counter",
    help:
      "Rows in successful statements (batched tables) or successful statements (downtime tables).",
    labels: ["table"],
    precreate: "tables",
  },
  dbFlushes: {
    name: "statusengine_db_flushes_total",
    type: "counter",
    help: "Successful bulk statements; events_written / flushes is the average batch size.",
    labels: ["table"],
    precreate: "batched_tables",
  },
  dbBatchFlushDuration: {
    name: "statusengine_db_batch_flush_duration_seconds",
    type: "histogram",
    help: "Duration of each flush attempt including its retries, per table.",
    labels: ["table"],
    precreate: "batched_tables",
  },
  dbBatchSizeAtFlush: {
    name: "statusengine_db_batch_size_at_flush",
    type: "histogram",
    help: "Rows in each flush attempt.",
    buckets: [1, 5, 10, 25, 50, 100, 250, 500, 700, 1400],
  },
  dbBatchRetries: {
    name: "statusengine_db_batch_retries_total",
    type: "counter",
    help: "Re-executions after a deadlock (1213) or lock wait timeout (1205).",
  },
  mysqlConflicts: {
    name: "statusengine_mysql_conflicts_total",
    type: "counter",
    help:
      "Statements that failed on a lock conflict and were sent again: kind deadlock (1213: a deadlock, or on Galera a certification failure or brute-force abort by another node's commit) or lock_wait_timeout (1205).",
    labels: ["table", "kind"],
  },
  dbConnectionRetries: {
    name: "statusengine_db_connection_retries_total",
    type: "counter",
    help:
      "Re-attempts while MySQL could not take writes: unreachable, read-only, full, privileges, timeout (measures outage length).",
  },
  dbAvailable: {
    name: "statusengine_db_available",
    type: "gauge",
    help:
      "1 while MySQL takes writes; 0 while the pipeline holds rows because it cannot (unreachable, read-only, full, privileges, statement timeout).",
    initial: 1,
  },
  mysqlHostInUse: {
    name: "statusengine_mysql_host_in_use",
    type: "gauge",
    help:
      "1 for the host of --mysql-url the worker's connections go to, 0 for the other hosts of the list (docs/running.md#mysql-hosts).",
    labels: ["host"],
  },
  rabbitmqHostInUse: {
    name: "statusengine_rabbitmq_host_in_use",
    type: "gauge",
    help:
      "1 for the broker of --rabbitmq-url the worker consumes from, 0 for the other brokers of the list (docs/running.md#rabbitmq-hosts).",
    labels: ["host"],
  },
  mysqlHostSwitches: {
    name: "statusengine_mysql_host_switches_total",
    type: "counter",
    help:
      "Moves to another host of --mysql-url: away from a host that stopped answering, and back to an earlier one that answers again.",
  },
  dbValuesAdjusted: {
    name: "statusengine_db_values_adjusted_total",
    type: "counter",
    help: "Values changed to fit their column: truncated strings, nulls for NOT NULL columns (D6).",
    labels: ["table", "reason"],
    precreate: "batched_tables_x_adjust_reasons",
  },
  // --- Graphite --------------------------------------------------------------
  graphiteMetricsWritten: {
    name: "statusengine_graphite_metrics_written_total",
    type: "counter",
    help: "Metrics whose TCP write to Carbon succeeded.",
  },
  graphiteFlushes: {
    name: "statusengine_graphite_flushes_total",
    type: "counter",
    help: "Successful writes to Carbon.",
  },
  graphiteMetricsDropped: {
    name: "statusengine_graphite_metrics_dropped_total",
    type: "counter",
    help: "Metrics lost because a dial or write to Carbon failed.",
  },
  graphiteAvailable: {
    name: "statusengine_graphite_available",
    type: "gauge",
    help: "1 while writes to Carbon succeed, 0 while metrics are being dropped.",
    initial: 1,
  },
  // --- perfdata backends (docs/perfdata.md#metrics) ------------------------------------
  // One set for Graphite, InfluxDB and remote write, labelled by backend; the graphite_* series
  // above stay for the dashboards built on them. A backend's series exist while it is configured.
  perfdataPointsWritten: {
    name: "statusengine_perfdata_points_written_total",
    type: "counter",
    help: "Perfdata points the backend accepted.",
    ...PER_BACKEND,
  },
  perfdataDropped: {
    name: "statusengine_perfdata_dropped_total",
    type: "counter",
    help: "Perfdata points that never reached the backend, by reason (buffer_full, " +
      "write_failed, rejected, out_of_order). MySQL is not affected by any of them.",
    labels: ["backend", "reason"],
    precreate: "perfdata_backends",
  },
  perfdataBackendAvailable: {
    name: "statusengine_perfdata_backend_available",
    type: "gauge",
    help: "1 while writes to the backend succeed (also before the first), 0 while its points " +
      "are being dropped.",
    ...PER_BACKEND,
  },
  perfdataWriteRetries: {
    name: "statusengine_perfdata_write_retries_total",
    type: "counter",
    help: "Writes sent again after a network error, a timeout, HTTP 429 or 5xx.",
    ...PER_BACKEND,
  },
  // --- external commands and WebSocket (docs/operations.md#metrics) -------------------
  // Dashboards built for the Go worker rely on these. The command series are pre-created only
  // while /commands is served, so a worker without command keys advertises no such endpoint.
  commandsReceived: {
    name: "statusengine_commands_received_total",
    type: "counter",
    help: "External commands published to statusngin_cmd (a bulk of 50 counts 50), per command.",
    labels: ["command"],
    precreate: "commands",
  },
  commandsRejected: {
    name: "statusengine_commands_rejected_total",
    type: "counter",
    help: "POST /commands requests refused with 400, 401, 403 or 413, per reason.",
    labels: ["reason"],
    precreate: "command_reject_reasons",
  },
  commandsPublished: {
    name: "statusengine_commands_published_total",
    type: "counter",
    help: "Broker messages published for POST /commands (one per accepted request).",
  },
  commandsPublishErrors: {
    name: "statusengine_commands_publish_errors_total",
    type: "counter",
    help: "Valid POST /commands requests answered 503 because the broker could not be reached.",
  },
  inOrderLockHeld: {
    name: "statusengine_in_order_lock_held",
    type: "gauge",
    help: "1 while this worker holds the in-order lease (a row of statusengine_worker_leases) " +
      "and consumes statusngin_downtimes; exactly one worker per node should show 1, " +
      "across every server of a Galera cluster.",
  },
  inOrderLeaseTakeovers: {
    name: "statusengine_in_order_lease_takeovers_total",
    type: "counter",
    help: "In-order leases this worker took over from a holder that had not renewed for the " +
      "whole term (it died, or lost the database); a lease released on stop is not counted.",
  },
  // --- statusengine_tasks (the UI's task queue) --------------------------------
  tasksSubmitted: {
    name: "statusengine_tasks_submitted_total",
    type: "counter",
    help: "Tasks of statusengine_tasks submitted to the core (broker or command file) and deleted.",
  },
  tasksRejected: {
    name: "statusengine_tasks_rejected_total",
    type: "counter",
    help: "Tasks deleted without being run: unknown type, or refused by the /commands validation.",
  },
  tasksSubmitErrors: {
    name: "statusengine_tasks_submit_errors_total",
    type: "counter",
    help: "Failed task submissions; the task stays and is retried on the next poll.",
  },
  websocketClientsActive: {
    name: "statusengine_websocket_clients_active",
    type: "gauge",
    help: "Connected /ws clients.",
  },
  websocketMessagesBroadcasted: {
    name: "statusengine_websocket_messages_broadcasted_total",
    type: "counter",
    help: "Events written to a /ws client's connection (per recipient). Each event offered to a " +
      "client is counted once: here or in statusengine_websocket_messages_dropped_total.",
  },
  websocketFramesSent: {
    name: "statusengine_websocket_frames_sent_total",
    type: "counter",
    help: "Frames (one per job) written to a /ws client's connection.",
  },
  websocketMessagesDropped: {
    name: "statusengine_websocket_messages_dropped_total",
    type: "counter",
    help:
      "Events one /ws client did not get: its send buffer (256 frames, 16 MiB) was full, or it was " +
      "closed (disconnect, write timeout, shutdown) with frames still unsent, in its buffer or " +
      "handed to its socket and not yet written.",
  },
  websocketSlowClientsClosed: {
    name: "statusengine_websocket_slow_clients_closed_total",
    type: "counter",
    help: "/ws clients the hub closed (1008) for not reading: losing frames while their socket " +
      "took none for 2 s, or no write progress at all for 10 s.",
  },
  websocketPublishDropped: {
    name: "statusengine_websocket_publish_dropped_total",
    type: "counter",
    help:
      "Events dropped because the /ws hub's 1024-frame inbound buffer was full: no client got them. Alert.",
  },
  // --- HTTP listeners ----------------------------------------------------------
  // One series per listener, pre-created while it is served.
  httpConnectionsOpen: {
    name: "statusengine_http_connections_open",
    type: "gauge",
    help: "Connections a listener holds now (requests in progress, open /ws streams); " +
      "at most 512 per listener.",
    ...PER_LISTENER,
  },
  httpConnectionsRefused: {
    name: "statusengine_http_connections_refused_total",
    type: "counter",
    help: "Connections closed right after accepting because the listener already held its " +
      "cap of 512.",
    ...PER_LISTENER,
  },
  httpHeaderTimeouts: {
    name: "statusengine_http_header_timeouts_total",
    type: "counter",
    help: "Connections closed because their first request head did not arrive within 10 s.",
    ...PER_LISTENER,
  },
  // --- other -----------------------------------------------------------------
  pipelineErrors: {
    name: "statusengine_pipeline_errors_total",
    type: "counter",
    help: "Errors per component (mysql: a failed statement; queue: an undecodable payload; …).",
    labels: ["component"],
    precreate: "components",
  },
  // --- the process ------------------------------------------------------------
  // The standard names of Prometheus' process collectors, so stock dashboards and alerts work.
  processCpuSeconds: {
    name: "process_cpu_seconds_total",
    type: "counter",
    help: "User and system CPU time the worker used, in seconds.",
    process: "cpuSeconds",
  },
  processResidentMemory: {
    name: "process_resident_memory_bytes",
    type: "gauge",
    help: "Resident memory of the worker; a steady climb under a steady load is a leak.",
    process: "residentMemoryBytes",
  },
  processVirtualMemory: {
    name: "process_virtual_memory_bytes",
    type: "gauge",
    help: "Virtual memory of the worker (from /proc: absent unless the worker may read it, " +
      "which Deno allows only under --allow-all).",
    process: "virtualMemoryBytes",
  },
  processOpenFds: {
    name: "process_open_fds",
    type: "gauge",
    help: "Open file descriptors (connections, files); from /proc, absent unless the worker " +
      "may read it (--allow-all).",
    process: "openFds",
  },
  processMaxFds: {
    name: "process_max_fds",
    type: "gauge",
    help: "The limit of open file descriptors; from /proc, absent unless the worker may read " +
      "it (--allow-all).",
    process: "maxFds",
  },
  processStartTime: {
    name: "process_start_time_seconds",
    type: "gauge",
    help: "When the worker started, in Unix seconds; changes() of it counts restarts.",
    process: "startTimeSeconds",
  },
  buildInfo: {
    name: "statusengine_build_info",
    type: "gauge",
    help: "Build identity; always 1. revision repeats commit under the Go worker's label name.",
    labels: ["version", "deno_version", "commit", "revision"],
  },
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
    const pre = m.name === "statusengine_queue_connected"
      ? "deliberately none (appears at the first real connection)"
      : m.name === "statusengine_queue_backlog"
      ? "deliberately none (appears at the first reading, absent while unknown)"
      : PRECREATED[m.precreate ?? "none"] + start;
    out.push(`| \`${m.name}\` | ${m.type} | ${labels} | ${pre} | ${m.help} |`);
  }
  out.push("<!-- deno-fmt-ignore-end -->", "");
  return out.join("\n");
}
