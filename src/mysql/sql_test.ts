import assert from "node:assert/strict";
import { ALL_TABLES, MAX_BATCH_SIZE, TABLES } from "./catalogue.ts";
import { insertStatement, STATEMENT_CACHE_SIZE } from "./sql.ts";

Deno.test("insertStatement: plain INSERT for logentries, without the AUTO_INCREMENT id (docs/writers.md#upsert-or-insert)", () => {
  assert.equal(
    insertStatement("statusengine_logentries", 2),
    "INSERT INTO `statusengine_logentries` (`entry_time`,`logentry_type`,`logentry_data`,`node_name`)" +
      " VALUES (?,?,?,?),(?,?,?,?)",
  );
});

Deno.test("insertStatement: plain INSERT for perfdata (docs/writers.md#upsert-or-insert)", () => {
  assert.equal(
    insertStatement("statusengine_perfdata", 1),
    "INSERT INTO `statusengine_perfdata` (`hostname`,`service_description`,`label`,`timestamp`," +
      "`timestamp_unix`,`value`,`unit`) VALUES (?,?,?,?,?,?,?)",
  );
});

Deno.test("insertStatement: a history upsert keeps the greater row as the status upsert does, without its future clause (docs/writers.md#upsert-or-insert)", () => {
  assert.equal(
    insertStatement("statusengine_host_acknowledgements", 1),
    "INSERT INTO `statusengine_host_acknowledgements` (`hostname`,`entry_time`,`entry_time_usec`," +
      "`state`,`author_name`,`comment_data`,`acknowledgement_type`,`is_sticky`," +
      "`persistent_comment`,`notify_contacts`) VALUES (?,?,?,?,?,?,?,?,?,?)" +
      " ON DUPLICATE KEY UPDATE `entry_time`=IF((VALUES(`entry_time`),VALUES(`state`)," +
      "CAST(VALUES(`author_name`) AS BINARY),CAST(VALUES(`comment_data`) AS BINARY)," +
      "VALUES(`acknowledgement_type`),VALUES(`is_sticky`),VALUES(`persistent_comment`)," +
      "VALUES(`notify_contacts`))>=(`entry_time`,`state`,CAST(`author_name` AS BINARY)," +
      "CAST(`comment_data` AS BINARY),`acknowledgement_type`,`is_sticky`,`persistent_comment`," +
      "`notify_contacts`),-9223372036854775808,`entry_time`)," +
      ["state", "author_name", "comment_data", "acknowledgement_type", "is_sticky"]
        .concat(["persistent_comment", "notify_contacts"])
        .map((c) => `\`${c}\`=IF(\`entry_time\`=-9223372036854775808,VALUES(\`${c}\`),\`${c}\`),`)
        .join("") +
      "`entry_time`=IF(`entry_time`=-9223372036854775808,VALUES(`entry_time`),`entry_time`)",
  );
});

Deno.test("insertStatement: full upsert decides once whether the inserted snapshot is the newer, then assigns every non-key column by that decision, the snapshot's time last (docs/writers.md#newest-snapshot)", () => {
  const sql = insertStatement("statusengine_servicestatus", 1);
  const table = TABLES.statusengine_servicestatus;
  assert.ok(
    sql.startsWith(
      `INSERT INTO \`statusengine_servicestatus\` (${
        table.columns.map((c) => `\`${c.name}\``).join(",")
      }) VALUES (${Array(43).fill("?").join(",")}) ON DUPLICATE KEY UPDATE `,
    ),
  );
  const clause = sql.slice(sql.indexOf(" ON DUPLICATE KEY UPDATE ") + 25);
  const assigned = [...clause.matchAll(/(?:^|\),)`([a-z_]+)`=IF\(/g)].map((m) => m[1]);
  const [time, ...rest] = table.snapshotOrder;
  // The time first (the decision) and last (its value); every other non-key column once.
  assert.deepEqual(assigned, [time, ...rest, time]);
  assert.equal(new Set(assigned).size, 41);
  assert.ok(!clause.includes("`hostname`=") && !clause.includes("`service_description`="));
  const inserted = table.snapshotOrder.map((c) =>
    table.charLimits[c] === undefined ? `VALUES(\`${c}\`)` : `CAST(VALUES(\`${c}\`) AS BINARY)`
  );
  const stored = table.snapshotOrder.map((c) =>
    table.charLimits[c] === undefined ? `\`${c}\`` : `CAST(\`${c}\` AS BINARY)`
  );
  const mark = "-9223372036854775808";
  assert.ok(
    clause.startsWith(
      `\`status_update_time\`=IF((${inserted.join(",")})>=(${stored.join(",")})` +
        ` OR \`status_update_time\`>UNIX_TIMESTAMP()+3600,${mark},\`status_update_time\`),`,
    ),
  );
  assert.ok(
    clause.includes(
      `,\`output\`=IF(\`status_update_time\`=${mark},VALUES(\`output\`),\`output\`),`,
    ),
  );
  assert.ok(
    clause.endsWith(
      `,\`status_update_time\`=IF(\`status_update_time\`=${mark},` +
        "VALUES(`status_update_time`),`status_update_time`)",
    ),
  );
});

Deno.test("insertStatement: never INSERT IGNORE, for any table (docs/writers.md#upsert-or-insert)", () => {
  for (const table of ALL_TABLES.filter((t) => t.batched)) {
    const sql = insertStatement(table, 3);
    assert.ok(sql.startsWith("INSERT INTO "), table.name);
    assert.ok(!/IGNORE/i.test(sql), table.name);
    assert.equal(sql.split("?").length - 1, 3 * table.insertColumns.length, table.name);
  }
});

Deno.test("insertStatement: tables that are not batched are refused", () => {
  for (const table of ALL_TABLES.filter((t) => !t.batched)) {
    assert.throws(() => insertStatement(table.name, 1), TypeError, table.name);
  }
  assert.equal(ALL_TABLES.filter((t) => !t.batched).length, 11);
});

Deno.test("insertStatement: the worst-case flush at batch size 700 builds, one placeholder more does not (docs/writers.md#statement-shape)", () => {
  const rows = MAX_BATCH_SIZE;
  const sql = insertStatement("statusengine_servicestatus", rows);
  assert.equal(sql.split("?").length - 1, rows * 43);
  assert.throws(() => insertStatement("statusengine_servicestatus", 1525), RangeError);
  assert.ok(insertStatement("statusengine_servicestatus", 1524).length > 0);
});

Deno.test("insertStatement: row counts below 1 or fractional are refused", () => {
  assert.throws(() => insertStatement("statusengine_hostchecks", 0), RangeError);
  assert.throws(() => insertStatement("statusengine_hostchecks", 1.5), RangeError);
  assert.throws(() => insertStatement("statusengine_hostchecks", Number.NaN), RangeError);
});

Deno.test("insertStatement: texts are cached per table and row count within a bounded cache", () => {
  const first = insertStatement("statusengine_hostchecks", 100);
  assert.equal(insertStatement("statusengine_hostchecks", 100), first);
  for (let n = 1; n <= STATEMENT_CACHE_SIZE * 2; n++) {
    const sql = insertStatement("statusengine_hostchecks", n);
    assert.equal(sql.split("),(").length, n);
  }
  assert.equal(insertStatement("statusengine_hostchecks", 100), first);
});

/** Every non-test `.ts` file under a directory of `src/`, relative to `src/`. */
async function sourceFiles(dir: string): Promise<string[]> {
  const files: string[] = [];
  for await (const entry of Deno.readDir(new URL(`../${dir}`, import.meta.url))) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory) files.push(...await sourceFiles(path));
    else if (entry.name.endsWith(".ts") && !entry.name.endsWith("_test.ts")) files.push(path);
  }
  return files;
}

// A string or template literal that opens with a statement keyword, as SQL text does.
const STATEMENT_LITERAL =
  /["'`]\s*(SELECT|INSERT|UPDATE|DELETE|REPLACE|CREATE|ALTER|DROP|TRUNCATE|SHOW|SET|USE|KILL|DO|GET_LOCK|RELEASE_LOCK)\b/;

Deno.test("sql: the tools and the daemon hold no statement text; they call src/mysql/ by name", async () => {
  const found: string[] = [];
  for (const dir of ["cli", "daemon"]) {
    for (const file of await sourceFiles(dir)) {
      const lines = (await Deno.readTextFile(new URL(`../${file}`, import.meta.url))).split("\n");
      for (const [index, line] of lines.entries()) {
        const code = line.trimStart();
        if (code.startsWith("*") || code.startsWith("/*") || code.startsWith("//")) continue;
        if (STATEMENT_LITERAL.test(code)) found.push(`src/${file}:${index + 1}: ${code}`);
      }
    }
  }
  assert.deepEqual(found, []);
});
