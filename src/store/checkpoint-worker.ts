/**
 * The WAL checkpointer's thread (see wal-checkpointer.ts): its own connection to the database
 * file, a PASSIVE checkpoint every `intervalMs`. PASSIVE copies what no reader still needs and
 * never waits for a lock, so the request thread's writes are not held up by it.
 *
 * PASSIVE alone never shortens the log under steady writes: SQLite starts the log over only when
 * a write begins with every frame already copied, and commits arrive every few dozen µs while a
 * pass (two fsyncs) takes milliseconds. The log then grew by every commit's pages for as long as
 * the load lasted (2.3 GB after 100,000 lone settlements), and with it each commit's system time
 * (56 → 99 µs). So once the log passes `restartLogBytes` (32 MB), a pass is followed by a second
 * one and a RESTART: it takes the write lock (waiting at most `RESTART_WAIT_MS` for a commit under
 * way), copies the little written during the second pass, and lets the next commit start the log
 * over. What that costs the writers, and how it is kept small:
 * - they meet SQLITE_BUSY while the restart copies and syncs that little (1–1.7 ms here), and
 *   retry on their timers (sqlite-errors.ts, the settlement queue);
 * - the restart syncs while holding the lock, so it is skipped when the second pass, which synced
 *   more, took longer than `SLOW_PASS_MS`: on a slow disk the log grows instead, as it used to;
 * - a restart that cannot finish (a reader holding an old snapshot: an export, the admin CLI) is
 *   tried again only after 1, 2, 4 … up to 64 passes, so a long reader does not cost every pass;
 * - the first commit after a restart syncs the log's new header (SQLite's rule in WAL mode), on
 *   the request thread: one fsync every 32 MB of log, where the log used to restart only in a lull.
 */
import { Database } from "bun:sqlite";
import { realpathSync } from "node:fs";
import { dbFileShape, freshFrameProof, logDamage, logFramesDamage, overwrittenMessage, shapeChange, type DbFileShape, type LogDescriptors } from "./sqlite/file-identity.ts";

declare const self: Worker;

export type CheckpointCommand = { type: "start"; path: string; intervalMs: number; restartLogBytes?: number; slowPassMs?: number } | { type: "stop" };
/** `code`: the store's error code (`SQLITE_IOERR_FSYNC`…), when the failure has one. */
export type CheckpointReport = { type: "ready" } | { type: "failed"; message: string; code?: string; log?: string } | { type: "stopped" };

const codeOf = (err: unknown): string | undefined => {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
};

let db: Database | undefined;
let dbPath = "";
/** Where SQLite keeps the log: beside the file a symlink points to. */
let realPath = "";
/** This thread's descriptors of the log and its index (sqlite/file-identity.ts). */
let log: LogDescriptors = {};
/** Passes in a row that found the log moving under their read, and the most skipped for it. */
let unsurePasses = 0;
const MAX_UNSURE_PASSES = 3;
/** The log's frames this thread found sound already (each is read and summed once). */
let proof = freshFrameProof();
/** The database file as the last pass left it (sqlite/file-identity.ts, dbFileShape). */
let shape: DbFileShape | undefined;
let timer: ReturnType<typeof setInterval> | undefined;

const report = (message: CheckpointReport) => self.postMessage(message);

/** The log's size past which it is started over (32 MB: 2 s of lone settlements at 2,800 a second). */
const RESTART_LOG_BYTES = 32 * 1024 * 1024;
/** How long the restart waits for the writer lock, and then for readers to leave the log, before it gives up until later. */
const RESTART_WAIT_MS = 5;
/** A second pass slower than this (its fsyncs) says the disk is slow: the restart, which syncs under the lock, waits. */
const SLOW_PASS_MS = 20;
/** The most passes let go by after a restart that could not finish or a slow pass. */
const MAX_RESTART_BACKOFF = 64;

type CheckpointRow = { busy: number; log: number; checkpointed: number };

let restartLogFrames = Infinity;
let slowPassMs = SLOW_PASS_MS;
/** Passes to let go by before the next restart, and how many the next failure sets. */
let skipRestarts = 0;
let backoff = 1;

function checkpoint(): void {
  if (!db) return;
  // Only checkpoints write the database file. One that was truncated or overwritten in place since
  // the last pass is not written into: the pages copied would make a file that looks whole again
  // (its length and its header back) and is malformed, and the gateway's own check would miss it.
  if (!shapeKept()) return;
  if (!logSound()) return;
  try {
    const pass = db.query<CheckpointRow, []>("PRAGMA wal_checkpoint(PASSIVE)").get();
    if (!shapeKept(true)) return;
    // `log` is the log's length when the pass began; commits since are behind it, so a long log is
    // started over whether or not the pass copied all it saw.
    if (!pass || pass.log < restartLogFrames) return;
    if (skipRestarts > 0) {
      skipRestarts--;
      return;
    }
    // The frames committed since the first pass are read before the second copies them.
    if (!logSound()) return;
    const started = performance.now();
    db.query("PRAGMA wal_checkpoint(PASSIVE)").get();
    const slow = performance.now() - started > slowPassMs;
    const restart = slow ? undefined : db.query<CheckpointRow, []>("PRAGMA wal_checkpoint(RESTART)").get();
    if (!shapeKept(true)) return;
    // Skipped (undefined) or unfinished (busy): the next restart waits longer.
    if (restart?.busy !== 0) {
      skipRestarts = backoff;
      backoff = Math.min(backoff * 2, MAX_RESTART_BACKOFF);
    } else backoff = 1;
  } catch (err) {
    if (!shapeKept(true)) return;
    // A log cut while the pass read it fails the pass (SQLITE_IOERR_SHORT_READ): said as the damage
    // it is, so the connection marks the log and copies none of it at its close (logSound), not as a
    // bare I/O error, which left it unmarked (a unit test, one run in two on a loaded machine).
    // Only that: a log merely moving under the check ("unsure") must not swallow the pass's own
    // error (a failed fsync is reported once by the kernel; a review).
    if (!logSound() && db === undefined) return;
    // SQLITE_BUSY from another checkpointer (the admin CLI, a second gateway): the next tick retries.
    if (!/busy|locked/i.test(String(err))) {
      stop();
      report({ type: "failed", message: String(err), code: codeOf(err) });
    }
  }
}

/**
 * Whether the file still has the shape the last pass left, then the shape now kept for the next
 * check; a change SQLite never makes (sqlite/file-identity.ts, shapeChange) stops the thread and is
 * reported. Checked after every pass too (`afterPass`): a file cut while a pass was copying had the
 * pass's pages written past the cut, and that shape, taken as the next check's baseline, hid the
 * cut, so the passes after it went on writing into the file (the file back to 60 KB seconds after
 * `: > file` while paid requests already had their 503; process/ledger-overwritten.test.ts, once in
 * a CI run, whose wait for the file's growth made a cut during a pass likely). A pass writes page 1
 * first (pages in order), so a cut during it leaves the header gone. A pass may shrink the file
 * itself: the one that copies the last frames of another connection's VACUUM truncates it to the
 * new page count (its header, with the cookie moved on, came in an earlier pass; a review's test),
 * and then the file is as long as its header says; a file cut before a pass that rewrote page 1
 * is shorter than that.
 */
function shapeKept(afterPass = false): boolean {
  const found = dbFileShape(dbPath);
  let changed = shape && found ? shapeChange(shape, found) : undefined;
  if (changed && afterPass && found!.header && found!.size === found!.declaredSize) changed = undefined;
  if (changed) {
    stop();
    report({ type: "failed", message: overwrittenMessage(dbPath, changed), code: "SWITCHYARD_LEDGER_FILE_GONE" });
    return false;
  }
  shape = found ?? shape;
  return true;
}

/**
 * Whether the log may be copied now. Not a log that was cut or overwritten: its holes would become
 * pages of zeros, and frames overwritten past its header pages of garbage (sqlite/file-identity.ts,
 * logDamage and logFramesDamage). Damage stops the thread and is reported (`log`: the gateway's
 * connection then copies nothing of it either); a log moving under the read waits for the next pass.
 */
function logSound(): boolean {
  const cut = logDamage(realPath, log);
  const frames = cut === undefined ? logFramesDamage(realPath, log, proof) : {};
  const damage = cut ?? frames.damage;
  if (damage) {
    stop();
    report({ type: "failed", message: `the ledger's write-ahead log ${realPath}-wal was ${damage}: nothing of it is copied into the ledger`, code: "SWITCHYARD_LEDGER_FILE_GONE", log: damage });
    return false;
  }
  // Moving under the read (started over): the next pass, unless it keeps moving at every pass.
  if (!frames.unsure) unsurePasses = 0;
  else if (unsurePasses++ < MAX_UNSURE_PASSES) return false;
  return true;
}

function stop(): void {
  if (timer) clearInterval(timer);
  timer = undefined;
  try {
    db?.close();
  } catch {}
  db = undefined;
}

self.onmessage = (event: MessageEvent<CheckpointCommand>) => {
  const command = event.data;
  if (command.type === "start") {
    try {
      // Never create: a file that is not there is a wrong path, not a database to start.
      db = new Database(command.path, { readwrite: true, create: false });
      dbPath = command.path;
      realPath = realpathSync(dbPath);
      log = {};
      proof = freshFrameProof();
      shape = dbFileShape(dbPath);
      // Only the restart waits for locks, and only briefly: it holds the writers up meanwhile.
      db.exec(`PRAGMA busy_timeout = ${RESTART_WAIT_MS};`);
      const pageSize = db.query<{ page_size: number }, []>("PRAGMA page_size").get()?.page_size ?? 4096;
      restartLogFrames = Math.max(1, Math.ceil((command.restartLogBytes ?? RESTART_LOG_BYTES) / pageSize));
      slowPassMs = command.slowPassMs ?? SLOW_PASS_MS;
      timer = setInterval(checkpoint, command.intervalMs);
      report({ type: "ready" });
    } catch (err) {
      stop();
      report({ type: "failed", message: String(err), code: codeOf(err) });
    }
  } else {
    // One last pass, so a clean shutdown leaves little for the next start to replay.
    checkpoint();
    stop();
    report({ type: "stopped" });
  }
};
