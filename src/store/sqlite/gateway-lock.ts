import { Database } from "bun:sqlite";
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";

export class GatewayLockError extends Error {
  /** Another process holds the lock (rather than the lock file failing). */
  constructor(message: string, readonly busy = false) {
    super(message);
  }
}

/**
 * One gateway process per SQLite file. The embedded ledger keeps its holds in memory, so a
 * second process on the same file would admit the same credits twice.
 *
 * The lock is an operating-system file lock, taken through SQLite on a file of its own beside
 * the database (`<db>-gateway.lock`) in exclusive locking mode: the kernel releases it when the
 * process ends, however it ends (kill -9 included), so there is no stale lock to clean up and
 * no heartbeat to trust. The database itself stays open to the admin CLI.
 */
export function lockDatabaseFile(dbPath: string): { path: string; release(): void } {
  const path = `${dbPath}-gateway.lock`;
  let lock: Database | undefined;
  try {
    // Taken before the database is opened (which would make the directory): a first start in an
    // empty directory must not fail on the default ./data/.
    mkdirSync(dirname(path), { recursive: true });
    lock = new Database(path, { create: true });
    lock.exec("PRAGMA busy_timeout = 0; PRAGMA locking_mode = EXCLUSIVE;");
    // An exclusive transaction held open for the life of the process takes the lock without
    // writing a byte: a restart on a full disk is not refused for its lock (it wrote a row each
    // start; a disk-fault probe). The kernel drops it with the process, however it ends.
    // The table only makes a new file a database once (its first start); after that nothing is written.
    lock.exec("CREATE TABLE IF NOT EXISTS holder (pid INTEGER, started_at INTEGER); BEGIN EXCLUSIVE;");
  } catch (err) {
    lock?.close();
    const code = (err as { code?: string }).code;
    if (code === "SQLITE_BUSY" || code === "SQLITE_LOCKED") {
      throw new GatewayLockError(
        `another Switchyard gateway is already running on ${dbPath} (it holds ${path}). ` +
          "The SQLite ledger serves one gateway process per file: stop the other one, give this one its own SWITCHYARD_DB, " +
          "or run several gateways on PostgreSQL.",
        true,
      );
    }
    throw new GatewayLockError(`cannot lock ${path}: ${err instanceof Error ? err.message : String(err)}`);
  }
  return {
    path,
    release() {
      lock?.close();
      lock = undefined;
    },
  };
}
