import type { WriteFailure } from "../../billing/settlement-queue.ts";

/**
 * What a failed SQLite write means for the data it carried (billing/settlement-queue.ts):
 * - `busy`: another connection holds the write lock (the admin CLI, a checkpoint); the same
 *   write will succeed later, and the gateway's connection never waits for it synchronously
 *   (busy_timeout = 0), it retries on a timer instead.
 * - `storage`: the store cannot take writes now (disk full, read-only file, I/O error, file
 *   gone); the write is kept and retried until the store recovers.
 * - `data`: this write can never succeed as it is (a constraint, a bad value); retrying the
 *   same batch would block every record behind it, so the batch is split to find the one.
 */

const BUSY = new Set(["SQLITE_BUSY", "SQLITE_LOCKED"]);
const STORAGE_PREFIXES = ["SQLITE_FULL", "SQLITE_IOERR", "SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_PROTOCOL", "SQLITE_NOMEM", "SQLITE_PERM", "SQLITE_NOLFS", "SQLITE_BUSY_"];

export function classifyWriteFailure(err: unknown): WriteFailure {
  const code = typeof (err as { code?: unknown })?.code === "string" ? (err as { code: string }).code : "";
  if (BUSY.has(code) || code.startsWith("SQLITE_LOCKED")) return "busy";
  if (STORAGE_PREFIXES.some((prefix) => code.startsWith(prefix))) return "storage";
  // A closed database or an unexpected failure of the driver: nothing in the data says it is
  // the batch's fault, so keep it and retry rather than split it and drop a record.
  if (!code.startsWith("SQLITE_")) return err instanceof RangeError || err instanceof TypeError ? "data" : "storage";
  return code.startsWith("SQLITE_CONSTRAINT") || code === "SQLITE_MISMATCH" || code === "SQLITE_TOOBIG" || code === "SQLITE_RANGE" ? "data" : "storage";
}

/**
 * Whether a SQLite error says the file cannot be written now (full, read-only, I/O, locked past
 * the wait): an admin or console write it stops is answered 503 with Retry-After, as PostgreSQL's
 * are, not 500 (a disk-fault probe).
 */
export function isSqliteUnavailable(err: unknown): boolean {
  const code = typeof (err as { code?: unknown })?.code === "string" ? (err as { code: string }).code : "";
  // Only what passes: a plain SQLITE_ERROR (a syntax error, a table missing) is a bug, and a 503
  // "retry in a few seconds" would have clients retry it forever (a reviewer's finding).
  return UNAVAILABLE_PREFIXES.some((prefix) => code.startsWith(prefix));
}

const UNAVAILABLE_PREFIXES = ["SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_FULL", "SQLITE_IOERR", "SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_NOLFS", "SQLITE_NOMEM"];

export function describeWriteFailure(err: unknown): string {
  const code = (err as { code?: unknown })?.code;
  const message = err instanceof Error ? err.message : String(err);
  return typeof code === "string" ? `${code}: ${message}` : message;
}

/**
 * Runs a write on a connection that never waits for locks, retrying on a timer while another
 * connection holds the write lock. For the rare writes outside the settlement queue (accounts,
 * keys, top-ups from the admin API); gives up after `deadlineMs`.
 */
export async function retryWhileBusy<T>(write: () => T, deadlineMs = 5_000): Promise<T> {
  const started = performance.now();
  for (let delay = 1; ; delay = Math.min(delay * 2, 50)) {
    try {
      return write();
    } catch (err) {
      if (classifyWriteFailure(err) !== "busy" || performance.now() - started + delay > deadlineMs) throw err;
    }
    await Bun.sleep(delay);
  }
}
