import type { AccountStore } from "./account-store.ts";

export const DEMO_ACCOUNT_NAME = "demo";
/**
 * What a new demo account starts with. A request holds its worst case before it is sent: Claude
 * Code asks Sonnet for 32,000 tokens, capped to 8,192, a hold of ~123 credits; 100 would refuse
 * its first request with a 402. An existing demo account keeps its balance (never topped up).
 */
export const DEMO_CREDITS_MICRO = 1_000 * 1_000_000;

export class DemoConfigError extends Error {}

/** Whether this start issues a demo key, and why not when it does not (for the operator's log). */
export type DemoChoice = { on: true } | { on: false; reason: string };

/**
 * The demo key is for the quick start, a fresh clone with nothing set. Anything that says the
 * gateway serves real tenants turns it off unless SWITCHYARD_DEMO=1 asks for it: an admin token
 * (accounts are managed), a shared database (every replica's start would revoke the others' key),
 * or the container image (SWITCHYARD_CONTAINER, set by the Dockerfile).
 */
export function demoChoice(env: Record<string, string | undefined>): DemoChoice {
  const raw = env.SWITCHYARD_DEMO?.trim().toLowerCase();
  if (raw) {
    if (["1", "on", "true", "yes"].includes(raw)) return { on: true };
    if (["0", "off", "false", "no"].includes(raw)) return { on: false, reason: "SWITCHYARD_DEMO is off" };
    throw new DemoConfigError(`SWITCHYARD_DEMO must be 1 or 0 (on or off), not "${env.SWITCHYARD_DEMO}"`);
  }
  if (env.SWITCHYARD_ADMIN_TOKEN) return { on: false, reason: "SWITCHYARD_ADMIN_TOKEN is set" };
  if (env.SWITCHYARD_DATABASE_URL) return { on: false, reason: "SWITCHYARD_DATABASE_URL is set" };
  if (env.SWITCHYARD_CONTAINER) return { on: false, reason: "running in the container image (SWITCHYARD_CONTAINER)" };
  return { on: true };
}

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
