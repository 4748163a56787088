/**
 * The token classes in both stores (issue 29): a SQLite file and a PostgreSQL database left by
 * the release before them open, keep every record, and read old records as fresh input; on
 * PostgreSQL a cached answer's record holds its classes and prices, and the audit recomputes it
 * and finds a record altered by hand.
 */
import { Database } from "bun:sqlite";
import { SQL } from "bun";
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runAdmin } from "../../src/cli/admin.ts";
import { migrate, openDatabase } from "../../src/store/database.ts";
import { migratePostgres } from "../../src/store/postgres/pg-migrations.ts";
import { auditPostgres, createPostgresUsageBreakdown, createPostgresUsageReport } from "../../src/store/postgres/pg-reports.ts";
import { openPostgresStores } from "../../src/store/stores.ts";
import { createUsageReport } from "../../src/store/sqlite/sqlite-usage-report.ts";
import { postgresMissing, useTestDatabase } from "../helpers/backends.ts";
import { startFakeUpstream, vendorRefusal, type RecordedRequest, type Reply } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, post, startGateway } from "../helpers/gateway.ts";
import { scriptedReply } from "../helpers/scripted-answers.ts";

/** Schema versions of the release before the token classes. */
const SQLITE_BEFORE = 5;
const POSTGRES_BEFORE = 2;
const DAY1 = Date.parse("2026-03-01T00:00:00Z");

const dirs: string[] = [];
const cleanups: (() => unknown)[] = [];
afterAll(async () => {
  for (const fn of cleanups.reverse()) await fn();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** What the older release wrote for one account with one answer of 1,000 + 200 tokens costing 0.9 credits. */
const OLD_ROWS = {
  account: ["acct_old", "old", 99_100_000, DAY1] as const,
  credit: ["acct_old", 100_000_000, "initial", DAY1] as const,
  key: ["key_old", "acct_old", "k", "hash-old", "svc-sk-abcd", "wxyz", DAY1, 900_000] as const,
  record: ["req_old", "acct_old", "key_old", "test/claude", "fake-anthropic", 1_000, 200, 0, 900_000, "ok", 12, DAY1 + 1_000, "client-1"] as const,
};

describe("a SQLite file from the release before", () => {
  test("opens, keeps every record, reads old records as fresh input, and the audit stays clean", async () => {
    const dir = mkdtempSync(join(tmpdir(), "switchyard-old-"));
    dirs.push(dir);
    const path = join(dir, "old.sqlite");
    const old = new Database(path, { create: true, strict: true });
    migrate(old, SQLITE_BEFORE);
    old.query("INSERT INTO accounts (id, name, balance_micro, created_at) VALUES (?, ?, ?, ?)").run(...OLD_ROWS.account);
    old.query("INSERT INTO credit_entries (account_id, amount_micro, kind, created_at) VALUES (?, ?, ?, ?)").run(...OLD_ROWS.credit);
    old.query("INSERT INTO api_keys (id, account_id, name, key_hash, key_prefix, key_last4, created_at, spent_micro) VALUES (?, ?, ?, ?, ?, ?, ?, ?)").run(...OLD_ROWS.key);
    old.query(`INSERT INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at, client_request_id)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`).run(...OLD_ROWS.record);
    old.close();

    const db = openDatabase(path);
    const record = db.query<Record<string, unknown>, []>("SELECT * FROM usage_records").get()!;
    expect(record).toMatchObject({ request_id: "req_old", prompt_tokens: 1_000, completion_tokens: 200, cost_micro: 900_000, fresh_input_tokens: null, cache_read_tokens: 0, price_id: null });
    const report = createUsageReport(db)("acct_old", DAY1, DAY1 + 86_400_000);
    expect(report.total).toMatchObject({ requests: 1, prompt_tokens: 1_000, fresh_input_tokens: 1_000, cache_read_tokens: 0, cache_write_5m_tokens: 0, cost: 0.9, cache_savings: 0 });
    db.close();
    const audit = await runAdmin(["audit"], { SWITCHYARD_DB: path });
    expect(JSON.parse(audit.out)).toMatchObject({ clean: true, usageRecords: 1, pricedRecords: 0, mispriced: [] });
  });
});

const missing = await postgresMissing();
if (missing) {
  test.skip(`Token classes on PostgreSQL — skipped: ${missing}`, () => {});
} else {
  describe("on PostgreSQL", () => {
    const database = useTestDatabase();

    test("a database from the release before migrates and keeps its records; a cached answer's record holds its classes; the audit finds a record altered by hand", async () => {
      const url = await database();
      const sql = new SQL({ url, max: 2 });
      cleanups.push(() => sql.close({ timeout: 0 }));
      await migratePostgres(sql, POSTGRES_BEFORE);
      await sql`INSERT INTO accounts (id, name, balance_micro, created_at) VALUES (${OLD_ROWS.account[0]}, ${OLD_ROWS.account[1]}, ${OLD_ROWS.account[2]}, ${OLD_ROWS.account[3]})`;
      await sql`INSERT INTO credit_entries (account_id, amount_micro, kind, created_at) VALUES (${OLD_ROWS.credit[0]}, ${OLD_ROWS.credit[1]}, ${OLD_ROWS.credit[2]}, ${OLD_ROWS.credit[3]})`;
      const [id, account, name, hash, prefix, last4, created, spent] = OLD_ROWS.key;
      await sql`INSERT INTO api_keys (id, account_id, name, key_hash, key_prefix, key_last4, created_at, spent_micro) VALUES (${id}, ${account}, ${name}, ${hash}, ${prefix}, ${last4}, ${created}, ${spent})`;
      await sql.unsafe(`INSERT INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at, client_request_id)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8::int::boolean, $9, $10, $11, $12, $13)`, [...OLD_ROWS.record]);

      const stores = await openPostgresStores(url, { ledger: { timeoutMs: 1_000, retryMaxMs: 40 } });
      const upstream = await startFakeUpstream();
      const gw = await startGateway({ upstreamUrl: upstream.url, stores, adminToken: "admin-secret-for-the-prompt-cache-tests-0123" });
      cleanups.push(async () => {
        await gw.stop();
        await stores.close(500);
        await upstream.stop();
      });

      const [old] = await sql`SELECT prompt_tokens, cost_micro, fresh_input_tokens, cache_read_tokens, price_id FROM usage_records WHERE request_id = 'req_old'`;
      expect({ prompt: Number(old.prompt_tokens), cost: Number(old.cost_micro), fresh: old.fresh_input_tokens, read: Number(old.cache_read_tokens), price: old.price_id })
        .toEqual({ prompt: 1_000, cost: 900_000, fresh: null, read: 0, price: null });
      const oldReport = await createPostgresUsageReport(sql)("acct_old", DAY1, DAY1 + 86_400_000);
      expect(oldReport.total).toMatchObject({ requests: 1, fresh_input_tokens: 1_000, cache_read_tokens: 0, cost: 0.9 });

      const reply = scriptedReply("anthropic", { text: "cached", usage: { input: 100, cacheRead: 9_000, cacheWrite5m: 300, cacheWrite1h: 200, output: 50 } });
      for (const stream of [false, true]) {
        upstream.reply((rec: RecordedRequest): Reply => vendorRefusal(rec) ?? reply(rec));
        const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 100, stream, messages: [{ role: "user", content: "cached context ".repeat(5_000) }] });
        expect(res.status).toBe(200);
        await res.text();
      }
      await gw.app.services.settled();
      const rows = await sql`SELECT request_id, fresh_input_tokens, cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens, cost_micro, cache_savings_micro
                               FROM usage_records WHERE price_id IS NOT NULL ORDER BY id`;
      const want = 100 * 3_000 + 9_000 * 300 + 300 * 3_750 + 200 * 6_000 + 50 * 15_000;
      expect(rows.map((r: Record<string, unknown>) => [Number(r.fresh_input_tokens), Number(r.cache_read_tokens), Number(r.cache_write_5m_tokens), Number(r.cache_write_1h_tokens), Number(r.cost_micro)]))
        .toEqual([[100, 9_000, 300, 200, want], [100, 9_000, 300, 200, want]]);
      expect(Number(rows[0].cache_savings_micro)).toBe(9_500 * 3_000 - (9_000 * 300 + 300 * 3_750 + 200 * 6_000));

      // The per-model report over a range that cuts hours: whole days and hours from the rollups
      // (the trigger's, and the migration's for old records), the ends from the records; the
      // same sums as the records' own.
      const [from, to] = [DAY1 - 3_600_000 + 5, Date.now() + 10];
      const direct = await sql`SELECT COUNT(*) AS requests, SUM(cost_micro) AS cost FROM usage_records WHERE account_id = 'acct_old' AND created_at >= ${from} AND created_at < ${to}`;
      const cut = await createPostgresUsageReport(sql)("acct_old", from, to);
      expect(cut.total.requests).toBe(Number(direct[0].requests));
      expect(cut.total.cost * 1e6).toBeCloseTo(Number(direct[0].cost), 3);
      expect(cut.models.map((m) => m.model)).toEqual(["test/claude"]);
      const live = await sql`SELECT COUNT(*) AS n FROM usage_records WHERE account_id = ${gw.accountId} AND created_at >= ${from} AND created_at < ${to}`;
      expect((await createPostgresUsageReport(sql)(gw.accountId, from, to)).total.requests).toBe(Number(live[0].n));
      // Read from the daily rollup, not the records: a rollup row made to differ shows through.
      await sql`UPDATE usage_daily SET requests = requests + 1000 WHERE day = ${DAY1} AND account_id = 'acct_old'`;
      expect((await createPostgresUsageReport(sql)("acct_old", from, to)).total.requests).toBe(Number(direct[0].requests) + 1000);
      await sql`UPDATE usage_daily SET requests = requests - 1000 WHERE day = ${DAY1} AND account_id = 'acct_old'`;
      // The breakdown over the same cut range, by day and by hour: the same total.
      for (const granularity of ["day", "hour"] as const) {
        const rows = await createPostgresUsageBreakdown(sql)({ from: DAY1 - 3_600_000 + 5, to: DAY1 + 3 * 86_400_000 + 7, groupBy: ["model"], granularity, accountId: "acct_old" });
        expect(rows.reduce((n, r) => n + r.requests, 0)).toBe(1);
      }

      const clean = await auditPostgres(sql);
      expect(clean).toMatchObject({ clean: true, pricedRecords: 2, mispriced: [] });
      await sql`UPDATE usage_records SET cost_micro = cost_micro + 1, held_micro = held_micro + 1 WHERE request_id = ${rows[1].request_id}`;
      const dirty = await auditPostgres(sql);
      expect(dirty.clean).toBe(false);
      expect(dirty.mispriced).toEqual([{ request_id: rows[1].request_id, problem: expect.stringContaining("price book"), cost_micro: want + 1, expected_micro: want }]);
    });
  });
}
