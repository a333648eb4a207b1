/**
 * The Gearman backend of the consumer core: one link target, a {@link QueueWorker}, per (queue,
 * server) (docs/consumption.md#one-connection-per-queue, D9). The backlog gauge asks each job
 * server once per reading: one admin `status` lists every queue.
 *
 * @module
 */
import { QueueWorker } from "./worker.ts";
import { adminStatus } from "./admin.ts";
import { waitingJobs } from "./codec.ts";
import {
  type BackendOptions,
  type ConsumedQueue,
  Consumer,
  type LinkContext,
} from "../consumer/consumer.ts";
import type { LinkTarget, QueueConsumer } from "../consumer/contract.ts";
import type { BacklogSource } from "../consumer/backlog_monitor.ts";
import { getLogger } from "../log.ts";

const log = getLogger("gearman");

export interface GearmanConsumerOptions extends BackendOptions {
  /** `host:port` of every job server (D9). */
  readonly servers: readonly string[];
  /** Most jobs in flight per queue (≥ 1), the hard cap of its window; in-order queues always get 1. */
  readonly maxJobsPerQueue: number;
  /** ECHO_REQ after this much silence; absent or undefined: the connection's 15 s. */
  readonly heartbeatIntervalMs?: number | undefined;
  /** A probe unanswered this long means dead; absent or undefined: the connection's 5 s. */
  readonly heartbeatTimeoutMs?: number | undefined;
  /** Bound on connecting and on the server's first answer. */
  readonly connectTimeoutMs?: number;
  readonly idlePollMs?: number;
  /** Prefix of the SET_CLIENT_ID shown in `gearadmin --workers`. */
  readonly clientIdPrefix?: string;
}

/**
 * Consumes every queue from every job server. Pairs that cannot connect keep retrying in the
 * background; `start()` fails only when none can and `waitAtStart` is off.
 */
export class GearmanConsumer extends Consumer implements QueueConsumer {
  /** @throws {RangeError} On an empty queue or server list, or a cap below 1. */
  constructor(o: GearmanConsumerOptions) {
    if (o.servers.length === 0) {
      throw new RangeError("Cannot create Gearman consumer: no job server address");
    }
    super({
      ...o,
      name: "gearman",
      log,
      targets: (context) => o.queues.flatMap((q) => o.servers.map((s) => target(o, q, s, context))),
      backlogSources: o.servers.map((s) => statusSource(s, o.queues.map((q) => q.name))),
      describe: { servers: o.servers.join(",") },
      serverNoun: "job server",
    });
  }
}

function target(
  o: GearmanConsumerOptions,
  queue: ConsumedQueue,
  server: string,
  context: LinkContext,
): LinkTarget {
  const budget = context.budget(queue.name);
  const clientId = o.clientIdPrefix === undefined
    ? undefined
    : `${o.clientIdPrefix}-${queue.name}-${Deno.pid}`;
  return {
    queues: [queue.name],
    server,
    open: (signal) =>
      QueueWorker.open({
        queue: queue.name,
        server,
        budget,
        engine: context.engine,
        clientId,
        idlePollMs: o.idlePollMs,
        // The heartbeat and connect timeout settings carry the connection's names.
        connect: { ...o, signal, maxBodySize: o.maxJobSize },
      }),
    async backlog(name, signal) {
      return (await statusSource(server, [name]).read(signal)).get(name);
    },
    async consumers(name, signal) {
      // The workers column: connections that registered the function, this one included.
      const row = (await adminStatus(server, { signal })).find((r) => r.function === name);
      return row?.workers ?? 0;
    },
  };
}

/** The backlogs of `queues` at one job server: one admin connection, one `status`. */
export function statusSource(server: string, queues: readonly string[]): BacklogSource {
  return {
    server,
    queues,
    read: async (signal) => waitingJobs(await adminStatus(server, { signal }), queues),
  };
}
