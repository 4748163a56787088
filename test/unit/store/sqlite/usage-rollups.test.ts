import { Database } from "bun:sqlite";
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openDatabase } from "../../../../src/store/database.ts";
import { createAccountStore } from "../../../../src/store/sqlite/sqlite-accounts.ts";
import { createSqliteLedger } from "../../../../src/store/sqlite/sqlite-ledger.ts";
import { createUsageBreakdown, createUsageReport } from "../../../../src/store/sqlite/sqlite-usage-report.ts";
import { createRollupFolder, FOLD_INTERVAL_MS, foldRollups, PAST_ROLLUP_MARK } from "../../../../src/store/sqlite/sqlite-rollups.ts";
import { MAX_REPORT_ROWS, mergeUsageRows, rangePieces, ReportTooLargeError, shapeUsageReport, USAGE_SUMS_SQL, usageBreakdownSql, usageRows, usageSums, type UsageBucketRow, type UsageQuery } from "../../../../src/billing/usage-report.ts";

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
/** The same report from the records alone (the statement for a range that cuts an hour reads them whole). */
const fromRecords = (db: Database, q: UsageQuery): UsageBucketRow[] => {
  const { text, params } = usageBreakdownSql({ ...q, from: q.from + 1 }, "sqlite");
  return usageRows(db.query(text).all(...params) as Record<string, unknown>[]);
};
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
    expect(rows).toEqual(fromRecords(s.db, q));
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
    expect(report(q)).toEqual(fromRecords(s.db, q));
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

describe("ranges that cut an hour, and the per-model account report: the rollups for whole hours and days, the records only at the ends (a hostile-tenant probe: a holder's reload read 600,000 records on the request thread)", () => {
  test("rangePieces: whole days from the daily rollup, whole hours from the hourly, the ends (under an hour) from the records", () => {
    const DAY = 24 * HOUR;
    const d = Date.UTC(2026, 10, 2);
    expect(rangePieces(d + 30 * 60_000, d + 2 * DAY + 5 * HOUR + 10)).toEqual([
      { source: "usage_records", from: d + 30 * 60_000, to: d + HOUR },
      { source: "usage_hourly", from: d + HOUR, to: d + DAY },
      { source: "usage_daily", from: d + DAY, to: d + 2 * DAY },
      { source: "usage_hourly", from: d + 2 * DAY, to: d + 2 * DAY + 5 * HOUR },
      { source: "usage_records", from: d + 2 * DAY + 5 * HOUR, to: d + 2 * DAY + 5 * HOUR + 10 },
    ]);
    expect(rangePieces(0, d)).toEqual([{ source: "usage_daily", from: 0, to: d }]);
    expect(rangePieces(d + 10, d + HOUR - 1)).toEqual([{ source: "usage_records", from: d + 10, to: d + HOUR - 1 }]);
    expect(rangePieces(d + 10, d + 2 * HOUR + 1)).toEqual([
      { source: "usage_records", from: d + 10, to: d + HOUR },
      { source: "usage_hourly", from: d + HOUR, to: d + 2 * HOUR },
      { source: "usage_records", from: d + 2 * HOUR, to: d + 2 * HOUR + 1 },
    ]);
    expect(rangePieces(d, d)).toEqual([]);
    // The pieces cover the range once, in order.
    for (const [from, to] of [[d + 1, d + 40 * DAY + 7], [d - 13 * HOUR - 5, d + 3 * HOUR], [0, d + 1]] as const) {
      const pieces = rangePieces(from, to);
      expect(pieces[0]!.from).toBe(from);
      expect(pieces.at(-1)!.to).toBe(to);
      for (let i = 1; i < pieces.length; i++) expect(pieces[i]!.from).toBe(pieces[i - 1]!.to);
    }
  });

  /** Records over three days, folded; then more past the mark. */
  async function spread() {
    const s = setup();
    for (let h = -30; h < 40; h += 3) {
      s.at(START + h * HOUR + 17 * 60_000);
      await s.settle(s.keys[(h + 30) % 2]!, h % 2 ? "m-a" : "m-b", 1_000 + h, { fresh: 10, cached: 5, out: 3 });
    }
    await s.ledger.flush();
    foldRollups(s.db);
    s.at(START + 39 * HOUR + 50 * 60_000);
    for (let i = 0; i < 3; i++) await s.settle(s.keys[0]!, "m-c", 2_000, { fresh: 1, cached: 0, out: 1 });
    await s.ledger.flush();
    expect(mark(s.db)).toBeLessThan(lastRecord(s.db));
    return s;
  }
  const ranges = [[START - 30 * HOUR + 5, START + 41 * HOUR - 7], [START - 2 * HOUR + 1, START + 2 * HOUR + 1], [START + 20 * 60_000, START + 50 * 60_000], [START - 48 * HOUR, START + 48 * HOUR]] as const;

  test("a breakdown over a range that cuts an hour equals the records' own sums, by hour and by day", async () => {
    const s = await spread();
    const report = createUsageBreakdown(s.db) as (q: UsageQuery) => UsageBucketRow[];
    for (const [from, to] of ranges) {
      for (const granularity of ["hour", "day"] as const) {
        const q: UsageQuery = { from, to, groupBy: ["key", "model"], granularity, accountId: s.account.id };
        expect([from, to, granularity, report(q)]).toEqual([from, to, granularity, fromRecords(s.db, q)]);
      }
    }
  });

  test("the per-model account report equals the records' own sums over any range, and the whole-hour part of a cut range is read from the rollups", async () => {
    const s = await spread();
    const usage = createUsageReport(s.db);
    const direct = (from: number, to: number) => s.db.query<Record<string, unknown>, [string, number, number]>(
      `SELECT u.model, ${USAGE_SUMS_SQL} FROM usage_records u WHERE u.account_id = ? AND u.created_at >= ? AND u.created_at < ? GROUP BY u.model ORDER BY u.model`,
    ).all(s.account.id, from, to).map((r) => ({ model: String(r.model), ...usageSums(r) }));
    for (const [from, to] of [...ranges, [0, START + 100 * HOUR]] as const) {
      expect([from, to, usage(s.account.id, from, to).models]).toEqual([from, to, shapeUsageReport(s.account.id, from, to, direct(from, to), []).models]);
    }
    // A rollup row made to differ from its records shows through: the report read the rollup, not the records.
    s.db.run("UPDATE usage_hourly SET requests = requests + 1000 WHERE hour = ?", [START - 21 * HOUR]);
    s.db.run("UPDATE usage_daily SET requests = requests + 1000 WHERE day = ?", [Date.UTC(2026, 10, 1)]);
    const [from, to] = [START - 30 * HOUR + 5, START + 41 * HOUR - 7];
    const total = usage(s.account.id, from, to).total.requests;
    expect(total).toBe(direct(from, to).reduce((n, r) => n + r.requests, 0) + 1000);
    const breakdown = (createUsageBreakdown(s.db) as (q: UsageQuery) => UsageBucketRow[])({ from, to, groupBy: [], granularity: "hour", accountId: s.account.id });
    expect(breakdown.reduce((n, r) => n + r.requests, 0)).toBe(total);
  });
});

/** The rollup tables against the records' own GROUP BY, for a file whose every record is folded. */
function expectRollupsToMatchRecords(db: Database) {
  expect(mark(db)).toBe(lastRecord(db));
  for (const [table, bucket, size] of [["usage_hourly", "hour", HOUR], ["usage_daily", "day", 24 * HOUR]] as const) {
    const rolled = db.query(`SELECT ${bucket} AS t, account_id, key_id, model, requests, prompt_tokens, completion_tokens, fresh_input_tokens, cache_read_tokens,
      cache_write_5m_tokens, cache_write_1h_tokens, reasoning_tokens, images, cost_micro, cache_savings_micro, estimated_requests FROM ${table} ORDER BY 1, 2, 3, 4`).all();
    const fromRecords = db.query(`SELECT (created_at / ${size}) * ${size} AS t, account_id, key_id, model, COUNT(*) AS requests, SUM(prompt_tokens) AS prompt_tokens,
      SUM(completion_tokens) AS completion_tokens, SUM(COALESCE(fresh_input_tokens, prompt_tokens)) AS fresh_input_tokens, SUM(cache_read_tokens) AS cache_read_tokens,
      SUM(cache_write_5m_tokens) AS cache_write_5m_tokens, SUM(cache_write_1h_tokens) AS cache_write_1h_tokens, SUM(reasoning_tokens) AS reasoning_tokens,
      SUM(images) AS images, SUM(cost_micro) AS cost_micro, SUM(cache_savings_micro) AS cache_savings_micro, SUM(estimated != 0) AS estimated_requests
      FROM usage_records GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4`).all();
    expect(rolled).toEqual(fromRecords);
  }
}

describe("usage rollups folded from the sums the ledger keeps as it writes (no scan of the records)", () => {
  const PRICES = { input: 3_000, output: 15_000, cacheRead: 300, cacheWrite5m: 3_750, cacheWrite1h: 6_000, perImage: 2_000_000 };
  /** A paid settlement with every class and the prices, so each rollup column has something to sum. */
  const settleAll = async (s: ReturnType<typeof setup>, requestId: string, keyId: string, model: string, i: number) => {
    expect((await s.ledger.reserve({ requestId, accountId: s.account.id, keyId, amountMicro: 10_000_000 })).ok).toBe(true);
    await s.ledger.settle({
      requestId, accountId: s.account.id, keyId, model, provider: "p", promptTokens: 100 + i, completionTokens: 20 + i, estimated: false, costMicro: 5_000 + i,
      status: "ok", latencyMs: 2, prices: PRICES,
      classes: { freshInput: 10 + i, cacheRead: 60, cacheWrite5m: 20, cacheWrite1h: 10, output: 20 + i, reasoning: i % 3, images: i % 2 },
    });
  };

  test("a folder told each record folds from its sums, equal to folding the records, hour and day", () => {
    const { db, account, keys } = setup();
    const insert = db.query(`INSERT INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at,
      fresh_input_tokens, cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens, reasoning_tokens, images, cache_savings_micro) VALUES (?, ?, ?, ?, 'p', ?, ?, ?, ?, 'ok', 1, ?, ?, ?, ?, ?, ?, ?, ?)`);
    const folder = createRollupFolder(db);
    const write = (n: number, at: (i: number) => number) =>
      db.transaction(() => {
        for (let i = 0; i < n; i++) {
          const key = keys[i % 2]!;
          const model = i % 3 ? "m-a" : "m-b";
          const v = [100 + i, 7, 900 + i, at(i), 40 + i, i, i % 4, i % 5, i % 2, i % 3, 11 * i] as const;
          // Every fourth record's counts estimated by the gateway: the rollups count those too.
          const estimated = i % 4 === 1;
          folder.added(at(i), account.id, key, model, v[0], v[1], v[4], v[5], v[6], v[7], v[8], v[9], v[2], v[10], estimated);
          const id = Number(insert.run(`r_${at(i)}_${i}`, account.id, key, model, v[0], v[1], estimated ? 1 : 0, ...v.slice(2)).lastInsertRowid);
          folder.inserted(id, id);
        }
        folder.fold();
      }).immediate();
    // Records across an hour's and a day's boundary, in two folds.
    write(40, (i) => START + 23 * HOUR + i * 120_000);
    write(25, (i) => START + 26 * HOUR + i * 1_000);
    expect(folder.folds).toEqual({ fromSums: 2, fromRecords: 0 });
    expectRollupsToMatchRecords(db);
    // Nothing told and nothing new: a fold moves nothing.
    expect(db.transaction(() => folder.fold()).immediate()).toBe(0);
  });

  test("sums are trusted only for exactly the records past the mark: a gap in the ids told, or a record not told, folds from the records", () => {
    const { db, account, keys } = setup();
    const insert = db.query(`INSERT INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at)
      VALUES (?, ?, ?, 'm', 'p', 10, 5, 0, 100, 'ok', 1, ?)`);
    const folder = createRollupFolder(db);
    let n = 0;
    const record = (tell: boolean) => {
      if (tell) folder.added(START, account.id, keys[0]!, "m", 10, 5, 10, 0, 0, 0, 0, 0, 100, 0, false);
      const id = Number(insert.run(`r_${n++}`, account.id, keys[0]!, START).lastInsertRowid);
      if (tell) folder.inserted(id, id);
    };
    const fold = () => db.transaction(() => folder.fold()).immediate();
    // One record not told between two told ones: as many told as past the mark would not hold.
    record(true);
    record(false);
    record(true);
    fold();
    expect(folder.folds).toEqual({ fromSums: 0, fromRecords: 1 });
    expectRollupsToMatchRecords(db);
    // Told ids that skip one (another writer's record between two statements) are a gap, even
    // where the count matches: here a record told but never written stands in for the other's.
    record(true);
    folder.added(START, account.id, keys[0]!, "m", 10, 5, 10, 0, 0, 0, 0, 0, 100, 0, false);
    insert.run(`r_${n++}`, account.id, keys[0]!, START);
    record(true);
    fold();
    expect(folder.folds).toEqual({ fromSums: 0, fromRecords: 2 });
    expectRollupsToMatchRecords(db);
    // Rolled back: what was told is forgotten, and the records decide.
    record(true);
    folder.rolledBack();
    fold();
    expect(folder.folds).toEqual({ fromSums: 0, fromRecords: 3 });
    expectRollupsToMatchRecords(db);
    record(true);
    fold();
    expect(folder.folds).toEqual({ fromSums: 1, fromRecords: 3 });
    expectRollupsToMatchRecords(db);
  });

  test("the ledger's folds come from its sums, and the rollups equal the records", async () => {
    const s = setup();
    for (let i = 0; i < 30; i++) {
      if (i % 10 === 0) s.at(START + (i / 10) * (HOUR / 2) + FOLD_INTERVAL_MS * i);
      await settleAll(s, `req_sums_${i}`, s.keys[i % 2]!, i % 3 ? "m-a" : "m-b", i);
    }
    s.at(START + 3 * HOUR);
    await settleAll(s, "req_sums_last", s.keys[0]!, "m-a", 99);
    await s.ledger.flush();
    expectRollupsToMatchRecords(s.db);
  });

  test("records the folder was not told (another connection's, a previous process's) are folded from the records: nothing lost, nothing twice", async () => {
    const s = setup();
    await settleAll(s, "req_a", s.keys[0]!, "m-a", 1);
    // Another connection writes a record between two batches, and another one folds.
    const other = new Database(s.path);
    try {
      other.run(`INSERT INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at)
        VALUES ('req_foreign', ?, ?, 'm-a', 'p', 5, 5, 0, 50, 'ok', 1, ?)`, [s.account.id, s.keys[1]!, START]);
      s.at(START + FOLD_INTERVAL_MS);
      await settleAll(s, "req_b", s.keys[0]!, "m-a", 2);
      expectRollupsToMatchRecords(s.db);
      await settleAll(s, "req_c", s.keys[1]!, "m-b", 3);
      foldRollups(other);
      s.at(START + 2 * FOLD_INTERVAL_MS);
      await settleAll(s, "req_d", s.keys[1]!, "m-b", 4);
      expectRollupsToMatchRecords(s.db);
    } finally {
      other.close();
    }
    // A new process on the same file: the records its predecessor left past the mark are folded too.
    await settleAll(s, "req_e", s.keys[0]!, "m-b", 5);
    await s.ledger.close();
    const again = createSqliteLedger(s.db, { now: () => START + 3 * FOLD_INTERVAL_MS });
    expect((await again.reserve({ requestId: "req_f", accountId: s.account.id, keyId: s.keys[0]!, amountMicro: 100 })).ok).toBe(true);
    await again.settle({ requestId: "req_f", accountId: s.account.id, keyId: s.keys[0]!, model: "m-a", provider: "p", promptTokens: 3, completionTokens: 3, estimated: false, costMicro: 60, status: "ok", latencyMs: 1 });
    expectRollupsToMatchRecords(s.db);
    await again.close();
  });

  test("a batch with a record already written (written again row by row) keeps the rollups exact", async () => {
    const s = setup();
    await settleAll(s, "req_once", s.keys[0]!, "m-a", 1);
    // The same request settled again beside new ones: the chunk is rolled back and written one by one.
    expect((await s.ledger.reserve({ requestId: "req_once", accountId: s.account.id, keyId: s.keys[0]!, amountMicro: 10_000_000 })).ok).toBe(true);
    s.at(START + FOLD_INTERVAL_MS);
    await Promise.all([
      s.ledger.settle({ requestId: "req_once", accountId: s.account.id, keyId: s.keys[0]!, model: "m-a", provider: "p", promptTokens: 1, completionTokens: 1, estimated: false, costMicro: 10, status: "ok", latencyMs: 1 }),
      settleAll(s, "req_new_1", s.keys[1]!, "m-a", 2),
      settleAll(s, "req_new_2", s.keys[1]!, "m-b", 3),
    ]);
    await s.ledger.flush();
    expect(s.db.query("SELECT COUNT(*) AS n FROM usage_records").get()).toEqual({ n: 3 });
    s.at(START + 2 * FOLD_INTERVAL_MS);
    await settleAll(s, "req_new_3", s.keys[0]!, "m-b", 4);
    expectRollupsToMatchRecords(s.db);
  });
});
