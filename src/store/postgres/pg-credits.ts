import { BalanceCapError, DebitRefusedError, IdempotencyConflictError } from "../../billing/ledger.ts";
import { MAX_BALANCE_MICRO } from "../../billing/money.ts";
import { int, type Pg } from "./pg-client.ts";

/**
 * Adds credits and writes the entry that says so, in one statement (the audit checks every
 * balance against its entries). False for an unknown account. Shared by the ledger (admin API)
 * and the admin CLI.
 *
 * With an idempotency key (unique on credit_entries), the entry is inserted first and the balance
 * moves only when it was: a repeat running at once waits on the first's row and then inserts
 * nothing. A repeat for the same account and amount returns true, credits nothing; for another
 * account or amount it throws IdempotencyConflictError (as store/sqlite/credits.ts).
 */
export async function creditAccount(sql: Pg, accountId: string, amountMicro: number, at: number, idempotencyKey?: string): Promise<boolean> {
  // The cap is in the statement, on the row the statement locks: a refused top-up writes neither
  // the balance nor its entry, and is then told apart from a missing account.
  if (idempotencyKey === undefined) {
    const rows = await sql`
      WITH credited AS (UPDATE accounts SET balance_micro = balance_micro + ${amountMicro} WHERE id = ${accountId} AND balance_micro + ${amountMicro} <= ${MAX_BALANCE_MICRO} RETURNING id)
      INSERT INTO credit_entries (account_id, amount_micro, kind, created_at) SELECT id, ${amountMicro}, 'top_up', ${at} FROM credited RETURNING id`;
    if (rows.length > 0) return true;
    return refusedOrMissing(sql, accountId);
  }
  // The account's row is locked before its balance is read (FOR UPDATE waits for a top-up under way
  // and reads the balance it left): two keyed top-ups at once could otherwise both pass the cap.
  const credited = await sql`
    WITH locked AS (SELECT id FROM accounts WHERE id = ${accountId} AND balance_micro + ${amountMicro} <= ${MAX_BALANCE_MICRO} FOR UPDATE),
    entry AS (
      INSERT INTO credit_entries (account_id, amount_micro, kind, created_at, idempotency_key)
      SELECT id, ${amountMicro}, 'top_up', ${at}, ${idempotencyKey} FROM locked
      ON CONFLICT (idempotency_key) DO NOTHING RETURNING account_id)
    UPDATE accounts SET balance_micro = balance_micro + ${amountMicro} WHERE id IN (SELECT account_id FROM entry) RETURNING id`;
  if (credited.length > 0) return true;
  const [done] = await sql`SELECT account_id, amount_micro FROM credit_entries WHERE idempotency_key = ${idempotencyKey}`;
  if (!done) return refusedOrMissing(sql, accountId);
  if (done.account_id === accountId && int(done.amount_micro) === amountMicro) return true;
  throw new IdempotencyConflictError(idempotencyKey, done.account_id, int(done.amount_micro));
}

/** After a top-up that credited nothing: false for a missing account, else the cap refused it. */
async function refusedOrMissing(sql: Pg, accountId: string): Promise<false> {
  const [row] = await sql`SELECT balance_micro FROM accounts WHERE id = ${accountId}`;
  if (row) throw new BalanceCapError(accountId, int(row.balance_micro));
  return false;
}

/**
 * Takes credits back, with an entry of kind `debit` and a negative amount, never past what the
 * account has available: `balance_micro − held_micro`, the holds of every gateway process on the
 * database, checked on the row the statement locks. False for an unknown account; a debit past
 * what is available throws DebitRefusedError and writes nothing. Keys as creditAccount's, from
 * the same column.
 */
export async function debitAccount(sql: Pg, accountId: string, amountMicro: number, at: number, idempotencyKey?: string): Promise<boolean> {
  if (idempotencyKey === undefined) {
    const rows = await sql`
      WITH debited AS (UPDATE accounts SET balance_micro = balance_micro - ${amountMicro} WHERE id = ${accountId} AND balance_micro - held_micro >= ${amountMicro} RETURNING id)
      INSERT INTO credit_entries (account_id, amount_micro, kind, created_at) SELECT id, ${-amountMicro}, 'debit', ${at} FROM debited RETURNING id`;
    if (rows.length > 0) return true;
    return refusedDebitOrMissing(sql, accountId, amountMicro);
  }
  const debited = await sql`
    WITH locked AS (SELECT id FROM accounts WHERE id = ${accountId} AND balance_micro - held_micro >= ${amountMicro} FOR UPDATE),
    entry AS (
      INSERT INTO credit_entries (account_id, amount_micro, kind, created_at, idempotency_key)
      SELECT id, ${-amountMicro}, 'debit', ${at}, ${idempotencyKey} FROM locked
      ON CONFLICT (idempotency_key) DO NOTHING RETURNING account_id)
    UPDATE accounts SET balance_micro = balance_micro - ${amountMicro} WHERE id IN (SELECT account_id FROM entry) RETURNING id`;
  if (debited.length > 0) return true;
  const [done] = await sql`SELECT account_id, amount_micro FROM credit_entries WHERE idempotency_key = ${idempotencyKey}`;
  if (!done) return refusedDebitOrMissing(sql, accountId, amountMicro);
  if (done.account_id === accountId && int(done.amount_micro) === -amountMicro) return true;
  throw new IdempotencyConflictError(idempotencyKey, done.account_id, int(done.amount_micro));
}

/** After a debit that took nothing: false for a missing account, else what was available refused it. */
async function refusedDebitOrMissing(sql: Pg, accountId: string, amountMicro: number): Promise<false> {
  const [row] = await sql`SELECT balance_micro - held_micro AS available FROM accounts WHERE id = ${accountId}`;
  if (row) throw new DebitRefusedError(accountId, int(row.available), amountMicro);
  return false;
}
