import type { Database } from "bun:sqlite";
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

export type ReserveResult = { ok: true; id: string } | { ok: false; availableMicro: number };

/**
 * Every money move is one immediate SQLite transaction: the write lock is taken before the
 * balance is read, so two gateways (or the CLI) can never both spend the same credit.
 */
export function createLedger(db: Database, now: () => number) {
  const available = db.query<{ available: number }, [string, string]>(
    `SELECT balance_micro - COALESCE((SELECT SUM(amount_micro) FROM reservations WHERE account_id = ?1), 0) AS available
       FROM accounts WHERE id = ?2`,
  );
  const insertReservation = db.query("INSERT INTO reservations (id, account_id, amount_micro, created_at, expires_at) VALUES (?, ?, ?, ?, ?)");
  const selectReservation = db.query<{ account_id: string; amount_micro: number }, [string]>(
    "SELECT account_id, amount_micro FROM reservations WHERE id = ?",
  );
  const deleteReservation = db.query("DELETE FROM reservations WHERE id = ?");
  const debit = db.query("UPDATE accounts SET balance_micro = balance_micro - ? WHERE id = ?");
  const insertUsage = db.query(
    `INSERT INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const expired = db.query("DELETE FROM reservations WHERE expires_at <= ?");

  const reserve = db.transaction((accountId: string, amountMicro: number, ttlMs: number): ReserveResult => {
    const row = available.get(accountId, accountId);
    const free = row?.available ?? 0;
    if (free < amountMicro) return { ok: false, availableMicro: Math.max(0, free) };
    const id = randomId("res");
    const at = now();
    insertReservation.run(id, accountId, amountMicro, at, at + ttlMs);
    return { ok: true, id };
  });

  const settle = db.transaction((reservationId: string | null, costMicro: number, record: UsageRecord): number => {
    let charged = 0;
    if (reservationId) {
      const held = selectReservation.get(reservationId);
      if (!held) return -1; // settled already: a second settle must never charge again
      charged = Math.min(costMicro, held.amount_micro);
      deleteReservation.run(reservationId);
      if (charged > 0) debit.run(charged, held.account_id);
    }
    insertUsage.run(
      record.requestId, record.accountId, record.keyId, record.model, record.provider,
      record.promptTokens, record.completionTokens, record.estimated ? 1 : 0, charged,
      record.status, record.latencyMs, now(),
    );
    return charged;
  });

  return {
    reserve: (accountId: string, amountMicro: number, ttlMs: number) => reserve.immediate(accountId, amountMicro, ttlMs),
    /** Charges min(cost, reserved), releases the rest and records usage; returns micro-credits charged, or -1 if already settled. */
    settle: (reservationId: string | null, costMicro: number, record: UsageRecord) => settle.immediate(reservationId, costMicro, record),
    /** Frees reservations a dead process left behind. */
    releaseExpired: () => expired.run(now()).changes,
  };
}

export type Ledger = ReturnType<typeof createLedger>;
