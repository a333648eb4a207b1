/**
 * The shape of a synthetic event, shared by the generators and the job framing.
 *
 * @module
 */

/** A JSON value as the generator builds it. */
export type JsonValue =
  | string
  | number
  | boolean
  | null
  | readonly JsonValue[]
  | { readonly [key: string]: JsonValue };

/** One event: envelope plus payload object (or the envelope-less core-restart message). */
export interface SyntheticEvent {
  readonly [key: string]: JsonValue;
}
