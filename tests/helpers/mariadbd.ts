/**
 * A private MariaDB server for one test: its own data directory and port,
 * so a test can make it read-only, fill its disk, revoke privileges or
 * freeze it (SIGSTOP) without touching the shared server other tests use.
 *
 * Started with `mariadb-install-db` + `mariadbd --no-defaults`, ready when a
 * root connection answers, stopped by PID, data directory removed. MariaDB
 * must be installed (`apt-get install mariadb-server`); a test that cannot
 * start it fails, it never skips.
 *
 * The server runs with SIGXFSZ ignored, so {@link Mariadbd.limitFileSize}
 * (the soft RLIMIT_FSIZE of the running server, set with util-linux
 * `prlimit`) makes a write past the limit fail with EFBIG, which InnoDB
 * reports as error 1114 "table is full", instead of killing the server:
 * a full disk for the files that grow, without root or a mount.
 */
import mysql from "mysql2/promise";
import { freePort } from "./gearmand.ts";

/** A running private MariaDB. */
export interface Mariadbd extends AsyncDisposable {
  readonly host: string;
  readonly port: number;
  /** PID of the current process (changes after {@link restart}). */
  readonly pid: number;
  readonly datadir: string;
  /**
   * `mysql://` URL for a user (default root, no password) and database.
   *
   * @param options User, password, database.
   */
  url(options?: { user?: string; password?: string; database?: string }): string;
  /** Run one statement as root (own short-lived connection), optionally in `database`. */
  query<T = unknown>(sql: string, params?: unknown[], database?: string): Promise<T>;
  /** SIGSTOP: the server keeps its sockets but answers nothing. */
  pause(): void;
  /** SIGCONT after {@link pause}. */
  resume(): void;
  /**
   * Files the server writes may not grow past `bytes` (nor be written past
   * that offset); `undefined` lifts the limit.
   */
  limitFileSize(bytes: number | undefined): Promise<void>;
  /** Size of every file under the data directory, by path relative to it. */
  fileSizes(): Promise<Map<string, number>>;
  /** The server's error log so far. */
  errorLog(): Promise<string>;
  /**
   * Take the server down and keep its data directory: `SIGTERM` (an orderly shutdown, which
   * ends every client connection) or `SIGKILL` (a crash: whatever it had not yet executed
   * never is); a paused server is continued first for SIGTERM. Resolves once it exited.
   */
  down(signal: "SIGTERM" | "SIGKILL"): Promise<void>;
  /** Start it again after {@link down}: same port, same data; resolves once it answers. */
  restart(): Promise<void>;
  /** SIGCONT, SIGTERM (SIGKILL after 20 s), wait, remove the data directory. Idempotent. */
  stop(): Promise<void>;
}

/** Options of {@link startMariadbd}. */
export interface MariadbdOptions {
  /** More `mariadbd` options. */
  readonly extraArgs?: readonly string[];
}

const REDO_LOG_SIZE = "8M";

function findBinary(names: readonly string[]): string {
  for (const name of names) {
    for (const dir of ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"]) {
      try {
        if (Deno.statSync(`${dir}/${name}`).isFile) return `${dir}/${name}`;
      } catch {
        // not here
      }
    }
  }
  throw new Error(
    `Cannot start a private MariaDB: none of ${
      names.join(", ")
    } is installed (apt-get install mariadb-server)`,
  );
}

async function run(cmd: string, args: readonly string[]): Promise<string> {
  const out = await new Deno.Command(cmd, { args: [...args], stdout: "piped", stderr: "piped" })
    .output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  if (!out.success) throw new Error(`${cmd} ${args.join(" ")} failed (${out.code}):\n${text}`);
  return text;
}

function asRoot(): string[] {
  // mariadbd refuses to run as root unless told to.
  return Deno.uid() === 0 ? ["--user=root"] : [];
}

async function readable(path: string): Promise<string> {
  try {
    return await Deno.readTextFile(path);
  } catch {
    return "";
  }
}

/**
 * Install a data directory and start a private server on a free port.
 *
 * @example
 * ```ts ignore
 * await using server = await startMariadbd();
 * await server.query("SET GLOBAL read_only = 1");
 * ```
 */
export async function startMariadbd(options: MariadbdOptions = {}): Promise<Mariadbd> {
  const mariadbd = findBinary(["mariadbd", "mysqld"]);
  const installDb = findBinary(["mariadb-install-db", "mysql_install_db"]);
  findBinary(["prlimit"]);
  const datadir = await Deno.makeTempDir({ prefix: "se-mariadbd-" });
  // Each server keeps its temporary tables in a directory of its own: with several servers set up
  // at once in the shared /tmp, mariadb-install-db once failed with "Could not remove temporary
  // table '/tmp/#sql-temptable-…'" and "Unknown table 'mysql.tmp_user_sys'".
  const tmpdir = `${datadir}/tmp`;
  await Deno.mkdir(tmpdir);
  try {
    await run(installDb, [
      "--no-defaults",
      `--datadir=${datadir}/data`,
      `--tmpdir=${tmpdir}`,
      "--auth-root-authentication-method=normal",
      "--skip-test-db",
      `--innodb-log-file-size=${REDO_LOG_SIZE}`,
      ...asRoot(),
    ]);
  } catch (err: unknown) {
    await Deno.remove(datadir, { recursive: true }).catch(() => {});
    throw new Error("Cannot start a private MariaDB: mariadb-install-db failed", { cause: err });
  }
  let lastError = "";
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = freePort();
    const args = [
      "--no-defaults",
      `--datadir=${datadir}/data`,
      `--socket=${datadir}/mysqld.sock`,
      `--tmpdir=${tmpdir}`,
      `--pid-file=${datadir}/mysqld.pid`,
      `--log-error=${datadir}/error.log`,
      `--port=${port}`,
      "--bind-address=127.0.0.1",
      "--skip-log-bin",
      `--innodb-log-file-size=${REDO_LOG_SIZE}`,
      "--innodb-buffer-pool-size=64M",
      // Tests, not durability: fewer fsyncs on a shared machine.
      "--innodb-flush-log-at-trx-commit=2",
      "--innodb-doublewrite=0",
      "--character-set-server=utf8mb4",
      "--collation-server=utf8mb4_general_ci",
      "--max-connections=200",
      ...asRoot(),
      ...(options.extraArgs ?? []),
    ];
    const host = "127.0.0.1";
    let running: Running | undefined = await launch(mariadbd, args, host, port);
    if (running === undefined) {
      lastError = await readable(`${datadir}/error.log`);
      continue;
    }
    let stopping: Promise<void> | undefined;
    let paused = false;
    const down = async (signal: "SIGTERM" | "SIGKILL") => {
      const current = running;
      running = undefined;
      paused = false;
      if (current === undefined || current.exited) return;
      try {
        if (signal === "SIGTERM") current.child.kill("SIGCONT");
        current.child.kill(signal);
      } catch {
        // already exited
      }
      const killTimer = setTimeout(() => {
        if (!current.exited) current.child.kill("SIGKILL");
      }, 20_000);
      try {
        await current.status;
      } finally {
        clearTimeout(killTimer);
      }
    };
    const stop = () => {
      stopping ??= (async () => {
        await down("SIGTERM");
        await Deno.remove(datadir, { recursive: true });
      })();
      return stopping;
    };
    const live = (): Running => {
      if (running === undefined) throw new Error(`private MariaDB on port ${port} is down`);
      return running;
    };
    const url = (o: { user?: string; password?: string; database?: string } = {}) => {
      const u = new URL(`mysql://${host}:${port}/`);
      u.username = encodeURIComponent(o.user ?? "root");
      if (o.password !== undefined) u.password = encodeURIComponent(o.password);
      u.pathname = `/${o.database ?? ""}`;
      return u.href;
    };
    return {
      host,
      port,
      get pid() {
        return running?.child.pid ?? -1;
      },
      datadir: `${datadir}/data`,
      url,
      async query<T>(sql: string, params?: unknown[], database?: string): Promise<T> {
        const conn = await mysql.createConnection({
          host,
          port,
          user: "root",
          connectTimeout: 5000,
          ...(database === undefined ? {} : { database }),
        });
        try {
          const [rows] = await conn.query(sql, params);
          return rows as T;
        } finally {
          await conn.end();
        }
      },
      pause() {
        paused = true;
        live().child.kill("SIGSTOP");
      },
      resume() {
        if (paused) live().child.kill("SIGCONT");
        paused = false;
      },
      async limitFileSize(bytes) {
        await run("prlimit", [
          "--pid",
          String(live().child.pid),
          `--fsize=${bytes === undefined ? "unlimited" : String(bytes)}:`,
        ]);
      },
      async fileSizes() {
        const sizes = new Map<string, number>();
        const walk = async (dir: string, prefix: string) => {
          for await (const entry of Deno.readDir(dir)) {
            const path = `${dir}/${entry.name}`;
            if (entry.isDirectory) await walk(path, `${prefix}${entry.name}/`);
            else if (entry.isFile) {
              sizes.set(`${prefix}${entry.name}`, (await Deno.stat(path)).size);
            }
          }
        };
        await walk(`${datadir}/data`, "");
        return sizes;
      },
      errorLog: () => readable(`${datadir}/error.log`),
      down,
      async restart() {
        if (running !== undefined) throw new Error("restart() needs the server down first");
        running = await launch(mariadbd, args, host, port);
        if (running === undefined) {
          throw new Error(
            `Cannot restart the private MariaDB on port ${port}:\n${await readable(
              `${datadir}/error.log`,
            )}`,
          );
        }
      },
      stop,
      [Symbol.asyncDispose]: stop,
    };
  }
  await Deno.remove(datadir, { recursive: true }).catch(() => {});
  throw new Error(`Cannot start a private MariaDB: not ready after 3 attempts:\n${lastError}`);
}

/** One process of the server. */
interface Running {
  readonly child: Deno.ChildProcess;
  readonly status: Promise<Deno.CommandStatus>;
  readonly exited: boolean;
}

/** Spawn the server and wait until a root connection answers; undefined if it never did. */
async function launch(
  mariadbd: string,
  args: readonly string[],
  host: string,
  port: number,
): Promise<Running | undefined> {
  // `trap "" XFSZ` leaves SIGXFSZ ignored across exec: see limitFileSize.
  const child = new Deno.Command("sh", {
    args: ["-c", 'trap "" XFSZ; exec "$0" "$@"', mariadbd, ...args],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  const state = { exited: false };
  const status = child.status.finally(() => (state.exited = true));
  const running: Running = {
    child,
    status,
    get exited() {
      return state.exited;
    },
  };
  const until = performance.now() + 30_000;
  while (!state.exited && performance.now() < until) {
    try {
      const conn = await mysql.createConnection({ host, port, user: "root", connectTimeout: 1000 });
      await conn.end();
      return running;
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  if (!state.exited) child.kill("SIGKILL");
  await status;
  return undefined;
}

/** The restricted account {@link createWorkerUser} makes. */
export const WORKER_USER = { user: "se_worker", password: "se-worker-pw" } as const;

/**
 * An account as a production worker has it: no SUPER or READ ONLY ADMIN (so `read_only`
 * applies to it), SELECT on `database`, and INSERT, UPDATE, DELETE granted per table (so a
 * REVOKE takes effect on its open connections).
 *
 * @param server The private server.
 * @param database The worker's database.
 * @param tables The tables it writes.
 */
export async function createWorkerUser(
  server: Mariadbd,
  database: string,
  tables: readonly string[],
): Promise<void> {
  const account = WORKER_USER;
  await server.query(`CREATE USER '${account.user}'@'%' IDENTIFIED BY '${account.password}'`);
  await server.query(`GRANT SELECT ON ${database}.* TO '${account.user}'@'%'`);
  for (const table of tables) {
    await server.query(
      `GRANT INSERT, UPDATE, DELETE ON ${database}.${table} TO '${account.user}'@'%'`,
    );
  }
}
