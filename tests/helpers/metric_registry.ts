/** Reading series straight from a worker's metrics registry in tests. */
import type { Metrics } from "../../src/metrics/registry.ts";

/**
 * Current value of the first series of `name` whose labels include `labels` (0 when no such
 * series exists yet).
 *
 * @param metrics The registry holder.
 * @param name Metric name.
 * @param labels Labels the series must carry.
 * @returns The value.
 * @throws {Error} When the registry has no metric of that name.
 */
export async function registryValue(
  metrics: Metrics,
  name: string,
  labels: Record<string, string> = {},
): Promise<number> {
  const metric = metrics.registry.getSingleMetric(name);
  if (metric === undefined) throw new Error(`No metric ${name}`);
  const data = await metric.get();
  const match = data.values.find((v) =>
    Object.entries(labels).every(([k, val]) => (v.labels as Record<string, unknown>)[k] === val)
  );
  return match?.value ?? 0;
}

/**
 * Sum of every series of `name` (all label values together).
 *
 * @param metrics The registry holder.
 * @param name Metric name.
 * @returns The sum; 0 while no series exists.
 * @throws {Error} When the registry has no metric of that name.
 */
export async function registrySum(metrics: Metrics, name: string): Promise<number> {
  const metric = metrics.registry.getSingleMetric(name);
  if (metric === undefined) throw new Error(`No metric ${name}`);
  return (await metric.get()).values.reduce((n, v) => n + v.value, 0);
}
