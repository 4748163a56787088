/**
 * `bun run admin audit` compares what limits and reports are computed from with the records they
 * come from, on SQLite and PostgreSQL: a key's or account's count for its spend-limit period, and
 * the hourly and daily rollups (what reports read for whole days and hours). A record deleted and
 * written again, a charge fixed by hand, or a period count lowered by hand each show; books kept by
 * the gateway are clean.
 */
import { Database } from "bun:sqlite";
import { SQL } from "bun";
import { afterAll, describe, expect, test } from "bun:test";
import { auditLedger } from "../../src/store/sqlite/audit.ts";
import { foldRollups } from "../../src/store/sqlite/sqlite-rollups.ts";
import { migratePostgres } from "../../src/store/postgres/pg-migrations.ts";
import { auditPostgres } from "../../src/store/postgres/pg-reports.ts";
import { openPostgresStores } from "../../src/store/stores.ts";
import { postgresMissing, useTestDatabase } from "../helpers/backends.ts";
import { startFakeUpstream } from "../helpers/fake-upstream.ts";
import { OPENAI_MODEL, post, startGateway, type Gateway } from "../helpers/gateway.ts";

const cleanups: (() => unknown)[] = [];
afterAll(async () => {
  for (const fn of cleanups.reverse()) await fn();
});

/** A gateway with a key whose daily limit has a period count, and three paid answers on it. */
async function answered(gw: Gateway): Promise<void> {
  const admin = { authorization: "Bearer admin-secret-for-the-audit-tests-0123456789", "content-type": "application/json" };
  const res = await fetch(`${gw.url}/v1/admin/keys/${gw.keyId}`, { method: "PATCH", headers: admin, body: JSON.stringify({ spend_limit: 1_000, spend_limit_period: "day" }) });
  expect(res.status).toBe(200);
  for (let i = 0; i < 3; i++) expect((await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: `hello ${i}` }] })).status).toBe(200);
  await gw.app.services.settled();
}

/** Limits and periods of a key and its account changed back and forth between paid answers, through the admin API. */
async function periodsBackAndForth(gw: Gateway): Promise<void> {
  const admin = { authorization: "Bearer admin-secret-for-the-audit-tests-0123456789", "content-type": "application/json" };
  const patch = async (path: string, body: unknown) => expect((await fetch(`${gw.url}/v1/admin${path}`, { method: "PATCH", headers: admin, body: JSON.stringify(body) })).status).toBe(200);
  const charge = async () => expect((await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] })).status).toBe(200);
  for (const period of ["day", "week", null, "month", "day"] as const) {
    await patch(`/keys/${gw.keyId}`, { spend_limit: 1_000, spend_limit_period: period });
    await patch(`/accounts/${gw.accountId}`, { spend_limit: 2_000, spend_limit_period: period === null ? "week" : null });
    await charge();
    await charge();
  }
  await patch(`/keys/${gw.keyId}`, { spend_limit: null });
  await charge();
  await gw.app.services.settled();
}

/** A gateway on its own SQLite file, stopped (with its upstream) after the tests. */
async function sqliteGateway() {
  const upstream = await startFakeUpstream();
  const gw = await startGateway({ upstreamUrl: upstream.url, adminToken: "admin-secret-for-the-audit-tests-0123456789" });
  cleanups.push(() => upstream.stop(), () => gw.stop());
  return gw;
}

/** Another connection to a gateway's file, as the admin CLI opens it. */
function openFile(gw: { dbPath: string }): Database {
  const db = new Database(gw.dbPath);
  cleanups.push(() => db.close());
  return db;
}

describe("on SQLite, books the gateway kept", () => {
  test("stay clean through limits and periods changed back and forth between charges, and accounts' limits too", async () => {
    const gw = await sqliteGateway();
    await periodsBackAndForth(gw);
    const db = openFile(gw);
    expect(auditLedger(db)).toMatchObject({ clean: true, periodDrift: [], rollupDrift: [] });
    foldRollups(db);
    expect(auditLedger(db)).toMatchObject({ clean: true, periodDrift: [], rollupDrift: [] });
  });
});

describe("on SQLite", () => {
  test("clean books are clean; a re-inserted record, a charge fixed by hand and a lowered period count are drift", async () => {
    const gw = await sqliteGateway();
    await answered(gw);
    const db = openFile(gw);
    db.exec("PRAGMA busy_timeout = 5000");
    foldRollups(db);
    expect(auditLedger(db)).toMatchObject({ clean: true, periodDrift: [], rollupDrift: [] });

    // A record deleted and written again (a new id, past the rollups' mark: folded twice once the next fold runs).
    const [first, second] = db.query<{ id: number; request_id: string; cost_micro: number }, []>("SELECT id, request_id, cost_micro FROM usage_records ORDER BY id").all();
    db.exec(`CREATE TEMP TABLE copy AS SELECT * FROM usage_records WHERE id = ${first!.id}; DELETE FROM usage_records WHERE id = ${first!.id};
             UPDATE copy SET id = NULL; INSERT INTO usage_records SELECT * FROM copy;`);
    foldRollups(db);
    // A charge fixed by hand (the record, the balance and the key, but not the rollups).
    db.exec(`UPDATE usage_records SET cost_micro = cost_micro + 7 WHERE request_id = '${second!.request_id}'`);
    let report = auditLedger(db);
    expect(report.clean).toBe(false);
    expect(report.rollupDrift.map((d) => [d.rollup, d.requests - d.expected_requests])).toEqual(expect.arrayContaining([["daily", 1], ["hourly", 1]]));
    expect(report.rollupDrift.some((d) => d.expected_micro - d.cost_micro === 7 - first!.cost_micro)).toBe(true);

    // A period count lowered by hand: what the limit is enforced with no longer matches the charges.
    db.exec(`UPDATE api_keys SET period_spent_micro = period_spent_micro - 50 WHERE id = '${gw.keyId}'`);
    report = auditLedger(db);
    expect(report.periodDrift).toContainEqual({ scope: "key", id: gw.keyId, period_spent_micro: expect.any(Number), expected_micro: expect.any(Number) });
    const drift = report.periodDrift.find((d) => d.id === gw.keyId)!;
    expect(drift.expected_micro - drift.period_spent_micro).toBe(57);
  });
});

const missing = await postgresMissing();
if (missing) {
  test.skip(`audit drift on PostgreSQL — skipped: ${missing}`, () => {});
} else {
  describe("on PostgreSQL", () => {
    const database = useTestDatabase();
    test("clean books are clean; a re-inserted record, a charge fixed by hand and a lowered period count are drift", async () => {
      const url = await database();
      const sql = new SQL({ url, max: 2 });
      cleanups.push(() => sql.close({ timeout: 0 }));
      await migratePostgres(sql);
      const stores = await openPostgresStores(url, { ledger: { timeoutMs: 1_000, retryMaxMs: 40 } });
      const upstream = await startFakeUpstream();
      const gw = await startGateway({ upstreamUrl: upstream.url, stores, adminToken: "admin-secret-for-the-audit-tests-0123456789" });
      cleanups.push(async () => {
        await gw.stop();
        await stores.close(500);
        await upstream.stop();
      });
      await answered(gw);
      expect(await auditPostgres(sql)).toMatchObject({ clean: true, periodDrift: [], rollupDrift: [] });
      // Limits and periods changed back and forth between charges: still clean.
      await periodsBackAndForth(gw);
      expect(await auditPostgres(sql)).toMatchObject({ clean: true, periodDrift: [], rollupDrift: [] });

      const rows = await sql`SELECT id, request_id, cost_micro FROM usage_records ORDER BY id`;
      const [first, second] = rows as { id: string; request_id: string; cost_micro: string }[];
      // Deleted and written again: the insert trigger adds it to the rollups a second time.
      await sql.unsafe(`CREATE TEMP TABLE copy AS SELECT * FROM usage_records WHERE id = ${first!.id}; DELETE FROM usage_records WHERE id = ${first!.id};
                        ALTER TABLE copy DROP COLUMN id; INSERT INTO usage_records SELECT nextval(pg_get_serial_sequence('usage_records', 'id')), * FROM copy;`);
      await sql`UPDATE usage_records SET cost_micro = cost_micro + 7 WHERE request_id = ${second!.request_id}`;
      let report = await auditPostgres(sql);
      expect(report.clean).toBe(false);
      expect(report.rollupDrift.map((d) => [d.rollup, d.requests - d.expected_requests])).toEqual(expect.arrayContaining([["daily", 1], ["hourly", 1]]));
      expect(report.rollupDrift.some((d) => d.expected_micro - d.cost_micro === 7 - Number(first!.cost_micro))).toBe(true);

      await sql`UPDATE api_keys SET period_spent_micro = period_spent_micro - 50 WHERE id = ${gw.keyId}`;
      report = await auditPostgres(sql);
      const drift = report.periodDrift.find((d) => d.id === gw.keyId)!;
      expect(drift.expected_micro - drift.period_spent_micro).toBe(57);
    });
  });
}
