/**
 * The external-command API: `POST /commands` validated and published to `statusngin_cmd`.
 *
 * @module
 */
export {
  COMMAND_NAMES,
  COMMAND_QUEUE,
  MAX_BODY_BYTES,
  MAX_JSON_DEPTH,
  RawCommandAllowlist,
  REJECT_REASONS,
  validateCommandBody,
} from "./validate.ts";
export {
  type CommandPublisher,
  gearmanCommandPublisher,
  rabbitMqCommandPublisher,
} from "./publisher.ts";
export { startCommandServer } from "./server.ts";
