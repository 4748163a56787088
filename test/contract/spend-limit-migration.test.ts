import { afterAll, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { migrate, openDatabase } from "../../src/store/database.ts";
import { connectPostgres } from "../../src/store/postgres/pg-client.ts";
import { migratePostgres, POSTGRES_SCHEMA_VERSION } from "../../src/store/postgres/pg-migrations.ts";
import { postgresMissing, useTestDatabase } from "../helpers/backends.ts";

/**
 * The periodic spend-limit migration on a database an older release left (schema version 5 on
 * SQLite, 2 on PostgreSQL): existing limits become lifetime ones whose window opened at 0 with
 * everything charged so far, and accounts count every charge of theirs.
 */
const dir = mkdtempSync(join(tmpdir(), "switchyard-migration-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const USAGE = `INSERT INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at)`;

test("SQLite: a file at the previous schema version opens, and old rows get the period columns' right values", () => {
  const path = join(dir, "old.sqlite");
  const old = new Database(path, { create: true, strict: true });
  migrate(old, 5);
  expect(old.query<{ v: number }, []>("SELECT MAX(version) AS v FROM schema_migrations").get()!.v).toBe(5);
  old.exec(`INSERT INTO accounts (id, name, balance_micro, created_at) VALUES ('acct_a', 'a', 10, 1), ('acct_b', 'b', 20, 2)`);
  old.exec(`INSERT INTO api_keys (id, account_id, key_hash, key_prefix, key_last4, created_at, spend_limit_micro, spent_micro)
            VALUES ('key_a1', 'acct_a', 'h1', 'p', 'l', 1, 9000000, 3000000), ('key_a2', 'acct_a', 'h2', 'p', 'l', 1, NULL, 4000000), ('key_b', 'acct_b', 'h3', 'p', 'l', 2, NULL, 0)`);
  old.exec(`${USAGE} VALUES ('r1', 'acct_a', 'key_a1', 'm', 'p', 1, 1, 0, 3000000, 'ok', 1, 5), ('r2', 'acct_a', 'key_a2', 'm', 'p', 1, 1, 0, 4000000, 'ok', 1, 6)`);
  old.close();

  const db = openDatabase(path);
  try {
    const keys = db.query("SELECT id, spend_limit_micro, spend_limit_period, spent_micro, period_spent_micro, period_start FROM api_keys ORDER BY id").all();
    expect(keys).toEqual([
      { id: "key_a1", spend_limit_micro: 9_000_000, spend_limit_period: null, spent_micro: 3_000_000, period_spent_micro: 3_000_000, period_start: 0 },
      { id: "key_a2", spend_limit_micro: null, spend_limit_period: null, spent_micro: 4_000_000, period_spent_micro: 4_000_000, period_start: 0 },
      { id: "key_b", spend_limit_micro: null, spend_limit_period: null, spent_micro: 0, period_spent_micro: 0, period_start: 0 },
    ]);
    const accounts = db.query("SELECT id, spend_limit_micro, spend_limit_period, period_spent_micro, period_start FROM accounts ORDER BY id").all();
    expect(accounts).toEqual([
      { id: "acct_a", spend_limit_micro: null, spend_limit_period: null, period_spent_micro: 7_000_000, period_start: 0 },
      { id: "acct_b", spend_limit_micro: null, spend_limit_period: null, period_spent_micro: 0, period_start: 0 },
    ]);
    // No index per key on the records: each costs every insert (a key's recount reads its account's).
    const indexes = db.query<{ name: string }, []>("SELECT name FROM pragma_index_list('usage_records')").all().map((r) => r.name);
    expect(indexes).not.toContain("usage_key_time");
    // Only the three periods (or none) can be stored.
    expect(() => db.exec("UPDATE api_keys SET spend_limit_period = 'year' WHERE id = 'key_a1'")).toThrow();
    expect(() => db.exec("UPDATE accounts SET spend_limit_period = 'fortnight' WHERE id = 'acct_a'")).toThrow();
    // Opening again changes nothing.
  } finally {
    db.close();
  }
  const again = openDatabase(path);
  expect(again.query<{ s: number }, []>("SELECT SUM(period_spent_micro) AS s FROM accounts").get()!.s).toBe(7_000_000);
  again.close();
});

const missing = await postgresMissing();
const database = useTestDatabase();
if (missing) {
  test.skip(`PostgreSQL migration — skipped: ${missing}`, () => {});
} else {
  test("PostgreSQL: a database at the previous schema version migrates, and old rows get the period columns' right values", async () => {
    const sql = connectPostgres(await database(), { max: 2 });
    try {
      expect(await migratePostgres(sql, 2)).toBe(2);
      await sql`INSERT INTO accounts (id, name, balance_micro, created_at) VALUES ('acct_a', 'a', 10, 1), ('acct_b', 'b', 20, 2)`;
      await sql`INSERT INTO api_keys (id, account_id, key_hash, key_prefix, key_last4, created_at, spend_limit_micro, spent_micro)
                VALUES ('key_a1', 'acct_a', 'h1', 'p', 'l', 1, 9000000, 3000000), ('key_a2', 'acct_a', 'h2', 'p', 'l', 1, NULL, 4000000)`;
      await sql.unsafe(`${USAGE} VALUES ('r1', 'acct_a', 'key_a1', 'm', 'p', 1, 1, false, 3000000, 'ok', 1, 5), ('r2', 'acct_a', 'key_a2', 'm', 'p', 1, 1, false, 4000000, 'ok', 1, 6)`);
      expect(await migratePostgres(sql)).toBe(POSTGRES_SCHEMA_VERSION);
      const keys = await sql`SELECT id, spend_limit_period, period_spent_micro::int AS spent, period_start::int AS start FROM api_keys ORDER BY id`;
      expect([...keys]).toEqual([
        { id: "key_a1", spend_limit_period: null, spent: 3_000_000, start: 0 },
        { id: "key_a2", spend_limit_period: null, spent: 4_000_000, start: 0 },
      ]);
      const accounts = await sql`SELECT id, spend_limit_micro, spend_limit_period, period_spent_micro::int AS spent, period_start::int AS start FROM accounts ORDER BY id`;
      expect([...accounts]).toEqual([
        { id: "acct_a", spend_limit_micro: null, spend_limit_period: null, spent: 7_000_000, start: 0 },
        { id: "acct_b", spend_limit_micro: null, spend_limit_period: null, spent: 0, start: 0 },
      ]);
      expect(await sql`SELECT indexdef FROM pg_indexes WHERE indexname = 'usage_key_time'`).toHaveLength(0);
      await expect(sql`UPDATE api_keys SET spend_limit_period = 'year' WHERE id = 'key_a1'`).rejects.toThrow();
    } finally {
      await sql.close({ timeout: 0 });
    }
  });
}
