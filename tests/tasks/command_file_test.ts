/**
 * The task queue's `submit_method: cmd` against a core that is slow to read its command FIFO.
 *
 * What would break without it: a write that outlasted its budget was reported as failed, but
 * Deno cannot cancel a write; it went on, the line reached the core once the core read again,
 * and the task, kept for the next poll, was written a second time: every acknowledgement,
 * downtime or notification of a slow moment ran twice.
 */
import assert from "node:assert/strict";
import { commandFileSubmitter, type ValidatedTask } from "../../src/tasks/task_manager.ts";
import { waitFor } from "../helpers/wait.ts";

/** Fill the FIFO's pipe to the last byte (non-blocking writes until EAGAIN); returns the bytes. */
async function fillPipe(fifo: string): Promise<number> {
  const script = [
    "import os, sys",
    "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_NONBLOCK)",
    "n = 0",
    "for size in (65536, 4096, 1):",
    "    while True:",
    "        try:",
    "            n += os.write(fd, b'A' * size)",
    "        except BlockingIOError:",
    "            break",
    "os.close(fd)",
    "print(n)",
  ].join("\n");
  const out = await new Deno.Command("python3", { args: ["-c", script, fifo] }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  return Number(new TextDecoder().decode(out.stdout).trim());
}

/** Read from the core's end until `done` says the text is complete. */
async function readUntil(file: Deno.FsFile, done: (text: string) => boolean): Promise<string> {
  const buffer = new Uint8Array(1 << 16);
  const decoder = new TextDecoder();
  let text = "";
  while (!done(text)) {
    const n = await file.read(buffer);
    if (n === null) break;
    text += decoder.decode(buffer.subarray(0, n));
  }
  return text;
}

Deno.test("command file: a line whose write outlasts its budget reaches the core once, not again at the next poll", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const fifo = `${dir}/naemon.cmd`;
    assert.ok((await new Deno.Command("mkfifo", { args: [fifo] }).output()).success, "mkfifo");
    // The core: keeps the FIFO open (read-write, as Naemon does) but does not read for now.
    using core = await Deno.open(fifo, { read: true, write: true });
    const filled = await fillPipe(fifo);
    const submitter = commandFileSubmitter(fifo, { timeoutMs: 100 });
    const signal = new AbortController().signal;
    const task: ValidatedTask = { body: "", line: "[1] ENABLE_HOST_CHECK;a", key: "t1" };
    const marker: ValidatedTask = { body: "", line: "[2] DISABLE_HOST_CHECK;b", key: "t2" };
    await assert.rejects(submitter.submit(task, signal), "the pipe is full: the budget runs out");

    // The core reads again. The manager submits the same task again (it was kept) until that
    // succeeds, then the next one.
    const head = await readUntil(core, (t) => t.length >= filled);
    assert.equal(head.length, filled, "only the filler's bytes while the pipe was full");
    await waitFor(
      () => submitter.submit(task, signal).then(() => true, () => false),
      { message: "the task submitted" },
    );
    await submitter.submit(marker, signal);
    const rest = await readUntil(core, (t) => t.includes(marker.line));
    assert.equal(
      rest.replace(/^A+/, ""),
      `${task.line}\n${marker.line}\n`,
      "the late line once, whole, then the next task",
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// The core's start may replace its FIFO (Nagios' init script removes it and the core makes a new
// one). An open that waited on the old FIFO, left while the core was down, never ends: every
// later submission failed at once, "an earlier open still waits", with the core reading again.
Deno.test("command file: an open left waiting on a FIFO the restarted core replaced does not hold up the tasks", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const fifo = `${dir}/naemon.cmd`;
    const mkfifo = async () =>
      assert.ok((await new Deno.Command("mkfifo", { args: [fifo] }).output()).success, "mkfifo");
    // The core is down, its FIFO left behind: the open waits for a reader.
    await mkfifo();
    // A second name for the old FIFO, so that the test can end the open waiting on it.
    await Deno.link(fifo, `${dir}/old.cmd`);
    const submitter = commandFileSubmitter(fifo, { timeoutMs: 100 });
    const signal = new AbortController().signal;
    const task: ValidatedTask = { body: "", line: "[1] ENABLE_HOST_CHECK;a", key: "t1" };
    await assert.rejects(submitter.submit(task, signal), "no reader: the budget runs out");
    // The core starts: a new FIFO at the path, read (opened read-write, as Naemon does).
    await Deno.remove(fifo);
    await mkfifo();
    using core = await Deno.open(fifo, { read: true, write: true });
    try {
      await waitFor(
        () => submitter.submit(task, signal).then(() => true, () => false),
        { timeoutMs: 5_000, message: "the task submitted to the new FIFO" },
      );
      assert.equal(await readUntil(core, (t) => t.endsWith("\n")), `${task.line}\n`);
    } finally {
      // A reader of the old FIFO ends the open still waiting on it.
      (await Deno.open(`${dir}/old.cmd`, { read: true, write: true })).close();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
