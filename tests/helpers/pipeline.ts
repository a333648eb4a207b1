/**
 * The write side on its own, as the integration tests that feed it jobs directly build it:
 * batches of 100, node name `N`, no write summaries, and a dead letter failing the test (these
 * tests write only valid events, so one would be a bug).
 */
import type { Pool } from "mysql2/promise";
import { Pipeline, type PipelineOptions } from "../../src/pipeline/pipeline.ts";
import { poolExecutor } from "../../src/mysql/executor.ts";

/**
 * A {@link Pipeline} writing through `pool`.
 *
 * @param pool Connections to the test's database.
 * @param options Settings that differ from the defaults above.
 * @returns The pipeline; the caller closes it.
 */
export function testPipeline(pool: Pool, options: Partial<PipelineOptions> = {}): Pipeline {
  return new Pipeline({
    executor: poolExecutor(pool),
    batchSize: 100,
    deadLetters: {
      write: (r) => Promise.reject(new Error(`unexpected dead letter: ${r.reason} ${r.error}`)),
      close: () => Promise.resolve(),
    },
    nodeName: "N",
    statusMaxAgeSeconds: 0,
    openItcockpit: false,
    perfdataToMysql: true,
    statsIntervalMs: 0,
    ...options,
  });
}
