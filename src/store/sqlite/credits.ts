import type { Database } from "bun:sqlite";
import { BalanceCapError, DebitRefusedError, IdempotencyConflictError } from "../../billing/ledger.ts";
import { MAX_BALANCE_MICRO } from "../../billing/money.ts";

/** Moves a balance by a positive amount; false for an unknown account. */
export type BalanceEntryWriter = (accountId: string, amountMicro: number, idempotencyKey?: string) => boolean;

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
export function creditWriter(db: Database, now: () => number): BalanceEntryWriter {
  return entryWriter(db, now, "top_up", (accountId, balance, amountMicro) => {
    if (balance + amountMicro > MAX_BALANCE_MICRO) throw new BalanceCapError(accountId, balance);
  });
}

/**
 * Takes credits back, with an entry of kind `debit` and a negative amount (so the audit's sums
 * still hold), never past `balance − heldOf(account)`: the holds of requests in flight, which
 * live in the gateway's memory on SQLite (zero for a CLI that holds the gateway lock). Keys as
 * creditWriter's, from the same column: a top-up's key is a conflict here.
 */
export function debitWriter(db: Database, now: () => number, heldOf: (accountId: string) => number): BalanceEntryWriter {
  return entryWriter(db, now, "debit", (accountId, balance, amountMicro) => {
    const available = balance - heldOf(accountId);
    if (amountMicro > available) throw new DebitRefusedError(accountId, available, amountMicro);
  });
}

function entryWriter(db: Database, now: () => number, kind: "top_up" | "debit", check: (accountId: string, balance: number, amountMicro: number) => void): BalanceEntryWriter {
  const sign = kind === "debit" ? -1 : 1;
  const move = db.query("UPDATE accounts SET balance_micro = balance_micro + ? WHERE id = ?");
  const balance = db.query<{ b: number }, [string]>("SELECT balance_micro AS b FROM accounts WHERE id = ?");
  const entry = db.query(`INSERT INTO credit_entries (account_id, amount_micro, kind, created_at, idempotency_key) VALUES (?, ?, '${kind}', ?, ?)`);
  const earlier = db.query<{ account_id: string; amount_micro: number }, [string]>("SELECT account_id, amount_micro FROM credit_entries WHERE idempotency_key = ?");
  const write = db.transaction((accountId: string, amountMicro: number, idempotencyKey: string | null): boolean => {
    const signed = sign * amountMicro;
    if (idempotencyKey !== null) {
      const done = earlier.get(idempotencyKey);
      if (done) {
        if (done.account_id === accountId && done.amount_micro === signed) return true;
        throw new IdempotencyConflictError(idempotencyKey, done.account_id, done.amount_micro);
      }
    }
    const before = balance.get(accountId);
    if (!before) return false;
    check(accountId, before.b, amountMicro);
    move.run(signed, accountId);
    entry.run(accountId, signed, now(), idempotencyKey);
    return true;
  });
  return (accountId, amountMicro, idempotencyKey) => write.immediate(accountId, amountMicro, idempotencyKey ?? null);
}
