/**
 * Counts the rows of one job still waiting for their commit or dead-letter (D1, D7;
 * docs/architecture.md, "Job tracker"). A job given back to the broker is withdrawn: another
 * worker writes its rows, so the writers drop them (docs/retries.md#give-back).
 *
 * @module
 */

export class JobTracker {
  /** Queue the job came from (dead-letter records and logs). */
  readonly queue: string;
  #pending: number;
  #deadLettered = 0;
  readonly #done: PromiseWithResolvers<void> = Promise.withResolvers<void>();
  readonly #withdrawn: (() => boolean) | undefined;

  /**
   * @param rows Total rows the job will hand to writers; 0 resolves at once.
   * @param withdrawn Whether the job went back to the broker (asked, not listened for: no
   *   listener per job on the link's signal).
   */
  constructor(queue: string, rows: number, withdrawn?: () => boolean) {
    this.queue = queue;
    this.#pending = rows;
    this.#withdrawn = withdrawn;
    if (rows === 0) this.#done.resolve();
  }

  get withdrawn(): boolean {
    return this.#withdrawn?.() === true;
  }

  /** Resolves when every row settled (committed or dead-lettered). */
  get done(): Promise<void> {
    return this.#done.promise;
  }

  get pending(): number {
    return this.#pending;
  }

  get deadLettered(): number {
    return this.#deadLettered;
  }

  committed(): void {
    if (--this.#pending === 0) this.#done.resolve();
  }

  /** One row was dead-lettered (it still counts as settled, D7). */
  deadLetter(): void {
    this.#deadLettered++;
    this.committed();
  }
}
