import { closeSync, existsSync, mkdirSync, openSync, readdirSync, statSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import { randomId } from "../ids.ts";
import { tryLockFile, type FileLock } from "../file-lock.ts";
import type { Pg } from "./pg-client.ts";
import { keepInSpill, removeSpill, removeSpillTemporaries, type Spilled } from "../spill-file.ts";

/**
 * PostgreSQL's spill files and who owns them (docs/decisions.md, "Spill files on PostgreSQL").
 * Any number of processes (workers, containers on one volume, restarts) share SWITCHYARD_SPILL_DIR
 * and a database. Each writes its own file, `<dir>/switchyard-<database identity hash>-<owner>.spill`, and
 * holds an operating-system lock on `<that>.lock` (store/file-lock.ts) from its start until it
 * stops: the kernel drops it when the process ends, however it ends. A file is replayed only by
 * a process that takes its lock, so never while its owner lives (its owner writes it again and
 * again while the database is away, and removes it itself once the database has it all).
 *
 * Lock files are removed only by whoever holds them, and only once their spill file is gone. A
 * lock taken is checked to still be the file at its path (the inode it was taken on): a cleaner
 * that removed the file meanwhile leaves the taker holding a lock nobody else can see.
 */
export function spillOwnership(o: {
  dir: string;
  /** The database's identity (`databaseIdentity`): every process of the database names its files alike. */
  database: string;
  instanceId: string;
  /** The database's URL as written, which versions before the identity named files after: theirs are replayed too. */
  formerly?: string;
}) {
  /** `switchyard-<database hash>-`: this database's files (a start replays only its own database's). */
  const prefix = spillPrefix(o.database);
  const prefixes = o.formerly !== undefined && spillPrefix(o.formerly) !== prefix ? [prefix, spillPrefix(o.formerly)] : [prefix];
  const lockOf = (spill: string) => `${spill}.lock`;
  let owner: { spill: string; lock: FileLock } | undefined;
  /** Whether this process let its lock go (the ledger closed): a file taken after that has a name of its own. */
  let released = false;

  /** A lock on `lockPath` that is still the file at that path, or undefined (held by someone, or replaced). */
  function lockIfFree(lockPath: string): FileLock | undefined {
    const before = inodeOf(lockPath);
    if (before === undefined) return undefined;
    const lock = tryLockFile(lockPath);
    if (lock && inodeOf(lockPath) !== before) {
      lock.release();
      return undefined;
    }
    return lock;
  }

  /** Removes a lock file (and the journal SQLite may keep beside it) while holding it, then lets it go. */
  function dropLock(lock: FileLock): void {
    for (const file of [lock.path, `${lock.path}-journal`]) {
      try {
        unlinkSync(file);
      } catch {}
    }
    lock.release();
  }

  /** This process's file, locked before it is first written: a new name each time (after `release`, a late spill takes one). */
  function own(): { spill: string; lock: FileLock } {
    if (owner) return owner;
    mkdirSync(o.dir, { recursive: true });
    for (let attempt = 0; attempt < 3; attempt++) {
      const spill = join(o.dir, `${prefix}${attempt === 0 && !released ? o.instanceId : `${o.instanceId}${randomId("", 4)}`}.spill`);
      // Made here, so the lock is taken on a file nobody else has seen yet (no one else makes this name).
      try {
        closeSync(openSync(lockOf(spill), "wx", 0o600));
      } catch (err) {
        if ((err as { code?: string }).code === "EEXIST") continue;
        throw err;
      }
      const lock = lockIfFree(lockOf(spill));
      if (lock) return (owner = { spill, lock });
    }
    throw new Error(`cannot take a spill file of its own in ${o.dir}`);
  }

  return {
    prefix,
    /** This process's spill file now (undefined before it has one). */
    get path(): string | undefined {
      return owner?.spill;
    },
    /** Takes this process's file (and its lock) now, so a failure says so at the start; throws when it cannot. */
    claim(): void {
      own();
    },
    /** This process's file rewritten to hold `spilled` (fsynced); throws when it cannot be. */
    keep(spilled: Spilled[]): void {
      keepInSpill(own().spill, spilled);
    },
    /** Everything this process kept is written: its file goes (its lock stays: it may spill again). */
    unkeep(): void {
      if (owner) removeSpill(owner.spill);
    },
    /**
     * The ledger is closed: the lock goes, and the lock file with it when nothing was kept. A
     * settlement that still comes (an answer cut at the stop) is kept in a file of a new name.
     */
    release(): void {
      if (!owner) return;
      released = true;
      if (existsSync(owner.spill)) owner.lock.release();
      else dropLock(owner.lock);
      owner = undefined;
    },
    /**
     * Spill files of processes that are gone (their locks taken now, held until `done` or
     * `release`), and lock files left without a spill file by processes that are gone (removed).
     * A file whose owner lives is left to it.
     */
    orphans(): { path: string; done(): void; release(): void }[] {
      if (!existsSync(o.dir)) return [];
      const names = readdirSync(o.dir).filter((name) => prefixes.some((p) => name.startsWith(p)));
      const found: { path: string; done(): void; release(): void }[] = [];
      for (const name of names) {
        const path = join(o.dir, name);
        if (path === owner?.spill || path === (owner && lockOf(owner.spill))) continue;
        if (name.endsWith(".spill")) {
          // A file of an older version has no lock file: made here, nobody holds it.
          try {
            closeSync(openSync(lockOf(path), "wx", 0o600));
          } catch {}
          const lock = lockIfFree(lockOf(path));
          if (!lock) continue;
          // Replayed and removed meanwhile by another process.
          if (!existsSync(path)) {
            lock.release();
            continue;
          }
          // Its owner may have died in the middle of rewriting it: what it was writing is not a spill.
          removeSpillTemporaries(path);
          found.push({
            path,
            done() {
              removeSpill(path);
              dropLock(lock);
            },
            release: () => lock.release(),
          });
        } else if (name.endsWith(".spill.lock") && !existsSync(path.slice(0, -".lock".length))) {
          const lock = lockIfFree(path);
          if (lock && !existsSync(path.slice(0, -".lock".length))) {
            // Killed while writing its first spill: the temporary file goes with the lock.
            removeSpillTemporaries(path.slice(0, -".lock".length));
            dropLock(lock);
          } else lock?.release();
        }
      }
      return found;
    },
  };
}

const spillPrefix = (name: string) => `switchyard-${(Bun.SHA256.hash(name, "hex") as string).slice(0, 12)}-`;

/**
 * The database's identity (made once by its migrations): what spill files are named after. Not
 * the URL, whose text differs between processes of one database (a host name or an address, a
 * password rotated, a pooler in between): a file named after one URL was never replayed by a
 * process started with another (a scale-out probe, twenty-ninth session).
 */
export async function databaseIdentity(sql: Pg): Promise<string> {
  const [row] = await sql`SELECT id FROM database_identity`;
  if (typeof row?.id !== "string") throw new Error("the database has no identity row (database_identity): its migrations did not finish");
  return row.id;
}

function inodeOf(path: string): number | undefined {
  try {
    return statSync(path).ino;
  } catch {
    return undefined;
  }
}

export type SpillOwnership = ReturnType<typeof spillOwnership>;
