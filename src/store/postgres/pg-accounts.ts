import { iso, keyOptions, KeyLimitError, MAX_ACTIVE_KEYS, newKey, type Account, type AccountDescription, type AccountStore, type ActiveKey, type IssuedKey, type KeyOptions, type KeySummary } from "../../accounts/account-store.ts";
import { microToCredits } from "../../billing/money.ts";
import { randomId } from "../ids.ts";
import { int, withTimeout, type Pg } from "./pg-client.ts";

/**
 * The AccountStore on PostgreSQL. Every call is one bounded round trip (or one short
 * transaction). Key creation takes a transaction-scoped advisory lock per account before it
 * counts the active keys, so two processes creating keys at once cannot both take the tenth
 * place — without locking the account row that reservations and settlements update.
 */
export function createPostgresAccounts(sql: Pg, now: () => number, timeoutMs = 2_000): AccountStore {
  const bounded = <T>(promise: Promise<T>, what: string) => withTimeout(promise, timeoutMs, what);
  const account = (row: { id: string; name: string; balance_micro: unknown; created_at: unknown }): Account =>
    ({ id: row.id, name: row.name, balance: microToCredits(int(row.balance_micro)), created_at: iso(int(row.created_at))! });
  const nullable = (value: unknown) => (value === null || value === undefined ? null : int(value));

  const store: AccountStore = {
    async createAccount(name: string, balanceMicro: number): Promise<Account> {
      const id = randomId("acct");
      const at = now();
      // The opening credit is an entry like any top-up, so the audit can sum what went in.
      await bounded(sql`
        WITH opened AS (INSERT INTO accounts (id, name, balance_micro, created_at) VALUES (${id}, ${name}, ${balanceMicro}, ${at}) RETURNING id)
        INSERT INTO credit_entries (account_id, amount_micro, kind, created_at) SELECT id, ${balanceMicro}, 'initial', ${at} FROM opened`, "create account");
      return { id, name, balance: microToCredits(balanceMicro), created_at: iso(at)! };
    },

    async getAccount(id: string): Promise<Account | null> {
      const [row] = await bounded(sql`SELECT id, name, balance_micro, created_at FROM accounts WHERE id = ${id}`, "account");
      return row ? account(row) : null;
    },

    async findAccountByName(name: string): Promise<Account | null> {
      const [row] = await bounded(sql`SELECT id, name, balance_micro, created_at FROM accounts WHERE name = ${name} ORDER BY created_at, id LIMIT 1`, "account");
      return row ? account(row) : null;
    },

    async describeAccount(id: string, heldMicro?: number): Promise<AccountDescription | null> {
      const [row] = await bounded(sql`SELECT id, name, balance_micro, held_micro, created_at FROM accounts WHERE id = ${id}`, "account");
      if (!row) return null;
      // Every process's holds are in the database's held total.
      return { ...account(row), reserved: microToCredits(heldMicro ?? int(row.held_micro)), keys: await store.listKeys(id) };
    },

    async createKey(accountId: string, options: KeyOptions | string | null = {}): Promise<IssuedKey | null> {
      const o = keyOptions(options);
      const id = randomId("key");
      const { key, hash, prefix, last4 } = newKey();
      const name = o.name ?? null;
      const at = now();
      return bounded(sql.begin(async (tx) => {
        await tx`SELECT pg_advisory_xact_lock(hashtextextended(${accountId}, 0))`;
        const [exists] = await tx`SELECT 1 AS one FROM accounts WHERE id = ${accountId}`;
        if (!exists) return null;
        const [active] = await tx`SELECT COUNT(*) AS n FROM api_keys WHERE account_id = ${accountId} AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ${at})`;
        if (int(active.n) >= MAX_ACTIVE_KEYS) {
          throw new KeyLimitError(`This account already has ${MAX_ACTIVE_KEYS} active keys, the most allowed. Revoke one first.`);
        }
        await tx`INSERT INTO api_keys (id, account_id, name, key_hash, key_prefix, key_last4, created_at, rate_limit_per_minute, expires_at, spend_limit_micro)
                 VALUES (${id}, ${accountId}, ${name}, ${hash}, ${prefix}, ${last4}, ${at}, ${o.rateLimitPerMinute ?? null}, ${o.expiresAt ?? null}, ${o.spendLimitMicro ?? null})`;
        return { id, key, name, created_at: iso(at)! };
      }), "create key");
    },

    async listKeys(accountId: string): Promise<KeySummary[]> {
      const rows = await bounded(sql`
        SELECT id, name, key_prefix, key_last4, created_at, revoked_at, expires_at, rate_limit_per_minute, spend_limit_micro, spent_micro
          FROM api_keys WHERE account_id = ${accountId} ORDER BY created_at, id`, "keys");
      return rows.map((k: Record<string, unknown>) => ({
        id: k.id as string,
        name: k.name as string | null,
        prefix: k.key_prefix as string,
        last4: k.key_last4 as string,
        created_at: iso(int(k.created_at))!,
        revoked_at: iso(nullable(k.revoked_at)),
        expires_at: iso(nullable(k.expires_at)),
        rate_limit_per_minute: nullable(k.rate_limit_per_minute),
        spend_limit: k.spend_limit_micro === null ? null : microToCredits(int(k.spend_limit_micro)),
        spent: microToCredits(int(k.spent_micro)),
      }));
    },

    async revokeKey(keyId: string): Promise<boolean> {
      const rows = await bounded(sql`UPDATE api_keys SET revoked_at = ${now()} WHERE id = ${keyId} AND revoked_at IS NULL RETURNING id`, "revoke key");
      return rows.length > 0;
    },

    async findActiveKey(keyHash: string): Promise<ActiveKey | null> {
      const [row] = await bounded(sql`SELECT id, account_id, rate_limit_per_minute, expires_at FROM api_keys WHERE key_hash = ${keyHash} AND revoked_at IS NULL`, "key lookup");
      return row ? { keyId: row.id, accountId: row.account_id, rateLimitPerMinute: nullable(row.rate_limit_per_minute), expiresAt: nullable(row.expires_at) } : null;
    },
  };
  return store;
}
