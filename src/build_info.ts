/**
 * Build identity, unstamped: tools/compile.ts stamps it for the compile and restores it, because
 * `deno compile` has no linker flags to inject them (docs/operations.md#version).
 *
 * @module
 */
export const BUILD_INFO = Object.freeze({
  version: "dev",
  commit: "unknown",
  date: "",
});
