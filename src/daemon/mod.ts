/**
 * The daemon: `startWorker` builds a running worker from a validated configuration; `run`
 * maps settings onto it, tests run it in-process.
 *
 * @module
 */
export { type PerfdataBackend, SETTINGS_AS_IS, type WorkerConfig } from "./config.ts";
export { type RunningWorker, startWorker } from "./start.ts";
export { NOTIFY_COMMAND, serviceNotifier } from "./notify.ts";
