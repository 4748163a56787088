import { afterEach, describe, expect, test } from "bun:test";
import { closeSync, mkdtempSync, openSync, readSync, realpathSync, rmSync, statSync, truncateSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Database } from "bun:sqlite";
import { openDatabase, WAL_AUTOCHECKPOINT_PAGES } from "../../../src/store/database.ts";
import { checkpointLostWrites, startWalCheckpointer, type WalCheckpointer } from "../../../src/store/wal-checkpointer.ts";
import { ledgerFiles } from "../../../src/store/sqlite/file-identity.ts";
import { until } from "../../helpers/until.ts";

const dirs: string[] = [];
const open: { db: Database; checkpointer?: WalCheckpointer }[] = [];

function freshDatabase(): { db: Database; path: string } {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-wal-"));
  dirs.push(dir);
  const path = join(dir, "gateway.sqlite");
  const db = openDatabase(path);
  open.push({ db });
  return { db, path };
}

afterEach(async () => {
  for (const { db, checkpointer } of open.splice(0)) {
    await checkpointer?.stop();
    db.close();
  }
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** Bytes 12–19 of a WAL file's header (checkpoint sequence and first salt: both change when the log is started over), as hex; "" before there is a header. */
function walHeaderMark(path: string): string {
  let fd: number | undefined;
  try {
    fd = openSync(path, "r");
    const bytes = Buffer.alloc(8);
    return readSync(fd, bytes, 0, 8, 12) === 8 ? bytes.toString("hex") : "";
  } catch {
    return "";
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

const autocheckpoint = (db: Database) => db.query<{ wal_autocheckpoint: number }, []>("PRAGMA wal_autocheckpoint").get()!.wal_autocheckpoint;

/** About 4 MB of rows, committed through the connection: they land in the log, not the database file. */
function writeRows(db: Database): void {
  db.exec("CREATE TABLE IF NOT EXISTS scratch (id INTEGER PRIMARY KEY, payload BLOB)");
  const insert = db.query("INSERT INTO scratch (payload) VALUES (?)");
  db.transaction(() => {
    for (let i = 0; i < 1000; i++) insert.run(new Uint8Array(4096).fill(i % 251));
  })();
}

describe("WAL checkpoints on their own thread", () => {
  test("a thread that failed is started again after a wait: checkpoints go back to it from the request thread", async () => {
    const { db, path } = freshDatabase();
    const failures: string[] = [];
    let running = 0;
    const checkpointer = startWalCheckpointer(db, path, {
      intervalMs: 20, retryMs: 50, workerUrl: new URL("../../fixtures/workers/checkpoint-fails-first.ts", import.meta.url),
      onFailure: (m) => failures.push(m), onRunning: () => running++,
    });
    open[open.length - 1]!.checkpointer = checkpointer;
    // The first thread fails: the connection checkpoints (its own setting back), and says why.
    expect(await checkpointer.ready).toBe(false);
    expect(failures).toEqual(["disk full (a test's first start)"]);
    expect(autocheckpoint(db)).toBe(WAL_AUTOCHECKPOINT_PAGES);
    // The next one runs them again.
    await until("another thread running the checkpoints", 5_000, () => running === 1);
    expect(autocheckpoint(db)).toBe(0);
    const before = statSync(path).size;
    writeRows(db);
    await until("the log copied into the database file", 3_000, () => statSync(path).size > before + 3_000_000);
  });

  test("a thread whose sync failed tells the ledger that commits may be lost (a kill -9 and disk-fault probe); one that could not start does not", async () => {
    const { db, path } = freshDatabase();
    const lost: { message: string; code: string }[] = [];
    const checkpointer = startWalCheckpointer(db, path, {
      intervalMs: 20, retryMs: 60_000, workerUrl: new URL("../../fixtures/workers/checkpoint-sync-fails.ts", import.meta.url),
      onLostWrites: (err) => lost.push({ message: err.message, code: err.code }),
    });
    open[open.length - 1]!.checkpointer = checkpointer;
    await until("the failure told", 5_000, () => lost.length === 1);
    expect(lost).toEqual([{ message: "a WAL checkpoint failed: SQLiteError: disk I/O error", code: "SQLITE_IOERR_FSYNC" }]);
    expect(autocheckpoint(db)).toBe(WAL_AUTOCHECKPOINT_PAGES);

    const other = freshDatabase();
    const told: unknown[] = [];
    const failing = startWalCheckpointer(other.db, other.path, {
      intervalMs: 20, retryMs: 60_000, workerUrl: new URL("../../fixtures/workers/checkpoint-fails-first.ts", import.meta.url), onLostWrites: (err) => told.push(err),
    });
    open[open.length - 1]!.checkpointer = failing;
    expect(await failing.ready).toBe(false);
    expect(told).toEqual([]);
  });

  test("a log the thread found cut is marked damaged on the request thread at once: an exit before its next write clears the index, and Bun's last close copies nothing", async () => {
    const { db, path } = freshDatabase();
    const codes: (string | undefined)[] = [];
    const checkpointer = startWalCheckpointer(db, path, { intervalMs: 20, retryMs: 60_000, onFailure: (_message, code) => codes.push(code) });
    open[open.length - 1]!.checkpointer = checkpointer;
    expect(await checkpointer.ready).toBe(true);
    writeRows(db);
    truncateSync(`${realpathSync(path)}-wal`, 0);
    // A write the check does not see (the console's, the alert outbox's) goes past the hole, or
    // fails reading it: which one depends on whether the connection still holds the pages it reads
    // (after a pass of the thread in between, it reads them from the cut log: SQLITE_IOERR_SHORT_READ,
    // every run on one guest). Either way the mark below must come from the thread.
    try {
      db.exec("CREATE TABLE IF NOT EXISTS unchecked (id INTEGER PRIMARY KEY)");
    } catch (err) {
      expect((err as { code?: string }).code).toStartWith("SQLITE_IOERR");
    }
    await until("the thread found the log cut", 5_000, () => codes.includes("SWITCHYARD_LEDGER_FILE_GONE"));
    // Marked on the connection now, not when the thread is started again (5 s to 5 min later) or
    // at the next settlement: a second signal's process.exit, in between, had Bun's close of the
    // connection copy the hole into the ledger (its exit hook is only set once the mark is).
    expect(ledgerFiles(db).logDamaged).toBe(true);
  });

  test("which failures say writes were lost: I/O errors, a full or read-only disk, a damaged or replaced file; not locks, not a thread that did not start", () => {
    for (const code of ["SQLITE_IOERR_FSYNC", "SQLITE_IOERR_WRITE", "SQLITE_IOERR", "SQLITE_FULL", "SQLITE_READONLY", "SQLITE_CORRUPT", "SWITCHYARD_LEDGER_FILE_GONE"]) expect([code, checkpointLostWrites(code)]).toEqual([code, true]);
    for (const code of [undefined, "SQLITE_BUSY", "SQLITE_BUSY_SNAPSHOT", "SQLITE_LOCKED", "SQLITE_CANTOPEN", "ERR_WORKER_INIT_FAILED"]) expect([code, checkpointLostWrites(code)]).toEqual([code, false]);
  });

  test("while it runs, commits never checkpoint and the thread copies the log into the database file", async () => {
    const { db, path } = freshDatabase();
    const checkpointer = startWalCheckpointer(db, path, { intervalMs: 20 });
    open[open.length - 1]!.checkpointer = checkpointer;
    expect(await checkpointer.ready).toBe(true);
    expect(autocheckpoint(db)).toBe(0);

    const before = statSync(path).size;
    writeRows(db);
    // 4 MB is past SQLite's default 1,000-page checkpoint; with the connection's checkpoints off,
    // only the thread can have moved the rows into the database file.
    await until("the log copied into the database file", 3_000, () => statSync(path).size > before + 3_000_000);
  });

  /**
   * Back-to-back lone commits for `ms` on a connection that never waits for the lock (as the
   * gateway's: busy_timeout 0), retried at once when refused: how many went in, the longest time
   * writes were refused in a row, and how many times they were refused at all (episodes), and how
   * many times the log was seen started over (its header's checkpoint sequence and salt, read every
   * 50 commits, changed).
   */
  function steadyCommits(
    db: Database,
    ms: number,
  ): { commits: number; longestRefusalMs: number; refusals: number; logRestarts: number } {
    db.exec("CREATE TABLE IF NOT EXISTS steady (id INTEGER PRIMARY KEY, payload TEXT)");
    db.exec("PRAGMA busy_timeout = 0");
    const insert = db.query("INSERT INTO steady (payload) VALUES (?)");
    let commits = 0;
    let refusedSince: number | undefined;
    let longestRefusalMs = 0;
    let refusals = 0;
    const walPath = `${db.filename}-wal`;
    let header = "";
    let logRestarts = -1;
    const readHeader = () => {
      const now = walHeaderMark(walPath);
      if (now !== header) logRestarts++;
      header = now;
    };
    readHeader();
    const until = performance.now() + ms;
    while (performance.now() < until) {
      try {
        insert.run("x".repeat(100));
        commits++;
        if (commits % 50 === 0) readHeader();
        if (refusedSince !== undefined) longestRefusalMs = Math.max(longestRefusalMs, performance.now() - refusedSince);
        refusedSince = undefined;
      } catch (err) {
        if ((err as { code?: string }).code !== "SQLITE_BUSY") throw err;
        if (refusedSince === undefined) refusals++;
        refusedSince ??= performance.now();
      }
    }
    return { commits, longestRefusalMs, refusals, logRestarts: Math.max(0, logRestarts) };
  }

  test("under steady commits the log is started over, not grown by every commit's pages; writers are refused only for moments", async () => {
    const { db, path } = freshDatabase();
    // A pass counts as slow only past a second: on a busy CI machine a pass descheduled for 20 ms
    // looked like a slow disk, the restart was skipped and backed off, and the log grew (1 run in
    // ~6 with two other busy threads). The slow-disk rule has its own test below.
    // The log's frames are read before every pass (logFramesDamage): never judged damaged while it is started over.
    const failures: string[] = [];
    const checkpointer = startWalCheckpointer(db, path, { intervalMs: 20, restartLogBytes: 1024 * 1024, slowPassMs: 1_000, onFailure: (message) => failures.push(message) });
    open[open.length - 1]!.checkpointer = checkpointer;
    expect(await checkpointer.ready).toBe(true);
    // Lone commits as lone settlements under steady load: the pass never finds a moment without a
    // commit after it, so only a restart brings the log back to its start.
    // Up to three more spells when the machine starved the checkpointer's thread (a CI run beside a
    // multi-process load saw one restart in the first 1.5 s): the rule is "started over", not a rate.
    let { commits, longestRefusalMs, refusals, logRestarts } = steadyCommits(db, 1_500);
    for (let more = 0; logRestarts < 5 && more < 3; more++) {
      const next = steadyCommits(db, 1_500);
      commits += next.commits;
      longestRefusalMs = Math.max(longestRefusalMs, next.longestRefusalMs);
      refusals += next.refusals;
      logRestarts += next.logRestarts;
    }
    const pageSize = db.query<{ page_size: number }, []>("PRAGMA page_size").get()!.page_size;
    // Each commit appended at least one page: a log never started over is at least that long.
    const appended = commits * pageSize;
    expect(commits).toBeGreaterThan(5_000);
    // Seen started over (~50 times here, 14–46 with four busy loops on the two cores); never, without
    // the restarts. The file keeps the longest the log grew between two of them: 10–20% of what was
    // appended here, up to 43% on a loaded machine (100 commits a millisecond append 8 MB between two
    // passes, and a thread kept waiting makes one gap long), so its bound is only "not all of it".
    expect(logRestarts).toBeGreaterThanOrEqual(5);
    expect(statSync(`${path}-wal`).size).toBeLessThan(appended * 0.75);
    // The restarts took the lock (that is how they start the log over), each for a moment only.
    expect(refusals).toBeGreaterThan(0);
    expect(longestRefusalMs).toBeLessThan(250);
    expect(failures).toEqual([]);
  });

  test("on a slow disk (a second pass slower than the limit) the restart is skipped: writers are not held, the log grows as it used to", async () => {
    const { db, path } = freshDatabase();
    // Every pass counts as slow: the restart, which would sync while holding the lock, never runs.
    const checkpointer = startWalCheckpointer(db, path, { intervalMs: 20, restartLogBytes: 256 * 1024, slowPassMs: -1 });
    open[open.length - 1]!.checkpointer = checkpointer;
    expect(await checkpointer.ready).toBe(true);
    const { commits, refusals } = steadyCommits(db, 800);
    const pageSize = db.query<{ page_size: number }, []>("PRAGMA page_size").get()!.page_size;
    expect(commits).toBeGreaterThan(2_000);
    // A passive pass can itself refuse a writer that will not wait (busy_timeout 0 here; the
    // gateway's writers wait) for an instant, rarely (1 in ~1 run of 20 on CI). The restart refused
    // them every pass: 29 times in this test when it ran on a slow disk.
    expect(refusals).toBeLessThanOrEqual(2);
    // The log grows by (nearly) every commit's pages. Nearly: a writer kept waiting long enough for a
    // passive pass to copy the whole log starts it over (0.73 of the pages were left with four busy
    // loops on the two cores).
    expect(statSync(`${path}-wal`).size).toBeGreaterThan(commits * pageSize * 0.5);
  });

  test("a reader holding an old snapshot keeps the log from restarting; the restart then backs off instead of holding writers every pass", async () => {
    const { db, path } = freshDatabase();
    db.exec("CREATE TABLE steady (id INTEGER PRIMARY KEY, payload TEXT)");
    // An export or the admin CLI reading for a long time: its snapshot keeps the log's frames in use.
    const reader = new Database(path, { readonly: true });
    reader.exec("BEGIN");
    reader.query("SELECT COUNT(*) FROM steady").get();
    try {
      const checkpointer = startWalCheckpointer(db, path, { intervalMs: 20, restartLogBytes: 256 * 1024 });
      open[open.length - 1]!.checkpointer = checkpointer;
      expect(await checkpointer.ready).toBe(true);
      const { commits, refusals, longestRefusalMs } = steadyCommits(db, 1_500);
      expect(commits).toBeGreaterThan(5_000);
      // ~70 passes find the log long; each restart that meets the reader holds the writers ~5 ms and
      // gives up. Backing off (1, 2, 4 … passes) leaves a handful of those, not one per pass.
      expect(refusals).toBeLessThanOrEqual(12);
      expect(longestRefusalMs).toBeLessThan(250);
    } finally {
      reader.exec("COMMIT");
      reader.close();
    }
  });

  test("a file cut while a pass copies into it stops the thread at that pass's end: the pages written past the cut do not become the next check's baseline", async () => {
    const { db, path } = freshDatabase();
    // ~40 MB in the log: the thread's first pass copies it for long enough to be cut partway.
    for (let i = 0; i < 10; i++) writeRows(db);
    const failures: { message: string; code?: string }[] = [];
    const checkpointer = startWalCheckpointer(db, path, { intervalMs: 30, onFailure: (message, code) => failures.push({ message, code }) });
    open[open.length - 1]!.checkpointer = checkpointer;
    expect(await checkpointer.ready).toBe(true);
    // Cut once the pass has begun writing pages (page 1, the header, goes first) and before it is done.
    const start = statSync(path).size;
    const deadline = performance.now() + 5_000;
    while (statSync(path).size < start + 1_000_000 && performance.now() < deadline) Bun.sleepSync(0.2);
    expect(statSync(path).size).toBeLessThan(start + 30_000_000);
    truncateSync(path, 0);
    await until("the thread stopped, naming the cut", 3_000, () => failures.length > 0);
    expect(failures[0]).toMatchObject({ code: "SWITCHYARD_LEDGER_FILE_GONE" });
    expect(failures[0]!.message).toContain("truncated or overwritten in place");
    // More commits, and several intervals: nothing more is copied into the file.
    writeRows(db);
    const after = statSync(path).size;
    await Bun.sleep(200);
    expect(statSync(path).size).toBe(after);
  });

  test("stop() gives checkpoints back to the connection", async () => {
    const { db, path } = freshDatabase();
    const checkpointer = startWalCheckpointer(db, path, { intervalMs: 60_000 });
    expect(await checkpointer.ready).toBe(true);
    writeRows(db);
    const logged = statSync(path).size;
    await checkpointer.stop();
    expect(autocheckpoint(db)).toBe(WAL_AUTOCHECKPOINT_PAGES);
    // Its last pass before leaving copied the log in.
    expect(statSync(path).size).toBeGreaterThan(logged + 3_000_000);
  });

  test("a thread that cannot open the database leaves checkpoints with the connection, and says why", async () => {
    const { db, path } = freshDatabase();
    const failures: string[] = [];
    const checkpointer = startWalCheckpointer(db, join(path, "..", "missing", "gateway.sqlite"), { onFailure: (m) => failures.push(m) });
    expect(await checkpointer.ready).toBe(false);
    expect(autocheckpoint(db)).toBe(WAL_AUTOCHECKPOINT_PAGES);
    expect(failures.length).toBe(1);
    expect(failures[0]).toMatch(/unable to open|no such file|SQLITE_CANTOPEN/i);
    await checkpointer.stop();
  });

  test("an in-memory database has no log to checkpoint: no thread", async () => {
    const db = openDatabase(":memory:");
    open.push({ db });
    const checkpointer = startWalCheckpointer(db, ":memory:");
    expect(await checkpointer.ready).toBe(false);
    await checkpointer.stop();
  });
});
