import { Database } from "bun:sqlite";
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openDatabase } from "../../../../src/store/database.ts";
import { createAccountStore } from "../../../../src/store/sqlite/sqlite-accounts.ts";
import { createSqliteLedger } from "../../../../src/store/sqlite/sqlite-ledger.ts";
import { createUsageBreakdown } from "../../../../src/store/sqlite/sqlite-usage-report.ts";
import { FOLD_INTERVAL_MS, foldRollups, PAST_ROLLUP_MARK } from "../../../../src/store/sqlite/sqlite-rollups.ts";
import { MAX_REPORT_ROWS, mergeUsageRows, ReportTooLargeError, usageBreakdownSql, usageSums, type UsageBucketRow, type UsageQuery } from "../../../../src/billing/usage-report.ts";

const HOUR = 3_600_000;
const START = Date.UTC(2026, 10, 2, 9, 0, 0);
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A ledger on a fresh file, on a clock the test moves, and one account with two keys. */
function setup() {
  const dir = mkdtempSync(join(tmpdir(), "rollups-"));
  dirs.push(dir);
  const path = join(dir, "gateway.sqlite");
  const db = openDatabase(path);
  let clock = START;
  const accounts = createAccountStore(db, () => clock);
  const account = accounts.createAccount("team", 1e12);
  const keys = [accounts.createKey(account.id)!.id, accounts.createKey(account.id)!.id];
  const ledger = createSqliteLedger(db, { now: () => clock });
  let n = 0;
  const settle = async (keyId: string, model: string, costMicro: number, tokens: { fresh: number; cached: number; out: number }) => {
    const requestId = `req_rollup_${n++}`;
    const held = await ledger.reserve({ requestId, accountId: account.id, keyId, amountMicro: costMicro });
    expect(held.ok).toBe(true);
    await ledger.settle({
      requestId, accountId: account.id, keyId, model, provider: "p", promptTokens: tokens.fresh + tokens.cached, completionTokens: tokens.out, estimated: false,
      costMicro, status: "ok", latencyMs: 3,
      classes: { freshInput: tokens.fresh, cacheRead: tokens.cached, cacheWrite5m: 0, cacheWrite1h: 0, reasoning: 0, images: 0, output: tokens.out } as never,
    });
  };
  return { db, path, account, keys, ledger, settle, at: (ms: number) => (clock = ms) };
}

const byHour = (accountId: string): UsageQuery => ({ from: START - 24 * HOUR, to: START + 24 * HOUR, groupBy: ["account", "key", "model"], granularity: "hour", accountId });
/** The same report from the records alone: a range that cuts an hour is never read from a rollup. */
const fromRecords = (q: UsageQuery): UsageQuery => ({ ...q, from: q.from + 1 });
const rolledRows = (db: Database) => db.query<{ n: number }, []>("SELECT COALESCE(SUM(requests), 0) AS n FROM usage_hourly").get()!.n;
const mark = (db: Database) => db.query<{ record_id: number }, []>("SELECT record_id FROM usage_rollup_mark").get()!.record_id;
const lastRecord = (db: Database) => db.query<{ id: number }, []>("SELECT MAX(id) AS id FROM usage_records").get()!.id;

describe("usage rollups on SQLite: folded behind a mark, exact at every moment", () => {
  test("no trigger writes a rollup row per record: settlements leave them to the fold", () => {
    const { db } = setup();
    expect(db.query("SELECT name FROM sqlite_master WHERE type = 'trigger'").all()).toEqual([]);
    expect(mark(db)).toBe(0);
  });

  test("a report read from the rollups adds the records past the mark, so it equals the records' own sums", async () => {
    const s = setup();
    const report = createUsageBreakdown(s.db) as (q: UsageQuery) => UsageBucketRow[];
    // The first settlement's batch folds (nothing folded yet); the clock then stands still, so
    // the next ones stay past the mark, spread over two hours, two keys and two models.
    await s.settle(s.keys[0]!, "m-a", 1_000, { fresh: 10, cached: 90, out: 5 });
    for (let i = 0; i < 12; i++) await s.settle(s.keys[i % 2]!, i % 3 ? "m-a" : "m-b", 500 + i, { fresh: 5 + i, cached: 20 * i, out: 7 });
    s.at(START + HOUR + 5);
    for (let i = 0; i < 3; i++) await s.settle(s.keys[1]!, "m-b", 700, { fresh: 40, cached: 0, out: 9 });
    await s.ledger.flush();
    const q = byHour(s.account.id);
    const rows = report(q);
    expect(rows).toEqual(report(fromRecords(q)));
    expect(rows.reduce((n, r) => n + r.requests, 0)).toBe(16);
    // The rollup table alone is behind: the tail is what made the report whole.
    expect(mark(s.db)).toBeLessThan(lastRecord(s.db));
    expect(rolledRows(s.db)).toBeLessThan(16);
  });

  test("the fold comes with a later batch once the interval has passed, and then the rollups alone hold every record", async () => {
    const s = setup();
    const report = createUsageBreakdown(s.db) as (q: UsageQuery) => UsageBucketRow[];
    for (let i = 0; i < 5; i++) await s.settle(s.keys[0]!, "m-a", 900, { fresh: 30, cached: 10, out: 4 });
    expect(mark(s.db)).toBeLessThan(lastRecord(s.db));
    s.at(START + FOLD_INTERVAL_MS);
    await s.settle(s.keys[1]!, "m-b", 900, { fresh: 30, cached: 10, out: 4 });
    // That batch folded every record, its own included (the fold runs after its inserts).
    expect(mark(s.db)).toBe(lastRecord(s.db));
    expect(rolledRows(s.db)).toBe(6);
    const q = byHour(s.account.id);
    expect(report(q)).toEqual(report(fromRecords(q)));
  });

  test("a process that stops between two folds loses nothing: another connection reads the same report, and folding later moves every record once", async () => {
    const s = setup();
    for (let i = 0; i < 7; i++) await s.settle(s.keys[i % 2]!, "m-a", 1_200, { fresh: 50, cached: 500, out: 20 });
    await s.ledger.flush();
    const q = byHour(s.account.id);
    const before = createUsageBreakdown(s.db)(q);
    // As after kill -9: the file as it is, read by a new connection.
    const other = new Database(s.path);
    try {
      expect(createUsageBreakdown(other)(q)).toEqual(before);
      foldRollups(other);
      expect(mark(other)).toBe(lastRecord(other));
      expect(rolledRows(other)).toBe(7);
      expect(createUsageBreakdown(other)(q)).toEqual(before);
      // A second fold finds nothing past the mark: nothing counted twice.
      expect(foldRollups(other)).toBe(0);
      expect(createUsageBreakdown(other)(q)).toEqual(before);
    } finally {
      other.close();
    }
  });

  test("the records past the mark are read by id, never through an account's index (which would read all of the account's records in the range)", () => {
    const s = setup();
    const { text } = usageBreakdownSql(byHour(s.account.id), "sqlite", { tailAfter: PAST_ROLLUP_MARK });
    const plan = s.db.query<{ detail: string }, []>(`EXPLAIN QUERY PLAN ${text}`).all().map((r) => r.detail).join(" | ");
    expect(plan).toContain("INTEGER PRIMARY KEY");
    expect(plan).not.toContain("usage_account_time");
  });

  test("a merged report keeps the row cap: more than MAX_REPORT_ROWS rows between the rollup and the tail is too large", () => {
    const row = (model: string): UsageBucketRow => ({ period: 0, model, ...usageSums({ requests: 1 }) });
    const rolled = Array.from({ length: 30_000 }, (_, i) => row(`m${i}`));
    const tail = Array.from({ length: 30_000 }, (_, i) => row(`n${i}`));
    expect(() => mergeUsageRows(rolled, tail)).toThrow(ReportTooLargeError);
    // Rows of the same period and group are one row: these stay within the cap and are summed.
    const merged = mergeUsageRows(rolled.slice(0, MAX_REPORT_ROWS / 2), rolled.slice(0, MAX_REPORT_ROWS / 2).map((r) => ({ ...r })));
    expect(merged.length).toBe(MAX_REPORT_ROWS / 2);
    expect(merged.every((r) => r.requests === 2)).toBe(true);
  });
});
