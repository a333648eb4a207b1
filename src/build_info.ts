/**
 * Build identity. This committed file is the unstamped state; `deno task
 * compile` (tools/compile.ts) rewrites it with the release version, commit
 * and build time for the duration of the compile and restores it afterwards,
 * because `deno compile` has no linker flags to inject them (docs/operations.md#version).
 *
 * @module
 */

/** Stamped build identity. */
export const BUILD_INFO: {
  readonly version: string;
  readonly commit: string;
  readonly date: string;
} = {
  version: "dev",
  commit: "unknown",
  date: "",
};
