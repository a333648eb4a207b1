/**
 * The external-command API: `POST /commands` validated and published to
 * `statusngin_cmd` (operations.md §4.2).
 *
 * @module
 */
export {
  COMMAND_NAMES,
  COMMAND_QUEUE,
  type CommandName,
  DENIED_RAW_COMMANDS,
  MAX_BODY_BYTES,
  MAX_BULK_COMMANDS,
  REJECT_REASONS,
  REJECT_STATUS,
  type RejectReason,
  validateCommandBody,
  type ValidationResult,
} from "./validate.ts";
export {
  type CommandBackend,
  type CommandPublisher,
  CommandPublishError,
  gearmanCommandPublisher,
  PUBLISH_BUDGET_MS,
  rabbitMqCommandPublisher,
} from "./publisher.ts";
export {
  type CommandMetrics,
  COMMANDS_PATH,
  type CommandServer,
  type CommandServerOptions,
  startCommandServer,
} from "./server.ts";
