/**
 * The `status` command: collect.ts gathers the report, format.ts renders it as text.
 *
 * @module
 */
import type { Io } from "../io.ts";
import { collectStatus, type StatusCommandOptions } from "./collect.ts";
import { formatStatusText } from "./format.ts";

/**
 * Run the `status` command: collect, print as text or as one JSON document. Exit 1 when a job
 * server, MySQL or a given metrics URL is unreachable.
 */
export async function runStatusCommand(options: StatusCommandOptions, io: Io): Promise<number> {
  const report = await collectStatus(options);
  if (options.json) io.out(JSON.stringify(report, null, 2));
  else for (const line of formatStatusText(report)) io.out(line);
  return report.ok ? 0 : 1;
}
