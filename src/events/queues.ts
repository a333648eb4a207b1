/**
 * The queue table, the single source of truth for the twelve consumed queues: settings, metrics,
 * decoders, consumer registrations and in-flight caps derive from it, so no list can drift.
 *
 * @module
 */

import {
  decodeAcknowledgement,
  decodeContactNotificationMethod,
  decodeCoreRestart,
  decodeDowntime,
  decodeHostCheck,
  decodeHostStatus,
  decodeLogEntry,
  decodeNotification,
  decodeServiceCheck,
  decodeServicePerfdata,
  decodeServiceStatus,
  decodeStateChange,
  type EventDecoder,
} from "./_event_decoders.ts";

import { DOWNTIME_TABLE_NAMES, type TableName } from "./table_names.ts";

/**
 * Payload key, tables and decoder of the twelve consumed queues, spelled as the broker's sample
 * configuration names them (docs/tables.md#consumed-queues); the other settings follow from the
 * name. Operators may rename queues on the broker; the configuration maps a configured name to one
 * of these.
 */
const DEFINITIONS = {
  "statusngin_hoststatus": ["hoststatus", ["statusengine_hoststatus"], decodeHostStatus],
  "statusngin_servicestatus": [
    "servicestatus",
    ["statusengine_servicestatus"],
    decodeServiceStatus,
  ],
  "statusngin_hostchecks": ["hostcheck", ["statusengine_hostchecks"], decodeHostCheck],
  "statusngin_servicechecks": ["servicecheck", ["statusengine_servicechecks"], decodeServiceCheck],
  "statusngin_service_perfdata": ["servicecheck", ["statusengine_perfdata"], decodeServicePerfdata],
  "statusngin_statechanges": [
    "statechange",
    ["statusengine_host_statehistory", "statusengine_service_statehistory"],
    decodeStateChange,
  ],
  "statusngin_logentries": ["logentry", ["statusengine_logentries"], decodeLogEntry],
  "statusngin_notifications": [
    "notification_data",
    ["statusengine_host_notifications_log", "statusengine_service_notifications_log"],
    decodeNotification,
  ],
  "statusngin_contactnotificationmethod": [
    "contactnotificationmethod",
    ["statusengine_host_notifications", "statusengine_service_notifications"],
    decodeContactNotificationMethod,
  ],
  "statusngin_acknowledgements": [
    "acknowledgement",
    ["statusengine_host_acknowledgements", "statusengine_service_acknowledgements"],
    decodeAcknowledgement,
  ],
  "statusngin_downtimes": ["downtime", DOWNTIME_TABLE_NAMES, decodeDowntime],
  "statusngin_core_restart": [
    null,
    ["statusengine_hoststatus", "statusengine_servicestatus"],
    decodeCoreRestart,
  ],
} as const satisfies Record<string, readonly [string | null, readonly TableName[], EventDecoder]>;

/** One of the twelve consumed queue names. */
export type QueueName = keyof typeof DEFINITIONS;

/** The twelve consumed queues, in the order of docs/tables.md#consumed-queues. */
export const QUEUE_NAMES: readonly QueueName[] = Object.freeze(
  Object.keys(DEFINITIONS) as QueueName[],
);

/** Everything the pipeline needs to know about one queue. */
export interface QueueSpec {
  /** The Gearman function / RabbitMQ queue name. */
  readonly name: QueueName;
  /** Key of the payload object inside each event; null for the envelope-less core restart. */
  readonly payloadKey: string | null;
  /** Kind of `DecodedJob` a valid job of this queue yields (besides `invalid`/`ignored`). */
  readonly output: "rows" | "downtimes" | "core_restart";
  /** Tables the queue may write (rows, statements, or the D4 cleanup DELETE). */
  readonly tables: readonly TableName[];
  /** Jobs one at a time, in delivery order: downtimes only (docs/consumption.md#downtimes-in-order). */
  readonly inOrder: boolean;
  /**
   * Its jobs are taken the moment the broker offers them, never after waiting for the byte budget:
   * their receive time is data (the core restart's cutoff, docs/core-restart.md rule 1).
   */
  readonly receiveAtOnce: boolean;
  /** Events older than `--status-max-age` are discarded (docs/payloads.md#stale-status). */
  readonly staleFilter: boolean;
  /**
   * Which events of a job the `/ws` stream carries (docs/operations.md#ws), stale ones never: every
   * event, or only those that produced rows or a restart cutoff (601, 605, PROCESS_RESTART 102).
   */
  readonly stream: "every_event" | "effective_events";
  /**
   * The row column holding when the core produced the event, for
   * `statusengine_queue_event_lag_seconds`: status and check queues only, whose newest row is what
   * the UI shows as current.
   */
  readonly eventTimeColumn: string | null;
  /** Decodes one event; internal to this directory. */
  readonly decode: EventDecoder;
}

const STATUS = ["statusngin_hoststatus", "statusngin_servicestatus"];
const CHECKS = ["statusngin_hostchecks", "statusngin_servicechecks"];
const EFFECTIVE = [
  "statusngin_notifications",
  "statusngin_contactnotificationmethod",
  "statusngin_core_restart",
];

/** The queue table, keyed by queue name. */
export const QUEUES: Readonly<Record<QueueName, QueueSpec>> = Object.freeze(
  Object.fromEntries(
    QUEUE_NAMES.map((name) => {
      const [payloadKey, tables, decode] = DEFINITIONS[name];
      const spec: QueueSpec = {
        name,
        payloadKey,
        output: name === "statusngin_downtimes"
          ? "downtimes"
          : name === "statusngin_core_restart"
          ? "core_restart"
          : "rows",
        tables: Object.freeze([...tables]),
        inOrder: name === "statusngin_downtimes",
        receiveAtOnce: name === "statusngin_core_restart",
        staleFilter: STATUS.includes(name),
        eventTimeColumn: STATUS.includes(name)
          ? "status_update_time"
          : CHECKS.includes(name)
          ? "end_time"
          : null,
        stream: EFFECTIVE.includes(name) ? "effective_events" : "every_event",
        decode,
      };
      return [name, Object.freeze(spec)];
    }),
  ) as Record<QueueName, QueueSpec>,
);

/**
 * Narrow a string to a {@linkcode QueueName}.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { isQueueName } from "./queues.ts";
 * assert.ok(isQueueName("statusngin_downtimes") && !isQueueName("statusngin_flappings"));
 * ```
 */
export function isQueueName(name: string): name is QueueName {
  return Object.hasOwn(QUEUES, name);
}
