/**
 * Build identity, unstamped: tools/compile.ts stamps it for the compile and restores it, because
 * `deno compile` has no linker flags to inject them (docs/operations.md#version).
 *
 * @module
 */
// Typed as strings, not inferred: once tools/compile.ts stamps a date, an inferred literal type
// would make `date === ""` a type error in the compile's own check.
export const BUILD_INFO: {
  readonly version: string;
  readonly commit: string;
  readonly date: string;
} = {
  version: "dev",
  commit: "unknown",
  date: "",
};
