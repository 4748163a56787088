import { fstatSync, openSync, readSync, realpathSync, statSync, writeSync } from "node:fs";
import { endianness } from "node:os";

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
function fileIdentityCheck(path: string | undefined, now: () => number, everyMs = 1_000): FileCheck {
  if (!path || path === ":memory:") return Object.assign(() => {}, { logDamaged: false, real: undefined, logBroken: () => {} });
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
  // This connection's log and index, each opened once (see `readers`): a log made anew by a later
  // connection on the same path is that connection's to read.
  const log: LogDescriptors = {};
  /** Damage found in the log's frames by whoever read them (the checkpoint thread): it stays. */
  let broken: string | undefined;
  const damaged = (damage: string) => {
    // Judged at every call from now on, as any failed check: the damage stays until a restart.
    failing = true;
    if (!check.logDamaged) {
      check.logDamaged = true;
      // Any exit closes the connection (Bun closes every database), and the last close checkpoints.
      process.once("exit", () => clearLogIndex(real, log));
    }
    return new LedgerFileGoneError(logDamagedMessage(real, damage));
  };
  const judgeLog = () => {
    const damage = logDamage(real, log);
    if (damage) throw damaged(damage);
  };
  let logJudgedAt = Number.NEGATIVE_INFINITY;
  const check = ((force = false) => {
    if (broken !== undefined) throw damaged(broken);
    const at = now();
    // The log at most every LOG_EVERY_MS (three reads, ~6 µs here, where a syscall costs 1.5–2:
    // before every batch they were 1.4 % of a lone client's stream), so a log cut under the gateway
    // takes at most that long of commits past its hole, which its stop then drops (closeLedger).
    if (force || failing || at < logJudgedAt || at - logJudgedAt >= LOG_EVERY_MS) {
      logJudgedAt = at;
      judgeLog();
    }
    // `force`: every time (a top-up, an account or key written: rare, and not to be lost); else at
    // most once per `everyMs` (a settlement batch), or at every call once a check has failed.
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
  }) as FileCheck;
  check.logDamaged = false;
  check.real = real;
  check.log = log;
  check.logBroken = (damage) => {
    broken ??= damage;
    damaged(damage);
  };
  return check;
}

/** A connection's file check, and what it found of the log. */
export type FileCheck = ((force?: boolean) => void) & {
  /** The log was found cut or overwritten: its frames must not reach the database file (see closeLedger). */
  logDamaged: boolean;
  /** The database file's real path (undefined: in memory). */
  real: string | undefined;
  log?: LogDescriptors;
  /** Damage found in the log's frames elsewhere (the checkpoint thread): every check throws from now on. */
  logBroken: (damage: string) => void;
};

/** Descriptors of one connection's log and its index, opened at first use and never closed (see `readers`). */
export interface LogDescriptors {
  wal?: number;
  shm?: number;
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
  /**
   * The length the header says the file has: its page size (bytes 16–17) times its page count
   * (bytes 28–31), when that count is valid (bytes 92–95 equal to the change counter, bytes
   * 24–27); 0 when it is not or there is no header.
   */
  declaredSize?: number;
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
    if (!header) return { size, header, schemaCookie: 0, declaredSize: 0 };
    const pageSize = head.readUInt16BE(16) === 1 ? 65_536 : head.readUInt16BE(16);
    const counted = head.readUInt32BE(92) === head.readUInt32BE(24);
    return { size, header, schemaCookie: head.readUInt32BE(40), declaredSize: counted ? pageSize * head.readUInt32BE(28) : 0 };
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

const CHECKS = new WeakMap<object, FileCheck>();

/** How often a connection's writes have its log judged (logDamage), at most. */
const LOG_EVERY_MS = 50;

/** The one check of a connection's files, shared by everything that writes through it (the ledger, the account store). */
export function ledgerFiles(db: { filename: string }, now: () => number = Date.now): FileCheck {
  let check = CHECKS.get(db);
  if (!check) CHECKS.set(db, (check = fileIdentityCheck(db.filename, now)));
  return check;
}

/** The fixed start of SQLite's write-ahead log: 0x377f0682 or 0x377f0683 (the checksums' byte order). */
const WAL_MAGIC = [0x377f0682, 0x377f0683];
const WAL_HEADER_BYTES = 32;
const WAL_FRAME_HEADER_BYTES = 24;
/** The wal-index header in `-shm`: two copies of 48 bytes (SQLite writes the second, then the first). */
const INDEX_HEADER_BYTES = 48;
const LITTLE_ENDIAN = endianness() === "LE";

/**
 * How the write-ahead log was damaged under SQLite, or undefined. A log truncated while the
 * gateway runs (`: > ledger.sqlite-wal`, a tool that rewrites it) is not seen by SQLite: it goes
 * on appending past the hole, `/ready` said 200 and paid answers were billed, and the checkpoint
 * thread (or the last connection's close, even at a clean stop) copied the zeros into the database
 * file, which was malformed at the next start (a disk-fault probe, twenty-third session).
 *
 * Read from outside, without locks, so only what holds at every instant of SQLite's own writes is
 * taken as damage: the wal-index header (in `-shm`, native byte order) says how many frames the
 * log holds (`mxFrame`) and which salts they carry; a log that is shorter than those frames, or
 * whose header lost SQLite's magic number while the index counts frames, was cut or overwritten.
 * A snapshot is only trusted when the index header's two copies agree and did not change while
 * the log was read, and the log's salts are the index's (a log being started over, whose new
 * header is written and which `journal_size_limit` may cut back before the index says so, is not
 * judged).
 */
export function logDamage(real: string, log: LogDescriptors = {}): string | undefined {
  const shm = (log.shm ??= descriptor(`${real}-shm`, "r+"));
  const wal = (log.wal ??= descriptor(`${real}-wal`, "r"));
  if (shm === undefined || wal === undefined) return undefined;
  try {
    const index = INDEX;
    if (readSync(shm, index, 0, index.length, 0) !== index.length) return undefined;
    // Copies that differ: a writer is between them. isInit (byte 12) 0: no index yet.
    if (index.compare(index, INDEX_HEADER_BYTES, 2 * INDEX_HEADER_BYTES, 0, INDEX_HEADER_BYTES) !== 0 || index[12] === 0) return undefined;
    const mxFrame = LITTLE_ENDIAN ? index.readUInt32LE(16) : index.readUInt32BE(16);
    if (mxFrame === 0) return undefined;
    const head = HEAD;
    const read = readSync(wal, head, 0, WAL_HEADER_BYTES, 0);
    const size = fstatSync(wal).size;
    const damage = judged(index, mxFrame, head, read, size);
    // Only what held while the index stood still is damage (a commit may have moved both meanwhile).
    if (damage === undefined) return undefined;
    const again = Buffer.alloc(INDEX_HEADER_BYTES);
    if (readSync(shm, again, 0, INDEX_HEADER_BYTES, 0) !== INDEX_HEADER_BYTES || again.compare(index, 0, INDEX_HEADER_BYTES) !== 0) return undefined;
    return damage;
  } catch {
    return undefined;
  }
}

/** Read buffers of the check, reused: it runs before every settlement batch (a few µs). */
const INDEX = Buffer.alloc(2 * INDEX_HEADER_BYTES);
const HEAD = Buffer.alloc(WAL_HEADER_BYTES);

/** What a log of `size` bytes starting with `head` says against its index's header, read at one instant. */
function judged(index: Buffer, mxFrame: number, head: Buffer, read: number, size: number): string | undefined {
  const pageField = LITTLE_ENDIAN ? index.readUInt16LE(14) : index.readUInt16BE(14);
  const pageSize = pageField === 1 ? 65_536 : pageField;
  const needed = WAL_HEADER_BYTES + mxFrame * (WAL_FRAME_HEADER_BYTES + pageSize);
  if (read < WAL_HEADER_BYTES) return `cut to ${size} bytes (its index counts ${mxFrame} frames, ${needed} bytes)`;
  const magic = head.readUInt32BE(0);
  if (magic !== WAL_MAGIC[0] && magic !== WAL_MAGIC[1]) return `cut or overwritten (its header is gone; ${size} bytes)`;
  // Another log's salts: it is being started over (or was replaced: the identity check says so).
  if (head.compare(index, 32, 40, 16, 24) !== 0) return undefined;
  if (size < needed) return `cut to ${size} bytes (its index counts ${mxFrame} frames, ${needed} bytes)`;
  return undefined;
}

/**
 * What a connection remembers of one log's frames it found sound (`logFramesDamage`): the log's
 * salts (which change each time SQLite starts it over), how many frames from its start were
 * checked, and SQLite's running checksum after the last of them.
 */
export interface FrameProof {
  salts?: string;
  frames: number;
  s1: number;
  s2: number;
}

export const freshFrameProof = (): FrameProof => ({ frames: 0, s1: 0, s2: 0 });

/**
 * Whether the frames the log's index counts are the frames SQLite wrote: each frame carries the
 * log's salts and a checksum chained from the log's header through every frame before it, which
 * SQLite checks only when it rebuilds the index (a start after a crash), never when it reads a
 * page or checkpoints. A log overwritten in place past its header (`dd conv=notrunc`, a tool that
 * rewrites it, a bad block) keeps its magic, salts and length, so `logDamage` sees nothing, and the
 * checkpoint thread, or the last close at a clean stop, copied the garbage into the ledger file:
 * malformed, and the next start served paid requests on it (a disk-fault probe, twenty-fourth
 * session). Checked where pages are copied: before each checkpoint pass (from `proof` on: each
 * frame is read and summed once per log) and before the last close (from the start).
 *
 * `{ damage }` names what is wrong; `{ unsure: true }` when the log moved under the read (started
 * over: its frames are being rewritten) and nothing may be concluded, so nothing should be copied
 * now either; `{}` when every counted frame is sound. Read without locks, so a damage is only
 * reported when the index did not change while the frames were read.
 */
export function logFramesDamage(real: string, log: LogDescriptors, proof: FrameProof): { damage?: string; unsure?: true } {
  const shm = (log.shm ??= descriptor(`${real}-shm`, "r+"));
  const wal = (log.wal ??= descriptor(`${real}-wal`, "r"));
  if (shm === undefined || wal === undefined) return {};
  try {
    const index = Buffer.alloc(2 * INDEX_HEADER_BYTES);
    if (readSync(shm, index, 0, index.length, 0) !== index.length) return { unsure: true };
    if (index.compare(index, INDEX_HEADER_BYTES, 2 * INDEX_HEADER_BYTES, 0, INDEX_HEADER_BYTES) !== 0) return { unsure: true };
    if (index[12] === 0) return {};
    const mxFrame = LITTLE_ENDIAN ? index.readUInt32LE(16) : index.readUInt32BE(16);
    if (mxFrame === 0) return {};
    const pageField = LITTLE_ENDIAN ? index.readUInt16LE(14) : index.readUInt16BE(14);
    const pageSize = pageField === 1 ? 65_536 : pageField;
    const head = Buffer.alloc(WAL_HEADER_BYTES);
    if (readSync(wal, head, 0, WAL_HEADER_BYTES, 0) < WAL_HEADER_BYTES) return { unsure: true };
    const magic = head.readUInt32BE(0);
    // A header that is not SQLite's, or another log's: logDamage judges it, or the log is starting over.
    if ((magic !== WAL_MAGIC[0] && magic !== WAL_MAGIC[1]) || head.compare(index, 32, 40, 16, 24) !== 0) return { unsure: true };
    const bigEndian = (magic & 1) === 1;
    const salts = head.toString("hex", 16, 24);
    let damage: string | undefined;
    let sum = checksum(bigEndian, head, 0, 24, 0, 0);
    if (sum[0] !== head.readUInt32BE(24) || sum[1] !== head.readUInt32BE(28)) damage = "overwritten (its header's checksum is wrong)";
    let { frames, s1, s2 } = proof.salts === salts && proof.frames <= mxFrame ? proof : { frames: 0, s1: sum[0], s2: sum[1] };
    const frameBytes = WAL_FRAME_HEADER_BYTES + pageSize;
    // Read FRAMES_A_READ frames at a time (one read each was most of the cost), into memory of its
    // own so its words line up (checksum reads them as 32-bit words where it can).
    const chunk = Buffer.from(new ArrayBuffer(frameBytes * Math.max(1, Math.min(FRAMES_A_READ, mxFrame - frames))));
    while (damage === undefined && frames < mxFrame) {
      const want = Math.min(FRAMES_A_READ, mxFrame - frames, chunk.length / frameBytes);
      const whole = Math.floor(readSync(wal, chunk, 0, want * frameBytes, WAL_HEADER_BYTES + frames * frameBytes) / frameBytes);
      for (let k = 0; k < whole; k++) {
        const at = k * frameBytes;
        sum = checksum(bigEndian, chunk, at, at + 8, s1, s2);
        sum = checksum(bigEndian, chunk, at + WAL_FRAME_HEADER_BYTES, at + frameBytes, sum[0], sum[1]);
        if (chunk.readUInt32BE(at) === 0 || chunk.compare(head, 16, 24, at + 8, at + 16) !== 0 || sum[0] !== chunk.readUInt32BE(at + 16) || sum[1] !== chunk.readUInt32BE(at + 20)) {
          damage = `overwritten (frame ${frames + 1} of the ${mxFrame} its index counts is not the one SQLite wrote)`;
          break;
        }
        frames++;
        s1 = sum[0];
        s2 = sum[1];
      }
      if (damage === undefined && whole < want) damage = `cut inside frame ${frames + 1} of the ${mxFrame} its index counts`;
    }
    if (damage === undefined) {
      Object.assign(proof, { salts, frames, s1, s2 });
      return {};
    }
    // Only what held while the index stood still: a log started over meanwhile rewrites its frames.
    const again = Buffer.alloc(INDEX_HEADER_BYTES);
    Object.assign(proof, freshFrameProof());
    if (readSync(shm, again, 0, INDEX_HEADER_BYTES, 0) !== INDEX_HEADER_BYTES || again.compare(index, 0, INDEX_HEADER_BYTES) !== 0) return { unsure: true };
    return { damage };
  } catch {
    return { unsure: true };
  }
}

const SUM: [number, number] = [0, 0];
/** Frames logFramesDamage reads at once (about 264 KB of 4 KB pages). */
const FRAMES_A_READ = 64;

/**
 * SQLite's log checksum (wal.c, walChecksumBytes) of `buf[from, to)`, chained from `s1`, `s2`. In
 * 32-bit integer arithmetic (`| 0`: the same bits as SQLite's unsigned sums; `>>> 0` made every sum
 * a double and the loop 6× slower), returned unsigned.
 */
function checksum(bigEndian: boolean, buf: Buffer, from: number, to: number, s1: number, s2: number): [number, number] {
  s1 |= 0;
  s2 |= 0;
  if (bigEndian) {
    for (let i = from; i < to; i += 8) {
      s1 = (s1 + buf.readInt32BE(i) + s2) | 0;
      s2 = (s2 + buf.readInt32BE(i + 4) + s1) | 0;
    }
  } else if (LITTLE_ENDIAN && (buf.byteOffset + from) % 4 === 0) {
    // The usual case (a log written on this machine): the words as they lie.
    const words = new Int32Array(buf.buffer, buf.byteOffset + from, (to - from) >>> 2);
    for (let i = 0; i < words.length; i += 2) {
      s1 = (s1 + words[i]! + s2) | 0;
      s2 = (s2 + words[i + 1]! + s1) | 0;
    }
  } else {
    for (let i = from; i < to; i += 8) {
      s1 = (s1 + buf.readInt32LE(i) + s2) | 0;
      s2 = (s2 + buf.readInt32LE(i + 4) + s1) | 0;
    }
  }
  SUM[0] = s1 >>> 0;
  SUM[1] = s2 >>> 0;
  return SUM;
}

function logDamagedMessage(real: string, damage: string): string {
  return `the ledger's write-ahead log ${real}-wal was ${damage} while the gateway had it open: commits since the last checkpoint are lost. `
    + "The gateway copies nothing of it into the ledger; restart it (settlements not written are kept in the spill file)";
}

/**
 * Closes the gateway's connection to the ledger. The last connection to close copies the log into
 * the database file: a damaged log (logDamage) would copy its holes, so the wal-index's header is
 * cleared first and SQLite, finding no index, rebuilds it from the log, whose header no longer
 * matches any frame: nothing is copied, and the file keeps its last checkpoint.
 */
export function closeLedger(db: { filename: string; close(): void }): void {
  const check = CHECKS.get(db);
  const real = check?.real;
  if (real && (check.logDamaged || logDamage(real, check.log) !== undefined || logFramesDamage(real, check.log ?? {}, freshFrameProof()).damage !== undefined)) clearLogIndex(real, check.log);
  db.close();
}

/** Both copies of the wal-index header cleared: the next reader of the log rebuilds the index from it. */
function clearLogIndex(real: string, log: LogDescriptors = {}): void {
  const shm = (log.shm ??= descriptor(`${real}-shm`, "r+"));
  try {
    if (shm !== undefined) writeSync(shm, Buffer.alloc(2 * INDEX_HEADER_BYTES), 0, 2 * INDEX_HEADER_BYTES, 0);
  } catch {}
}

/**
 * A descriptor of `file`, never closed (see `readers`), or undefined while it cannot be opened (a
 * log not made yet). The caller keeps it: a file replaced meanwhile is the identity check's to find.
 */
function descriptor(file: string, flags: "r" | "r+"): number | undefined {
  try {
    return openSync(file, flags);
  } catch {
    return undefined;
  }
}

function identity(file: string): string | undefined {
  try {
    const s = statSync(file);
    return `${s.dev}:${s.ino}`;
  } catch {
    return undefined;
  }
}
