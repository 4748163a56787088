/**
 * The write-ahead log cut or overwritten under a connection (sqlite/file-identity.ts, logDamage):
 * SQLite goes on appending past the hole, and a checkpoint (the last close's included) copies the
 * hole into the database file. What the check reads and what the gateway's close does about it,
 * on a real SQLite file.
 */
import { afterEach, beforeEach, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { closeSync, mkdtempSync, openSync, realpathSync, rmSync, statSync, truncateSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { closeLedger, freshFrameProof, ledgerFiles, LedgerFileGoneError, logDamage, logFramesDamage } from "../../../../src/store/sqlite/file-identity.ts";

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

/** Garbage written over the log in place from `from` to its end: same length, same inode. */
function overwriteLog(real: string, from: number): void {
  const size = statSync(`${real}-wal`).size;
  const fd = openSync(`${real}-wal`, "r+");
  try {
    const garbage = Buffer.alloc(size - from);
    for (let i = 0; i < garbage.length; i++) garbage[i] = (i * 7919 + 13) & 0xff;
    writeSync(fd, garbage, 0, garbage.length, from);
  } finally {
    closeSync(fd);
  }
}

test("a sound log's frames are never judged damaged, read once each: through commits, checkpoints and restarts", () => {
  const real = realpathSync(path);
  const proof = freshFrameProof();
  const other = new Database(path);
  try {
    for (let round = 0; round < 30; round++) {
      insert(round * 100, 100);
      expect(logFramesDamage(real, {}, freshFrameProof())).toEqual({});
      expect(logFramesDamage(real, {}, proof)).toEqual({});
      expect(proof.frames).toBeGreaterThan(0);
      other.query(round % 3 === 0 ? "PRAGMA wal_checkpoint(RESTART)" : round % 3 === 1 ? "PRAGMA wal_checkpoint(TRUNCATE)" : "PRAGMA wal_checkpoint(PASSIVE)").get();
      expect(logFramesDamage(real, {}, proof)).toEqual({});
    }
  } finally {
    other.close();
  }
});

/*
 * Frames overwritten in place past the log's header (a disk-fault probe, twenty-fourth session:
 * `dd conv=notrunc` of garbage from byte 32 to the end): the magic, salts and length are SQLite's,
 * so logDamage saw nothing, and the last close (as the checkpoint thread) copied the garbage into
 * the file, malformed; the next start served paid requests on it.
 */
test("frames overwritten past the log's header: judged damaged, and the close copies nothing of them", () => {
  const real = realpathSync(path);
  insert(0, 200);
  db.query("PRAGMA wal_checkpoint(PASSIVE)").get();
  insert(200, 50);
  ledgerFiles(db)(true);
  overwriteLog(real, 32);
  expect(logDamage(real)).toBeUndefined();
  expect(logFramesDamage(real, {}, freshFrameProof()).damage).toMatch(/^overwritten \(frame 1 of the \d+ its index counts/);
  closeLedger(db);
  expect(reopened()).toEqual({ integrity: "ok", rows: 200 });
});

test("without the frames' check, the same close copies the garbage into the file (what closeLedger prevents)", () => {
  const real = realpathSync(path);
  insert(0, 200);
  db.query("PRAGMA wal_checkpoint(PASSIVE)").get();
  insert(200, 50);
  overwriteLog(real, 32);
  db.close();
  // Page 1 garbage too: "file is not a database" at the first read, else a failed integrity check.
  let integrity: string;
  try {
    integrity = reopened().integrity;
  } catch (err) {
    integrity = String(err);
  }
  expect(integrity).not.toBe("ok");
});

test("damage another thread found in the frames (logBroken): every write check throws from then on, and the close copies nothing", () => {
  const real = realpathSync(path);
  insert(0, 200);
  db.query("PRAGMA wal_checkpoint(PASSIVE)").get();
  insert(200, 50);
  const check = ledgerFiles(db);
  check(true);
  overwriteLog(real, 32);
  check.logBroken("overwritten (frame 3 of the 9 its index counts is not the one SQLite wrote)");
  expect(() => check()).toThrow(/write-ahead log .* was overwritten \(frame 3/);
  expect(() => check(true)).toThrow(LedgerFileGoneError);
  expect(check.logDamaged).toBe(true);
  closeLedger(db);
  expect(reopened()).toEqual({ integrity: "ok", rows: 200 });
});

test("a log overwritten whole at its length is judged within 50 ms of writes, not at the next full check a second later", () => {
  const real = realpathSync(path);
  insert(0, 200);
  db.query("PRAGMA wal_checkpoint(PASSIVE)").get();
  insert(200, 50);
  let at = 1_000_000;
  const check = ledgerFiles(db, () => at);
  check(true);
  at += 10;
  check();
  overwriteLog(real, 0);
  // Judged with the writes at most every 50 ms (a read before every batch cost 1.4 % of a lone
  // client's stream): 20 ms after the last judgement it is not yet, 50 ms after it is.
  at += 10;
  check();
  at += 40;
  expect(() => check()).toThrow(/write-ahead log .* was cut or overwritten \(its header is gone/);
});
