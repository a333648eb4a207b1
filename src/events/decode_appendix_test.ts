// Every fixture decodes to exactly its expected rows (docs/tables.md#appendix), column by
// column, with node name `N` and the stale filter off. The expectations were written down
// from the payloads by hand, not copied from the decoder's output.
import assert from "node:assert/strict";
import { APPENDIX_CTX, fixture, SCHEMA_COLUMNS } from "./_testing.ts";
import { decodeJob } from "./decode.ts";
import { PERFDATA_THRESHOLDS } from "./perfdata.ts";
import type { QueueName } from "./queues.ts";
import type { DecodedJob, DowntimeStatement, Row, TableRow } from "./types.ts";

function rowsOf(job: DecodedJob): TableRow[] {
  assert.equal(job.kind, "rows", JSON.stringify(job));
  return job.kind === "rows" ? job.rows : [];
}

/** Compares rows column by column and pins the schema column order of each row. */
function assertRows(queue: QueueName, want: TableRow[]): void {
  const job = decodeJob(queue, fixture(queue), APPENDIX_CTX);
  const got = rowsOf(job);
  assert.equal(job.kind === "rows" ? job.staleDiscarded : -1, 0);
  assert.equal(got.length, want.length, `${queue}: row count`);
  for (let i = 0; i < want.length; i++) {
    const g = got[i];
    const w = want[i];
    assert.ok(g && w);
    assert.equal(g.table, w.table, `${queue} row ${i}: table`);
    assert.deepEqual(Object.keys(g.row), SCHEMA_COLUMNS[g.table], `${queue} row ${i}: columns`);
    for (const col of Object.keys(w.row)) {
      assert.ok(
        Object.is(g.row[col], w.row[col]),
        `${queue} row ${i}: ${col} = ${g.row[col]}, want ${w.row[col]}`,
      );
    }
    assert.deepEqual(g.row, w.row, `${queue} row ${i}`);
  }
}

function r(table: TableRow["table"], row: Row): TableRow {
  return { table, row };
}

// The columns both statusengine_hoststatus rows of the fixture share.
const HOSTSTATUS_COMMON = {
  output: "PING OK - Packet loss = 0%, RTA = 0.08 ms",
  "long_output": "",
  "current_state": 0,
  "current_check_attempt": 1,
  "max_check_attempts": 10,
  "is_passive_check": 1, // check_type 0 = active (docs/tables.md#is-passive-check)
  "last_hard_state": 0,
  "is_hardstate": 1,
  "last_notification": 0,
  "next_notification": 0,
  "notifications_enabled": 1,
  "problem_has_been_acknowledged": 0,
  "acknowledgement_type": 0,
  "passive_checks_enabled": 1,
  "active_checks_enabled": 1,
  "is_flapping": 0,
  "scheduled_downtime_depth": 0,
  "process_performance_data": 1,
  "obsess_over_host": 1,
  "normal_check_interval": 5,
  "retry_check_interval": 1,
  "check_timeperiod": "24x7",
  "node_name": "N",
  "last_time_unreachable": 0,
  "current_notification_number": 0,
  "percent_state_change": 0,
  "event_handler": null,
  "check_command": "check-host-alive",
};

Deno.test("appendix: statusngin_hoststatus.json yields the two statusengine_hoststatus rows", () => {
  assertRows("statusngin_hoststatus", [
    r("statusengine_hoststatus", {
      ...HOSTSTATUS_COMMON,
      hostname: "demo.statusengine.org",
      "status_update_time": 1785470659,
      perfdata: "rta=0.077000ms;3000.000000;5000.000000;0.000000 pl=0%;80;100;0",
      "last_check": 1785470653,
      "next_check": 1785470953,
      "last_state_change": 1762725251,
      "last_hard_state_change": 1711613888,
      "event_handler_enabled": 1,
      "flap_detection_enabled": 1,
      latency: 0.259,
      "execution_time": 4.113,
      "last_time_up": 1785470657,
      "last_time_down": 1762725251,
    }),
    r("statusengine_hoststatus", {
      ...HOSTSTATUS_COMMON,
      hostname: "localhost",
      "status_update_time": 1785470668,
      perfdata: "rta=0.078000ms;3000.000000;5000.000000;0.000000 pl=0%;80;100;0",
      "last_check": 1785470664,
      "next_check": 1785470726,
      "last_state_change": 1667502634,
      "last_hard_state_change": 1667502634,
      "event_handler_enabled": 0,
      "flap_detection_enabled": 0,
      latency: 0.6037200093269348, // exact double, not PHP's 14 digits (docs/tables.md#double-columns)
      "execution_time": 4.097793,
      "last_time_up": 1785470668,
      "last_time_down": 1667502634,
    }),
  ]);
});

// The columns both statusengine_servicestatus rows of the fixture share.
const SERVICESTATUS_COMMON = {
  hostname: "foobar",
  "long_output": "",
  "current_state": 2,
  "current_check_attempt": 4,
  "max_check_attempts": 4,
  "is_passive_check": 1,
  "last_hard_state": 2,
  "is_hardstate": 1,
  "notifications_enabled": 1,
  "passive_checks_enabled": 1,
  "active_checks_enabled": 1,
  "event_handler_enabled": 1,
  "flap_detection_enabled": 1,
  "is_flapping": 0,
  "scheduled_downtime_depth": 0,
  "process_performance_data": 1,
  "obsess_over_service": 1,
  "normal_check_interval": 1,
  "retry_check_interval": 1,
  "check_timeperiod": "24x7",
  "node_name": "N",
  "last_time_unknown": 0,
  "percent_state_change": 0,
  "event_handler": null,
};

Deno.test("appendix: statusngin_servicestatus.json yields the two statusengine_servicestatus rows", () => {
  assertRows("statusngin_servicestatus", [
    r("statusengine_servicestatus", {
      ...SERVICESTATUS_COMMON,
      "service_description": "Swap Usage",
      "status_update_time": 1785470669,
      output: "SWAP CRITICAL - 0% free (0 MB out of 0 MB)",
      perfdata: "swap=0MB;0;0;0;0",
      "last_check": 1785470619,
      "next_check": 1785470729,
      "last_state_change": 1670265137,
      "last_hard_state_change": 1670265715,
      "last_notification": 1676018776,
      "next_notification": 1676022376,
      "problem_has_been_acknowledged": 1,
      "acknowledgement_type": 2,
      latency: 0.941,
      "execution_time": 0.002,
      "last_time_ok": 1670265137,
      "last_time_warning": 0,
      "last_time_critical": 1785470619,
      "current_notification_number": 1599,
      "check_command": "check_local_swap!20!10",
    }),
    r("statusengine_servicestatus", {
      ...SERVICESTATUS_COMMON,
      "service_description": "Root Partition",
      "status_update_time": 1785470673,
      output: "DISK CRITICAL - free space: / 18296 MB (2% inode=78%):",
      perfdata: "/=599355MB;515145;579538;0;643932",
      "last_check": 1785470624,
      "next_check": 1785470733,
      "last_state_change": 1778326043,
      "last_hard_state_change": 1778326043,
      "last_notification": 1785470264,
      "next_notification": 1785473864,
      "problem_has_been_acknowledged": 0,
      "acknowledgement_type": 0,
      latency: 0.914,
      "execution_time": 0.003,
      "last_time_ok": 1769439648,
      "last_time_warning": 1778326043,
      "last_time_critical": 1785470624,
      "current_notification_number": 3846,
      "check_command": "check_local_disk!20%!10%!/",
    }),
  ]);
});

Deno.test("appendix: statusngin_hostchecks.json yields one statusengine_hostchecks row", () => {
  assertRows("statusngin_hostchecks", [
    r("statusengine_hostchecks", {
      hostname: "localhost",
      "start_time": 1785470664, // payload, not the envelope's 1785470668
      "start_time_usec": 701779,
      state: 0,
      "is_hardstate": 1,
      "end_time": 1785470668,
      output: "PING OK - Packet loss = 0%, RTA = 0.08 ms",
      timeout: 30,
      "early_timeout": 0,
      latency: 0.6037200093269348,
      "execution_time": 4.097793,
      perfdata: "rta=0.078000ms;3000.000000;5000.000000;0.000000 pl=0%;80;100;0",
      command: "$USER1$/check_ping -H $HOSTADDRESS$ -w 3000.0,80% -c 5000.0,100% -p 5",
      "current_check_attempt": 1,
      "max_check_attempts": 10,
      "long_output": "",
    }),
  ]);
});

Deno.test("appendix: statusngin_servicechecks.json yields two statusengine_servicechecks rows and no perfdata", () => {
  const common = {
    hostname: "localhost",
    state: 0,
    "is_hardstate": 1,
    timeout: 60,
    "early_timeout": 0,
    "current_check_attempt": 1,
    "max_check_attempts": 4,
    "long_output": "",
  };
  assertRows("statusngin_servicechecks", [
    r("statusengine_servicechecks", {
      ...common,
      "service_description": "Current Users",
      "start_time": 1785470660,
      "start_time_usec": 603182,
      "end_time": 1785470660,
      output: "USERS OK - 0 users currently logged in",
      latency: 0.6007760167121887,
      "execution_time": 0.002062,
      perfdata: "users=0;20;50;0",
      command: "$USER1$/check_users -w $ARG1$ -c $ARG2$",
    }),
    r("statusengine_servicechecks", {
      ...common,
      "service_description": "PING",
      "start_time": 1785470664,
      "start_time_usec": 700601,
      hostname: "demo.statusengine.org",
      "end_time": 1785470668,
      output: "PING OK - Packet loss = 0%, RTA = 0.08 ms",
      latency: 0.6001949906349182,
      "execution_time": 4.09994,
      perfdata: "rta=0.084000ms;100.000000;500.000000;0.000000 pl=0%;20;60;0",
      command: "$USER1$/check_ping -H $HOSTADDRESS$ -w $ARG1$ -c $ARG2$ -p 5",
    }),
  ]);
});

Deno.test("appendix: statusngin_service_perfdata.json yields four perfdata rows timed by start_time (D5)", () => {
  function p(
    host: string,
    service: string,
    label: string,
    t: number,
    value: number,
    unit: string | null,
    [warn, crit, min, max]: (number | null)[],
  ) {
    return r("statusengine_perfdata", {
      hostname: host,
      "service_description": service,
      label,
      timestamp: t * 1000,
      "timestamp_unix": t,
      value,
      unit,
      // Not a column: travels to the time-series backends only.
      [PERFDATA_THRESHOLDS]: { warn, crit, min, max },
    });
  }
  assertRows("statusngin_service_perfdata", [
    // No unit: SQL NULL, as the legacy worker writes it (docs/tables.md#perfdata-unit-null).
    p("localhost", "Current Users", "users", 1785470660, 0, null, [20, 50, 0, null]),
    p("localhost", "Swap Usage", "swap", 1785470666, 0, "MB", [0, 0, 0, 0]),
    p("demo.statusengine.org", "PING", "rta", 1785470664, 0.084, "ms", [100, 500, 0, null]),
    p("demo.statusengine.org", "PING", "pl", 1785470664, 0, "%", [20, 60, 0, null]),
  ]);
});

Deno.test("appendix: statusngin_statechanges.json yields two service statehistory rows", () => {
  const common = {
    "service_description": "Flapping",
    "state_change": 1,
    state: 0,
    "current_check_attempt": 4,
    "max_check_attempts": 4,
    "last_state": 1,
  };
  assertRows("statusngin_statechanges", [
    r("statusengine_service_statehistory", {
      ...common,
      "state_time": 1785470683,
      "state_time_usec": 632628,
      hostname: "localhost",
      "is_hardstate": 1,
      "last_hard_state": 1,
      output: "Your random value is: 158",
      "long_output": "Your random value is: 158",
    }),
    r("statusengine_service_statehistory", {
      ...common,
      "state_time": 1785470686,
      "state_time_usec": 630353,
      hostname: "demo.statusengine.org",
      "is_hardstate": 0,
      "last_hard_state": 0,
      output: "Your random value is: 87",
      "long_output": "Your random value is: 87",
    }),
  ]);
});

Deno.test("appendix: statusngin_logentries.json yields three log rows in event order", () => {
  assertRows("statusngin_logentries", [
    r("statusengine_logentries", {
      "entry_time": 1785470659,
      "logentry_type": 262144,
      "logentry_data":
        "Event broker module '/opt/statusengine/lib/libstatusengine.so' initialized successfully.",
      "node_name": "N",
    }),
    r("statusengine_logentries", {
      "entry_time": 1785470659,
      "logentry_type": 262144,
      "logentry_data": "Successfully launched command file worker with pid 1490327",
      "node_name": "N",
    }),
    r("statusengine_logentries", {
      "entry_time": 1785470666,
      "logentry_type": 1048576,
      "logentry_data":
        "SERVICE NOTIFICATION SUPPRESSED: localhost;Swap Usage;Notifications are temporarily disabled for this object by an external command.",
      "node_name": "N",
    }),
  ]);
});

Deno.test("appendix: statusngin_notifications.json yields one service and one host notifications_log row", () => {
  assertRows("statusngin_notifications", [
    r("statusengine_service_notifications_log", {
      hostname: "localhost",
      "service_description": "Swap Usage",
      "start_time": 1785517089,
      "start_time_usec": 927750,
      "end_time": 1785517089,
      state: 2,
      "reason_type": 8,
      "is_escalated": 0,
      "contacts_notified_count": 1,
      output:
        "CRITICAL: Agent error: Error response from daemon: client version 1.51 is too new. Maximum supported API version is 1.46",
      "ack_author": "Daniel Z",
      "ack_data": "Test notification",
    }),
    r("statusengine_host_notifications_log", {
      hostname: "b19e585b-b439-4150-8d0c-5f3b1ab9faf9",
      "start_time": 1785776162,
      "start_time_usec": 789235,
      "end_time": 1785776162,
      state: 0,
      "reason_type": 8,
      "is_escalated": 0,
      "contacts_notified_count": 1,
      output: "OK: Agent version 3.6.1 running on ubuntu (24.04). Last update: 2026-08-03 16:55:20",
      "ack_author": "Daniel Z",
      "ack_data": "Test notification",
    }),
  ]);
});

Deno.test("appendix: statusngin_contactnotificationmethod.json yields one service notifications row", () => {
  assertRows("statusngin_contactnotificationmethod", [
    r("statusengine_service_notifications", {
      "service_description": "Swap Usage",
      "start_time": 1785517089,
      "start_time_usec": 927284,
      hostname: "localhost",
      "contact_name": "286a2700-006a-4d7d-a6fe-6df5b3533ad2",
      "command_name": "52c9c3e2-4a00-40a4-8e75-db4649eba846",
      "command_args": null,
      state: 2,
      "end_time": 1785517089,
      "reason_type": 8,
      output:
        "CRITICAL: Agent error: Error response from daemon: client version 1.51 is too new. Maximum supported API version is 1.46",
      "ack_author": "Daniel Z",
      "ack_data": "Test notification",
    }),
  ]);
});

Deno.test("appendix: statusngin_acknowledgements.json yields one service acknowledgement row", () => {
  assertRows("statusngin_acknowledgements", [
    r("statusengine_service_acknowledgements", {
      "service_description": "Swap Usage",
      "entry_time": 1785516972,
      "entry_time_usec": 732213,
      hostname: "localhost",
      state: 2,
      "author_name": "Daniel Z",
      "comment_data": "I will take a look at this",
      "acknowledgement_type": 1,
      "is_sticky": 0,
      "persistent_comment": 1,
      "notify_contacts": 1,
    }),
  ]);
});

Deno.test("appendix: statusngin_downtimes.json yields the service history row, the announcement and the scheduled copy of an ADD", () => {
  const job = decodeJob("statusngin_downtimes", fixture("statusngin_downtimes"), APPENDIX_CTX);
  assert.equal(job.kind, "downtimes");
  const statements: DowntimeStatement[] = job.kind === "downtimes" ? job.statements : [];
  assert.equal(statements.length, 3);
  const [history, announcement, scheduled] = statements;
  assert.ok(
    history?.kind === "upsert" && announcement?.kind === "upsert" && scheduled?.kind === "copy",
  );
  const shared = {
    hostname: "efb91fa3-2bd4-47a4-a89b-1ffe9ca719b5",
    "service_description": "66d42eec-650f-4a98-aeaf-8ee51beaac62",
    "internal_downtime_id": 1,
    "scheduled_start_time": 1785517380,
    "node_name": "N",
    "entry_time": 1785517314, // payload entry_time, one second before the envelope timestamp
    "author_name": "Daniel Z",
    "comment_data": "In maintenance",
    "triggered_by_id": 0,
    "is_fixed": 1,
    duration: 120,
    "scheduled_end_time": 1785517500,
    "was_started": 0,
    "actual_start_time": 0,
  };
  assert.equal(history.table, "statusengine_service_downtimehistory");
  assert.deepEqual(Object.keys(history.row), SCHEMA_COLUMNS[history.table]);
  assert.deepEqual(history.row, {
    ...shared,
    "entry_time_usec": 224439,
    "actual_end_time": 0,
    "was_cancelled": 0,
  });
  const key = {
    hostname: shared.hostname,
    "service_description": shared.service_description,
    "node_name": "N",
    "scheduled_start_time": shared.scheduled_start_time,
    "internal_downtime_id": 1,
  };
  assert.equal(announcement.table, "statusengine_downtime_announcements");
  assert.deepEqual(announcement.row, {
    ...key,
    "announced_at": 1785517315, // the envelope timestamp
  });
  assert.equal(scheduled.table, "statusengine_service_scheduleddowntimes");
  assert.equal(scheduled.from, "statusengine_service_downtimehistory");
  assert.deepEqual(scheduled.key, key);
});

Deno.test("appendix: statusngin_core_restart.json (timestamp 0) yields the worker clock as cutoff (D4)", () => {
  const job = decodeJob("statusngin_core_restart", fixture("statusngin_core_restart"), {
    ...APPENDIX_CTX,
    nowSeconds: 1785470670.9,
  });
  assert.deepEqual(job, { kind: "core_restart", cutoff: 1785470670, cutoffSource: "clock" });
});
