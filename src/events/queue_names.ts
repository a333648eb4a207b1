/**
 * The list of consumed queues on its own, with no imports, so that layers
 * which may not depend on the decoders (the settings table) can share it
 * instead of keeping a copy.
 *
 * @module
 */

/**
 * The twelve consumed queues, spelled as the broker's sample configuration names them
 * (docs/tables.md#consumed-queues). Operators may rename queues on the broker; the configuration
 * maps a configured name to one of these.
 */
export const QUEUE_NAMES = Object.freeze(
  [
    "statusngin_hoststatus",
    "statusngin_servicestatus",
    "statusngin_hostchecks",
    "statusngin_servicechecks",
    "statusngin_service_perfdata",
    "statusngin_statechanges",
    "statusngin_logentries",
    "statusngin_notifications",
    "statusngin_contactnotificationmethod",
    "statusngin_acknowledgements",
    "statusngin_downtimes",
    "statusngin_core_restart",
  ] as const,
);
