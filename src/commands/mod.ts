/**
 * The external-command API: `POST /commands` validated and published to
 * `statusngin_cmd`.
 *
 * @module
 */
export {
  ALLOW_ALL,
  COMMAND_NAMES,
  COMMAND_QUEUE,
  type CommandName,
  DEFAULT_ALLOWED_RAW_COMMANDS,
  DENIED_RAW_COMMANDS,
  MAX_BODY_BYTES,
  MAX_BULK_COMMANDS,
  MAX_JSON_DEPTH,
  parseRawCommand,
  type RawCommand,
  RawCommandAllowlist,
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
