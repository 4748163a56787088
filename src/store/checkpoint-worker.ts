/**
 * The WAL checkpointer's thread (see wal-checkpointer.ts): its own connection to the database
 * file, a PASSIVE checkpoint every `intervalMs`. PASSIVE copies what no reader still needs and
 * never waits for a lock, so the request thread's writes are not held up by it.
 *
 * PASSIVE alone never shortens the log under steady writes: SQLite starts the log over only when
 * a write begins with every frame already copied, and commits arrive every few dozen µs while a
 * pass (two fsyncs) takes milliseconds. The log then grew by every commit's pages for as long as
 * the load lasted (2.3 GB after 100,000 lone settlements), and with it each commit's system time
 * (56 → 99 µs). So a pass that leaves a long log behind is followed by a second pass and a
 * RESTART: it takes the write lock (waiting at most `RESTART_WAIT_MS` for a commit under way),
 * copies the few frames written during the second pass, and lets the next commit start the log
 * over. Writers meet SQLITE_BUSY
 * for that moment, once a pass at most, and retry on their timer (sqlite-errors.ts).
 */
import { Database } from "bun:sqlite";

declare const self: Worker;

export type CheckpointCommand = { type: "start"; path: string; intervalMs: number } | { type: "stop" };
export type CheckpointReport = { type: "ready" } | { type: "failed"; message: string } | { type: "stopped" };

let db: Database | undefined;
let timer: ReturnType<typeof setInterval> | undefined;

const report = (message: CheckpointReport) => self.postMessage(message);

/** A log of this many frames or more after a pass is started over (4,096: one WAL-index segment). */
export const RESTART_FRAMES = 4_096;
/** How long the restart waits for the writer lock, and then for readers to leave the log, before it gives up until the next pass. */
const RESTART_WAIT_MS = 5;

type CheckpointRow = { busy: number; log: number; checkpointed: number };

function checkpoint(): void {
  if (!db) return;
  try {
    const pass = db.query<CheckpointRow, []>("PRAGMA wal_checkpoint(PASSIVE)").get();
    // `log` is the log's length when the pass began; commits since are behind it, so a long log is
    // started over whether or not the pass copied all it saw. A second pass first copies what came
    // during the first (its fsyncs without the lock), so the restart holds the writers up only for
    // the little that came during the second.
    if (pass && pass.log >= RESTART_FRAMES) {
      db.query("PRAGMA wal_checkpoint(PASSIVE)").get();
      db.query("PRAGMA wal_checkpoint(RESTART)").get();
    }
  } catch (err) {
    // SQLITE_BUSY from another checkpointer (the admin CLI, a second gateway): the next tick retries.
    if (!/busy|locked/i.test(String(err))) {
      stop();
      report({ type: "failed", message: String(err) });
    }
  }
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
      // Only the restart waits for locks, and only briefly: it holds the writers up meanwhile.
      db.exec(`PRAGMA busy_timeout = ${RESTART_WAIT_MS};`);
      timer = setInterval(checkpoint, command.intervalMs);
      report({ type: "ready" });
    } catch (err) {
      stop();
      report({ type: "failed", message: String(err) });
    }
  } else {
    // One last pass, so a clean shutdown leaves little for the next start to replay.
    checkpoint();
    stop();
    report({ type: "stopped" });
  }
};
