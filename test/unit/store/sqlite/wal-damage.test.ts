/**
 * The write-ahead log cut or overwritten under a connection (sqlite/file-identity.ts, logDamage):
 * SQLite goes on appending past the hole, and a checkpoint (the last close's included) copies the
 * hole into the database file. What the check reads and what the gateway's close does about it,
 * on a real SQLite file.
 */
import { afterEach, beforeEach, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { mkdtempSync, realpathSync, rmSync, statSync, truncateSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { closeLedger, ledgerFiles, LedgerFileGoneError, logDamage } from "../../../../src/store/sqlite/file-identity.ts";

let dir: string;
let path: string;
let db: Database;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "switchyard-wal-damage-"));
  path = join(dir, "ledger.sqlite");
  db = new Database(path, { create: true });
  db.exec("PRAGMA page_size = 1024; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0; PRAGMA journal_size_limit = 65536;");
  db.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL)");
});
afterEach(() => {
  try {
    db.close();
  } catch {}
  rmSync(dir, { recursive: true, force: true });
});

const insert = (from: number, n: number) => {
  const put = db.query("INSERT INTO t (id, body) VALUES (?, ?)");
  for (let i = from; i < from + n; i++) put.run(i, "x".repeat(300));
};

/** What a fresh connection finds: SQLite's check of every page, and the rows. */
function reopened(): { integrity: string; rows: number } {
  const conn = new Database(path);
  try {
    const integrity = conn.query<{ integrity_check: string }, []>("PRAGMA integrity_check").get()!.integrity_check;
    const rows = integrity === "ok" ? conn.query<{ n: number }, []>("SELECT count(*) AS n FROM t").get()!.n : -1;
    return { integrity, rows };
  } finally {
    conn.close();
  }
}

test("a sound log is never judged damaged: through commits, checkpoints, restarts and the log cut back to its size limit", () => {
  const real = realpathSync(path);
  const check = ledgerFiles(db);
  const other = new Database(path);
  try {
    for (let round = 0; round < 30; round++) {
      insert(round * 100, 100);
      expect(logDamage(real)).toBeUndefined();
      check(true);
      // Another connection copies the log and starts it over; the next commit writes a new header
      // and cuts the log back to journal_size_limit.
      other.query(round % 2 === 0 ? "PRAGMA wal_checkpoint(RESTART)" : "PRAGMA wal_checkpoint(PASSIVE)").get();
      expect(logDamage(real)).toBeUndefined();
    }
    expect(check.logDamaged).toBe(false);
  } finally {
    other.close();
  }
});

test("a log cut to nothing, then written past the hole: judged damaged, the write check throws, and the close copies nothing of it", () => {
  const real = realpathSync(path);
  insert(0, 200);
  db.query("PRAGMA wal_checkpoint(PASSIVE)").get();
  insert(200, 50);
  const check = ledgerFiles(db);
  check(true);
  truncateSync(`${real}-wal`, 0);
  expect(logDamage(real)).toMatch(/^cut to 0 bytes \(its index counts \d+ frames/);
  expect(() => check(true)).toThrow(LedgerFileGoneError);
  expect(check.logDamaged).toBe(true);
  // SQLite does not notice: this commit goes past the hole, under a header of zeros.
  insert(250, 50);
  expect(statSync(`${real}-wal`).size).toBeGreaterThan(32);
  expect(logDamage(real)).toMatch(/^cut or overwritten \(its header is gone/);
  closeLedger(db);
  // The file as its last checkpoint left it: whole, the 200 rows it held.
  expect(reopened()).toEqual({ integrity: "ok", rows: 200 });
});

test("without the cleared index, the same close copies the hole into the file (what closeLedger prevents)", () => {
  const real = realpathSync(path);
  insert(0, 200);
  db.query("PRAGMA wal_checkpoint(PASSIVE)").get();
  insert(200, 50);
  truncateSync(`${real}-wal`, 0);
  insert(250, 50);
  db.close();
  expect(reopened().integrity).not.toBe("ok");
});
