/**
 * PostgreSQL's estimated_requests migration beside a gateway still inserting records
 * (a fleet upgraded one process at a time on shared stores). The migration backfills from the
 * committed records and then replaces the trigger function; a record whose INSERT began before the
 * migration committed (its statement-level trigger already running the old function, waiting on
 * usage_hourly's lock that ALTER TABLE holds) is invisible to the backfill and then rolled up by the
 * old function, which adds nothing to estimated_requests: a permanent drift the audit reports.
 */
import { expect, test } from "bun:test";
import { rollupDriftSql } from "../../src/billing/usage-report.ts";
import { connectPostgres } from "../../src/store/postgres/pg-client.ts";
import { migratePostgres, versionOf } from "../../src/store/postgres/pg-migrations.ts";

/** The version the estimated rollups' migration brings a database to. */
const ESTIMATED = versionOf("ADD COLUMN estimated_requests");
import { postgresMissing, useTestDatabase } from "../helpers/backends.ts";
import { until } from "../helpers/until.ts";

const missing = await postgresMissing();
const database = useTestDatabase();
const USAGE = `INSERT INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at)`;
const AT = Date.parse("2026-03-01T00:00:00Z");

if (missing) test.skip(`skipped: ${missing}`, () => {});
else
  test("an estimated record inserted while the migration runs is counted in the rollups' estimated_requests (no drift)", async () => {
    const url = await database();
    const migrator = connectPostgres(url, { max: 1 });
    const gateway = connectPostgres(url, { max: 1 });
    const blocker = connectPostgres(url, { max: 1 });
    const watcher = connectPostgres(url, { max: 1 });
    try {
      expect(await migratePostgres(migrator, ESTIMATED - 1)).toBe(ESTIMATED - 1);
      await gateway.unsafe(`${USAGE} VALUES ('r0', 'acct', 'key', 'm', 'p', 10, 5, true, 100, 'ok', 1, $1)`, [AT]);
      const waiting = async (table: string) =>
        Number((await watcher.unsafe(`SELECT count(*) AS n FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = $1 AND NOT l.granted`, [table]))[0].n) > 0;
      const gatewayPid = Number((await gateway`SELECT pg_backend_pid() AS pid`)[0].pid);
      const gatewayWaits = async () =>
        Number((await watcher.unsafe(`SELECT count(*) AS n FROM pg_locks WHERE pid = $1 AND NOT granted`, [gatewayPid]))[0].n) > 0;

      // Something reading usage_daily holds the migration after its ALTER of usage_hourly (only to order the race).
      let release!: () => void;
      const held = new Promise<void>((r) => (release = r));
      const blocking = blocker.begin(async (tx) => {
        await tx`SELECT count(*) FROM usage_daily`;
        await held;
      });
      await Bun.sleep(50);
      // Locks are waited for 1 s at most (pg-client.ts, lock_timeout): the race is in the migration's last second.
      const migrating = migratePostgres(migrator, ESTIMATED);
      await until("the migration waits for usage_daily", 900, () => waiting("usage_daily"), 5);
      // An older gateway settles an estimated answer now: it waits for a lock the migration holds
      // (usage_hourly, in its trigger; usage_records once the migration holds it first).
      const inserting = (async () => await gateway.unsafe(`${USAGE} VALUES ('r1', 'acct', 'key', 'm', 'p', 10, 5, true, 100, 'ok', 1, $1)`, [AT + 1]))();
      await until("the insert waits for the migration", 700, gatewayWaits, 5);
      release();
      await blocking;
      expect(await migrating).toBe(ESTIMATED);
      await inserting;

      const rows = [...(await watcher.unsafe(`SELECT requests, estimated_requests FROM usage_hourly`))].map((r: any) => [Number(r.requests), Number(r.estimated_requests)]);
      console.log("usage_hourly (requests, estimated_requests):", JSON.stringify(rows));
      expect(rows).toEqual([[2, 2]]);
      expect([...(await watcher.unsafe(rollupDriftSql("hourly")))]).toEqual([]);
    } finally {
      for (const s of [migrator, gateway, blocker, watcher]) await s.close({ timeout: 0 });
    }
  });
