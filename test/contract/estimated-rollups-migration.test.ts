import { afterAll, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { rollupDriftSql } from "../../src/billing/usage-report.ts";
import { migrate, openDatabase, sqliteVersionOf } from "../../src/store/database.ts";
import { connectPostgres } from "../../src/store/postgres/pg-client.ts";
import { migratePostgres, POSTGRES_SCHEMA_VERSION, versionOf } from "../../src/store/postgres/pg-migrations.ts";

/** The version the estimated rollups' migration brings a database to. */
const ESTIMATED = versionOf("ADD COLUMN estimated_requests");
import { createPostgresUsageBreakdown } from "../../src/store/postgres/pg-reports.ts";
import { foldRollups } from "../../src/store/sqlite/sqlite-rollups.ts";
import { createUsageBreakdown } from "../../src/store/sqlite/sqlite-usage-report.ts";
import { postgresMissing, useTestDatabase } from "../helpers/backends.ts";

/**
 * The rollups' count of estimated requests (the usage report's `estimated_requests`) on a
 * database an older release left: rows already rolled up take theirs from their records, and
 * what is rolled up afterwards counts them as it goes, on both stores.
 */
const dir = mkdtempSync(join(tmpdir(), "switchyard-estimated-rollups-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const HOUR = 3_600_000;
const DAY1 = Date.parse("2026-03-01T00:00:00Z");
const USAGE = `INSERT INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at)`;
/** Records over two hours of two days and two models, every third one estimated: [request id, model, estimated, created_at]. */
const records = (from: number, n: number, first = 0) =>
  Array.from({ length: n }, (_, i) => [`r${first + i}`, i % 2 ? "m-a" : "m-b", (first + i) % 3 === 0, DAY1 + (i % 4 < 2 ? 0 : 24 * HOUR) + (i % 2) * HOUR + from + i] as const);
const expectedEstimated = (rows: ReturnType<typeof records>, size: number) => {
  const out = new Map<string, number>();
  for (const [, model, estimated, at] of rows) {
    const id = `${Math.floor(at / size) * size} ${model}`;
    out.set(id, (out.get(id) ?? 0) + (estimated ? 1 : 0));
  }
  return [...out].sort(([a], [b]) => (a < b ? -1 : 1));
};
const QUERY = { from: DAY1, to: DAY1 + 2 * 24 * HOUR, groupBy: ["model" as const], granularity: "hour" as const };

test("SQLite: a file at the previous schema version: folded rows count their estimated records, and so does every fold after", async () => {
  const path = join(dir, "old.sqlite");
  const old = new Database(path, { create: true, strict: true });
  // The release before the estimated counts (later migrations are not its to test).
  migrate(old, sqliteVersionOf("ADD COLUMN estimated_requests") - 1);
  const before = records(0, 24);
  const insert = old.query(`${USAGE} VALUES (?, 'acct', 'key', ?, 'p', 10, 5, ?, 100, 'ok', 1, ?)`);
  for (const [id, model, estimated, at] of before) insert.run(id, model, estimated ? 1 : 0, at);
  // The old release's fold (sqlite-rollups.ts then): its sums had no count of estimated records.
  for (const [table, size] of [["usage_hourly", HOUR], ["usage_daily", 24 * HOUR]] as const) {
    old.exec(`INSERT INTO ${table} SELECT (created_at / ${size}) * ${size}, account_id, key_id, model, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens),
      SUM(COALESCE(fresh_input_tokens, prompt_tokens)), SUM(cache_read_tokens), SUM(cache_write_5m_tokens), SUM(cache_write_1h_tokens), SUM(reasoning_tokens),
      SUM(images), SUM(cost_micro), SUM(cache_savings_micro) FROM usage_records GROUP BY 1, 2, 3, 4`);
  }
  old.exec("UPDATE usage_rollup_mark SET record_id = (SELECT MAX(id) FROM usage_records)");
  // Records past the mark: the old release had not folded them when it stopped.
  const tail = records(10, 8, 24);
  for (const [id, model, estimated, at] of tail) insert.run(id, model, estimated ? 1 : 0, at);
  old.close();

  const db = openDatabase(path);
  try {
    const rolled = (table: "usage_hourly" | "usage_daily") =>
      db.query<{ period: number; model: string; n: number }, []>(`SELECT ${table === "usage_hourly" ? "hour" : "day"} AS period, model, estimated_requests AS n FROM ${table} ORDER BY 1, 2`).all().map((r) => [`${r.period} ${r.model}`, r.n]);
    expect(rolled("usage_hourly")).toEqual(expectedEstimated(before, HOUR));
    expect(rolled("usage_daily")).toEqual(expectedEstimated(before, 24 * HOUR));
    // The report adds the records past the mark to the rollups: exact before the next fold, and after it.
    const report = createUsageBreakdown(db);
    const fromReport = async () => (await report(QUERY)).map((r) => [`${r.period} ${r.model}`, r.estimated_requests]);
    expect(await fromReport()).toEqual(expectedEstimated([...before, ...tail], HOUR));
    expect(foldRollups(db)).toBe(8);
    expect(rolled("usage_hourly")).toEqual(expectedEstimated([...before, ...tail], HOUR));
    expect(await fromReport()).toEqual(expectedEstimated([...before, ...tail], HOUR));
    // The audit compares the count too: a rollup row's count altered by hand is drift.
    expect(db.query(rollupDriftSql("hourly", "id <= (SELECT record_id FROM usage_rollup_mark)")).all()).toEqual([]);
    db.exec(`UPDATE usage_hourly SET estimated_requests = estimated_requests + 1 WHERE model = 'm-a' AND hour = ${DAY1 + HOUR}`);
    expect(db.query<{ estimated_requests: number; expected_estimated: number }, []>(rollupDriftSql("hourly", "id <= (SELECT record_id FROM usage_rollup_mark)")).all())
      .toMatchObject([{ model: "m-a", estimated_requests: expectedEstimated([...before, ...tail], HOUR).find(([id]) => id === `${DAY1 + HOUR} m-a`)![1] + 1 }]);
  } finally {
    db.close();
  }
});

const missing = await postgresMissing();
const database = useTestDatabase();
if (missing) {
  test.skip(`PostgreSQL estimated rollups — skipped: ${missing}`, () => {});
} else {
  test("PostgreSQL: a database at the previous schema version: rolled-up rows count their estimated records, and the trigger counts new ones", async () => {
    const sql = connectPostgres(await database(), { max: 2 });
    try {
      expect(await migratePostgres(sql, ESTIMATED - 1)).toBe(ESTIMATED - 1);
      const insert = async (rows: ReturnType<typeof records>) => {
        for (const [id, model, estimated, at] of rows) await sql.unsafe(`${USAGE} VALUES ($1, 'acct', 'key', $2, 'p', 10, 5, $3, 100, 'ok', 1, $4)`, [id, model, estimated, at]);
      };
      const before = records(0, 24);
      await insert(before);
      expect(await migratePostgres(sql)).toBe(POSTGRES_SCHEMA_VERSION);
      const rolled = async (table: "usage_hourly" | "usage_daily") =>
        [...(await sql.unsafe(`SELECT ${table === "usage_hourly" ? "hour" : "day"} AS period, model, estimated_requests AS n FROM ${table} ORDER BY 1, model COLLATE "C"`))]
          .map((r: { period: string; model: string; n: string }) => [`${Number(r.period)} ${r.model}`, Number(r.n)]);
      expect(await rolled("usage_hourly")).toEqual(expectedEstimated(before, HOUR));
      expect(await rolled("usage_daily")).toEqual(expectedEstimated(before, 24 * HOUR));
      const after = records(10, 8, 24);
      await insert(after);
      expect(await rolled("usage_hourly")).toEqual(expectedEstimated([...before, ...after], HOUR));
      const report = createPostgresUsageBreakdown(sql);
      expect((await report(QUERY)).map((r) => [`${r.period} ${r.model}`, r.estimated_requests])).toEqual(expectedEstimated([...before, ...after], HOUR));
      expect([...(await sql.unsafe(rollupDriftSql("daily")))]).toEqual([]);
    } finally {
      await sql.close({ timeout: 0 });
    }
  });
}
