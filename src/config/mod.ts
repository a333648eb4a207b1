/**
 * Configuration of statusengine-worker: one settings table drives flags, environment
 * variables, the YAML file (Go keys and the legacy PHP config.yml), validation, `--help` and
 * the reference in docs/configuration.md (D8, docs/operations.md#settings).
 *
 * @example Loading the settings of the daemon (main.ts passes `Deno.args` and
 * `Deno.env.toObject()`)
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadSettings, parseCommandLine } from "./mod.ts";
 * const line = parseCommandLine(["run", "--mysql-batch-size", "200"]);
 * const { settings } = await loadSettings(line.command, { argv: line.rest, env: {} });
 * assert.equal(settings.mysqlBatchSize, 200); // a number, 1..700
 * ```
 *
 * @module
 */

export * from "./load.ts";
export * from "./help.ts";
export * from "./settings.ts";
export { ConfigError } from "./values.ts";
export { didYouMean } from "./legacy.ts";
