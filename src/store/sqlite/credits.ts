import type { Database } from "bun:sqlite";
import { BalanceCapError, IdempotencyConflictError } from "../../billing/ledger.ts";
import { MAX_BALANCE_MICRO } from "../../billing/money.ts";

/**
 * Adds credits to an account and writes the entry that says so, in one transaction: the audit
 * (audit.ts) checks every balance against its entries. Returns false for an unknown account.
 * Shared by the ledger (admin API) and the admin CLI.
 *
 * With an idempotency key, the entry keeps it (unique): a top-up repeated with the same key, for
 * the same account and amount, credits nothing more and returns true; for another account or
 * amount it throws IdempotencyConflictError. The check and the write share the transaction's
 * write lock, so two repeats at once credit once.
 */
export function creditWriter(db: Database, now: () => number): (accountId: string, amountMicro: number, idempotencyKey?: string) => boolean {
  const credit = db.query("UPDATE accounts SET balance_micro = balance_micro + ? WHERE id = ?");
  const balance = db.query<{ b: number }, [string]>("SELECT balance_micro AS b FROM accounts WHERE id = ?");
  const entry = db.query("INSERT INTO credit_entries (account_id, amount_micro, kind, created_at, idempotency_key) VALUES (?, ?, 'top_up', ?, ?)");
  const earlier = db.query<{ account_id: string; amount_micro: number }, [string]>("SELECT account_id, amount_micro FROM credit_entries WHERE idempotency_key = ?");
  const write = db.transaction((accountId: string, amountMicro: number, idempotencyKey: string | null): boolean => {
    if (idempotencyKey !== null) {
      const done = earlier.get(idempotencyKey);
      if (done) {
        if (done.account_id === accountId && done.amount_micro === amountMicro) return true;
        throw new IdempotencyConflictError(idempotencyKey, done.account_id, done.amount_micro);
      }
    }
    const before = balance.get(accountId);
    if (!before) return false;
    if (before.b + amountMicro > MAX_BALANCE_MICRO) throw new BalanceCapError(accountId);
    credit.run(amountMicro, accountId);
    entry.run(accountId, amountMicro, now(), idempotencyKey);
    return true;
  });
  return (accountId, amountMicro, idempotencyKey) => write.immediate(accountId, amountMicro, idempotencyKey ?? null);
}
