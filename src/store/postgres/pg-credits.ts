import type { Pg } from "./pg-client.ts";

/**
 * Adds credits and writes the entry that says so, in one statement (the audit checks every
 * balance against its entries). False for an unknown account. Shared by the ledger (admin API)
 * and the admin CLI.
 */
export async function creditAccount(sql: Pg, accountId: string, amountMicro: number, at: number): Promise<boolean> {
  const rows = await sql`
    WITH credited AS (UPDATE accounts SET balance_micro = balance_micro + ${amountMicro} WHERE id = ${accountId} RETURNING id)
    INSERT INTO credit_entries (account_id, amount_micro, kind, created_at) SELECT id, ${amountMicro}, 'top_up', ${at} FROM credited RETURNING id`;
  return rows.length > 0;
}
