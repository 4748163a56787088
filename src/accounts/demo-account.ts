import type { Database } from "bun:sqlite";
import type { AccountStore } from "./account-store.ts";

export const DEMO_ACCOUNT_NAME = "demo";
const DEMO_CREDITS_MICRO = 100 * 1_000_000;

/**
 * The quick start needs a key that works at once. Keys are stored hashed and shown once,
 * so each start revokes the previous demo key and prints a fresh one.
 */
export function issueDemoKey(db: Database, accounts: AccountStore): { accountId: string; key: string } {
  let row = db.query<{ id: string }, [string]>("SELECT id FROM accounts WHERE name = ? ORDER BY created_at LIMIT 1").get(DEMO_ACCOUNT_NAME);
  if (!row) row = { id: accounts.createAccount(DEMO_ACCOUNT_NAME, DEMO_CREDITS_MICRO).id };
  const old = db.query<{ id: string }, [string]>("SELECT id FROM api_keys WHERE account_id = ? AND name = 'demo' AND revoked_at IS NULL").all(row.id);
  for (const k of old) accounts.revokeKey(k.id);
  return { accountId: row.id, key: accounts.createKey(row.id, "demo")!.key };
}
