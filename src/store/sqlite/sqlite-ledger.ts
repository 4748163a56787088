import type { Database } from "bun:sqlite";
import { checkSettlement, type Hold, type Ledger, type LedgerHealth, type RejectionLog, type ReserveResult, type Settlement } from "../../billing/ledger.ts";
import { createChangeWatch, type ChangeWatch } from "../change-watch.ts";
import type { Logger } from "../../log.ts";
import { creditWriter } from "./credits.ts";
import { classifyWriteFailure, describeWriteFailure, retryWhileBusy, type WriteFailure } from "./sqlite-errors.ts";

export interface SqliteLedgerOptions {
  now: () => number;
  /** Shared with the key cache, so a request reads data_version at most once. */
  changes?: ChangeWatch;
  log?: Logger;
  /** Settlements that may wait unwritten; past this, free requests are refused too. */
  maxQueued?: number;
  /** How long another connection may hold the write lock before the store counts as failing. */
  busyLimitMs?: number;
  /** Longest pause between retries while the store fails (recovery is seen within this). */
  retryMaxMs?: number;
  /** An idle gateway writes a probe this often, so `/ready` learns of a dead disk without traffic. */
  probeIntervalMs?: number;
}

interface Queued {
  settlement: Settlement;
  /** When it was accepted (the settlement lag of `health()`). */
  at: number;
  /** False once the database refused its debit for good: the record is written without it. */
  charge?: false;
  /** Resolves the settle() promise: on commit, or when the store is found failing. */
  done: (() => void) | undefined;
}

interface HeldAmount {
  accountId: string;
  keyId: string;
  amount: number;
}

/** Settlements written per transaction at most. */
const MAX_BATCH = 512;
/** Distinct (key, minute, status) rejection counters kept before they are written early. */
const MAX_REJECTION_COUNTERS = 10_000;
/** Rejection counters are statistics: written with the next batch, or after this long. */
const REJECTION_FLUSH_MS = 1_000;

/**
 * The embedded ledger on one SQLite file, for one gateway process (src/store/sqlite/gateway-lock.ts
 * enforces that).
 *
 * Holds live in memory, checked against the balance SQLite has: JavaScript runs one request at a
 * time, so check and hold cannot interleave, and a reservation costs no write (a write per
 * request cost the WAL an fsync every few hundred). A process that dies takes its holds with it.
 *
 * Settlements are group-committed: each goes into a queue that is written at the end of the
 * event loop's turn, one transaction for everything that finished in that turn, each
 * settlement's debit and usage record together. The pipeline waits for that commit before a
 * paid answer's final byte (see docs/decisions.md, "Money across kill -9"); in WAL mode with
 * synchronous=NORMAL a commit is in the OS's hands once it returns, so it survives the process.
 *
 * The connection never waits for a lock (busy_timeout = 0): a held write lock leaves the queue
 * to a retry timer instead of freezing the event loop. A store that cannot write (disk full,
 * read-only, a lock held past `busyLimitMs`) keeps its settlements queued, retries with backoff,
 * and refuses paid requests until a write succeeds; nothing escapes as an uncaught error.
 * Idempotent by request id: a usage record that already exists charges nothing again.
 */
export function createSqliteLedger(db: Database, o: SqliteLedgerOptions): Ledger & RejectionLog {
  const now = o.now;
  const log = o.log ?? (() => {});
  const changes = o.changes ?? createChangeWatch(db);
  const maxQueued = o.maxQueued ?? 50_000;
  const busyLimitMs = o.busyLimitMs ?? 1_000;
  const retryMaxMs = o.retryMaxMs ?? 1_000;
  const probeIntervalMs = o.probeIntervalMs ?? 2_000;

  const balanceOf = db.query<{ balance_micro: number }, [string]>("SELECT balance_micro FROM accounts WHERE id = ?");
  const keyBudget = db.query<{ spend_limit_micro: number | null; spent_micro: number }, [string]>(
    "SELECT spend_limit_micro, spent_micro FROM api_keys WHERE id = ?",
  );
  const debitAccount = db.query("UPDATE accounts SET balance_micro = balance_micro - ? WHERE id = ?");
  const debitKey = db.query("UPDATE api_keys SET spent_micro = spent_micro + ? WHERE id = ?");
  const insertUsage = db.query(
    `INSERT OR IGNORE INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at, client_request_id)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const countRejections = db.query(
    `INSERT INTO rejection_counts (key_id, minute, status, count) VALUES (?, ?, ?, ?)
     ON CONFLICT (key_id, minute, status) DO UPDATE SET count = count + excluded.count`,
  );
  const probe = db.query("INSERT OR REPLACE INTO ledger_probe (id, at) VALUES (1, ?)");
  const credit = creditWriter(db, now);

  // ── Cached balances: what SQLite has, as of our last read plus our own commits since. ──
  const balances = new Map<string, number>();
  const budgets = new Map<string, { limit: number | null; spent: number }>();
  changes.onChange(() => {
    balances.clear();
    budgets.clear();
  });
  const balance = (accountId: string): number | undefined => {
    let value = balances.get(accountId);
    if (value === undefined) {
      const row = balanceOf.get(accountId);
      if (!row) return undefined;
      balances.set(accountId, (value = row.balance_micro));
    }
    return value;
  };
  const budget = (keyId: string) => {
    let value = budgets.get(keyId);
    if (value === undefined) {
      const row = keyBudget.get(keyId);
      if (!row) return undefined;
      budgets.set(keyId, (value = { limit: row.spend_limit_micro, spent: row.spent_micro }));
    }
    return value;
  };

  // ── Holds ──
  const holds = new Map<string, HeldAmount>();
  const heldByAccount = new Map<string, number>();
  const heldByKey = new Map<string, number>();
  const add = (map: Map<string, number>, id: string, delta: number) => {
    const value = (map.get(id) ?? 0) + delta;
    if (value === 0) map.delete(id);
    else map.set(id, value);
  };
  const lift = (requestId: string) => {
    const held = holds.get(requestId);
    if (!held) return;
    holds.delete(requestId);
    add(heldByAccount, held.accountId, -held.amount);
    add(heldByKey, held.keyId, -held.amount);
  };

  // ── The write queue ──
  let queue: Queued[] = [];
  let rejections = new Map<string, { keyId: string; minute: number; status: number; count: number }>();
  let droppedRejections = 0;
  let scheduled: ReturnType<typeof setTimeout> | undefined;
  let scheduledImmediate = false;
  let rejectionTimer: ReturnType<typeof setTimeout> | undefined;
  let busySince: number | undefined;
  let failingSince: number | undefined;
  let lastError: string | undefined;
  let retryDelay = 0;
  let lastCommitAt = now();
  let closed = false;

  /** Debits are summed per account and per key: one UPDATE each per batch, not per request. */
  const writeBatch = db.transaction((batch: Queued[], counters: { keyId: string; minute: number; status: number; count: number }[], at: number) => {
    const byAccount = new Map<string, number>();
    const byKey = new Map<string, number>();
    for (const { settlement: s, charge: chargeable } of batch) {
      const held = chargeable === false ? undefined : holds.get(s.requestId);
      // A settlement posts at most its hold; without one (free models) it charges nothing.
      const charge = held ? Math.min(s.costMicro, held.amount) : 0;
      const inserted = insertUsage.run(s.requestId, s.accountId, s.keyId, s.model, s.provider, s.promptTokens, s.completionTokens,
        s.estimated ? 1 : 0, charge, s.status, Math.round(s.latencyMs), at, s.clientRequestId ?? null).changes === 1;
      // Already recorded (a retry, a replay): charged then, not again.
      if (inserted && held && charge > 0) {
        add(byAccount, held.accountId, charge);
        add(byKey, held.keyId, charge);
      }
    }
    for (const [accountId, amount] of byAccount) debitAccount.run(amount, accountId);
    for (const [keyId, amount] of byKey) debitKey.run(amount, keyId);
    for (const c of counters) countRejections.run(c.keyId, c.minute, c.status, c.count);
    if (batch.length === 0 && counters.length === 0) probe.run(at);
    return { byAccount, byKey };
  });

  /** The batch is on disk: only now do cached balances drop and holds lift. */
  const committed = (batch: Queued[], result: { byAccount: Map<string, number>; byKey: Map<string, number> }) => {
    for (const [accountId, amount] of result.byAccount) {
      const cached = balances.get(accountId);
      if (cached !== undefined) balances.set(accountId, cached - amount);
    }
    for (const [keyId, amount] of result.byKey) {
      const cached = budgets.get(keyId);
      if (cached) cached.spent += amount;
    }
    for (const q of batch) {
      lift(q.settlement.requestId);
      q.done?.();
      q.done = undefined;
    }
  };

  const recovered = () => {
    lastCommitAt = now();
    busySince = undefined;
    retryDelay = 0;
    if (failingSince !== undefined) {
      log("info", "ledger writes again", { failedForMs: lastCommitAt - failingSince, queued: queue.length });
      failingSince = undefined;
      lastError = undefined;
    }
  };

  /** The store is failing: nobody waits for it any more; what is queued stays queued. */
  const fail = (message: string) => {
    lastError = message;
    if (failingSince === undefined) {
      failingSince = now();
      log("error", "ledger cannot write: paid requests are refused until it can, settlements wait in memory", { error: message, queued: queue.length });
    }
    for (const q of queue) {
      q.done?.();
      q.done = undefined;
    }
  };

  const takeCounters = () => {
    const counters = [...rejections.values()];
    rejections = new Map();
    return counters;
  };
  const putBackCounters = (counters: { keyId: string; minute: number; status: number; count: number }[]) => {
    for (const c of counters) countRejection(c.keyId, c.status, c.minute * 60_000, c.count);
  };

  /** One attempt at writing the head of the queue (and the rejection counters). */
  function write(probeOnly = false): WriteFailure | undefined {
    const batch = probeOnly ? [] : queue.slice(0, MAX_BATCH);
    const counters = probeOnly ? [] : takeCounters();
    try {
      const result = writeBatch.immediate(batch, counters, now());
      queue.splice(0, batch.length);
      committed(batch, result);
      recovered();
      return undefined;
    } catch (err) {
      rollbackQuietly(db);
      putBackCounters(counters);
      const kind = classifyWriteFailure(err);
      if (kind === "data") return isolate(batch, err);
      onFailure(kind, err);
      return kind;
    }
  }

  /**
   * A batch that can never be written as it is: write its settlements one by one so that one bad
   * record does not hold back the others. One that fails alone is logged whole (an operator can
   * apply it by hand) and dropped from the queue.
   */
  function isolate(batch: Queued[], batchError: unknown): WriteFailure | undefined {
    if (batch.length === 0) {
      log("error", "ledger probe failed", { error: describeWriteFailure(batchError) });
      return undefined;
    }
    for (const q of batch) {
      try {
        const result = writeBatch.immediate([q], [], now());
        queue.splice(queue.indexOf(q), 1);
        committed([q], result);
        recovered();
      } catch (err) {
        rollbackQuietly(db);
        const kind = classifyWriteFailure(err);
        if (kind !== "data") {
          onFailure(kind, err);
          return kind;
        }
        if (q.charge !== false) {
          // Keep the usage record at least; the refused charge goes to the log for an operator.
          log("error", "settlement's charge refused by the database; recorded without it, apply it by hand", { settlement: q.settlement, error: describeWriteFailure(err) });
          q.charge = false;
          const failure = isolate([q], err);
          if (failure) return failure;
          continue;
        }
        log("error", "settlement refused by the database and dropped; apply it by hand", { settlement: q.settlement, error: describeWriteFailure(err) });
        queue.splice(queue.indexOf(q), 1);
        lift(q.settlement.requestId);
        q.done?.();
      }
    }
    return undefined;
  }

  function onFailure(kind: WriteFailure, err: unknown): void {
    if (kind === "busy") {
      busySince ??= now();
      if (now() - busySince >= busyLimitMs) fail(`the database has been locked by another connection for ${now() - busySince} ms`);
      retryDelay = Math.min(Math.max(retryDelay * 2, 2), 50);
    } else {
      fail(describeWriteFailure(err));
      retryDelay = Math.min(Math.max(retryDelay * 2, 50), retryMaxMs);
    }
  }

  function run(): void {
    if (scheduled) clearTimeout(scheduled);
    scheduled = undefined;
    scheduledImmediate = false;
    if (closed) return;
    if (queue.length === 0 && rejections.size === 0 && failingSince === undefined) return;
    const failure = write(queue.length === 0 && rejections.size === 0);
    if (failure) schedule(retryDelay);
    else if (queue.length > 0) schedule(0);
  }

  /**
   * `0`: at the end of this turn of the event loop, after its I/O callbacks (group commit: every
   * answer that finished in the turn goes in one transaction). `setImmediate`, not a 0 ms
   * timer: timers wait at least a millisecond, and a paid answer's last frame waits for this.
   * Otherwise a retry delay.
   */
  function schedule(delayMs: number): void {
    if (closed) return;
    if (delayMs === 0) {
      if (scheduledImmediate || (scheduled && busySince !== undefined) || failingSince !== undefined) return;
      if (scheduled) clearTimeout(scheduled);
      scheduled = undefined;
      scheduledImmediate = true;
      setImmediate(run);
      return;
    }
    if (scheduled || scheduledImmediate) return;
    scheduled = setTimeout(run, delayMs);
  }

  function countRejection(keyId: string, status: number, at: number, count = 1): void {
    const minute = Math.floor(at / 60_000);
    const id = `${keyId}\u0000${minute}\u0000${status}`;
    const counter = rejections.get(id);
    if (counter) counter.count += count;
    else if (rejections.size >= MAX_REJECTION_COUNTERS * 2) droppedRejections += count; // the store has been down a long time
    else rejections.set(id, { keyId, minute, status, count });
    if (rejections.size >= MAX_REJECTION_COUNTERS) schedule(0);
    else rejectionTimer ??= setTimeout(() => {
      rejectionTimer = undefined;
      schedule(0);
    }, REJECTION_FLUSH_MS);
  }

  // An idle gateway still learns that its disk died (and that it came back).
  const prober = setInterval(() => {
    if (closed) return;
    if (queue.length === 0 && rejections.size === 0 && !scheduled && now() - lastCommitAt >= probeIntervalMs) {
      const failure = write(true);
      if (failure) schedule(retryDelay);
    }
  }, probeIntervalMs);
  prober.unref?.();

  const admits = (paid: boolean) => !closed && queue.length < maxQueued && (!paid || failingSince === undefined);

  return {
    async reserve(hold: Hold): Promise<ReserveResult> {
      if (!admits(true)) return { ok: false, reason: "unavailable", message: lastError ?? "the ledger's queue is full" };
      try {
        changes.sync();
        const free = (balance(hold.accountId) ?? 0) - (heldByAccount.get(hold.accountId) ?? 0);
        if (free < hold.amountMicro) return { ok: false, reason: "balance", availableMicro: Math.max(0, free) };
        const keyBudget = budget(hold.keyId);
        if (keyBudget && keyBudget.limit !== null) {
          const keyFree = keyBudget.limit - keyBudget.spent - (heldByKey.get(hold.keyId) ?? 0);
          if (keyFree < hold.amountMicro) return { ok: false, reason: "key_spend_limit", availableMicro: Math.max(0, keyFree) };
        }
      } catch (err) {
        // A store that cannot even be read: refuse rather than admit unmetered.
        log("error", "ledger cannot read balances", { error: describeWriteFailure(err) });
        return { ok: false, reason: "unavailable", message: describeWriteFailure(err) };
      }
      if (holds.has(hold.requestId)) return { ok: true };
      holds.set(hold.requestId, { accountId: hold.accountId, keyId: hold.keyId, amount: hold.amountMicro });
      add(heldByAccount, hold.accountId, hold.amountMicro);
      add(heldByKey, hold.keyId, hold.amountMicro);
      return { ok: true };
    },

    settle(settlement: Settlement): Promise<void> {
      const problem = checkSettlement(settlement);
      if (problem) {
        // The pipeline validates upstream numbers first; this is the last line, never a crash.
        log("error", "settlement with impossible numbers: charged its hold's worth of nothing, recorded as zero", { requestId: settlement.requestId, problem });
        settlement = { ...settlement, costMicro: 0, promptTokens: Math.max(0, Math.trunc(settlement.promptTokens) || 0), completionTokens: Math.max(0, Math.trunc(settlement.completionTokens) || 0), latencyMs: 0 };
      }
      const queued: Queued = { settlement, at: now(), done: undefined };
      const promise = failingSince !== undefined || closed ? Promise.resolve() : new Promise<void>((resolve) => (queued.done = resolve));
      queue.push(queued);
      schedule(0);
      return promise;
    },

    async release(requestId: string): Promise<void> {
      lift(requestId);
    },

    async topUp(accountId: string, amountMicro: number): Promise<boolean> {
      const done = await retryWhileBusy(() => credit(accountId, amountMicro));
      balances.delete(accountId);
      return done;
    },

    async balance(accountId: string) {
      const value = balance(accountId);
      return value === undefined ? null : { balanceMicro: value, heldMicro: heldByAccount.get(accountId) ?? 0 };
    },

    async flush(): Promise<void> {
      if (scheduled) clearTimeout(scheduled);
      scheduled = undefined;
      scheduledImmediate = false;
      while (queue.length > 0 || rejections.size > 0) {
        const failure = write();
        if (failure) {
          schedule(retryDelay);
          return;
        }
      }
    },

    admits,

    health(): LedgerHealth {
      return { writable: failingSince === undefined, queued: queue.length, maxQueued, failingSince, lastError, oldestQueuedAt: queue[0]?.at };
    },

    openHolds: () => holds.size,

    async close(graceMs = 5_000): Promise<void> {
      clearInterval(prober);
      if (rejectionTimer) clearTimeout(rejectionTimer);
      const deadline = performance.now() + graceMs;
      for (;;) {
        if (scheduled) clearTimeout(scheduled);
        scheduled = undefined;
        if (queue.length === 0 && rejections.size === 0) break;
        const failure = write();
        if (failure && performance.now() + retryDelay > deadline) break;
        if (failure) await Bun.sleep(retryDelay);
      }
      closed = true;
      if (queue.length > 0) {
        // Nothing else can keep them: the log is the record of last resort.
        for (const q of queue) log("error", "settlement not written at shutdown; apply it by hand", { settlement: q.settlement });
        for (const q of queue) q.done?.();
      }
      if (droppedRejections > 0) log("warn", "rejection counts dropped while the ledger could not write", { dropped: droppedRejections });
    },

    countRejection: (keyId, status, at) => countRejection(keyId, status, at),
  };
}

/** A failed COMMIT can leave the transaction open; a closed database throws on any call. */
function rollbackQuietly(db: Database): void {
  try {
    if (db.inTransaction) db.exec("ROLLBACK");
  } catch {}
}
