import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { tryLockFile, type FileLock } from "../file-lock.ts";

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
 * The lock is an operating-system file lock (store/file-lock.ts) on a file of its own beside the
 * database (`<db>-gateway.lock`): the kernel releases it when the process ends, however it ends
 * (kill -9 included), so there is no stale lock to clean up and no heartbeat to trust. The
 * database itself stays open to the admin CLI.
 */
export function lockDatabaseFile(dbPath: string): FileLock {
  const path = `${dbPath}-gateway.lock`;
  let lock: FileLock | undefined;
  try {
    // Taken before the database is opened (which would make the directory): a first start in an
    // empty directory must not fail on the default ./data/.
    mkdirSync(dirname(path), { recursive: true });
    lock = tryLockFile(path);
  } catch (err) {
    throw new GatewayLockError(`cannot lock ${path}: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (!lock) {
    throw new GatewayLockError(
      `another Switchyard gateway is already running on ${dbPath} (it holds ${path}). ` +
        "The SQLite ledger serves one gateway process per file: stop the other one, give this one its own SWITCHYARD_DB, " +
        "or run several gateways on PostgreSQL.",
      true,
    );
  }
  return lock;
}
