import type { AccountStore } from "./account-store.ts";

export const DEMO_ACCOUNT_NAME = "demo";
/**
 * What a new demo account starts with. A request holds its worst case before it is sent: Claude
 * Code asks Sonnet for 32,000 tokens, capped to 8,192, a hold of ~123 credits; 100 would refuse
 * its first request with a 402. An existing demo account keeps its balance (never topped up).
 */
export const DEMO_CREDITS_MICRO = 1_000 * 1_000_000;

/**
 * The quick start needs a key that works at once. Keys are stored hashed and shown once,
 * so each start revokes the previous demo key and prints a fresh one.
 */
export async function issueDemoKey(accounts: AccountStore): Promise<{ accountId: string; key: string }> {
  const account = (await accounts.findAccountByName(DEMO_ACCOUNT_NAME)) ?? (await accounts.createAccount(DEMO_ACCOUNT_NAME, DEMO_CREDITS_MICRO));
  for (const k of await accounts.listKeys(account.id)) {
    if (k.name === "demo" && k.revoked_at === null) await accounts.revokeKey(k.id);
  }
  return { accountId: account.id, key: (await accounts.createKey(account.id, "demo"))!.key };
}
