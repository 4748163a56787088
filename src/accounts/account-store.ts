import type { Database } from "bun:sqlite";
import { randomId } from "../store/ids.ts";
import { microToCredits } from "../billing/money.ts";

export const KEY_PREFIX = "svc-sk-";

export interface Account { id: string; name: string; balance: number; created_at: string }
export interface IssuedKey { id: string; key: string; name: string | null; created_at: string }
export interface ActiveKey { keyId: string; accountId: string }

/** A key body is 32 random bytes in base64url: 43 URL-safe characters, well over the 32 asked for. */
export function generateKey(): string {
  return KEY_PREFIX + Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64url");
}

export function hashKey(key: string): string {
  return new Bun.CryptoHasher("sha256").update(key).digest("hex");
}

export function createAccountStore(db: Database, now: () => number) {
  const insertAccount = db.query("INSERT INTO accounts (id, name, balance_micro, created_at) VALUES (?, ?, ?, ?)");
  const selectAccount = db.query<{ id: string; name: string; balance_micro: number; created_at: number }, [string]>(
    "SELECT id, name, balance_micro, created_at FROM accounts WHERE id = ?",
  );
  const insertKey = db.query(
    "INSERT INTO api_keys (id, account_id, name, key_hash, key_prefix, key_last4, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
  );
  const revoke = db.query("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL");
  const selectActiveKey = db.query<{ id: string; account_id: string }, [string]>(
    "SELECT id, account_id FROM api_keys WHERE key_hash = ? AND revoked_at IS NULL",
  );

  return {
    createAccount(name: string, balanceMicro: number): Account {
      const id = randomId("acct");
      const at = now();
      insertAccount.run(id, name, balanceMicro, at);
      return { id, name, balance: microToCredits(balanceMicro), created_at: new Date(at).toISOString() };
    },

    getAccount(id: string): Account | null {
      const row = selectAccount.get(id);
      if (!row) return null;
      return { id: row.id, name: row.name, balance: microToCredits(row.balance_micro), created_at: new Date(row.created_at).toISOString() };
    },

    /** The plain key is returned once and never stored; only its SHA-256 is kept. */
    createKey(accountId: string, name: string | null): IssuedKey | null {
      if (!selectAccount.get(accountId)) return null;
      const id = randomId("key");
      const key = generateKey();
      const at = now();
      insertKey.run(id, accountId, name, hashKey(key), key.slice(0, KEY_PREFIX.length + 4), key.slice(-4), at);
      return { id, key, name, created_at: new Date(at).toISOString() };
    },

    revokeKey(keyId: string): boolean {
      return revoke.run(now(), keyId).changes > 0;
    },

    findActiveKey(keyHash: string): ActiveKey | null {
      const row = selectActiveKey.get(keyHash);
      return row ? { keyId: row.id, accountId: row.account_id } : null;
    },
  };
}

export type AccountStore = ReturnType<typeof createAccountStore>;
