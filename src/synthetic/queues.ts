/**
 * One generator per consumed queue: the events of that queue, built from the world's objects,
 * with every payload field and the envelope in the broker's key order.
 *
 * @module
 */

import type { QueueName } from "../events/mod.ts";
import type { Instant, MonitoredObject, World } from "./world.ts";
import { HOST_STATE_NAMES, SERVICE_STATE_NAMES } from "./plugin_outputs.ts";

/** A JSON value as the generator builds it. */
export type JsonValue =
  | string
  | number
  | boolean
  | null
  | readonly JsonValue[]
  | { readonly [key: string]: JsonValue };

/** One event: envelope plus payload object (or the envelope-less core-restart message). */
export interface SyntheticEvent {
  readonly [key: string]: JsonValue;
}

const CONTACTS = [
  "Daniel Z",
  "Jürgen Müller",
  "admin",
  "Анна Иванова",
  "山田 太郎",
  "286a2700-006a-4d7d-a6fe-6df5b3533ad2",
] as const;

const COMMENTS = [
  "I will take a look at this",
  "In maintenance",
  "Wird untersucht – Ticket #4711, Lüfter getauscht",
  "Работаем над этим",
  "調査中です",
  "Planned reboot after kernel update",
] as const;

function envelope(
  type: number,
  at: Instant,
  key: string,
  payload: SyntheticEvent,
  attr = 0,
): SyntheticEvent {
  return { type, flags: 0, attr, timestamp: at.sec, timestamp_usec: at.usec, [key]: payload };
}

function statusPayload(w: World, obj: MonitoredObject, ts: number): SyntheticEvent {
  const rng = w.rng;
  const r = w.check(obj, ts);
  const sim = obj.sim;
  const isHost = obj.service === null;
  const interval = obj.check.checkInterval;
  const lastCheck = ts - rng.int(0, 3);
  const problem = sim.state !== 0 && sim.stateType === 1;
  const lastNotification = problem ? sim.lastHardStateChange + rng.int(0, 60) : 0;
  const identity: SyntheticEvent = isHost
    ? { name: obj.host.name }
    : { host_name: obj.host.name, description: obj.service ?? "" };
  // last_time_up … last_time_unreachable, or last_time_ok … last_time_unknown.
  const lastTimes: SyntheticEvent = Object.fromEntries(
    (isHost ? HOST_STATE_NAMES : SERVICE_STATE_NAMES).map((name, s) => [
      `last_time_${name.toLowerCase()}`,
      sim.lastTimeIn[s] ?? 0,
    ]),
  );
  return {
    ...identity,
    plugin_output: r.output,
    long_plugin_output: r.longOutput,
    event_handler: obj.eventHandler,
    perf_data: r.perfData,
    check_command: obj.check.commandName,
    check_period: obj.checkPeriod,
    current_state: sim.state,
    has_been_checked: 1,
    should_be_scheduled: 1,
    current_attempt: sim.attempt,
    max_attempts: obj.check.maxAttempts,
    last_check: lastCheck,
    next_check: lastCheck +
      Math.round((sim.stateType === 0 ? obj.check.retryInterval : interval) * 60),
    check_type: obj.passive ? 1 : 0,
    last_state_change: sim.lastStateChange,
    last_hard_state_change: sim.lastHardStateChange,
    last_hard_state: sim.lastHardState,
    ...lastTimes,
    state_type: sim.stateType,
    last_notification: lastNotification,
    next_notification: problem ? lastNotification + 7_200 : 0,
    no_more_notifications: 0,
    notifications_enabled: rng.chance(0.95) ? 1 : 0,
    problem_has_been_acknowledged: sim.acknowledged,
    // In status payloads this is 0 none, 1 normal, 2 sticky (docs/tables.md#status-queues).
    acknowledgement_type: sim.acknowledged === 1 ? rng.int(1, 2) : 0,
    current_notification_number: problem ? sim.notificationNumber : 0,
    accept_passive_checks: 1,
    event_handler_enabled: obj.eventHandler === null ? 0 : 1,
    checks_enabled: obj.passive ? 0 : 1,
    flap_detection_enabled: 1,
    is_flapping: rng.chance(0.02) ? 1 : 0,
    percent_state_change: rng.chance(0.8) ? 0 : rng.float(0, 40),
    latency: obj.passive ? 0 : rng.float(0.001, 1.2),
    execution_time: obj.check.duration + rng.float(0.001, 0.999),
    scheduled_downtime_depth: rng.chance(0.03) ? 1 : 0,
    process_performance_data: 1,
    obsess: 1,
    modified_attributes: rng.pick([0, 0, 0, 1, 19, 31]),
    check_interval: interval,
    retry_interval: obj.check.retryInterval,
  };
}

function checkPayload(w: World, obj: MonitoredObject, ts: number): SyntheticEvent {
  const rng = w.rng;
  const check = obj.check;
  let r = w.check(obj, ts);
  const sim = obj.sim;
  const isHost = obj.service === null;
  let earlyTimeout = 0;
  let executionTime = check.duration + rng.float(0.0001, 0.9999);
  if (!isHost && rng.chance(0.005)) {
    earlyTimeout = 1;
    executionTime = check.timeout + rng.float(0, 0.05);
    r = {
      output: `(Service check timed out after ${executionTime.toFixed(2)} seconds)`,
      perfData: "",
      longOutput: "",
    };
  }
  const identity: SyntheticEvent = isHost
    ? { host_name: obj.host.name }
    : { host_name: obj.host.name, service_description: obj.service ?? "" };
  return {
    ...identity,
    command_line: check.commandLine,
    command_name: check.commandName,
    output: r.output,
    long_output: r.longOutput,
    perf_data: r.perfData,
    check_type: obj.passive ? 1 : 0,
    current_attempt: sim.attempt,
    max_attempts: check.maxAttempts,
    state_type: sim.stateType,
    state: sim.state,
    timeout: check.timeout,
    // Constant duration per check kind keeps the service keys unique (see CheckKind.duration).
    start_time: ts - check.duration,
    end_time: ts,
    early_timeout: earlyTimeout,
    execution_time: executionTime,
    latency: obj.passive ? 0 : rng.float(0.001, 1.2),
    return_code: isHost ? (sim.state === 0 ? 0 : 2) : sim.state,
  };
}

/** One event per object picked, its payload built by `payload`. */
function* objectEvents(
  w: World,
  type: number,
  key: string,
  pick: (w: World) => MonitoredObject,
  payload: (w: World, obj: MonitoredObject, ts: number) => SyntheticEvent,
): Generator<SyntheticEvent> {
  for (;;) {
    const at = w.nextInstant();
    yield envelope(type, at, key, payload(w, pick(w), at.sec));
  }
}

const randomHost = (w: World) => w.rng.pick(w.hosts).object;
const randomService = (w: World) => w.rng.pick(w.services);
/** A host with probability `hostShare`, else a service. */
const randomObject = (hostShare: number) => (w: World) =>
  w.rng.chance(hostShare) ? randomHost(w) : randomService(w);

function perfdataPayload(w: World, obj: MonitoredObject, ts: number): SyntheticEvent {
  return {
    host_name: obj.host.name,
    service_description: obj.service ?? "",
    perf_data: w.check(obj, ts).perfData,
    start_time: ts - obj.check.duration,
  };
}

function stateChangePayload(w: World, obj: MonitoredObject, ts: number): SyntheticEvent {
  const r = w.check(obj, ts, true);
  const sim = obj.sim;
  return {
    host_name: obj.host.name,
    service_description: obj.service,
    output: r.output,
    // The broker copies output into long_output (docs/tables.md#state-changes).
    long_output: r.output,
    statechange_type: obj.service === null ? 0 : 1,
    state: sim.state,
    state_type: sim.stateType,
    current_attempt: sim.attempt,
    max_attempts: obj.check.maxAttempts,
    last_state: sim.lastState,
    last_hard_state: sim.lastHardState,
  };
}

const LOG_INFO_LINES = [
  "Auto-save of retention data completed successfully.",
  "Event broker module '/opt/statusengine/lib/libstatusengine.so' initialized successfully.",
  "Successfully launched command file worker with pid 1490327",
  "LOG VERSION: 2.0",
] as const;

function* logEntryEvents(w: World): Generator<SyntheticEvent> {
  const rng = w.rng;
  for (;;) {
    const at = w.nextInstant();
    const kind = rng.weighted([30, 10, 8, 4, 8, 6, 6, 4]);
    let dataType: number;
    let data: string;
    const host = rng.pick(w.hosts);
    const svc = rng.pick(host.services);
    const obj = kind === 1 || kind === 3 ? host.object : svc;
    const r = w.check(obj, at.sec);
    const state = obj.sim;
    const stateType = state.stateType === 1 ? "HARD" : "SOFT";
    const serviceState = SERVICE_STATE_NAMES[state.state];
    const hostState = HOST_STATE_NAMES[state.state];
    switch (kind) {
      case 0:
        dataType = [8192, 32768, 65536, 16384][state.state] ?? 8192;
        data =
          `SERVICE ALERT: ${host.name};${svc.service};${serviceState};${stateType};${state.attempt};${r.output}`;
        break;
      case 1:
        dataType = [1024, 2048, 4096][state.state] ?? 1024;
        data = `HOST ALERT: ${host.name};${hostState};${stateType};${state.attempt};${r.output}`;
        break;
      case 2:
        dataType = 1048576;
        data = `SERVICE NOTIFICATION: ${
          rng.pick(CONTACTS)
        };${host.name};${svc.service};${serviceState};notify-service-by-email;${r.output}`;
        break;
      case 3:
        dataType = 524288;
        data = `HOST NOTIFICATION: ${
          rng.pick(CONTACTS)
        };${host.name};${hostState};notify-host-by-email;${r.output}`;
        break;
      case 4:
        dataType = 512;
        data = `EXTERNAL COMMAND: SCHEDULE_FORCED_SVC_CHECK;${host.name};${svc.service};${at.sec}`;
        break;
      case 5:
        dataType = 131072;
        data = `PASSIVE SERVICE CHECK: ${host.name};${svc.service};${state.state};${r.output}`;
        break;
      case 6:
        dataType = 2;
        data =
          `Warning: The check of service '${svc.service}' on host '${host.name}' looks like it was orphaned (results never came back; last_check=${
            at.sec - 900
          }).  I'm scheduling an immediate check of the service...`;
        break;
      default:
        dataType = 262144;
        data = rng.pick(LOG_INFO_LINES);
    }
    yield envelope(300, at, "logentry", { entry_time: at.sec, data_type: dataType, data });
  }
}

function notificationPayload(w: World, obj: MonitoredObject, ts: number): SyntheticEvent {
  const rng = w.rng;
  const r = w.check(obj, ts);
  // 0 normal, 1 ack, 5/6 downtime start/end, 8 custom (docs/tables.md#notifications-log).
  const reason = rng.pick([0, 0, 0, 0, 1, 5, 6, 8]);
  const withAuthor = reason === 1 || reason === 8;
  return {
    host_name: obj.host.name,
    service_description: obj.service,
    output: r.output,
    long_output: r.output,
    ack_author: withAuthor ? rng.pick(CONTACTS) : null,
    ack_data: withAuthor ? rng.pick(COMMENTS) : null,
    notification_type: obj.service === null ? 0 : 1,
    // start = envelope second: unique (host, start_time, start_time_usec) per event.
    start_time: ts,
    end_time: ts,
    reason_type: reason,
    state: obj.sim.state,
    escalated: rng.chance(0.05) ? 1 : 0,
    // The broker drops rounds that reached nobody (docs/tables.md#consumed-queues).
    contacts_notified: rng.int(1, 3),
  };
}

function* contactNotificationEvents(w: World): Generator<SyntheticEvent> {
  const rng = w.rng;
  for (;;) {
    const obj = randomObject(0.3)(w);
    const contact = rng.pick(CONTACTS);
    const command = obj.service === null ? "host-notify-by-email" : rng.pick([
      "service-notify-by-email",
      "service-notify-by-sms",
      "52c9c3e2-4a00-40a4-8e75-db4649eba846",
    ]);
    const reason = rng.pick([0, 0, 0, 1, 8]);
    const withAuthor = reason !== 0;
    const author = withAuthor ? rng.pick(CONTACTS) : null;
    const comment = withAuthor ? rng.pick(COMMENTS) : null;
    const args = rng.chance(0.1) ? "--priority=high" : null;
    const first = w.nextInstant();
    const r = w.check(obj, first.sec);
    // 604 when the command starts, 605 when it ends (docs/tables.md#contact-notification-methods).
    for (const type of [604, 605]) {
      const at = type === 604 ? first : w.nextInstant();
      yield envelope(type, at, "contactnotificationmethod", {
        host_name: obj.host.name,
        service_description: obj.service,
        output: r.output,
        ack_author: author,
        ack_data: comment,
        contact_name: contact,
        command_name: command,
        command_args: args,
        reason_type: reason,
        state: obj.sim.state,
        // Its own second keeps the 605 row's key (object, start_time, start_time_usec) unique.
        start_time: at.sec,
        end_time: at.sec,
      });
    }
  }
}

function acknowledgementPayload(w: World, obj: MonitoredObject): SyntheticEvent {
  const rng = w.rng;
  const isHost = obj.service === null;
  const state = isHost ? rng.int(1, 2) : rng.int(1, 3);
  return {
    host_name: obj.host.name,
    service_description: obj.service,
    author_name: rng.pick(CONTACTS),
    comment_data: rng.pick(COMMENTS),
    // Here the object kind: 0 host, 1 service (docs/tables.md#acknowledgements).
    acknowledgement_type: isHost ? 0 : 1,
    state,
    is_sticky: rng.chance(0.3) ? 1 : 0,
    persistent_comment: rng.chance(0.5) ? 1 : 0,
    notify_contacts: rng.chance(0.8) ? 1 : 0,
  };
}

/** Downtime envelope `type` values (docs/tables.md#downtime-events). */
const DT_ADD = 1100;
const DT_DELETE = 1101;
const DT_START = 1103;
const DT_STOP = 1104;

function* downtimeEvents(w: World): Generator<SyntheticEvent> {
  const rng = w.rng;
  let n = 0;
  for (;;) {
    const obj = randomObject(0.3)(w);
    const isHost = obj.service === null;
    const id = w.downtimeIdBase + n++;
    const duration = rng.pick([120, 600, 1_800, 3_600, 7_200]);
    const lead = rng.int(0, 900);
    const variant = rng.weighted([6, 2, 2]); // runs out, cancelled early, deleted before start
    const at0 = w.nextInstant();
    // Laid out backwards from the ADD's instant so that every event lies in the past; envelope
    // times are consistent with the window (docs/tables.md#downtime-statements).
    let entryTime: number;
    let start: number;
    let end: number;
    let fixedWindow = 1;
    if (variant === 2) {
      entryTime = at0.sec - lead;
      start = at0.sec + rng.int(600, 86_400);
      end = start + duration;
    } else {
      start = at0.sec - (variant === 0 ? duration : rng.int(60, duration - 1));
      end = start + duration;
      entryTime = start - lead;
      fixedWindow = rng.chance(0.85) ? 1 : 0;
    }
    const payload: SyntheticEvent = {
      "host_name": obj.host.name,
      "service_description": obj.service,
      "author_name": rng.pick(CONTACTS),
      "comment_data": rng.pick(COMMENTS),
      // 2 host, 1 service: the reverse of the other queues' 0/1 (docs/tables.md#host-or-service).
      "downtime_type": isHost ? 2 : 1,
      "entry_time": entryTime,
      "start_time": start,
      "end_time": end,
      "triggered_by": 0,
      "downtime_id": id,
      fixed: fixedWindow,
      duration: fixedWindow === 1 ? end - start : Math.max(60, Math.floor(duration / 2)),
    };
    const events: [type: number, sec: number, attr: number][] = variant === 2
      ? [[DT_ADD, entryTime, 0], [DT_DELETE, at0.sec, 0]]
      : [
        [DT_ADD, entryTime, 0],
        [DT_START, start, 0],
        [DT_STOP, variant === 0 ? end : at0.sec, variant === 0 ? 1 : 2],
        [DT_DELETE, variant === 0 ? end : at0.sec, 0],
      ];
    for (const [i, [type, sec, attr]] of events.entries()) {
      const usec = i === 0 ? at0.usec : w.nextInstant().usec;
      yield envelope(type, { sec, usec }, "downtime", payload, attr);
    }
  }
}

function* coreRestartEvents(): Generator<SyntheticEvent> {
  for (;;) yield { object_type: 102, timestamp: 0 };
}

export const GENERATORS: Readonly<Record<QueueName, (w: World) => Generator<SyntheticEvent>>> = {
  "statusngin_hoststatus": (w) => objectEvents(w, 1201, "hoststatus", randomHost, statusPayload),
  "statusngin_servicestatus": (w) =>
    objectEvents(w, 1202, "servicestatus", randomService, statusPayload),
  "statusngin_hostchecks": (w) => objectEvents(w, 801, "hostcheck", randomHost, checkPayload),
  "statusngin_servicechecks": (w) =>
    objectEvents(w, 701, "servicecheck", randomService, checkPayload),
  "statusngin_service_perfdata": (w) =>
    objectEvents(w, 701, "servicecheck", randomService, perfdataPayload),
  "statusngin_statechanges": (w) =>
    objectEvents(w, 1801, "statechange", randomObject(0.25), stateChangePayload),
  "statusngin_logentries": logEntryEvents,
  "statusngin_notifications": (w) =>
    objectEvents(w, 601, "notification_data", randomObject(0.3), notificationPayload),
  "statusngin_contactnotificationmethod": contactNotificationEvents,
  "statusngin_acknowledgements": (w) =>
    objectEvents(w, 1700, "acknowledgement", randomObject(0.3), acknowledgementPayload),
  "statusngin_downtimes": downtimeEvents,
  "statusngin_core_restart": coreRestartEvents,
};
