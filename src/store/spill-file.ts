import { closeSync, existsSync, fsyncSync, ftruncateSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, statfsSync, statSync, unlinkSync, writeSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import type { Settlement } from "../billing/ledger.ts";
import type { Logger } from "../log/log.ts";

/**
 * The spill file: settlements a ledger could not write before its process stopped (the store
 * failing through the whole grace at close), kept on disk so the next start writes them instead
 * of leaving them to a log line (docs/decisions.md, "Settlements at shutdown"). One JSON line per
 * settlement, with what its request held (the most it may charge) and a refused charge.
 */
export interface Spilled {
  settlement: Settlement;
  held: number;
  charge?: false;
}

/**
 * A spill file holds settlements of accounts the ledger does not have: the ledger is not the one
 * the file was written for (its file lost and made anew, a database recreated). Replaying would
 * post charges to no balance and delete their only copy, so the start stops instead.
 */
export class SpillMismatchError extends Error {
  constructor(path: string, settlements: number, accounts: string[]) {
    super(
      `the spill file ${path} holds ${settlements} settlements of ${accounts.length} account${accounts.length === 1 ? "" : "s"} this ledger does not have (${accounts.slice(0, 3).join(", ")}${accounts.length > 3 ? ", …" : ""}): `
        + "was the ledger replaced or lost? Restore it and start again, or move the spill file away to start without those settlements.",
    );
  }
}

/** The accounts of `spilled` that `exists` does not know, each once. */
export function unknownAccounts(spilled: Spilled[], exists: (accountId: string) => boolean): string[] {
  const missing = new Set<string>();
  for (const s of spilled) if (!missing.has(s.settlement.accountId) && !exists(s.settlement.accountId)) missing.add(s.settlement.accountId);
  return [...missing];
}

/**
 * Writes the file whole (a temporary file, fsynced, renamed over the old one): it then holds
 * exactly what is still unwritten, including anything replayed from it that is still queued.
 */
export function keepInSpill(path: string, spilled: Spilled[]): void {
  try {
    writeSpill(path, spilled);
  } catch (err) {
    // The disk is full: the room reserved at start (reserveSpillRoom) is given up for the spill,
    // which is then written into it. A completely full disk had taken no spill at all, and every
    // settlement queued went to the log only (a kill -9 and disk-fault probe).
    if (!isNoRoom(err) || !existsSync(reserveOf(path))) throw err;
    const held = statSync(reserveOf(path)).size;
    unlinkSync(reserveOf(path));
    const bytes = writeSpill(path, spilled);
    // What the spill did not take is held again at once, before anyone else can: a spill while
    // the process runs (the store failing) must not hand the room to the database that filled
    // the disk, and the spill at shutdown rewrites the file (a second copy until its rename).
    // As much as the disk has now, in whole blocks (less a block at each try that does not fit).
    let room = held - bytes;
    try {
      const { bavail, bsize } = statfsSync(dirname(path));
      room = Math.min(room, Number(bavail) * Number(bsize));
      for (room -= room % Number(bsize); room > 0; room -= Number(bsize) * 4) {
        try {
          reserveSpillRoom(path, room);
          break;
        } catch {}
      }
    } catch {}
  }
}

/** The file holding room for the spill file on a disk that fills up. */
const reserveOf = (path: string) => `${path}.reserve`;

/** Errors that say the disk (or the process's file-size limit) has no room. */
function isNoRoom(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === "ENOSPC" || code === "EDQUOT" || code === "EFBIG";
}

/**
 * Holds `bytes` of disk for the spill file (written and fsynced now, beside it), given up when a
 * spill finds the disk full. Best effort: a disk without the room now is logged by the caller.
 */
export function reserveSpillRoom(path: string, bytes: number): void {
  const reserve = reserveOf(path);
  if (bytes <= 0) return;
  let has = 0;
  try {
    has = statSync(reserve).size;
  } catch {}
  if (has >= bytes) return;
  if (has === 0) return writeWhole(reserve, Buffer.alloc(bytes));
  // Grown, not written anew: a top-up that finds no room keeps what was held.
  const fd = openSync(reserve, "r+");
  try {
    const more = Buffer.alloc(bytes - has);
    for (let written = 0; written < more.length; ) {
      const n = writeSync(fd, more, written, more.length - written, has + written);
      if (n <= 0) throw new Error(`${reserve} took no more bytes`);
      written += n;
    }
    fsyncSync(fd);
  } catch (err) {
    try {
      ftruncateSync(fd, has);
    } catch {}
    throw err;
  } finally {
    closeSync(fd);
  }
}

/**
 * Temporary files of spills whose process died in the middle of writing them (a kill -9 while
 * the store failed: the spill is rewritten whole at every turn that settles a charge). Never
 * renamed, so never a spill: the file they were to replace still holds what was kept, and what
 * they added was for answers whose last byte had not gone out. Nobody removed them, and each held
 * up to a spill's size on a disk that had just been full. Only the owner of `path` calls this (the
 * SQLite gateway under its lock at start; a PostgreSQL process holding a stopped process's lock),
 * before it writes a spill of its own. Returns how many went.
 */
export function removeSpillTemporaries(path: string): number {
  const folder = dirname(path);
  const stem = `${basename(path)}.`;
  let names: string[];
  try {
    names = readdirSync(folder);
  } catch {
    return 0;
  }
  let removed = 0;
  for (const name of names) {
    if (!name.startsWith(stem) || !/^\d+\.tmp$/.test(name.slice(stem.length))) continue;
    try {
      unlinkSync(join(folder, name));
      removed++;
    } catch {}
  }
  return removed;
}

/** Writes the file whole; returns its size. */
function writeSpill(path: string, spilled: Spilled[]): number {
  const temporary = `${path}.${process.pid}.tmp`;
  const bytes = Buffer.from(spilled.map((s) => JSON.stringify(s)).join("\n") + "\n");
  writeWhole(temporary, bytes);
  renameSync(temporary, path);
  return bytes.length;
}

/**
 * `bytes` in `file`, every one of them and fsynced, or an error and no file. On a nearly full disk a
 * write takes what fits and says how much: one write's count unread had kept a cut spill file whose
 * settlements were reported as kept (a kill -9 and disk-fault probe: 32 paid answers delivered whole
 * had no record after the restart). The write that finds no room throws (ENOSPC); nothing
 * half-written is left to take room or to be mistaken for a spill.
 */
function writeWhole(file: string, bytes: Buffer): void {
  mkdirSync(dirname(file), { recursive: true });
  const fd = openSync(file, "w", 0o600);
  try {
    for (let written = 0; written < bytes.length; ) {
      const n = writeSync(fd, bytes, written, bytes.length - written);
      if (n <= 0) throw new Error(`${file} took no more bytes (${written} of ${bytes.length} written)`);
      written += n;
    }
    fsyncSync(fd);
  } catch (err) {
    try {
      closeSync(fd);
    } catch {}
    try {
      unlinkSync(file);
    } catch {}
    throw err;
  }
  closeSync(fd);
}

/** A spill file's settlements; a line that cannot be read is logged in full, never dropped silently. */
export function readSpill(path: string, log: Logger): Spilled[] {
  if (!existsSync(path)) return [];
  const out: Spilled[] = [];
  for (const line of readFileSync(path, "utf8").split("\n")) {
    if (line.trim() === "") continue;
    try {
      const s = JSON.parse(line) as Spilled;
      if (typeof s?.settlement?.requestId === "string" && Number.isSafeInteger(s.held)) out.push(s);
      else throw new Error("not a spilled settlement");
    } catch (err) {
      log("error", "a line of the spill file cannot be read; apply it by hand", { line: line.slice(0, 2_000), error: String(err) });
    }
  }
  return out;
}

/** The spill files in `dir` whose names start with `prefix` (one per process that stopped with settlements unwritten). */
export function spillFilesIn(dir: string, prefix: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).filter((name) => name.startsWith(prefix) && name.endsWith(".spill")).map((name) => join(dir, name));
}

export function removeSpill(path: string): void {
  try {
    unlinkSync(path);
  } catch {}
}
