/**
 * The ledger's file rewritten in place, under the same inode (a truncation, `cp` of an older copy
 * over it): SQLite notices nothing, so the gateway checks the file's length and header itself
 * (store/sqlite/file-identity.ts). A VACUUM by another connection shrinks the file too, and must
 * not count (a kill -9 and disk-fault probe).
 */
import { afterEach, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { copyFileSync, existsSync, mkdtempSync, rmSync, statSync, truncateSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openDatabase } from "../../../../src/store/database.ts";
import { dbFileShape, ledgerFiles, LedgerFileGoneError, shapeChange } from "../../../../src/store/sqlite/file-identity.ts";

const dirs: string[] = [];
const dbs: Database[] = [];
afterEach(() => {
  for (const db of dbs.splice(0)) db.close();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A ledger with rows checkpointed into its file, and the gateway's check of it. */
function ledgerWithRows(): { db: Database; path: string; check: (force?: boolean) => void } {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-shape-"));
  dirs.push(dir);
  const path = join(dir, "gateway.sqlite");
  const db = openDatabase(path);
  dbs.push(db);
  const check = ledgerFiles(db);
  db.exec("CREATE TABLE scratch (id INTEGER PRIMARY KEY, payload BLOB)");
  const insert = db.query("INSERT INTO scratch (payload) VALUES (?)");
  db.transaction(() => {
    for (let i = 0; i < 400; i++) insert.run(new Uint8Array(1000).fill(i % 251));
  })();
  db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  check(true);
  return { db, path, check };
}

const failure = (check: (force?: boolean) => void): unknown => {
  try {
    check(true);
    return undefined;
  } catch (err) {
    return err;
  }
};

test("a ledger truncated in place is a storage failure saying so", () => {
  const { path, check } = ledgerWithRows();
  truncateSync(path, 0);
  const err = failure(check);
  expect(err).toBeInstanceOf(LedgerFileGoneError);
  expect((err as Error).message).toContain("truncated or overwritten in place");
  // And it stays failing: the check does not take the new length as the file's own.
  expect(failure(check)).toBeInstanceOf(LedgerFileGoneError);
});

test("an older copy written over it (same inode): a storage failure", () => {
  const { db, path, check } = ledgerWithRows();
  const older = `${path}.older`;
  copyFileSync(path, older);
  const insert = db.query("INSERT INTO scratch (payload) VALUES (?)");
  db.transaction(() => {
    for (let i = 0; i < 400; i++) insert.run(new Uint8Array(1000).fill(7));
  })();
  db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  check(true);
  const inode = statSync(path).ino;
  copyFileSync(older, path);
  expect(statSync(path).ino).toBe(inode);
  expect((failure(check) as Error).message).toContain("it shrank from");
});

test("a VACUUM by another connection shrinks the file and is not a failure", () => {
  const { db, path, check } = ledgerWithRows();
  const before = statSync(path).size;
  const other = new Database(path);
  other.exec("DELETE FROM scratch; VACUUM;");
  other.close();
  db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  expect(statSync(path).size).toBeLessThan(before);
  expect(failure(check)).toBeUndefined();
});

test("shapeChange: a header gone, or a shrink without a new schema cookie", () => {
  const shape = { size: 10_240, header: true, schemaCookie: 4 };
  expect(shapeChange(shape, { size: 20_480, header: true, schemaCookie: 4 })).toBeUndefined();
  expect(shapeChange(shape, { size: 5_120, header: true, schemaCookie: 5 })).toBeUndefined();
  expect(shapeChange(shape, { size: 5_120, header: true, schemaCookie: 4 })).toContain("shrank from 10240 to 5120 bytes");
  expect(shapeChange(shape, { size: 20_480, header: false, schemaCookie: 0 })).toContain("header is gone");
  // A file not yet written (no header) that gets one is how every ledger starts.
  expect(shapeChange({ size: 0, header: false, schemaCookie: 0 }, shape)).toBeUndefined();
  expect(dbFileShape("/nonexistent/gateway.sqlite")).toBeUndefined();
});

test("dbFileShape reads the length the header declares (page size × page count): a checkpointed file is that long", () => {
  const { db, path } = ledgerWithRows();
  db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  const shape = dbFileShape(path)!;
  const pages = db.query<{ page_count: number }, []>("PRAGMA page_count").get()!.page_count;
  const pageSize = db.query<{ page_size: number }, []>("PRAGMA page_size").get()!.page_size;
  expect(shape).toMatchObject({ header: true, size: pages * pageSize, declaredSize: pages * pageSize });
});

test("the check keeps SQLite's locks on the file: another process cannot take it for itself", () => {
  const { db, path, check } = ledgerWithRows();
  db.exec("INSERT INTO scratch (payload) VALUES (x'01')");
  check(true);
  check(true);
  // Closing a descriptor of the file drops every POSIX lock this process holds on it, SQLite's
  // shared lock included; a connection closing elsewhere then takes itself for the last one and
  // deletes the log (the sqlite3 shell did, while a probe ran a check that opened and closed the
  // file). A connection in exclusive locking mode needs that lock free to read at all.
  const other = Bun.spawnSync(["bun", "-e", `const { Database } = require("bun:sqlite"); const d = new Database(${JSON.stringify(path)});
    d.exec("PRAGMA busy_timeout = 0; PRAGMA locking_mode = EXCLUSIVE");
    try { d.query("SELECT COUNT(*) FROM scratch").get(); console.log("taken"); } catch (e) { console.log(String(e)); }
    d.close();`]);
  expect(other.stdout.toString()).toContain("database is locked");
  expect(existsSync(`${path}-wal`)).toBe(true);
  expect(db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM scratch").get()!.n).toBe(401);
});
