/**
 * The `status` subcommand: one screen answering "is the pipeline healthy right now?" —
 * queue depths and connected workers at every job server (admin protocol, docs/gearman-protocol.md#admin) or
 * at the RabbitMQ broker (passive declarations, `--consumer rabbitmq`),
 * whether MySQL answers, and, given a running worker's `/metrics`, its in-flight jobs,
 * connection state, MySQL availability and write rates per table (docs/operations.md#metrics).
 *
 * @module
 */
import type { Io } from "../io.ts";
import { collectStatus, type StatusCommandOptions } from "./collect.ts";
import { formatStatusText } from "./format.ts";

export {
  type JobServerStatus,
  type MysqlStatus,
  type QueueAtServer,
  type QueueStatus,
  type StatusCommandOptions,
  type StatusReport,
  type TableWriteRate,
  type WorkerStatus,
} from "./collect.ts";
export { parsePrometheusText, type PrometheusSample, sampleValue } from "./parse.ts";

/**
 * Run the `status` command: collect, print as text or as one JSON document. Exit 1 when a job
 * server, MySQL or a given metrics URL is unreachable.
 */
export async function runStatusCommand(
  options: StatusCommandOptions,
  io: Io,
): Promise<number> {
  const report = await collectStatus(options);
  if (options.json) io.out(JSON.stringify(report, null, 2));
  else for (const line of formatStatusText(report)) io.out(line);
  return report.ok ? 0 : 1;
}
