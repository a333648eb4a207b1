/**
 * Test helpers for this directory: the fixture loader and the column lists of the catalogue.
 *
 * @module
 */

import { ALL_TABLES } from "../mysql/catalogue.ts";
import type { QueueName } from "./queues.ts";
import type { DecodeContext } from "./types.ts";

/**
 * The fixture of a queue, as text: byte-for-byte copies of `shared/fixtures/<queue>.json`, named
 * `.job` because `deno fmt` would re-indent a `.json` file, and the expected rows
 * (docs/tables.md#appendix) are stated for the unchanged bytes.
 */
export function fixture(queue: QueueName): string {
  return new TextDecoder().decode(fixtureBytes(queue));
}

export function fixtureBytes(queue: QueueName): Uint8Array {
  return Deno.readFileSync(new URL(`./testdata/${queue}.job`, import.meta.url));
}

/** The conditions of the expected rows: node name `N`, stale filter off. */
export const APPENDIX_CTX: DecodeContext = Object.freeze({
  nodeName: "N",
  nowSeconds: 1785470959,
  statusMaxAgeSeconds: 0,
});

/**
 * Column lists in schema order (without AUTO_INCREMENT ids) from the table catalogue of
 * src/mysql/: a decoder row whose keys differ from these would misalign the writer's statement.
 */
export const SCHEMA_COLUMNS: Readonly<Record<string, readonly string[]>> = Object.fromEntries(
  ALL_TABLES.map((t) => [t.name, t.insertColumns]),
);
