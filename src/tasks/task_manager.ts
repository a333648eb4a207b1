/**
 * The Statusengine UI's task queue (docs/running.md#tasks): this node's rows of
 * `statusengine_tasks`, validated like a `POST /commands` `raw` command, submitted, and deleted
 * only after the submission succeeded or was written to the broker unconfirmed (never twice). A
 * task that can never run is deleted too: keeping it would repeat the refusal every poll, and the
 * PHP worker deleted every task.
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
import { hasCode } from "../util/errors.ts";

const log = getLogger("tasks");

/** The only task type the UI writes: a complete core command line in `payload`. */
const EXTERNAL_COMMAND_TASK = "externalcommand";

/** Tasks read per poll; the rest waits for the next one (bounds memory and one round's time). */
const TASKS_PER_POLL = 500;

/** Budget of one write to the command file, the open included (a FIFO without reader blocks). */
const COMMAND_FILE_TIMEOUT_MS = 5_000;

/** How long the start-up probe waits for a reader of the FIFO; without one it just knows less. */
const COMMAND_FILE_PROBE_MS = 1_000;

/** How a validated command reaches the core (`--submit-method`). */
export type SubmitMethod = "broker" | "cmd";

/** Hands one validated command to the core. */
export interface TaskSubmitter {
  readonly method: SubmitMethod;
  /** @throws When the command was not handed over; the task is kept. */
  submit(command: ValidatedTask, signal: AbortSignal): Promise<void>;
}

export interface ValidatedTask {
  /** The envelope as `/commands` publishes it: `{"Command":"raw","Data":"[ts] …"}`. */
  readonly body: string;
  /** The command line with its `[timestamp] ` prefix, as the command file takes it. */
  readonly line: string;
  /** The task's row (every column), the same at every poll while the row stays. */
  readonly key: string;
}

/** Submit through the publisher `POST /commands` uses (`statusngin_cmd`). */
export function brokerSubmitter(publisher: CommandPublisher): TaskSubmitter {
  return {
    method: "broker",
    submit: (command, signal) => publisher.publish(command.body, { signal }),
  };
}

/**
 * Submit by appending the line to the core's external command file (a FIFO, or a plain file). The
 * file is never created: a missing one means the core is not running, and the task must wait.
 * Each line is one write, so lines up to the pipe buffer (4 KiB) never interleave with others.
 *
 * A write cannot be cancelled: one that outlasts the budget (a core that does not read, its pipe
 * full) is reported as failed but goes on, to the end of its line, and reaches the core once it
 * reads again. Its task is then taken as submitted when it comes again (the manager keeps the
 * order, so it is the next submission): written twice, it would run twice.
 */
export function commandFileSubmitter(
  path: string,
  options: { readonly timeoutMs?: number } = {},
): TaskSubmitter {
  const timeoutMs = options.timeoutMs ?? COMMAND_FILE_TIMEOUT_MS;
  const encoder = new TextEncoder();
  // At most one open or write given up on is left behind; while it waits, every submission fails
  // at once instead of stacking up blocked opens and writes. An open waits on the file the path
  // named: once the path names another (a core's start may make a new FIFO), nothing can end it,
  // and it is left alone (it writes nothing).
  let stuck: { readonly on: "open" | "write"; readonly file?: string | undefined } | undefined;
  // The key of the task whose write ended after its submission had been given up.
  let landed: string | undefined;
  return {
    method: "cmd",
    async submit(command, signal) {
      const file = await fileIdentity(path);
      if (stuck !== undefined && (stuck.on === "write" || stuck.file === file)) {
        throw new Error(
          `External command file ${path} has no reader (an earlier ${stuck.on} still waits)`,
        );
      }
      const late = landed;
      landed = undefined;
      if (late === command.key) return;
      using limit = deadline(timeoutMs, signal);
      const opened = await openCommandFile(path, limit.signal).catch((err: unknown) => {
        throw new Error(`Cannot open external command file ${path}: ${errorMessage(err)}`, {
          cause: err,
        });
      });
      if ("late" in opened) {
        const waiting = { on: "open" as const, file };
        stuck = waiting;
        void opened.late.finally(() => stuck === waiting && (stuck = undefined));
        throw new Error(
          `Cannot open external command file ${path} within ${timeoutMs} ms ` +
            "(is the monitoring core reading it?)",
        );
      }
      const writing = writeLine(opened.file, encoder.encode(`${command.line}\n`));
      try {
        await abortable(writing, limit.signal);
      } catch (err: unknown) {
        if (!limit.signal.aborted) throw err;
        const waiting = { on: "write" as const };
        stuck = waiting;
        void writing.then(() => (landed = command.key), () => {})
          .finally(() => stuck === waiting && (stuck = undefined));
        throw new Error(
          `Cannot write to external command file ${path} within ${timeoutMs} ms (is the ` +
            "monitoring core reading it?); the line goes in once it reads, and not again",
          { cause: err },
        );
      }
    },
  };
}

/** Write all of `bytes` (one line), then close the file, whatever the caller stopped waiting for. */
async function writeLine(file: Deno.FsFile, bytes: Uint8Array): Promise<void> {
  try {
    let written = 0;
    while (written < bytes.length) written += await file.write(bytes.subarray(written));
  } finally {
    file.close();
  }
}

/** The file `path` names (device and inode), or undefined when it names none. */
function fileIdentity(path: string): Promise<string | undefined> {
  return Deno.stat(path).then((s) => `${s.dev}:${s.ino}`, () => undefined);
}

/** An open command file, or an open given up on that closes its file once it completes. */
type Opened = { readonly file: Deno.FsFile } | { readonly late: Promise<void> };

/**
 * Open the command file for appending, never creating it. A FIFO's open blocks until the core
 * reads it, and Deno cannot cancel an open: when `signal` aborts first, it is returned as `late`.
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
 * Open the command file once at start, writing nothing, so that a file the worker may not write
 * refuses the start instead of failing every task while the worker looks ready.
 *
 * @throws The open's error when it exists and cannot be opened for writing.
 */
export async function probeCommandFile(path: string): Promise<CommandFileProbe> {
  using limit = deadline(COMMAND_FILE_PROBE_MS);
  try {
    const opened = await openCommandFile(path, limit.signal);
    if ("late" in opened) return "no-reader";
    opened.file.close();
    return "writable";
  } catch (err: unknown) {
    if (err instanceof Deno.errors.NotFound) return "missing";
    throw err;
  }
}

export interface TaskManagerOptions {
  readonly executor: SqlExecutor;
  readonly nodeName: string;
  readonly intervalMs: number;
  readonly submitter: TaskSubmitter;
  readonly metrics?: Metrics;
  /** `raw` commands that pass (`--command-allow`, as `POST /commands`); default built-in. */
  readonly allow?: RawCommandAllowlist;
  /** Clock in epoch seconds (tests). */
  readonly now?: () => number;
  /**
   * Whether this worker may run the node's tasks now (it holds the tasks lease, when several
   * workers share the node); asked before each poll and each submission. Default: always.
   */
  readonly mayRun?: () => boolean;
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
  /**
   * The key of the task submitted last whose DELETE failed (MySQL went away, or its answer was
   * lost): the next poll deletes its row without submitting it again. At most one: a failed
   * DELETE ends the poll.
   */
  #undeleted: string | undefined;

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

  /**
   * Stop polling; a submission in progress is abandoned (its task stays, unless its message was
   * written to the broker: that task is deleted, not sent twice). Idempotent.
   */
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
   * One poll: run this node's tasks in entry order, stopping at the first that could not be
   * submitted or deleted, so the order is kept, or once {@link TaskManagerOptions.mayRun} says
   * no. Returns the tasks submitted.
   */
  async poll(signal: AbortSignal): Promise<number> {
    const o = this.#o;
    const m = o.metrics;
    if (o.mayRun?.() === false) return 0;
    // No ORDER BY: the table has no key, so InnoDB keeps its rows (and their node_name index
    // entries) in the order they were written, which is how the PHP worker read them. The UI's
    // entry_time has whole seconds; sorting on it here, stably, keeps the written order of the
    // tasks of one second (a tie broken by the random uuid could run "enable" before "disable").
    const { rows } = await o.executor.run(
      "SELECT `uuid`, `entry_time`, `type`, `payload` FROM `statusengine_tasks` " +
        `WHERE \`node_name\` = ? LIMIT ${TASKS_PER_POLL}`,
      [o.nodeName],
    );
    const tasks = (rows as unknown as readonly TaskRow[]).toSorted((a, b) =>
      Number(a["entry_time"]) - Number(b["entry_time"])
    );
    let submitted = 0;
    for (const raw of tasks) {
      signal.throwIfAborted();
      // Every log line of this task starts with these.
      const task = { uuid: raw.uuid ?? "", "node_name": o.nodeName };
      const key = JSON.stringify([raw.uuid, String(raw["entry_time"]), raw.type, raw.payload]);
      if (key === this.#undeleted) {
        log.info("tasks: deleting a task submitted before; it is not submitted again", task);
        await this.#delete(raw);
        this.#undeleted = undefined;
        continue;
      }
      // Validated as the `raw` command of a `POST /commands` body, by the same rules.
      const checked = raw.type === EXTERNAL_COMMAND_TASK
        ? validateCommandBody(JSON.stringify({ Command: "raw", Data: raw.payload ?? "" }), {
          nowSeconds: Math.floor(o.now?.() ?? Date.now() / 1000),
          allow: o.allow,
        })
        : { ok: false as const, reason: "unknown_type", error: `type ${JSON.stringify(raw.type)}` };
      if (!checked.ok) {
        m?.tasksRejected.inc();
        log.warn("tasks: task refused and deleted; it can never run", {
          ...task,
          reason: checked.reason,
          error: checked.error,
        });
        await this.#delete(raw);
        continue;
      }
      // The lease may have ended while earlier tasks ran: the next holder reads this one.
      if (o.mayRun?.() === false) return submitted;
      try {
        // A validated `raw` command's Data is always its line.
        const line = (JSON.parse(checked.body) as { Data: string }).Data;
        await o.submitter.submit({ body: checked.body, line, key }, signal);
      } catch (err: unknown) {
        // Written to the broker, its confirm lost (or no longer waited for: the worker stops): it
        // may be queued, and submitted again, here or at the next start, it would run twice (two
        // downtimes, two notifications), as the publisher never sends it twice.
        if (!hasCode(err, "command_unconfirmed")) {
          if (signal.aborted) throw err;
          m?.tasksSubmitErrors.inc();
          log.error("tasks: submitting a task failed; it stays for the next poll", {
            ...task,
            submit_method: o.submitter.method,
            error: errorMessage(err),
          });
          return submitted;
        }
        log.warn(
          "tasks: submission not confirmed; the task is deleted, not sent twice, and may " +
            "not have reached the core",
          {
            ...task,
            // The publisher's text would name its budget, which a stop does not exhaust.
            error: signal.aborted
              ? "the worker stopped before the confirm came"
              : errorMessage(err),
          },
        );
      }
      m?.tasksSubmitted.inc();
      submitted++;
      // Only now: a task deleted before its submission succeeded would be lost.
      this.#undeleted = key;
      await this.#delete(raw);
      this.#undeleted = undefined;
    }
    // Every row was read and the one left undeleted was not among them: gone meanwhile (its
    // DELETE committed, only the answer was lost).
    if (rows.length < TASKS_PER_POLL) this.#undeleted = undefined;
    if (submitted > 0) log.debug("tasks: submitted", { tasks: submitted, node_name: o.nodeName });
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
