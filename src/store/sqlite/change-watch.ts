import type { Database } from "bun:sqlite";

/** How stale an in-memory copy of the database may be after another process commits. */
export const CHANGE_CHECK_MS = 1;

/**
 * Notices commits made through other connections to the same file (the admin CLI, a second
 * gateway): SQLite's `data_version` moves when they commit, never for our own writes. Reading it
 * is a statement, and under load every statement costs a few microseconds, so it is read at most
 * once per CHANGE_CHECK_MS and the requests in between share the answer: a key revoked or an
 * account topped up from the CLI is seen within a millisecond of its commit.
 */
export function createChangeWatch(db: Database, intervalMs = CHANGE_CHECK_MS) {
  const dataVersion = db.query<{ data_version: number }, []>("PRAGMA data_version");
  let version = dataVersion.get()!.data_version;
  let checkedAt = performance.now();
  const listeners: (() => void)[] = [];

  return {
    /** `fn` runs when another connection's commit is noticed: drop what was copied from disk. */
    onChange(fn: () => void): void {
      listeners.push(fn);
    },
    /**
     * This connection changed rows that copies were made of (an admin API write of a key's or an
     * account's limits): `data_version` does not move for our own commits, so say it.
     */
    notify(): void {
      for (const fn of listeners) fn();
    },
    sync(): void {
      const at = performance.now();
      if (at - checkedAt < intervalMs) return;
      checkedAt = at;
      const current = dataVersion.get()!.data_version;
      if (current === version) return;
      version = current;
      for (const fn of listeners) fn();
    },
  };
}

export type ChangeWatch = ReturnType<typeof createChangeWatch>;
