import type { Database } from "bun:sqlite";
import { hostname } from "node:os";
import { randomId } from "../store/ids.ts";

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
 * The only place money moves. Reservations are taken synchronously in one immediate
 * transaction (the write lock is held before the balance is read, so two processes can
 * never spend the same credit). Settlements are queued and written in batches — one
 * transaction per batch, each settlement's debit, release and usage record together — so
 * no response waits on a write; until a settlement is written its reservation still holds
 * the money, which keeps every balance check on the safe side.
 */
export function createLedger(db: Database, now: () => number) {
  const instanceId = randomId("gw");
  const host = hostname();

  const accountAvailable = db.query<{ available: number }, [string, string]>(
    `SELECT balance_micro - COALESCE((SELECT SUM(amount_micro) FROM reservations WHERE account_id = ?1), 0) AS available
       FROM accounts WHERE id = ?2`,
  );
  const keyAvailable = db.query<{ available: number | null }, [string, string]>(
    `SELECT spend_limit_micro - spent_micro - COALESCE((SELECT SUM(amount_micro) FROM reservations WHERE key_id = ?1), 0) AS available
       FROM api_keys WHERE id = ?2`,
  );
  const insertReservation = db.query(
    "INSERT INTO reservations (id, account_id, key_id, instance_id, amount_micro, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
  );
  const selectReservation = db.query<{ account_id: string; key_id: string | null; amount_micro: number }, [string]>(
    "SELECT account_id, key_id, amount_micro FROM reservations WHERE id = ?",
  );
  const deleteReservation = db.query("DELETE FROM reservations WHERE id = ?");
  const debitAccount = db.query("UPDATE accounts SET balance_micro = balance_micro - ? WHERE id = ?");
  const debitKey = db.query("UPDATE api_keys SET spent_micro = spent_micro + ? WHERE id = ?");
  const insertUsage = db.query(
    `INSERT OR IGNORE INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const credit = db.query("UPDATE accounts SET balance_micro = balance_micro + ? WHERE id = ?");

  const reserve = db.transaction((accountId: string, keyId: string, amountMicro: number, ttlMs: number): ReserveResult => {
    const free = accountAvailable.get(accountId, accountId)?.available ?? 0;
    if (free < amountMicro) return { ok: false, reason: "balance", availableMicro: Math.max(0, free) };
    const keyFree = keyAvailable.get(keyId, keyId)?.available;
    if (keyFree !== null && keyFree !== undefined && keyFree < amountMicro) {
      return { ok: false, reason: "key_spend_limit", availableMicro: Math.max(0, keyFree) };
    }
    const id = randomId("res");
    const at = now();
    insertReservation.run(id, accountId, keyId, instanceId, amountMicro, at, at + ttlMs);
    return { ok: true, id };
  });

  const settleBatch = db.transaction((batch: PendingSettlement[]) => {
    for (const s of batch) {
      let charged = 0;
      if (s.reservationId) {
        const held = selectReservation.get(s.reservationId);
        // Gone means released already (a restart freed it): never charge twice, never charge unreserved.
        if (!held) continue;
        charged = Math.min(s.costMicro, held.amount_micro);
        deleteReservation.run(s.reservationId);
        if (charged > 0) {
          debitAccount.run(charged, held.account_id);
          if (held.key_id) debitKey.run(charged, held.key_id);
        }
      }
      const r = s.record;
      insertUsage.run(r.requestId, r.accountId, r.keyId, r.model, r.provider, r.promptTokens, r.completionTokens, r.estimated ? 1 : 0, charged, r.status, r.latencyMs, s.at);
    }
  });

  let pending: PendingSettlement[] = [];
  let timer: ReturnType<typeof setTimeout> | undefined;

  function flush(): void {
    if (timer) clearTimeout(timer);
    timer = undefined;
    if (pending.length === 0) return;
    const batch = pending;
    pending = [];
    settleBatch.immediate(batch);
  }

  const upsertInstance = db.query(
    "INSERT INTO gateway_instances (id, hostname, pid, started_at, heartbeat_at) VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT(id) DO UPDATE SET heartbeat_at = ?4",
  );
  const otherInstances = db.query<{ id: string; hostname: string; pid: number; heartbeat_at: number }, [string]>(
    "SELECT id, hostname, pid, heartbeat_at FROM gateway_instances WHERE id != ?",
  );
  const dropInstance = db.query("DELETE FROM gateway_instances WHERE id = ?");
  const releaseOfInstance = db.query("DELETE FROM reservations WHERE instance_id = ?");
  const releaseOrphans = db.query(
    "DELETE FROM reservations WHERE expires_at <= ?1 OR instance_id IS NULL OR (instance_id != ?2 AND instance_id NOT IN (SELECT id FROM gateway_instances))",
  );

  const recover = db.transaction((at: number) => {
    let released = 0;
    upsertInstance.run(instanceId, host, process.pid, at);
    for (const other of otherInstances.all(instanceId)) {
      const dead = (other.hostname === host && !processAlive(other.pid)) || other.heartbeat_at < at - STALE_INSTANCE_MS;
      if (!dead) continue;
      released += releaseOfInstance.run(other.id).changes;
      dropInstance.run(other.id);
    }
    released += releaseOrphans.run(at, instanceId).changes;
    return released;
  });

  return {
    instanceId,

    reserve: (accountId: string, keyId: string, amountMicro: number, ttlMs: number): ReserveResult =>
      reserve.immediate(accountId, keyId, amountMicro, ttlMs),

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

    /**
     * Frees what dead gateways left reserved: processes on this host that no longer exist,
     * instances elsewhere whose heartbeat stopped, and expired reservations. Also the heartbeat.
     */
    recover: (): number => recover.immediate(now()),

    /** Forgets this instance on a clean shutdown, after the last flush. */
    retire(): void {
      flush();
      db.transaction(() => {
        releaseOfInstance.run(instanceId);
        dropInstance.run(instanceId);
      }).immediate();
    },

    topUp(accountId: string, amountMicro: number): boolean {
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
