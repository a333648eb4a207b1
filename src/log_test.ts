import assert from "node:assert/strict";
import { configureLogging, connectedToJournal, getLogger, resetLogging } from "./log.ts";

async function linesOf(
  format: "text" | "json",
  journal: boolean,
): Promise<string[]> {
  const lines: string[] = [];
  await configureLogging({ level: "debug", format, journal, write: (l) => lines.push(l) });
  const log = getLogger("test");
  log.debug("d");
  log.info("i");
  log.warn("w", { a: 1 });
  log.error("e");
  await resetLogging();
  return lines.map((l) => l.trimEnd());
}

// logtape spelled the level "warning" in text and "WARN" in JSON while --log-level says "warn".
Deno.test("log: text and JSON spell the levels as --log-level does", async () => {
  const text = await linesOf("text", false);
  assert.deepEqual(text.map((l) => /level=(\S+)/.exec(l)?.[1]), ["debug", "info", "warn", "error"]);
  const json = await linesOf("json", false);
  assert.deepEqual(json.map((l) => JSON.parse(l).level), ["debug", "info", "warn", "error"]);
});

// Without the sd-daemon prefix journald stores every line at info: `journalctl -p err` found nothing.
Deno.test("log: connected to the journal, each line starts with its syslog priority", async () => {
  for (const format of ["text", "json"] as const) {
    const lines = await linesOf(format, true);
    assert.deepEqual(lines.map((l) => l.slice(0, 3)), ["<7>", "<6>", "<4>", "<3>"]);
    if (format === "json") assert.equal(JSON.parse(lines[3]?.slice(3) ?? "").level, "error");
  }
  const plain = await linesOf("text", false);
  assert.ok(plain.every((l) => l.startsWith("time=")), plain.join("\n"));
});

Deno.test("log: JOURNAL_STREAM counts unless the log goes to a terminal", () => {
  assert.equal(connectedToJournal("8:12345", false), true);
  assert.equal(connectedToJournal("8:12345", true), false);
  assert.equal(connectedToJournal(undefined, false), false);
  assert.equal(connectedToJournal("", false), false);
});

const CHILD = `
import { configureLogging, getLogger } from ${
  JSON.stringify(new URL("./log.ts", import.meta.url).href)
};
await configureLogging({ level: "info", format: "text" });
getLogger("x").error("boom");
getLogger("x").info("fine");
`;

// The real process: systemd sets JOURNAL_STREAM and connects stdout to a socket, not a terminal.
Deno.test("log: a process started with JOURNAL_STREAM prefixes its stdout lines", async () => {
  const run = async (env: Record<string, string>) => {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["eval", "--ext=ts", CHILD],
      env,
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    return new TextDecoder().decode(out.stdout).trimEnd().split("\n");
  };
  const journal = await run({ JOURNAL_STREAM: "8:4242" });
  assert.deepEqual(journal.map((l) => l.slice(0, 3)), ["<3>", "<6>"]);
  const plain = await run({ JOURNAL_STREAM: "" });
  assert.ok(plain.every((l) => l.startsWith("time=")), plain.join("\n"));
});
