/**
 * The daemon: `startWorker` builds a running worker from a validated configuration; `run`
 * maps settings onto it, tests run it in-process.
 *
 * @module
 */
export {
  type ConsumerKind,
  type PerfdataBackend,
  SETTINGS_AS_IS,
  type WorkerConfig,
} from "./config.ts";
export { type QueueConsumer } from "../consumer/contract.ts";
export { type RunningWorker, startWorker } from "./start.ts";
export {
  type KeepAlive,
  NOTIFY_COMMAND,
  type NotifyEnvironment,
  type ServiceNotifier,
  serviceNotifier,
} from "./notify.ts";
