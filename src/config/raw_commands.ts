/**
 * Which `raw` commands `POST /commands` and the task queue pass to the monitoring core: the
 * fixed denylist and the default of `--command-allow`. Declared with the settings because the
 * setting's default, its help text and its validation derive from them; `src/commands/`
 * applies them.
 *
 * @module
 */

/**
 * `raw` commands refused with 403 whatever `--command-allow` says. Both
 * spellings of shutdown and restart, because Naemon maps them to the same
 * handler; `PROCESS_FILE` makes Naemon execute commands read from a file and
 * would bypass every other rule.
 */
export const DENIED_RAW_COMMANDS = [
  "SHUTDOWN_PROGRAM",
  "SHUTDOWN_PROCESS",
  "RESTART_PROGRAM",
  "RESTART_PROCESS",
  "PROCESS_FILE",
] as const;

/**
 * The `raw` commands accepted unless `--command-allow` replaces the list: what
 * the Statusengine UI and openITCOCKPIT send for a host or service (checks,
 * passive results, acknowledgements, downtimes, comments, custom
 * notifications, and switching notifications, checks, event handlers and flap
 * detection per object). Program-wide switches (`DISABLE_NOTIFICATIONS`, …)
 * are left out: one request would silence a whole installation.
 */
export const DEFAULT_ALLOWED_RAW_COMMANDS = [
  // checks
  "SCHEDULE_HOST_CHECK",
  "SCHEDULE_FORCED_HOST_CHECK",
  "SCHEDULE_SVC_CHECK",
  "SCHEDULE_FORCED_SVC_CHECK",
  "SCHEDULE_HOST_SVC_CHECKS",
  "SCHEDULE_FORCED_HOST_SVC_CHECKS",
  "PROCESS_HOST_CHECK_RESULT",
  "PROCESS_SERVICE_CHECK_RESULT",
  // acknowledgements
  "ACKNOWLEDGE_HOST_PROBLEM",
  "ACKNOWLEDGE_SVC_PROBLEM",
  "REMOVE_HOST_ACKNOWLEDGEMENT",
  "REMOVE_SVC_ACKNOWLEDGEMENT",
  // downtimes
  "SCHEDULE_HOST_DOWNTIME",
  "SCHEDULE_SVC_DOWNTIME",
  "SCHEDULE_HOST_SVC_DOWNTIME",
  "SCHEDULE_AND_PROPAGATE_HOST_DOWNTIME",
  "SCHEDULE_AND_PROPAGATE_TRIGGERED_HOST_DOWNTIME",
  "SCHEDULE_HOSTGROUP_HOST_DOWNTIME",
  "SCHEDULE_HOSTGROUP_SVC_DOWNTIME",
  "SCHEDULE_SERVICEGROUP_HOST_DOWNTIME",
  "SCHEDULE_SERVICEGROUP_SVC_DOWNTIME",
  "DEL_HOST_DOWNTIME",
  "DEL_SVC_DOWNTIME",
  "DEL_DOWNTIME_BY_HOST_NAME",
  // comments and custom notifications
  "ADD_HOST_COMMENT",
  "ADD_SVC_COMMENT",
  "DEL_HOST_COMMENT",
  "DEL_SVC_COMMENT",
  "SEND_CUSTOM_HOST_NOTIFICATION",
  "SEND_CUSTOM_SVC_NOTIFICATION",
  // per-object switches
  "ENABLE_HOST_NOTIFICATIONS",
  "DISABLE_HOST_NOTIFICATIONS",
  "ENABLE_SVC_NOTIFICATIONS",
  "DISABLE_SVC_NOTIFICATIONS",
  "ENABLE_HOST_SVC_NOTIFICATIONS",
  "DISABLE_HOST_SVC_NOTIFICATIONS",
  "ENABLE_HOST_CHECK",
  "DISABLE_HOST_CHECK",
  "ENABLE_SVC_CHECK",
  "DISABLE_SVC_CHECK",
  "ENABLE_HOST_SVC_CHECKS",
  "DISABLE_HOST_SVC_CHECKS",
  "ENABLE_PASSIVE_HOST_CHECKS",
  "DISABLE_PASSIVE_HOST_CHECKS",
  "ENABLE_PASSIVE_SVC_CHECKS",
  "DISABLE_PASSIVE_SVC_CHECKS",
  "ENABLE_HOST_EVENT_HANDLER",
  "DISABLE_HOST_EVENT_HANDLER",
  "ENABLE_SVC_EVENT_HANDLER",
  "DISABLE_SVC_EVENT_HANDLER",
  "ENABLE_HOST_FLAP_DETECTION",
  "DISABLE_HOST_FLAP_DETECTION",
  "ENABLE_SVC_FLAP_DETECTION",
  "DISABLE_SVC_FLAP_DETECTION",
] as const;

/** The `--command-allow` entry that allows every command the denylist does not refuse. */
export const ALLOW_ALL = "*";
