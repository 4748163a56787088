import { realpathSync, statSync } from "node:fs";

/**
 * Whether the files a connection writes are still the ones at their paths. A ledger deleted (or
 * replaced by a restore) while the gateway runs keeps taking commits into the open, unlinked
 * inode: paid answers were billed into a file nobody will read again, `/ready` said 200, and after
 * the next start every key was unknown (a disk-fault probe, 2026-11-30). The check throws a
 * storage failure instead, so the store is marked failing (paid requests paused, `/ready` 503,
 * settlements kept in memory and, at shutdown, in the spill file) until the process is restarted
 * on a ledger that is there. The database file, its write-ahead log and its shared-memory index
 * are compared by device and inode, at most once per `everyMs`; a failed check is repeated at
 * every write until it passes.
 */
function fileIdentityCheck(path: string | undefined, now: () => number, everyMs = 1_000): (force?: boolean) => void {
  if (!path || path === ":memory:") return () => {};
  // SQLite writes its log beside the file a symlink points to, not beside the link.
  let real = path;
  try {
    real = realpathSync(path);
  } catch {}
  // And its shared-memory index: deleted while the gateway runs, the next connection (the admin
  // CLI) makes a new one, whose locks and index the gateway's never meet: its commits were reported
  // done and then overwritten by the gateway's (a kill -9 and disk-fault probe: a revoked key kept
  // answering, five top-ups were lost). Gone or replaced, it is a storage failure as the others are.
  const files = [real, `${real}-wal`, `${real}-shm`];
  /** Each file's identity once seen; the log is made at the first write, so it may be learnt later. */
  const seen: (string | undefined)[] = files.map(identity);
  let checkedAt = now();
  let failing = false;
  // `force`: every time (a top-up, an account or key written: rare, and not to be lost); else at
  // most once per `everyMs` (a settlement batch), or at every call once a check has failed.
  return (force = false) => {
    const at = now();
    if (!force && !failing && at >= checkedAt && at - checkedAt < everyMs) return;
    checkedAt = at;
    for (let i = 0; i < files.length; i++) {
      const current = identity(files[i]!);
      if (seen[i] === undefined) {
        seen[i] = current;
        continue;
      }
      if (current !== seen[i]) {
        failing = true;
        throw new LedgerFileGoneError(`the ledger file ${files[i]} was ${current === undefined ? "deleted" : "replaced"} while the gateway had it open: restart the gateway on the ledger`);
      }
    }
    failing = false;
  };
}

export class LedgerFileGoneError extends Error {
  readonly code = "SWITCHYARD_LEDGER_FILE_GONE";
  /** What the HTTP surfaces answer a write refused for it (http/plugins/errors.ts): the store is failing. */
  readonly status = 503;
}

const CHECKS = new WeakMap<object, (force?: boolean) => void>();

/** The one check of a connection's files, shared by everything that writes through it (the ledger, the account store). */
export function ledgerFiles(db: { filename: string }, now: () => number = Date.now): (force?: boolean) => void {
  let check = CHECKS.get(db);
  if (!check) CHECKS.set(db, (check = fileIdentityCheck(db.filename, now)));
  return check;
}

function identity(file: string): string | undefined {
  try {
    const s = statSync(file);
    return `${s.dev}:${s.ino}`;
  } catch {
    return undefined;
  }
}
