/**
 * The worker's row in `statusengine_nodes` (D11): node name, version and start time, as the
 * legacy worker registers itself; the Statusengine UI lists the nodes from it.
 *
 * @module
 */
import type { SqlExecutor } from "./executor.ts";

/** What a node registers. */
export interface NodeRegistration {
  readonly nodeName: string;
  readonly version: string;
  /** Epoch seconds. */
  readonly startTime: number;
}

/**
 * Insert or refresh this node's row.
 *
 * @param executor Runs the statement.
 * @param node Name, version and start time.
 */
export async function registerNode(executor: SqlExecutor, node: NodeRegistration): Promise<void> {
  await executor.run(
    "INSERT INTO `statusengine_nodes` (`node_name`, `node_version`, `node_start_time`) " +
      "VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE `node_version` = VALUES(`node_version`), " +
      "`node_start_time` = VALUES(`node_start_time`)",
    [node.nodeName, node.version, node.startTime],
  );
}
