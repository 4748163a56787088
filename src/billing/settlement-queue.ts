import type { LedgerHealth, Settlement } from "./ledger.ts";
import type { Logger } from "../log/log.ts";

/** What a store says of a failed write (see store/sqlite/sqlite-errors.ts, store/postgres/pg-client.ts). */
export type WriteFailure =
  /** Lock conflicts, deadlocks: the same write will succeed later. */
  | "busy"
  /** The store cannot take writes now (disk full, read-only, unreachable): keep it, retry. */
  | "storage"
  /** This write can never succeed as it is (a constraint): split the batch to find the one. */
  | "data";

export interface RejectionCounter {
  keyId: string;
  minute: number;
  status: number;
  count: number;
}

export interface QueuedSettlement {
  settlement: Settlement;
  /** False once the store refused its charge for good: the record is written without it. */
  charge?: false;
  /** Resolves the settle() promise: on commit, or when the store is found failing. */
  done?: () => void;
  /** When it was accepted (the settlement lag of `health()`). */
  at?: number;
}

/** A store's side of group commit. `write` and `probe` may answer at once (SQLite) or later (PostgreSQL). */
export interface SettlementStore<Q extends QueuedSettlement> {
  /** One transaction: every settlement of the batch (debit and record together) and the refusal counters. */
  write(batch: Q[], counters: RejectionCounter[], at: number): void | Promise<void>;
  /** A small write that succeeds when writes would (the idle gateway's probe, PostgreSQL's heartbeat). */
  probe(at: number): void | Promise<void>;
  classify(err: unknown): WriteFailure;
  describe(err: unknown): string;
  /** The batch is durable: caches move, holds lift. */
  committed(batch: Q[]): void;
  /**
   * What is still queued when the grace at close runs out, kept durably (a spill file replayed
   * at the next start); throws when it cannot be kept, and the log is then the last record.
   */
  spill?(queued: Q[]): void;
  /**
   * The spill file kept while the store failed is no longer needed: everything in it is written.
   * A store with it also keeps the queue's charges in the spill file while it fails (see below).
   */
  unspill?(): void;
  /** A settlement refused even without its charge, logged and let go: its hold lifts. */
  dropped(q: Q): void;
  /**
   * The failure cannot pass while this process runs (SQLite: the ledger file was replaced, removed
   * or is corrupt): a stop keeps the queue in the spill file at once instead of retrying through
   * its grace into a file that will never take it.
   */
  hopeless?(err: unknown): boolean;
}

export interface SettlementQueueOptions {
  now: () => number;
  log: Logger;
  /** Settlements that may wait unwritten; past this, free requests are refused too. */
  maxQueued: number;
  /** Settlements per transaction at most. */
  maxBatch: number;
  /** How long lock conflicts may go on before the store counts as failing. */
  busyLimitMs: number;
  /** Longest pause between retries while the store fails (recovery is seen within this). */
  retryMaxMs: number;
  /** An idle store is probed this often, so `/ready` learns of a dead one without traffic. */
  probeIntervalMs: number;
  /**
   * PostgreSQL's `commit_delay` and `commit_siblings`, for the same reason: while other answers
   * are on their way to settling, a batch's first settlement waits up to `ms` for them, so a
   * commit's fixed cost is shared by more of them (SQLite's: ~45 µs of write and lock calls,
   * against ~3 µs per settlement). `inFlight` is how many requests may settle (those already
   * queued included): once all of them are queued, nobody else is coming and the batch goes at
   * the end of that turn instead of at the end of the delay. Without it, or with nothing else
   * running, the batch goes at the end of the turn, as it always does for a lone request.
   */
  commitDelay?: { ms: number; inFlight: () => number };
  /**
   * How long a charge waits for the store to come back when the spill file cannot keep it either
   * (a read-only disk, fsync failing), before its answer is delivered anyway. Default 10 s.
   */
  unkeptWaitMs?: number;
}

/** Distinct (key, minute, status) refusal counters kept before they are written early. */
const MAX_REJECTION_COUNTERS = 10_000;
/** Refusal counters are statistics: written with the next batch, or after this long. */
const REJECTION_FLUSH_MS = 1_000;

/** See SettlementQueueOptions.unkeptWaitMs. */
const UNKEPT_WAIT_MS = 10_000;

/**
 * Group commit with failure handling, shared by every Ledger implementation (the SQLite and
 * PostgreSQL ledgers differ only in the statements they run).
 *
 * Settlements are queued and written by a single writer, one transaction for everything queued
 * when it starts (at most `maxBatch`), batch after batch while there is work. The first batch of
 * a burst starts at the end of the event loop's turn (`setImmediate`: a 0 ms timer waits at least
 * a millisecond, and a paid answer's last frame waits for the commit), so everything that finished
 * in one turn shares one transaction.
 *
 * A write that fails because of the store keeps its batch queued and in order: lock conflicts are
 * retried on a short timer and count as failing after `busyLimitMs`; anything else (disk full,
 * read-only, unreachable) marks the store failing at once. While failing, nobody waits for a
 * commit (the promises resolve, the settlements stay queued; a charge on a store that keeps a spill
 * file while running waits for that file first, see keepQueuedAndRelease), paid requests are refused
 * (`admits(true)` is false), and the queue is retried with backoff until a write succeeds. A batch
 * the store refuses for its data is split, so one bad settlement never holds back the others; one
 * that fails alone is written without its charge (logged in full), and dropped only if even that
 * is refused. Nothing here throws.
 */
export function createSettlementQueue<Q extends QueuedSettlement>(store: SettlementStore<Q>, o: SettlementQueueOptions) {
  const { now, log } = o;
  const queue: Q[] = [];
  let rejections = new Map<string, RejectionCounter>();
  let droppedRejections = 0;
  let rejectionTimer: ReturnType<typeof setTimeout> | undefined;
  let retryTimer: ReturnType<typeof setTimeout> | undefined;
  let scheduled = false;
  let delayTimer: ReturnType<typeof setTimeout> | undefined;
  let writing: Promise<void> | undefined;
  let busySince: number | undefined;
  let failingSince: number | undefined;
  let lastError: string | undefined;
  let retryDelay = 0;
  let lastCommitAt = now();
  let closed = false;
  /** What the spill file holds since close: each late settlement rewrites it with all of them. */
  let spilled: Q[] = [];
  /** The spill file holds charges kept while the store failed (removed once they are written). */
  let keptWhileFailing = false;
  /** Charges that came while failing wait for the end of the turn's spill (one file write for all). */
  let keepScheduled = false;
  /** Whether "cannot keep them" was logged in this failure (once, not per settlement). */
  let keepFailureLogged = false;
  /** Releases the charges that neither the store nor the spill file could take, once they waited long enough. */
  let unkeptTimer: ReturnType<typeof setTimeout> | undefined;

  /** The last failure cannot pass while this process runs (store.hopeless): close() waits no grace for it. */
  let hopeless = false;
  const recovered = () => {
    lastCommitAt = now();
    hopeless = false;
    busySince = undefined;
    retryDelay = 0;
    if (failingSince !== undefined) {
      log("info", "ledger writes again", { failedForMs: lastCommitAt - failingSince, queued: queue.length });
      failingSince = undefined;
      lastError = undefined;
      keepFailureLogged = false;
    }
    if (unkeptTimer) {
      clearTimeout(unkeptTimer);
      unkeptTimer = undefined;
    }
    // Everything the spill file kept is written now: a start must not find it (it would only
    // replay records that exist, but it holds their credit again until it has).
    if (keptWhileFailing && queue.length === 0 && !closed) {
      keptWhileFailing = false;
      store.unspill?.();
    }
  };

  /**
   * Only a store that can also remove the file keeps charges in it while running: the file must be
   * this process's alone while it lives (SQLite: one process per file; PostgreSQL: a file per
   * process, replayed by another only once its owner is gone, store/postgres/pg-spill.ts).
   */
  const keepsWhileFailing = store.spill !== undefined && store.unspill !== undefined;

  /** A charge: a settlement that moves money (not a hold's release, not a free answer's record). */
  const isCharge = (q: Q) => !(q as { release?: boolean }).release && q.settlement.costMicro > 0;

  /**
   * While the store fails, the answers whose settlements wait in memory are delivered whole; a
   * kill -9 then lost their charges (a kill -9 and disk-fault probe: 156 whole paid answers of 746
   * finished after a disk filled had no record after the restart). So before their promises
   * resolve, every charge still queued is kept in the spill file (fsynced; on a full disk the room
   * held for it is given up), which the next start replays: a record written meanwhile makes its
   * replay charge nothing. When the file cannot be written either (a read-only disk, fsync
   * failing), they wait for the store (each retry tries the file again) for up to `unkeptWaitMs`:
   * a fault that clears meanwhile ends their answers with their records written. Past that they
   * are delivered as before (a kill -9 then loses them), and the log has said so once.
   */
  function keepQueuedAndRelease(): void {
    keepScheduled = false;
    // Written meanwhile (the store is back): they were released by their commit, or wait for it.
    if (failingSince === undefined) return;
    const waiting = queue.filter((q) => q.done);
    if (waiting.length === 0) return;
    const charges = queue.filter(isCharge);
    // Once closed, close() keeps the queue in the spill file itself.
    if (!closed && charges.length > 0 && keepsWhileFailing) {
      try {
        store.spill!(charges);
        keptWhileFailing = true;
      } catch (err) {
        if (!keepFailureLogged) {
          keepFailureLogged = true;
          log("error", "settlements waiting for the ledger could not be kept in the spill file either: their answers wait for the ledger a while, then end without a durable record (a kill -9 loses them)", { error: String(err), settlements: charges.length, waitMs: o.unkeptWaitMs ?? UNKEPT_WAIT_MS });
        }
        unkeptTimer ??= setTimeout(releaseWaiting, o.unkeptWaitMs ?? UNKEPT_WAIT_MS);
        return;
      }
    }
    releaseWaiting();
  }

  function releaseWaiting(): void {
    if (unkeptTimer) clearTimeout(unkeptTimer);
    unkeptTimer = undefined;
    for (const q of queue) {
      q.done?.();
      q.done = undefined;
    }
  }

  /** The store is failing: nobody waits for it any more; what is queued stays queued. */
  const fail = (message: string) => {
    lastError = message;
    if (failingSince === undefined) {
      failingSince = now();
      log("error", "ledger cannot write: paid requests are refused until it can, settlements wait in memory", { error: message, queued: queue.length });
    }
    keepQueuedAndRelease();
  };

  function onFailure(kind: WriteFailure, err: unknown): void {
    hopeless = store.hopeless?.(err) === true;
    if (kind === "busy") {
      busySince ??= now();
      if (now() - busySince >= o.busyLimitMs) fail(`the store has refused writes with lock conflicts for ${now() - busySince} ms: ${store.describe(err)}`);
      retryDelay = Math.min(Math.max(retryDelay * 2, 2), 50);
    } else {
      fail(store.describe(err));
      retryDelay = Math.min(Math.max(retryDelay * 2, 50), o.retryMaxMs);
    }
  }

  const takeCounters = () => {
    const counters = [...rejections.values()];
    rejections = new Map();
    return counters;
  };

  const committed = (batch: Q[]) => {
    store.committed(batch);
    for (const q of batch) {
      q.done?.();
      q.done = undefined;
    }
  };

  /** One attempt at the head of the queue (and the counters); undefined when written. */
  async function writeHead(): Promise<WriteFailure | undefined> {
    const batch = queue.slice(0, o.maxBatch);
    const counters = takeCounters();
    try {
      await store.write(batch, counters, now());
      queue.splice(0, batch.length);
      committed(batch);
      recovered();
      return undefined;
    } catch (err) {
      for (const c of counters) countRejection(c.keyId, c.status, c.minute * 60_000, c.count);
      const kind = store.classify(err);
      if (kind === "data") return isolate(batch, err);
      onFailure(kind, err);
      return kind;
    }
  }

  /** A batch that can never be written as it is: its settlements one by one (see above). */
  async function isolate(batch: Q[], batchError: unknown): Promise<WriteFailure | undefined> {
    if (batch.length === 0) {
      log("error", "rejection counts refused by the database and dropped", { error: store.describe(batchError) });
      takeCounters();
      return undefined;
    }
    for (const q of batch) {
      for (;;) {
        try {
          await store.write([q], [], now());
          queue.splice(queue.indexOf(q), 1);
          committed([q]);
          recovered();
          break;
        } catch (err) {
          const kind = store.classify(err);
          if (kind !== "data") {
            onFailure(kind, err);
            return kind;
          }
          if (q.charge !== false) {
            // Keep the usage record at least; the refused charge goes to the log for an operator.
            log("error", "settlement's charge refused by the database; recorded without it, apply it by hand", { settlement: q.settlement, error: store.describe(err) });
            q.charge = false;
            continue;
          }
          log("error", "settlement refused by the database and dropped; apply it by hand", { settlement: q.settlement, error: store.describe(err) });
          queue.splice(queue.indexOf(q), 1);
          store.dropped(q);
          q.done?.();
          q.done = undefined;
          break;
        }
      }
    }
    return undefined;
  }

  /** The single writer: batches back to back while there is work, a retry timer when it fails. */
  function pump(): Promise<void> {
    if (writing) return writing;
    // Nothing to write: no writer. (An async body that never awaits would finish before it is
    // assigned, and `writing` would then hold a settled promise for ever, blocking every write.)
    if (closed || (queue.length === 0 && rejections.size === 0)) return Promise.resolve();
    const run = (async () => {
      while (!closed && (queue.length > 0 || rejections.size > 0)) {
        if (await writeHead()) {
          scheduleRetry();
          return;
        }
      }
    })();
    writing = run;
    void run.finally(() => {
      if (writing === run) writing = undefined;
      // Settled between the loop's last look and now: theirs is the next batch.
      if (queue.length > 0 || rejections.size > 0) schedule();
    });
    return run;
  }

  function scheduleRetry(): void {
    if (retryTimer || closed) return;
    retryTimer = setTimeout(() => {
      retryTimer = undefined;
      if (queue.length > 0 || rejections.size > 0) void pump();
      else void probe();
    }, retryDelay);
  }

  const scheduledPump = () => {
    scheduled = false;
    delayTimer = undefined;
    void pump();
  };

  /**
   * At the end of this turn of the event loop: everything settled in it goes in one batch; or,
   * when other answers are about to settle, after the commit delay, with theirs.
   */
  function schedule(): void {
    if (scheduled) {
      if (!delayTimer) return;
      // A full batch does not wait for the delay; one that everybody in flight has joined goes
      // at the end of this turn (whatever else settles in it still comes along).
      if (queue.length >= o.maxBatch) {
        clearTimeout(delayTimer);
        scheduledPump();
      } else if (!othersComing()) {
        clearTimeout(delayTimer);
        delayTimer = undefined;
        setImmediate(scheduledPump);
      }
      return;
    }
    if (writing || retryTimer || closed) return;
    scheduled = true;
    const delay = o.commitDelay;
    if (delay && delay.ms > 0 && othersComing()) delayTimer = setTimeout(scheduledPump, delay.ms);
    else setImmediate(scheduledPump);
  }

  /** Requests in flight that have not settled yet: what a delayed batch waits for. */
  function othersComing(): boolean {
    const delay = o.commitDelay;
    return delay !== undefined && delay.inFlight() > queue.length;
  }

  async function probe(): Promise<void> {
    if (closed || writing) return;
    try {
      await store.probe(now());
      recovered();
      if (queue.length > 0 || rejections.size > 0) void pump();
    } catch (err) {
      onFailure(store.classify(err) === "busy" ? "busy" : "storage", err);
      if (failingSince !== undefined || busySince !== undefined) scheduleRetry();
    }
  }

  // An idle gateway still learns that its store died (and that it came back).
  const prober = setInterval(() => {
    if (!closed && !writing && !retryTimer && queue.length === 0 && now() - lastCommitAt >= o.probeIntervalMs) void probe();
  }, o.probeIntervalMs);
  prober.unref?.();

  function countRejection(keyId: string, status: number, at: number, count = 1): void {
    const minute = Math.floor(at / 60_000);
    const id = `${keyId}\u0000${minute}\u0000${status}`;
    const counter = rejections.get(id);
    if (counter) counter.count += count;
    // Past twice the bound the store has been down a long time: statistics give way to memory.
    else if (rejections.size >= MAX_REJECTION_COUNTERS * 2) droppedRejections += count;
    else rejections.set(id, { keyId, minute, status, count });
    if (rejections.size >= MAX_REJECTION_COUNTERS) schedule();
    else rejectionTimer ??= setTimeout(() => {
      rejectionTimer = undefined;
      schedule();
    }, REJECTION_FLUSH_MS);
  }

  const admits = (paid: boolean) => !closed && queue.length < o.maxQueued && (!paid || failingSince === undefined);

  /**
   * A settlement that arrives once the queue has closed (an answer that finished, or was cut,
   * while the process stops): kept in the spill file with everything kept before it, durably,
   * before its promise resolves, so its answer's last byte still follows a durable record. Queued
   * now, it would be written by nobody while its client got the whole answer. When it cannot be
   * kept, the log has it in full and its promise never resolves: the answer does not end as whole.
   */
  function keepAfterClose(q: Q): Promise<void> {
    q.at ??= now();
    if (keepInSpill([...spilled, q])) {
      log("warn", "a settlement that came after the ledger closed was kept in the spill file; the next start writes it", { requestId: q.settlement.requestId });
      return Promise.resolve();
    }
    log("error", "settlement after shutdown not written; apply it by hand", { settlement: q.settlement });
    return new Promise<void>(() => {});
  }

  /** The spill file rewritten to hold `all` (fsynced); false when there is none or it cannot be written. */
  function keepInSpill(all: Q[]): boolean {
    if (!store.spill) return false;
    try {
      store.spill(all);
      spilled = all;
      return true;
    } catch (err) {
      log("error", "settlements could not be kept in the spill file", { error: String(err) });
      return false;
    }
  }

  return {
    /**
     * Resolves once the settlement is committed, or once the store is failing (it waits queued): a
     * charge then once the spill file keeps it too, or `unkeptWaitMs` later (keepQueuedAndRelease).
     */
    enqueue(q: Q): Promise<void> {
      if (closed) return keepAfterClose(q);
      q.at ??= now();
      // While failing, nobody waits for a commit; a charge waits for the spill file (above).
      const waits = failingSince === undefined || (isCharge(q) && keepsWhileFailing);
      const promise = waits ? new Promise<void>((resolve) => (q.done = resolve)) : Promise.resolve();
      queue.push(q);
      if (failingSince !== undefined && waits && !keepScheduled) {
        keepScheduled = true;
        setImmediate(keepQueuedAndRelease);
      }
      schedule();
      return promise;
    },

    countRejection,
    admits,

    get failing(): boolean {
      return failingSince !== undefined;
    },
    get lastError(): string | undefined {
      return lastError;
    },

    /** A failure seen outside the queue (a reservation that could not reach the store). */
    failed(kind: WriteFailure, err: unknown): void {
      onFailure(kind, err);
      if (failingSince !== undefined) scheduleRetry();
    },

    health(): LedgerHealth {
      return { writable: failingSince === undefined, queued: queue.length, maxQueued: o.maxQueued, failingSince, lastError, oldestQueuedAt: queue[0]?.at };
    },

    /** Writes everything queued; returns when written, or when the store refuses (a retry is then scheduled). */
    async flush(): Promise<void> {
      while (!closed && (queue.length > 0 || rejections.size > 0)) {
        if (retryTimer) {
          // Failing, or backing off after a lock conflict: one attempt now, then leave it to the timer.
          clearTimeout(retryTimer);
          retryTimer = undefined;
          await pump();
          if (failingSince !== undefined || retryTimer) return;
          continue;
        }
        await pump();
        if (failingSince !== undefined || retryTimer) return;
      }
    },

    /**
     * The process stops now (a second signal during shutdown): what is queued (a batch being
     * written included: its records are unique, so a replay of one that committed adds nothing)
     * is kept in the spill file at once, or logged in full; nothing more is written. It had been
     * dropped without a trace (a kill -9 and disk-fault probe: 20 paid answers delivered whole).
     */
    abandon(): void {
      if (closed) return;
      closed = true;
      clearInterval(prober);
      if (unkeptTimer) clearTimeout(unkeptTimer);
      for (const timer of [delayTimer, rejectionTimer, retryTimer]) if (timer) clearTimeout(timer);
      if (queue.length === 0) return;
      const kept = keepInSpill([...queue]);
      const charges = queue.filter((q) => !(q as { release?: boolean }).release).length;
      if (kept) log("warn", "settlements not written when the process was stopped at once were kept in the spill file; the next start writes them", { settlements: charges });
      else for (const q of queue) log("error", "settlement not written when the process was stopped at once; apply it by hand", { settlement: q.settlement });
    },

    /** Writes what is queued (within `graceMs`, retrying) and stops; what cannot be written is logged in full. */
    async close(graceMs: number): Promise<void> {
      clearInterval(prober);
      if (unkeptTimer) clearTimeout(unkeptTimer);
      if (delayTimer) clearTimeout(delayTimer);
      if (rejectionTimer) clearTimeout(rejectionTimer);
      const deadline = performance.now() + graceMs;
      while ((queue.length > 0 || rejections.size > 0) && performance.now() < deadline && !hopeless) {
        if (retryTimer) {
          clearTimeout(retryTimer);
          retryTimer = undefined;
        }
        await pump();
        if (queue.length > 0 || rejections.size > 0) await Bun.sleep(Math.max(retryDelay, 10));
      }
      if (writing) await writing;
      closed = true;
      if (retryTimer) clearTimeout(retryTimer);
      if (queue.length > 0) {
        const kept = keepInSpill([...queue]);
        // Charges only: releases of holds are not kept (nothing to write once the process is gone).
        const charges = queue.filter((q) => !(q as { release?: boolean }).release).length;
        if (kept) log("warn", "settlements not written at shutdown were kept in the spill file; the next start writes them", { settlements: charges });
        // Nothing else could keep them: the log is the record of last resort.
        if (!kept) for (const q of queue) log("error", "settlement not written at shutdown; apply it by hand", { settlement: q.settlement });
        for (const q of queue) q.done?.();
      }
      if (droppedRejections > 0) log("warn", "rejection counts dropped while the ledger could not write", { dropped: droppedRejections });
    },
  };
}

export type SettlementQueue<Q extends QueuedSettlement> = ReturnType<typeof createSettlementQueue<Q>>;
