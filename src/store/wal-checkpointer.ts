import type { Database } from "bun:sqlite";
import { WAL_AUTOCHECKPOINT_PAGES } from "./database.ts";
import type { CheckpointCommand, CheckpointReport } from "./checkpoint-worker.ts";
import { workerUrl } from "../worker-url.ts";

/**
 * WAL checkpoints on a thread of their own. A checkpoint copies the log into the database file
 * and fsyncs it; SQLite runs it inside whichever commit crosses `wal_autocheckpoint`, and ours
 * commit on the event loop (the ledger's settlement batches), so every few seconds under load
 * one batch took 50–60 ms instead of 3 and every request in flight waited for the disk. With this
 * running, the gateway's connection never checkpoints (`wal_autocheckpoint = 0`) and the thread
 * does, every `intervalMs`. If the thread cannot start or fails, the connection checkpoints
 * again as before: the log never grows unchecked.
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
  /** Told why the thread gave up (the connection checkpoints from then on). */
  onFailure?: (message: string) => void;
}

export function startWalCheckpointer(db: Database, path: string, o: WalCheckpointerOptions = {}): WalCheckpointer {
  if (path === ":memory:" || path === "") return { ready: Promise.resolve(false), stop: async () => {} };

  let running = false;
  let finished = false;
  let resolveReady!: (running: boolean) => void;
  const ready = new Promise<boolean>((resolve) => (resolveReady = resolve));
  let resolveStopped: (() => void) | undefined;

  const giveBack = () => {
    running = false;
    try {
      db.exec(`PRAGMA wal_autocheckpoint = ${WAL_AUTOCHECKPOINT_PAGES};`);
    } catch {
      // The connection is already closed: nothing left to checkpoint through it.
    }
  };
  const fail = (message: string) => {
    if (finished) return;
    finished = true;
    giveBack();
    resolveReady(false);
    worker?.terminate();
    o.onFailure?.(message);
  };

  let worker: Worker | undefined;
  try {
    worker = new Worker(WORKER_URL);
  } catch (err) {
    fail(String(err));
    return { ready, stop: async () => {} };
  }
  // The thread must not keep the process (or a test run) alive.
  worker.unref();
  worker.onmessage = (event: MessageEvent<CheckpointReport>) => {
    const report = event.data;
    if (report.type === "ready") {
      running = true;
      db.exec("PRAGMA wal_autocheckpoint = 0;");
      resolveReady(true);
    } else if (report.type === "failed") fail(report.message);
    else resolveStopped?.();
  };
  worker.onerror = (event) => fail(event.message || "the checkpoint thread failed");
  worker.addEventListener("close", () => {
    if (!finished) fail("the checkpoint thread exited");
  });
  worker.postMessage({ type: "start", path, intervalMs: o.intervalMs ?? 1000, restartLogBytes: o.restartLogBytes, slowPassMs: o.slowPassMs } satisfies CheckpointCommand);

  return {
    ready,
    async stop() {
      if (finished) return;
      finished = true;
      resolveReady(false);
      if (running && worker) {
        const stopped = new Promise<void>((resolve) => (resolveStopped = resolve));
        worker.postMessage({ type: "stop" } satisfies CheckpointCommand);
        await Promise.race([stopped, Bun.sleep(2000)]);
      }
      worker?.terminate();
      giveBack();
    },
  };
}
