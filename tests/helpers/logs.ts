/** Recording the worker's log lines in a test, to wait for a lifecycle event it logs. */
import { configureLogging, resetLogging } from "../../src/log.ts";

/** One log line as the JSON format writes it. */
export interface LogLine {
  readonly level: string;
  readonly message: string;
  readonly properties: Record<string, unknown>;
}

/**
 * Run `fn` with every log line (info and up) recorded, then restore the default logging.
 *
 * @param fn Gets the array the lines are appended to as they are logged.
 * @returns What `fn` returned.
 */
export async function withLogs<T>(fn: (logs: LogLine[]) => Promise<T>): Promise<T> {
  const logs: LogLine[] = [];
  await configureLogging({
    level: "info",
    format: "json",
    write: (line) => logs.push(JSON.parse(line)),
  });
  try {
    return await fn(logs);
  } finally {
    await resetLogging();
  }
}
