import assert from "node:assert/strict";
import { MysqlHosts, type MysqlHostsOptions } from "./failover.ts";
import { mysqlOptionsFromUrl, type MysqlUrlOptions } from "../util/mysql_url.ts";

/** Hosts whose answer the test decides, and a clock it moves. */
function fixture(failbackAfterMs: number) {
  const up = new Set(["h1:3306", "h2:3306", "h3:3306"]);
  let now = 0;
  const switches: number[] = [];
  const inUse = new Map<string, number>();
  const hosts = new MysqlHosts(mysqlOptionsFromUrl("mysql://u:pw@h1,h2,h3/db"), {
    failbackAfterMs,
    now: () => now,
    probe: (o: MysqlUrlOptions) =>
      up.has(`${o.host}:${o.port}`) ? Promise.resolve() : Promise.reject(new Error("refused")),
    metrics: {
      mysqlHostInUse: {
        set: (labels: { host: string }, value: number) => inUse.set(labels.host, value),
      },
      mysqlHostSwitches: { inc: () => switches.push(now) },
    } as unknown as NonNullable<MysqlHostsOptions["metrics"]>,
  });
  return {
    hosts,
    up,
    inUse,
    switches,
    advance(ms: number) {
      now += ms;
    },
  };
}

Deno.test("MysqlHosts: the first host is used while it answers; a failing one is left for the first of the list that answers", async () => {
  const f = fixture(60_000);
  assert.equal(f.hosts.label, "h1:3306");
  assert.deepEqual(Object.fromEntries(f.inUse), { "h1:3306": 1, "h2:3306": 0, "h3:3306": 0 });
  await f.hosts.check();
  assert.equal(f.hosts.label, "h1:3306", "a host that answers is kept");
  f.up.delete("h1:3306");
  f.up.delete("h2:3306");
  await f.hosts.check();
  assert.equal(f.hosts.label, "h3:3306");
  assert.equal(f.hosts.inUse.host, "h3");
  assert.equal(f.hosts.inUse.hosts, undefined, "a dedicated connection goes to that host alone");
  assert.deepEqual(Object.fromEntries(f.inUse), { "h1:3306": 0, "h2:3306": 0, "h3:3306": 1 });
  assert.equal(f.switches.length, 1);
  f.up.clear();
  await f.hosts.check();
  assert.equal(f.hosts.label, "h3:3306", "none answers: stay");
  assert.equal(f.switches.length, 1);
});

Deno.test("MysqlHosts: back to an earlier host only once it answered every probe for --mysql-failback-after", async () => {
  const f = fixture(60_000);
  f.up.delete("h1:3306");
  await f.hosts.check();
  assert.equal(f.hosts.label, "h2:3306");
  f.up.add("h1:3306");
  await f.hosts.failBack();
  f.advance(59_999);
  await f.hosts.failBack();
  assert.equal(f.hosts.label, "h2:3306", "not before the delay");
  // A failed probe starts the delay again.
  f.up.delete("h1:3306");
  f.advance(1);
  await f.hosts.failBack();
  f.up.add("h1:3306");
  f.advance(5_000);
  await f.hosts.failBack();
  f.advance(59_999);
  await f.hosts.failBack();
  assert.equal(f.hosts.label, "h2:3306", "the delay counts from the first probe after the failure");
  f.advance(1);
  await f.hosts.failBack();
  assert.equal(f.hosts.label, "h1:3306");
  assert.deepEqual(Object.fromEntries(f.inUse), { "h1:3306": 1, "h2:3306": 0, "h3:3306": 0 });
  assert.equal(f.switches.length, 2);
});

Deno.test("MysqlHosts: many failures at once make one check, and none again within a second", async () => {
  let probes = 0;
  const hosts = new MysqlHosts(mysqlOptionsFromUrl("mysql://u@h1,h2/db"), {
    failbackAfterMs: 60_000,
    now: () => 0,
    probe: () => {
      probes++;
      return Promise.resolve();
    },
  });
  for (let i = 0; i < 50; i++) hosts.suspect();
  await hosts.check();
  assert.equal(probes, 1);
  hosts.suspect();
  await hosts.check();
  assert.equal(probes, 2, "check() itself always probes");
  hosts.suspect();
  await hosts.stop();
  assert.equal(probes, 2, "suspect() within a second of a check does not probe");
});

Deno.test("MysqlHosts: one host (or a socket) is left alone", async () => {
  let probes = 0;
  const hosts = new MysqlHosts(mysqlOptionsFromUrl("mysql://u@h1/db"), {
    failbackAfterMs: 60_000,
    probe: () => {
      probes++;
      return Promise.reject(new Error("refused"));
    },
  });
  assert.equal(hosts.several, false);
  hosts.suspect();
  await hosts.check();
  hosts.start();
  await hosts.stop();
  assert.equal(probes, 0);
  assert.equal(hosts.label, "h1:3306");
  assert.equal(hosts.inUse.host, "h1");
});
