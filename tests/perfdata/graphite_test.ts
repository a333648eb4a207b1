import assert from "node:assert/strict";
import { GraphiteClient } from "../../src/perfdata/graphite.ts";
import { createMetrics, type Metrics } from "../../src/metrics/registry.ts";
import { perfdataObserver } from "../../src/daemon/outputs.ts";
import { waitFor } from "../helpers/wait.ts";
import { startTcpPeer } from "../helpers/tcp_proxy.ts";

/** The value of an unlabelled counter or gauge. */
async function value(
  m: Metrics["graphiteMetricsWritten" | "graphiteAvailable"],
): Promise<number> {
  return (await m.get()).values[0]?.value ?? 0;
}

/** A client with prefix `se` and no periodic stats, counting into `m`. */
function clientOf(m: Metrics, addr: string, batchSize: number): GraphiteClient {
  const observer = perfdataObserver(m, "graphite");
  return new GraphiteClient({ addr, prefix: "se", batchSize, observer, statsIntervalMs: 0 });
}

const row = (label: string, value: number) => ({
  hostname: "host.example.com",
  service_description: "Disk Usage /var",
  label,
  value,
  timestamp: 1785470664000,
  timestamp_unix: 1785470664,
  unit: "",
});

Deno.test("graphite: offered perfdata reaches Carbon as plaintext lines, counted as written and flushed", async () => {
  // A Carbon stand-in that keeps the received text.
  const server = startTcpPeer();
  const m = createMetrics();
  const client = clientOf(m, server.addr, 2);
  client.offer([row("used", 1e-7), row("free", 42), row("x y", -1.5)]);
  await client.close(2000);
  const expected = "se.host.example.com.Disk_Usage__var.used 0.0000001 1785470664\n" +
    "se.host.example.com.Disk_Usage__var.free 42 1785470664\n" +
    "se.host.example.com.Disk_Usage__var.x_y -1.5 1785470664\n";
  // The client's writes returned; the fake Carbon reads them on its own schedule.
  await waitFor(() => server.received().length >= expected.length, { message: "lines at Carbon" });
  assert.equal(server.received(), expected);
  assert.equal(await value(m.graphiteMetricsWritten), 3);
  assert.equal(await value(m.graphiteFlushes), 2);
  assert.equal(await value(m.graphiteMetricsDropped), 0);
  await server.close();
});

Deno.test("graphite: an undialable Carbon drops the batch, counts every metric and never retries", async () => {
  const m = createMetrics();
  const client = clientOf(m, "127.0.0.1:1", 10);
  m.graphiteAvailable.set(1);
  client.offer([row("a", 1), row("b", 2)]);
  await client.close(2000);
  assert.equal(await value(m.graphiteMetricsDropped), 2);
  assert.equal(await value(m.graphiteAvailable), 0);
  assert.equal(await value(m.graphiteMetricsWritten), 0);
});

Deno.test("graphite: offer never blocks; beyond the buffer metrics are dropped and counted", async () => {
  const m = createMetrics();
  const client = clientOf(m, "127.0.0.1:1", 1);
  // The buffer holds ten batches, and never fewer than 10,000 metrics.
  client.offer(Array.from({ length: 10_025 }, (_, i) => row(`m${i}`, i)));
  assert.ok(await value(m.graphiteMetricsDropped) >= 25);
  await client.close(2000);
  assert.equal(await value(m.graphiteMetricsDropped), 10_025);
});

Deno.test("graphite: a connection Carbon closed (a restart) is not written into: the next batch goes out on a new connection", async () => {
  const server = startTcpPeer();
  const m = createMetrics();
  // Batches of 10 and three rows: each offer is sent by the 250 ms flush, as in production.
  const client = clientOf(m, server.addr, 10);
  const line = (label: string) => `se.host.example.com.Disk_Usage__var.${label} 1 1785470664\n`;
  client.offer([row("before", 1)]);
  await waitFor(() => server.received() === line("before"), { message: "the first line" });
  // Carbon goes away cleanly (it read everything): the worker's socket gets a FIN. Writing into
  // it succeeds locally and the bytes are lost when Carbon's RST comes back.
  (await server.accepted).close();
  client.offer([row("after", 1)]);
  await waitFor(
    async () => await value(m.graphiteMetricsWritten) + await value(m.graphiteMetricsDropped) === 2,
    {
      message: "the second batch written or dropped",
    },
  );
  await client.close(2000);
  if (await value(m.graphiteMetricsWritten) === 2) {
    await waitFor(() => server.received().includes(line("after")), {
      timeoutMs: 3_000,
      message: "the line counted as written at Carbon",
    });
  }
  assert.equal(server.received(), line("before") + line("after"));
  assert.equal(await value(m.graphiteMetricsDropped), 0);
  await server.close();
});
