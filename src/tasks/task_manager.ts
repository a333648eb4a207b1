/**
 * The task queue of the Statusengine UI: every user action (reschedule, acknowledge,
 * downtime, passive result) is a row of `statusengine_tasks` for the node that must run it,
 * as the PHP worker's TaskManager read them. Every `--command-check-interval` this node's
 * tasks are read in entry order, each one validated exactly like a `POST /commands` `raw`
 * command, submitted (to `statusngin_cmd`, or written to the core's external command file),
 * and deleted only after the submission succeeded.
 *
 * Delivery is at least once: a task whose submission succeeded but whose DELETE failed is
 * submitted again on the next poll, like a redelivered broker message. A task that can never
 * run (unknown type, refused by the validation) is logged, counted and deleted: keeping it
 * would only repeat the same refusal every poll, and the PHP worker deleted every task it read.
 *
 * @module
 */
import {
  type CommandPublisher,
  type RawCommandAllowlist,
  validateCommandBody,
} from "../commands/mod.ts";
import type { SqlExecutor } from "../mysql/mod.ts";
import type { Metrics } from "../metrics/registry.ts";
import { abortable, deadline, sleepUnlessAborted } from "../util/async.ts";
import { errorMessage, getLogger } from "../log.ts";

const log = getLogger("tasks");

/** The only task type the UI writes: a complete core command line in `payload`. */
const EXTERNAL_COMMAND_TASK = "externalcommand";

/** Tasks read per poll; the rest waits for the next one (bounds memory and one round's time). */
const TASKS_PER_POLL = 500;

/** Budget of one write to the external command file, the open included (a FIFO without reader blocks). */
const COMMAND_FILE_TIMEOUT_MS = 5_000;

/**
 * How long the start waits for the core to open its FIFO when probing it; a FIFO no core reads
 * yet is no reason to refuse, only to not know more.
 */
const COMMAND_FILE_PROBE_MS = 1_000;

/** How a validated command reaches the core (`--submit-method`). */
export type SubmitMethod = "broker" | "cmd";

/** Hands one validated command to the core. */
export interface TaskSubmitter {
  /** `broker` or `cmd`, for logs. */
  readonly method: SubmitMethod;
  /**
   * Submit one command.
   *
   * @param command The re-serialised envelope and the command line it carries.
   * @param signal Aborts the wait (shutdown).
   * @throws When the command was not handed over; the task is kept.
   */
  submit(command: ValidatedTask, signal: AbortSignal): Promise<void>;
}

/** A task that passed the `POST /commands` validation. */
export interface ValidatedTask {
  /** The envelope as `/commands` publishes it: `{"Command":"raw","Data":"[ts] …"}`. */
  readonly body: string;
  /** The command line with its `[timestamp] ` prefix, as the command file takes it. */
  readonly line: string;
}

/**
 * Validate one task's payload as the `raw` command of a `POST /commands` body. The one call
 * into the command validation, so a change of its rules applies to tasks too.
 *
 * @param payload The task's `payload` column.
 * @param nowSeconds Clock for a missing timestamp prefix.
 * @returns The validated command, or why it is refused.
 */
function validateTask(
  payload: string,
  nowSeconds: number,
  allow?: RawCommandAllowlist,
): { ok: true; task: ValidatedTask } | { ok: false; reason: string; error: string } {
  const result = validateCommandBody(JSON.stringify({ Command: "raw", Data: payload }), {
    nowSeconds,
    ...(allow === undefined ? {} : { allow }),
  });
  if (!result.ok) return { ok: false, reason: result.reason, error: result.error };
  const data = (JSON.parse(result.body) as { Data?: unknown }).Data;
  if (typeof data !== "string") {
    return { ok: false, reason: "malformed", error: "validated command carries no line" };
  }
  return { ok: true, task: { body: result.body, line: data } };
}

/**
 * Submit through the broker: the publisher `POST /commands` uses (`statusngin_cmd`).
 *
 * @param publisher A command publisher of the worker's backend.
 * @returns The submitter.
 */
export function brokerSubmitter(publisher: CommandPublisher): TaskSubmitter {
  return {
    method: "broker",
    submit: (command, signal) => publisher.publish(command.body, { signal }),
  };
}

/**
 * Submit by appending the command line to the core's external command file (a FIFO the core
 * reads, or a plain file in tests and spools). The file is never created: a missing one means
 * the core is not running, and the task must wait. Each line is one write, so lines up to the
 * pipe buffer (4 KiB) never interleave with other writers of the FIFO.
 *
 * @param path `--external-command-file`.
 * @returns The submitter.
 */
export function commandFileSubmitter(path: string): TaskSubmitter {
  const encoder = new TextEncoder();
  // At most one open that waits for a reader is left behind; while it waits, every write fails
  // at once instead of stacking up blocked opens.
  let stuck: Promise<unknown> | undefined;
  return {
    method: "cmd",
    async submit(command, signal) {
      if (stuck !== undefined) {
        throw new Error(
          `External command file ${path} has no reader (an earlier open still waits)`,
        );
      }
      using limit = deadline(COMMAND_FILE_TIMEOUT_MS, signal);
      let opened: Opened;
      try {
        opened = await openCommandFile(path, limit.signal);
      } catch (err: unknown) {
        throw new Error(`Cannot open external command file ${path}: ${errorMessage(err)}`, {
          cause: err,
        });
      }
      if ("late" in opened) {
        const pending = opened.late.finally(() => {
          stuck = undefined;
        });
        stuck = pending;
        void pending;
        throw new Error(
          `Cannot open external command file ${path} within ${COMMAND_FILE_TIMEOUT_MS} ms ` +
            "(is the monitoring core reading it?)",
        );
      }
      const file = opened.file;
      try {
        const bytes = encoder.encode(`${command.line}\n`);
        let written = 0;
        while (written < bytes.length) {
          written += await abortable(file.write(bytes.subarray(written)), limit.signal);
        }
      } finally {
        file.close();
      }
    },
  };
}

/** An open command file, or an open given up on that closes its file once it completes. */
type Opened = { readonly file: Deno.FsFile } | { readonly late: Promise<void> };

/**
 * Open the command file for appending, never creating it. Opening a FIFO for writing blocks
 * until the core opens it for reading, and Deno cannot cancel an open in progress: when
 * `signal` aborts first, the open is handed back as `late`.
 *
 * @throws The open's error (missing, not permitted, read-only file system).
 */
async function openCommandFile(path: string, signal: AbortSignal): Promise<Opened> {
  const opening = Deno.open(path, { write: true, append: true });
  try {
    return { file: await abortable(opening, signal) };
  } catch (err: unknown) {
    if (!signal.aborted) throw err;
    return { late: opening.then((late) => late.close(), () => {}) };
  }
}

/** What opening the command file once at start showed. */
export type CommandFileProbe = "writable" | "missing" | "no-reader";

/**
 * Open the command file for writing once, writing nothing, as each submission will: at start,
 * so that a file the worker may not write (the core's FIFO is writable for the core's group
 * only; a plain file under ProtectSystem=strict is read-only) refuses the start instead of
 * failing every task while the worker looks ready.
 *
 * @param path `--external-command-file`.
 * @returns `missing` when it does not exist (the core is not running, or the path is wrong),
 *   `no-reader` when it is a FIFO no core reads yet.
 * @throws The open's error when it exists and cannot be opened for writing.
 */
export async function probeCommandFile(path: string): Promise<CommandFileProbe> {
  using limit = deadline(COMMAND_FILE_PROBE_MS);
  try {
    const opened = await openCommandFile(path, limit.signal);
    if ("late" in opened) {
      void opened.late;
      return "no-reader";
    }
    opened.file.close();
    return "writable";
  } catch (err: unknown) {
    if (err instanceof Deno.errors.NotFound) return "missing";
    throw err;
  }
}

/** Options of {@link TaskManager}. */
export interface TaskManagerOptions {
  readonly executor: SqlExecutor;
  readonly nodeName: string;
  readonly intervalMs: number;
  readonly submitter: TaskSubmitter;
  readonly metrics?: Metrics;
  /** `raw` commands that pass (`--command-allow`, shared with `POST /commands`); default the built-in list. */
  readonly allow?: RawCommandAllowlist;
  /** Clock in epoch seconds (tests). */
  readonly now?: () => number;
}

interface TaskRow {
  readonly uuid: string | null;
  readonly "entry_time": number | string;
  readonly type: string | null;
  readonly payload: string | null;
}

/** Polls `statusengine_tasks` for this node and runs its tasks. */
export class TaskManager {
  readonly #o: TaskManagerOptions;
  readonly #stop = new AbortController();
  #loop: Promise<void> | undefined;
  #rounds = 0;

  /** @param options Executor, node, interval, submitter. */
  constructor(options: TaskManagerOptions) {
    this.#o = options;
  }

  /** Completed poll rounds (tests wait for it instead of sleeping). */
  get rounds(): number {
    return this.#rounds;
  }

  /** Start polling; the first poll runs at once. */
  start(): void {
    if (this.#loop !== undefined) return;
    log.info("tasks: polling statusengine_tasks", {
      node_name: this.#o.nodeName,
      interval_ms: this.#o.intervalMs,
      submit_method: this.#o.submitter.method,
    });
    this.#loop = this.#run();
  }

  /** Stop polling; a submission in progress is abandoned (its task stays). Idempotent. */
  async stop(): Promise<void> {
    this.#stop.abort(new Error("task manager stopped"));
    await this.#loop;
  }

  async #run(): Promise<void> {
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      try {
        await this.poll(signal);
      } catch (err: unknown) {
        if (signal.aborted) break;
        log.error("tasks: poll failed; tasks stay for the next poll", {
          node_name: this.#o.nodeName,
          error: errorMessage(err),
        });
      }
      this.#rounds++;
      if (!(await sleepUnlessAborted(this.#o.intervalMs, signal))) break;
    }
  }

  /**
   * One poll: read this node's tasks and run them in entry order. Stops at the first task
   * that could not be submitted or deleted, so the order is kept.
   *
   * @param signal Aborts the round.
   * @returns Tasks submitted in this round.
   * @throws When the tasks cannot be read.
   */
  async poll(signal: AbortSignal): Promise<number> {
    const o = this.#o;
    const m = o.metrics;
    const { rows } = await o.executor.run(
      "SELECT `uuid`, `entry_time`, `type`, `payload` FROM `statusengine_tasks` " +
        "WHERE `node_name` = ? " +
        `ORDER BY \`entry_time\`, \`uuid\` LIMIT ${TASKS_PER_POLL}`,
      [o.nodeName],
    );
    let submitted = 0;
    for (const raw of rows as unknown as readonly TaskRow[]) {
      signal.throwIfAborted();
      const uuid = raw.uuid ?? "";
      let refusal: { reason: string; error: string } | undefined;
      let task: ValidatedTask | undefined;
      if (raw.type !== EXTERNAL_COMMAND_TASK) {
        refusal = { reason: "unknown_type", error: `type ${JSON.stringify(raw.type)}` };
      } else {
        const checked = validateTask(
          raw.payload ?? "",
          Math.floor(o.now?.() ?? Date.now() / 1000),
          o.allow,
        );
        if (checked.ok) task = checked.task;
        else refusal = { reason: checked.reason, error: checked.error };
      }
      if (task === undefined) {
        m?.tasksRejected.inc();
        log.warn("tasks: task refused and deleted; it can never run", {
          uuid,
          node_name: o.nodeName,
          reason: refusal?.reason ?? "",
          error: refusal?.error ?? "",
        });
        await this.#delete(raw);
        continue;
      }
      try {
        await o.submitter.submit(task, signal);
      } catch (err: unknown) {
        if (signal.aborted) throw err;
        m?.tasksSubmitErrors.inc();
        log.error("tasks: submitting a task failed; it stays for the next poll", {
          uuid,
          node_name: o.nodeName,
          submit_method: o.submitter.method,
          error: errorMessage(err),
        });
        return submitted;
      }
      m?.tasksSubmitted.inc();
      submitted++;
      // Only now: a task deleted before its submission succeeded would be lost.
      await this.#delete(raw);
    }
    if (submitted > 0) {
      log.debug("tasks: submitted", { tasks: submitted, node_name: o.nodeName });
    }
    return submitted;
  }

  /**
   * Delete exactly the row that was run. The table has no key and `uuid` may repeat or be
   * NULL, so the row is matched on every column (NULL-safe) and one row is deleted: an
   * identical task written twice runs twice, as it was asked to.
   */
  async #delete(row: TaskRow): Promise<void> {
    await this.#o.executor.run(
      "DELETE FROM `statusengine_tasks` WHERE `node_name` = ? AND `uuid` <=> ? AND " +
        "`entry_time` = ? AND `type` <=> ? AND `payload` <=> ? LIMIT 1",
      [this.#o.nodeName, row.uuid, row["entry_time"], row.type, row.payload],
    );
  }
}
