import { Database } from "bun:sqlite";
import { statSync } from "node:fs";

/** The table that makes a lock file a database (once, at its first lock). */
const HOLDER_TABLE = "CREATE TABLE IF NOT EXISTS holder (pid INTEGER, started_at INTEGER);";

/** An operating-system lock on one file, held until `release()` or the end of the process. */
export interface FileLock {
  path: string;
  release(): void;
}

/**
 * An exclusive lock on `path` (made if missing), or undefined when another holder has it. Taken
 * through SQLite in exclusive locking mode, an exclusive transaction held open: a POSIX record
 * lock the kernel drops when the process ends, however it ends (kill -9 included), so there is
 * no stale lock to clean up and no pid or heartbeat to trust; two connections of one process
 * exclude each other too (SQLite tracks its own locks per file). Nothing is written once the file
 * is a database (its first lock makes the table), so a full disk does not refuse it.
 *
 * The one rule of POSIX locks: a process that opens and closes a file it holds such a lock on, by
 * any other means, loses the lock. So a lock file is only ever opened here (or made, empty, before
 * anyone can hold it); otherwise it is only looked at (stat) and removed.
 */
export function tryLockFile(path: string): FileLock | undefined {
  let lock: Database | undefined;
  try {
    if (sizeOf(path) === 0) {
      // A new file is made a database first, on a connection of its own: made under the held lock,
      // its journal would stay beside it as long as the lock (and after a kill -9).
      const made = new Database(path, { create: true });
      try {
        made.exec(`PRAGMA busy_timeout = 0; ${HOLDER_TABLE}`);
      } finally {
        made.close();
      }
    }
    lock = new Database(path, { create: true });
    lock.exec("PRAGMA busy_timeout = 0; PRAGMA locking_mode = EXCLUSIVE;");
    lock.exec(`${HOLDER_TABLE} BEGIN EXCLUSIVE;`);
  } catch (err) {
    lock?.close();
    const code = (err as { code?: string }).code;
    if (code === "SQLITE_BUSY" || code === "SQLITE_LOCKED") return undefined;
    throw err;
  }
  return {
    path,
    release() {
      lock?.close();
      lock = undefined;
    },
  };
}

/** The file's size; 0 when there is none yet. */
function sizeOf(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}
