import type { Database } from "bun:sqlite";
import { WAL_AUTOCHECKPOINT_PAGES } from "./database.ts";
import type { CheckpointCommand, CheckpointReport } from "./checkpoint-worker.ts";
import { workerUrl } from "../worker-url.ts";
import { ledgerFiles } from "./sqlite/file-identity.ts";

/**
 * WAL checkpoints on a thread of their own. A checkpoint copies the log into the database file
 * and fsyncs it; SQLite runs it inside whichever commit crosses `wal_autocheckpoint`, and ours
 * commit on the event loop (the ledger's settlement batches), so every few seconds under load
 * one batch took 50–60 ms instead of 3 and every request in flight waited for the disk. With this
 * running, the gateway's connection never checkpoints (`wal_autocheckpoint = 0`) and the thread
 * does, every `intervalMs`. If the thread cannot start or fails, the connection checkpoints
 * again as before (the log never grows unchecked) until another thread, started after a wait
 * (5 s, doubling to 5 minutes), runs them.
 */
const WORKER_URL = workerUrl("store/checkpoint-worker.ts");

export interface WalCheckpointer {
  /** True once the thread runs the checkpoints; false when they stay with the connection. */
  readonly ready: Promise<boolean>;
  /** Ends the thread (after one last checkpoint) and gives checkpoints back to the connection. */
  stop(): Promise<void>;
}

export interface WalCheckpointerOptions {
  intervalMs?: number;
  /** The log's size past which it is started over (checkpoint-worker.ts; tests pass a small one). */
  restartLogBytes?: number;
  /** A second pass slower than this skips the restart (checkpoint-worker.ts; tests pass -1: every disk is slow). */
  slowPassMs?: number;
  /**
   * Told why the thread gave up (the connection checkpoints until another thread runs), with the
   * store's error code when there is one: see `checkpointLostWrites`.
   */
  onFailure?: (message: string, code?: string) => void;
  /**
   * Told when the thread's failure says commits reported done may not be on the disk
   * (`checkpointLostWrites`): the gateway passes it to its ledger (`Ledger.storageFailed`).
   */
  onLostWrites?: (err: Error & { code: string }) => void;
  /** Told when a thread runs the checkpoints again after a failure (and at the first start). */
  onRunning?: () => void;
  /** The first wait before another thread is started after one failed (tests pass a short one). */
  retryMs?: number;
  /** The thread's script (tests pass one that fails first). */
  workerUrl?: string | URL;
}

/** The code of a ledger file deleted, replaced, truncated, or whose log was cut (sqlite/file-identity.ts). */
const LEDGER_FILE_GONE = "SWITCHYARD_LEDGER_FILE_GONE";

/** After the thread failed, the first wait before another is started, doubling to RETRY_MAX_MS. */
const RETRY_MS = 5_000;
const RETRY_MAX_MS = 300_000;
/** A thread that ran this long before it failed starts the waits over. */
const STEADY_MS = 60_000;

/**
 * Whether a checkpoint thread's failure says the disk is losing writes (an I/O error while it
 * synced, a full or read-only disk, a file gone or overwritten), not that the thread could not
 * start or met a lock. A checkpoint is the only fsync of a ledger in `synchronous = NORMAL`: its
 * failure is the one sign that commits reported done are not on the disk (sqlite-ledger.ts,
 * `storageFailed`).
 */
export function checkpointLostWrites(code: string | undefined): boolean {
  if (!code) return false;
  if (code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED")) return false;
  return /^SQLITE_(IOERR|FULL|READONLY|CORRUPT|NOTADB)/.test(code) || code === LEDGER_FILE_GONE;
}

export function startWalCheckpointer(db: Database, path: string, o: WalCheckpointerOptions = {}): WalCheckpointer {
  if (path === ":memory:" || path === "") return { ready: Promise.resolve(false), stop: async () => {} };

  let running = false;
  let stopped = false;
  let resolveReady!: (running: boolean) => void;
  const ready = new Promise<boolean>((resolve) => (resolveReady = resolve));
  let resolveStopped: (() => void) | undefined;
  let worker: Worker | undefined;
  let retryMs = o.retryMs ?? RETRY_MS;
  let retry: ReturnType<typeof setTimeout> | undefined;
  /** When the thread running now reported ready (undefined: none runs). */
  let runningSince: number | undefined;

  const giveBack = () => {
    running = false;
    try {
      db.exec(`PRAGMA wal_autocheckpoint = ${WAL_AUTOCHECKPOINT_PAGES};`);
    } catch {
      // The connection is already closed: nothing left to checkpoint through it.
    }
  };
  /**
   * The thread gave up (a disk full for a moment was enough): the connection checkpoints, and
   * another thread is started after a wait, so a fault that passed does not leave checkpoints on
   * the request thread, with their stalls, for the rest of the process's life (a disk-fault probe).
   */
  const fail = (failed: Worker | undefined, message: string, code?: string) => {
    if (stopped || failed !== worker) return;
    worker = undefined;
    failed?.terminate();
    // Not into a ledger file truncated or overwritten, nor from a log cut under it: the connection's
    // checkpoints would copy what the thread refused to (sqlite/file-identity.ts). The store is
    // failing meanwhile, and a restart is what brings it back.
    if (code !== LEDGER_FILE_GONE) giveBack();
    else {
      running = false;
      // The request thread's check judges the files now, not at its next write or this thread's
      // next start: a log found cut is marked on the connection, and any exit in between clears
      // its index before Bun's last close would copy it (sqlite/file-identity.ts, closeLedger).
      try {
        ledgerFiles(db)(true);
      } catch {}
    }
    resolveReady(false);
    o.onFailure?.(message, code);
    if (checkpointLostWrites(code)) o.onLostWrites?.(Object.assign(new Error(`a WAL checkpoint failed: ${message}`), { code: code! }));
    // The wait starts over only after a thread ran a while: one that opens and then fails at its
    // first checkpoint (a disk still full) must not be restarted every few seconds forever.
    if (runningSince !== undefined && performance.now() - runningSince >= STEADY_MS) retryMs = o.retryMs ?? RETRY_MS;
    runningSince = undefined;
    retry = setTimeout(launch, retryMs);
    retry.unref?.();
    retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
  };

  const launch = () => {
    retry = undefined;
    if (stopped) return;
    // Not on a ledger that was deleted or replaced: its log would be copied into the new file.
    try {
      ledgerFiles(db)(true);
    } catch (err) {
      const code = (err as { code?: string }).code;
      o.onFailure?.(`not started again: ${(err as Error).message}`, code);
      if (checkpointLostWrites(code)) o.onLostWrites?.(Object.assign(new Error((err as Error).message), { code: code! }));
      return;
    }
    let started: Worker;
    try {
      started = new Worker(o.workerUrl ?? WORKER_URL);
    } catch (err) {
      worker = undefined;
      return fail(undefined, String(err));
    }
    worker = started;
    // The thread must not keep the process (or a test run) alive.
    started.unref();
    started.onmessage = (event: MessageEvent<CheckpointReport>) => {
      const report = event.data;
      if (report.type === "stopped") return resolveStopped?.();
      if (stopped || started !== worker) return;
      if (report.type === "ready") {
        running = true;
        runningSince = performance.now();
        db.exec("PRAGMA wal_autocheckpoint = 0;");
        resolveReady(true);
        o.onRunning?.();
      } else {
        // Frames overwritten in the log (file-identity.ts, logFramesDamage): the connection's own
        // checks read only the log's header and length, so it is told, and copies nothing of it.
        if (report.log !== undefined) ledgerFiles(db).logBroken(report.log);
        fail(started, report.message, report.code);
      }
    };
    started.onerror = (event) => fail(started, event.message || "the checkpoint thread failed");
    started.addEventListener("close", () => fail(started, "the checkpoint thread exited"));
    started.postMessage({ type: "start", path, intervalMs: o.intervalMs ?? 1000, restartLogBytes: o.restartLogBytes, slowPassMs: o.slowPassMs } satisfies CheckpointCommand);
  };
  launch();

  return {
    ready,
    async stop() {
      if (stopped) return;
      stopped = true;
      clearTimeout(retry);
      resolveReady(false);
      if (running && worker) {
        const done = new Promise<void>((resolve) => (resolveStopped = resolve));
        worker.postMessage({ type: "stop" } satisfies CheckpointCommand);
        await Promise.race([done, Bun.sleep(2000)]);
      }
      worker?.terminate();
      giveBack();
    },
  };
}
