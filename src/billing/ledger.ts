import type { Database } from "bun:sqlite";
import { hostname } from "node:os";
import { randomId } from "../store/ids.ts";
import { createChangeWatch, type ChangeWatch } from "../store/change-watch.ts";

export interface UsageRecord {
  requestId: string;
  accountId: string;
  keyId: string;
  model: string;
  provider: string;
  promptTokens: number;
  completionTokens: number;
  estimated: boolean;
  status: string;
  latencyMs: number;
}

export type ReserveResult =
  | { ok: true; id: string }
  | { ok: false; reason: "balance"; availableMicro: number }
  | { ok: false; reason: "key_spend_limit"; availableMicro: number };

interface PendingSettlement {
  reservationId: string | null;
  costMicro: number;
  record: UsageRecord;
  at: number;
}

/** A process is presumed dead when its heartbeat is this old (for instances on other hosts). */
const STALE_INSTANCE_MS = 60_000;
/** Settlements wait at most this long, or until this many are queued, before they are written. */
const FLUSH_DELAY_MS = 20;
const FLUSH_BATCH = 256;

/**
 * The only place money moves. A reservation is a hold in memory on (balance − holds), checked
 * against the balance as SQLite has it: JavaScript runs one request at a time, so check and hold
 * cannot interleave, and no request writes to disk before it has an answer (a write transaction
 * per request costs the WAL an fsync every few hundred requests). Settlements are queued and
 * written in batches — one transaction per batch, each settlement's debit and usage record
 * together — and their holds are lifted only once the batch is on disk, so a balance check errs
 * only on the side of refusing. A process that dies takes its holds with it: nothing stays locked.
 * The price of holds in memory is one gateway process per database file; a second one is
 * detected through the instance heartbeat and logged.
 *
 * Balances and key budgets are read from disk once and then kept in step with our own commits;
 * a commit by another connection (a top-up from the CLI) drops the copies. Under load a SELECT
 * per request cost more than the rest of the reservation put together.
 */
export function createLedger(db: Database, now: () => number, changes: ChangeWatch = createChangeWatch(db)) {
  const instanceId = randomId("gw");
  const host = hostname();

  const balanceOf = db.query<{ balance_micro: number }, [string]>("SELECT balance_micro FROM accounts WHERE id = ?");
  const keyBudget = db.query<{ spend_limit_micro: number | null; spent_micro: number }, [string]>(
    "SELECT spend_limit_micro, spent_micro FROM api_keys WHERE id = ?",
  );
  const debitAccount = db.query("UPDATE accounts SET balance_micro = balance_micro - ? WHERE id = ?");
  const debitKey = db.query("UPDATE api_keys SET spent_micro = spent_micro + ? WHERE id = ?");
  const insertUsage = db.query(
    `INSERT OR IGNORE INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const credit = db.query("UPDATE accounts SET balance_micro = balance_micro + ? WHERE id = ?");

  /** What SQLite has, as of our last read plus our own commits since. */
  const balances = new Map<string, number>();
  const budgets = new Map<string, { limit: number | null; spent: number }>();
  changes.onChange(() => {
    balances.clear();
    budgets.clear();
  });
  const balance = (accountId: string): number => {
    let value = balances.get(accountId);
    if (value === undefined) {
      const row = balanceOf.get(accountId);
      if (!row) return 0;
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

  const holds = new Map<string, { accountId: string; keyId: string; amount: number }>();
  const heldByAccount = new Map<string, number>();
  const heldByKey = new Map<string, number>();
  let nextHold = 0;
  const add = (map: Map<string, number>, id: string, delta: number) => {
    const value = (map.get(id) ?? 0) + delta;
    if (value === 0) map.delete(id);
    else map.set(id, value);
  };

  /** Debits are summed per account and per key: one UPDATE each per batch, not per request. */
  const settleBatch = db.transaction((batch: PendingSettlement[]) => {
    const byAccount = new Map<string, number>();
    const byKey = new Map<string, number>();
    for (const s of batch) {
      let charged = 0;
      if (s.reservationId) {
        const held = holds.get(s.reservationId);
        if (!held) continue; // settled already: never charge twice
        charged = Math.min(s.costMicro, held.amount);
        if (charged > 0) {
          add(byAccount, held.accountId, charged);
          add(byKey, held.keyId, charged);
        }
      }
      const r = s.record;
      insertUsage.run(r.requestId, r.accountId, r.keyId, r.model, r.provider, r.promptTokens, r.completionTokens, r.estimated ? 1 : 0, charged, r.status, r.latencyMs, s.at);
    }
    for (const [accountId, amount] of byAccount) debitAccount.run(amount, accountId);
    for (const [keyId, amount] of byKey) debitKey.run(amount, keyId);
    return { byAccount, byKey };
  });

  let pending: PendingSettlement[] = [];
  let timer: ReturnType<typeof setTimeout> | undefined;

  function release(reservationId: string): void {
    const held = holds.get(reservationId);
    if (!held) return;
    holds.delete(reservationId);
    add(heldByAccount, held.accountId, -held.amount);
    add(heldByKey, held.keyId, -held.amount);
  }

  function flush(): void {
    if (timer) clearTimeout(timer);
    timer = undefined;
    if (pending.length === 0) return;
    const batch = pending;
    pending = [];
    const { byAccount, byKey } = settleBatch.immediate(batch);
    // Only now is the debit on disk; until here the hold kept the money out of reach.
    for (const [accountId, amount] of byAccount) {
      const cached = balances.get(accountId);
      if (cached !== undefined) balances.set(accountId, cached - amount);
    }
    for (const [keyId, amount] of byKey) {
      const cached = budgets.get(keyId);
      if (cached) cached.spent += amount;
    }
    for (const s of batch) if (s.reservationId) release(s.reservationId);
  }

  const upsertInstance = db.query(
    "INSERT INTO gateway_instances (id, hostname, pid, started_at, heartbeat_at) VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT(id) DO UPDATE SET heartbeat_at = ?4",
  );
  const otherInstances = db.query<{ id: string; hostname: string; pid: number; heartbeat_at: number }, [string]>(
    "SELECT id, hostname, pid, heartbeat_at FROM gateway_instances WHERE id != ?",
  );
  const dropInstance = db.query("DELETE FROM gateway_instances WHERE id = ?");

  return {
    instanceId,

    reserve(accountId: string, keyId: string, amountMicro: number): ReserveResult {
      changes.sync();
      const free = balance(accountId) - (heldByAccount.get(accountId) ?? 0);
      if (free < amountMicro) return { ok: false, reason: "balance", availableMicro: Math.max(0, free) };
      const keyBudget = budget(keyId);
      if (keyBudget && keyBudget.limit !== null) {
        const keyFree = keyBudget.limit - keyBudget.spent - (heldByKey.get(keyId) ?? 0);
        if (keyFree < amountMicro) return { ok: false, reason: "key_spend_limit", availableMicro: Math.max(0, keyFree) };
      }
      const id = `res_${(nextHold++).toString(36)}`;
      holds.set(id, { accountId, keyId, amount: amountMicro });
      add(heldByAccount, accountId, amountMicro);
      add(heldByKey, keyId, amountMicro);
      return { ok: true, id };
    },

    /**
     * Charges min(cost, reserved) and records usage; queued, written within FLUSH_DELAY_MS.
     * A request without a reservation (free model) still leaves its usage record.
     */
    settle(reservationId: string | null, costMicro: number, record: UsageRecord): void {
      pending.push({ reservationId, costMicro, record, at: now() });
      if (pending.length >= FLUSH_BATCH) flush();
      else timer ??= setTimeout(flush, FLUSH_DELAY_MS);
    },

    /** Writes every queued settlement now (tests, shutdown). */
    flush,

    /** Micro-credits held by requests in flight. */
    heldMicro: (accountId: string) => heldByAccount.get(accountId) ?? 0,
    openHolds: () => holds.size,

    /**
     * The heartbeat: registers this process and forgets dead ones. A second live gateway on the
     * same file is reported: its holds are invisible to ours. Returns how many live others there are.
     */
    recover(log?: (message: string, fields: Record<string, unknown>) => void): number {
      const at = now();
      let others = 0;
      db.transaction(() => {
        upsertInstance.run(instanceId, host, process.pid, at);
        for (const other of otherInstances.all(instanceId)) {
          const dead = (other.hostname === host && !processAlive(other.pid)) || other.heartbeat_at < at - STALE_INSTANCE_MS;
          if (dead) dropInstance.run(other.id);
          else others += 1;
        }
      }).immediate();
      if (others > 0) log?.("another gateway process uses this database: run one gateway per database file", { others });
      return others;
    },

    /** Forgets this instance on a clean shutdown, after the last flush. */
    retire(): void {
      flush();
      dropInstance.run(instanceId);
    },

    topUp(accountId: string, amountMicro: number): boolean {
      balances.delete(accountId);
      return credit.run(amountMicro, accountId).changes > 0;
    },
  };
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

export type Ledger = ReturnType<typeof createLedger>;
