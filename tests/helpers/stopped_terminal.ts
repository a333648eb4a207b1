/** A terminal whose writes wait, for tests of a file that stops answering. */
import assert from "node:assert/strict";

/**
 * A terminal whose output is stopped (XOFF): every write to it waits, as one to a hung NFS mount
 * does. The worker refuses a FIFO, not a terminal; the test holds the master side.
 */
export function stoppedTerminal(): {
  readonly path: string;
  /**
   * Make `file` name this terminal, in one rename: for a worker's dead-letter file after its
   * start, which refuses what is not a file.
   */
  replace(file: string): Promise<void>;
  close(): void;
} {
  const libc = Deno.dlopen("libc.so.6", {
    posix_openpt: { parameters: ["i32"], result: "i32" },
    grantpt: { parameters: ["i32"], result: "i32" },
    unlockpt: { parameters: ["i32"], result: "i32" },
    ptsname_r: { parameters: ["i32", "buffer", "usize"], result: "i32" },
    write: { parameters: ["i32", "buffer", "usize"], result: "isize" },
    close: { parameters: ["i32"], result: "i32" },
  });
  const O_RDWR = 0o2;
  const O_NOCTTY = 0o400;
  const master = libc.symbols.posix_openpt(O_RDWR | O_NOCTTY);
  const name = new Uint8Array(64);
  assert.ok(master >= 0 && libc.symbols.grantpt(master) === 0);
  assert.equal(libc.symbols.unlockpt(master), 0);
  assert.equal(libc.symbols.ptsname_r(master, name, BigInt(name.length)), 0);
  const path = new TextDecoder().decode(name.subarray(0, name.indexOf(0)));
  // Held open so that the line keeps its state; then XOFF (Ctrl-S) stops its output.
  const terminal = Deno.openSync(path, { read: true, write: true });
  assert.equal(libc.symbols.write(master, new Uint8Array([0x13]), 1n), 1n);
  return {
    path,
    async replace(file) {
      await Deno.symlink(path, `${file}.swap`);
      await Deno.rename(`${file}.swap`, file);
    },
    close() {
      // A write still waiting fails (EIO) once the master side is gone.
      libc.symbols.close(master);
      terminal.close();
      libc.close();
    },
  };
}
