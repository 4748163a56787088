import { fstatSync, openSync, readSync, realpathSync, statSync } from "node:fs";

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
  // And the database file's contents, rewritten in place under the same inode (`cp backup.sqlite`
  // over it, a truncation): SQLite never notices, the gateway billed on into a file that was
  // malformed at the next start (a kill -9 and disk-fault probe). See dbFileShape.
  let shape = dbFileShape(real);
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
    const nowShape = dbFileShape(real);
    const changed = shape && nowShape ? shapeChange(shape, nowShape) : undefined;
    if (changed) {
      failing = true;
      throw new LedgerFileGoneError(overwrittenMessage(real, changed));
    }
    shape = nowShape ?? shape;
    failing = false;
  };
}

/**
 * What SQLite's database file looks like from outside: its length and its 100-byte header. SQLite
 * only ever grows the file (the gateway runs no VACUUM, and without auto_vacuum nothing else
 * shrinks it) and never takes its header away; a VACUUM by another connection shrinks it but adds
 * one to the schema cookie. A file that lost its header, or shrank without that, was truncated or
 * overwritten in place by someone else (`cp` of an older copy over it, `: > file`, a tool that
 * truncates), with the inode unchanged: SQLite keeps reading its cache and log and writing
 * checkpoints into it, and the file is malformed at the next start.
 */
export interface DbFileShape {
  size: number;
  /** The file starts with SQLite's header ("SQLite format 3\0"). */
  header: boolean;
  /** Bytes 40–43 of the header: the schema cookie, which a VACUUM moves on. */
  schemaCookie: number;
}

const MAGIC = Buffer.from("SQLite format 3\0", "latin1");

/**
 * One descriptor per file, opened at its first read and never closed. Closing any descriptor of a
 * file drops every POSIX lock the process holds on it, SQLite's own included: its shared lock on
 * the database is how another connection that closes knows the log is still in use, and without
 * it the `sqlite3` shell checkpointed and deleted the gateway's -wal under it (seen while probing
 * this check, which had opened and closed the file each time).
 */
const readers = new Map<string, number>();

/** The file's shape now; undefined when it cannot be read (gone: the identity check says so). */
export function dbFileShape(path: string): DbFileShape | undefined {
  try {
    let fd = readers.get(path);
    let stat = fd === undefined ? undefined : fstatSync(fd);
    // A new file at the path (another ledger made there): read that one. The old descriptor stays
    // open, for the reason above; the identity check is what says the file was replaced.
    if (fd === undefined || stat!.ino !== statSync(path).ino) {
      readers.set(path, (fd = openSync(path, "r")));
      stat = fstatSync(fd);
    }
    const head = Buffer.alloc(100);
    const read = readSync(fd, head, 0, 100, 0);
    const size = stat!.size;
    const header = read === 100 && head.subarray(0, 16).equals(MAGIC);
    return { size, header, schemaCookie: header ? head.readUInt32BE(40) : 0 };
  } catch {
    return undefined;
  }
}

/** How the file changed from `before` in a way SQLite never changes it; undefined when it did not. */
export function shapeChange(before: DbFileShape, after: DbFileShape): string | undefined {
  if (before.header && !after.header) return `truncated or overwritten in place (its SQLite header is gone; ${after.size} bytes left of ${before.size})`;
  if (after.size < before.size && !(after.header && after.schemaCookie > before.schemaCookie)) {
    return `truncated or overwritten in place (it shrank from ${before.size} to ${after.size} bytes)`;
  }
  return undefined;
}

/** The words of the failure a changed shape is (the log, /ready, an admin write's 503). */
export function overwrittenMessage(path: string, change: string): string {
  return `the ledger file ${path} was ${change} while the gateway had it open: commits since the last checkpoint may be lost. `
    + "Stop the gateway, restore the ledger from a backup (without the old -wal and -shm files) and start it again; settlements not written are kept in the spill file";
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
