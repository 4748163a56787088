/**
 * usage_records without AUTOINCREMENT (one page fewer in every commit's write-ahead log): a file
 * of the release before is rebuilt at start with every record as it was, ids and indexes
 * included; new records continue the ids; a table too large to copy quickly keeps AUTOINCREMENT.
 */
import { Database } from "bun:sqlite";
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BEFORE_USAGE_REBUILD, migrate, openDatabase, PAGE_SIZE } from "../../src/store/database.ts";
import { createSqliteLedger } from "../../src/store/sqlite/sqlite-ledger.ts";
import { dropUsageAutoincrement } from "../../src/store/sqlite/rebuild-usage-records.ts";

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});
const T0 = Date.parse("2026-11-01T10:00:00Z");

/** A file at the schema version before the rebuild, with an account, a key and `n` records. */
function oldFile(n: number): string {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-rebuild-"));
  dirs.push(dir);
  const path = join(dir, "old.sqlite");
  const db = new Database(path, { create: true, strict: true });
  db.exec("PRAGMA journal_mode = WAL");
  migrate(db, BEFORE_USAGE_REBUILD);
  db.run("INSERT INTO accounts (id, name, balance_micro, created_at) VALUES ('acct_r', 'r', 1000000000, ?)", [T0]);
  db.run("INSERT INTO api_keys (id, account_id, name, key_hash, key_prefix, key_last4, created_at) VALUES ('key_r', 'acct_r', 'k', 'h', 'p', 'l', ?)", [T0]);
  const insert = db.query(`INSERT INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at,
    client_request_id, fresh_input_tokens, cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens, reasoning_tokens, images, price_id, held_micro, cache_savings_micro)
    VALUES (?, 'acct_r', 'key_r', ?, 'p', ?, ?, 0, ?, 'ok', 3, ?, ?, ?, ?, ?, 0, ?, 0, ?, ?, ?)`);
  for (let i = 0; i < n; i++) {
    insert.run(`req_${i}`, i % 2 ? "m-a" : "m-b", 100 + i, 10 + i, 500 + i, T0 + i * 1000, i % 3 ? `client-${i}` : null, i % 4 ? 100 + i : null, i % 4 ? 0 : 60, i % 5, i % 2, i % 7 ? 123 : null, i % 9 ? null : 400, i * 3);
  }
  db.close();
  return path;
}

const definition = (db: Database) => db.query<{ sql: string }, []>("SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'usage_records'").get()!.sql;
const indexes = (db: Database) => db.query<{ name: string; unique: number }, []>("SELECT name, \"unique\" FROM pragma_index_list('usage_records') ORDER BY name").all();
const everything = (db: Database) => db.query("SELECT * FROM usage_records ORDER BY id").all();

describe("usage_records without AUTOINCREMENT", () => {
  test("a file of the release before is rebuilt at start: every record, id and index as it was", async () => {
    const path = oldFile(40);
    const before = new Database(path, { readonly: true });
    const records = everything(before);
    const indexesBefore = indexes(before);
    expect(definition(before)).toContain("AUTOINCREMENT");
    before.close();

    const db = openDatabase(path);
    expect(definition(db)).not.toContain("AUTOINCREMENT");
    expect(everything(db)).toEqual(records);
    expect(indexes(db)).toEqual(indexesBefore);
    expect(db.query("SELECT name FROM sqlite_sequence WHERE name = 'usage_records'").all()).toEqual([]);
    expect(db.query("PRAGMA integrity_check").get()).toEqual({ integrity_check: "ok" });
    // The request id is still unique: a record is never written twice.
    expect(() => db.run("INSERT INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at) VALUES ('req_3', 'acct_r', 'key_r', 'm', 'p', 1, 1, 0, 1, 'ok', 1, 1)")).toThrow();

    // New records continue the ids, through the ledger's batches.
    const ledger = createSqliteLedger(db, { now: () => T0 + 60_000 });
    const settle = async (requestId: string) => {
      expect((await ledger.reserve({ requestId, accountId: "acct_r", keyId: "key_r", amountMicro: 1_000 })).ok).toBe(true);
      await ledger.settle({ requestId, accountId: "acct_r", keyId: "key_r", model: "m-a", provider: "p", promptTokens: 5, completionTokens: 5, estimated: false, costMicro: 100, status: "ok", latencyMs: 1 });
    };
    await Promise.all([settle("req_new_1"), settle("req_new_2")]);
    await ledger.close();
    expect(db.query("SELECT id, request_id FROM usage_records WHERE id > 40 ORDER BY id").all()).toEqual([{ id: 41, request_id: "req_new_1" }, { id: 42, request_id: "req_new_2" }]);
    db.close();
  });

  test("a new file is made without it, with 1 KB pages", () => {
    const dir = mkdtempSync(join(tmpdir(), "switchyard-rebuild-"));
    dirs.push(dir);
    const db = openDatabase(join(dir, "new.sqlite"));
    expect(definition(db)).not.toContain("AUTOINCREMENT");
    expect(indexes(db).map((i) => i.name)).toContain("usage_account_time");
    expect(db.query("PRAGMA page_size").get()).toEqual({ page_size: PAGE_SIZE });
    expect(PAGE_SIZE).toBe(1024);
    db.close();
  });

  test("a file of the release before keeps its 4 KB pages, and the ledger writes to it as before", async () => {
    const path = oldFile(3);
    const db = openDatabase(path);
    expect(db.query("PRAGMA page_size").get()).toEqual({ page_size: 4096 });
    const ledger = createSqliteLedger(db, { now: () => T0 + 1e6 });
    await ledger.settle({ requestId: "req_after", accountId: "acct_r", keyId: "key_r", model: "m-a", provider: "p", promptTokens: 1, completionTokens: 1, estimated: false, costMicro: 7, status: "ok", latencyMs: 1 });
    await ledger.close();
    expect(db.query("SELECT request_id FROM usage_records ORDER BY id DESC LIMIT 1").get()).toEqual({ request_id: "req_after" });
    expect(db.query("PRAGMA integrity_check").get()).toEqual({ integrity_check: "ok" });
    db.close();
  });

  test("a table larger than the bound keeps AUTOINCREMENT (no start held for minutes); ids and charges are the same either way", () => {
    const path = oldFile(6);
    const db = new Database(path, { strict: true });
    try {
      expect(db.transaction(() => dropUsageAutoincrement(db, 5)).immediate()).toBe(false);
      expect(definition(db)).toContain("AUTOINCREMENT");
      expect(everything(db)).toHaveLength(6);
      // Within the bound it is rebuilt; once rebuilt there is nothing left to do.
      expect(db.transaction(() => dropUsageAutoincrement(db, 6)).immediate()).toBe(true);
      expect(definition(db)).not.toContain("AUTOINCREMENT");
      expect(db.transaction(() => dropUsageAutoincrement(db, 6)).immediate()).toBe(false);
    } finally {
      db.close();
    }
  });
});
