/**
 * A refused setting; a bad command line is a `WorkerError` with code `usage` (exit status 2)
 * (docs/operations.md#startup).
 *
 * @module
 */

/**
 * A setting could not be accepted: refuse to start (exit status 1).
 *
 * The message names the setting, the source (`flag --mysql-batch-size`,
 * `env STATUSENGINE_MYSQL_BATCH_SIZE`, `file /etc/x.yml key mysql_batch_size`, …) and the
 * accepted form. Secrets never appear: URLs carry `****` for the password and API keys are
 * replaced by `(hidden)`, both in the message and in {@linkcode ConfigError.rawValue}.
 *
 * A class, not a `WorkerError` code: the commands catch it by class, and tests read the
 * setting, source and masked value it carries.
 */
export class ConfigError extends Error {
  /** Canonical flag name of the setting (`mysql-batch-size`), or `config` for the file itself. */
  readonly setting: string;
  /** Where the value came from, e.g. `env STATUSENGINE_MYSQL_BATCH_SIZE`. */
  readonly source: string;
  /** The offending value as given, with secrets masked; `undefined` when there is none. */
  readonly rawValue: string | undefined;
  /** Process exit status for this condition: the worker refuses to start. */
  readonly exitCode: 1 = 1;

  /**
   * Create the error; the caller has already masked every secret.
   *
   * @param message Complete, secret-free message.
   * @param details Setting, source, masked raw value and an optional cause.
   */
  constructor(
    message: string,
    details: { setting: string; source: string; rawValue?: string; cause?: unknown },
  ) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = "ConfigError";
    this.setting = details.setting;
    this.source = details.source;
    this.rawValue = details.rawValue;
  }
}
