import type { Database } from "bun:sqlite";

/**
 * Adds credits to an account and writes the entry that says so, in one transaction: the audit
 * (audit.ts) checks every balance against its entries. Returns false for an unknown account.
 * Shared by the ledger (admin API) and the admin CLI.
 */
export function creditWriter(db: Database, now: () => number): (accountId: string, amountMicro: number) => boolean {
  const credit = db.query("UPDATE accounts SET balance_micro = balance_micro + ? WHERE id = ?");
  const entry = db.query("INSERT INTO credit_entries (account_id, amount_micro, kind, created_at) VALUES (?, ?, 'top_up', ?)");
  const write = db.transaction((accountId: string, amountMicro: number): boolean => {
    if (credit.run(amountMicro, accountId).changes === 0) return false;
    entry.run(accountId, amountMicro, now());
    return true;
  });
  return (accountId, amountMicro) => write.immediate(accountId, amountMicro);
}
