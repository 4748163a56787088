import type { Database } from "bun:sqlite";
import { randomId } from "../store/ids.ts";
import { microToCredits } from "../billing/money.ts";

export const KEY_PREFIX = "svc-sk-";
/** Spec 5.4: at most 10 active keys per account. */
export const MAX_ACTIVE_KEYS = 10;

export interface Account { id: string; name: string; balance: number; created_at: string }
export interface IssuedKey { id: string; key: string; name: string | null; created_at: string }
export interface ActiveKey {
  keyId: string;
  accountId: string;
  /** Per-key override of limits.requests_per_minute. */
  rateLimitPerMinute: number | null;
  /** Epoch ms after which the key stops working. */
  expiresAt: number | null;
}
export interface KeyOptions {
  name?: string | null;
  rateLimitPerMinute?: number | null;
  expiresAt?: number | null;
  spendLimitMicro?: number | null;
}
/** What an operator may see of a key: never the key, only enough to recognise it. */
export interface KeySummary {
  id: string;
  name: string | null;
  prefix: string;
  last4: string;
  created_at: string;
  revoked_at: string | null;
  expires_at: string | null;
  rate_limit_per_minute: number | null;
  spend_limit: number | null;
  spent: number;
}

/** An account as the admin API shows it: balance, what open requests hold, keys (summaries only). */
export interface AccountDescription extends Account {
  reserved: number;
  keys: KeySummary[];
}

export class KeyLimitError extends Error {}

type MaybePromise<T> = T | Promise<T>;

/**
 * The AccountStore port: accounts and keys. SQLite answers synchronously (one process, one file:
 * the key lookup on a cache miss costs no await); PostgreSQL (store/postgres/pg-accounts.ts)
 * answers with promises. Callers await every method except where the synchronous answer is
 * worth keeping (the key resolver, accounts/key-resolver.ts). Both keep at most
 * MAX_ACTIVE_KEYS active keys per account, atomically: parallel requests cannot both take the
 * last place.
 */
export interface AccountStore {
  createAccount(name: string, balanceMicro: number): MaybePromise<Account>;
  getAccount(id: string): MaybePromise<Account | null>;
  /** The oldest account with this name (the demo account), or null. */
  findAccountByName(name: string): MaybePromise<Account | null>;
  describeAccount(id: string, heldMicro?: number): MaybePromise<AccountDescription | null>;
  /** The plain key is returned once and never stored; only its SHA-256 is kept. Throws KeyLimitError at the cap. */
  createKey(accountId: string, options?: KeyOptions | string | null): MaybePromise<IssuedKey | null>;
  listKeys(accountId: string): MaybePromise<KeySummary[]>;
  revokeKey(keyId: string): MaybePromise<boolean>;
  findActiveKey(keyHash: string): MaybePromise<ActiveKey | null>;
}

/** `createKey`'s options, whichever form they came in. */
export function keyOptions(options: KeyOptions | string | null | undefined): KeyOptions {
  return typeof options === "string" || options === null || options === undefined ? { name: options ?? null } : options;
}

/** What a new key row holds: the key (shown once), its hash, and what an operator may see of it. */
export function newKey(): { key: string; hash: string; prefix: string; last4: string } {
  const key = generateKey();
  return { key, hash: hashKey(key), prefix: key.slice(0, KEY_PREFIX.length + 4), last4: key.slice(-4) };
}

/** A key body is 32 random bytes in base64url: 43 URL-safe characters, well over the 32 asked for. */
export function generateKey(): string {
  return KEY_PREFIX + Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64url");
}

export function hashKey(key: string): string {
  // The one-shot form: no hasher object per request (150 against 350 ns).
  return Bun.SHA256.hash(key, "hex") as string;
}

export const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

/** The SQLite AccountStore: synchronous, on the gateway's own connection. */
export function createAccountStore(db: Database, now: () => number) {
  const insertAccount = db.query("INSERT INTO accounts (id, name, balance_micro, created_at) VALUES (?, ?, ?, ?)");
  const insertCredit = db.query("INSERT INTO credit_entries (account_id, amount_micro, kind, created_at) VALUES (?, ?, 'initial', ?)");
  // The opening credit is an entry like any top-up, so the audit can sum what went in.
  const openAccount = db.transaction((id: string, name: string, balanceMicro: number, at: number) => {
    insertAccount.run(id, name, balanceMicro, at);
    insertCredit.run(id, balanceMicro, at);
  });
  const selectAccount = db.query<{ id: string; name: string; balance_micro: number; created_at: number }, [string]>(
    "SELECT id, name, balance_micro, created_at FROM accounts WHERE id = ?",
  );
  const countActive = db.query<{ n: number }, [string, number]>(
    "SELECT COUNT(*) AS n FROM api_keys WHERE account_id = ? AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)",
  );
  const insertKey = db.query(
    `INSERT INTO api_keys (id, account_id, name, key_hash, key_prefix, key_last4, created_at, rate_limit_per_minute, expires_at, spend_limit_micro)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const selectKeys = db.query<
    { id: string; name: string | null; key_prefix: string; key_last4: string; created_at: number; revoked_at: number | null; expires_at: number | null; rate_limit_per_minute: number | null; spend_limit_micro: number | null; spent_micro: number },
    [string]
  >("SELECT id, name, key_prefix, key_last4, created_at, revoked_at, expires_at, rate_limit_per_minute, spend_limit_micro, spent_micro FROM api_keys WHERE account_id = ? ORDER BY created_at, id");
  const selectByName = db.query<{ id: string }, [string]>("SELECT id FROM accounts WHERE name = ? ORDER BY created_at LIMIT 1");
  const revoke = db.query("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL");
  const selectActiveKey = db.query<{ id: string; account_id: string; rate_limit_per_minute: number | null; expires_at: number | null }, [string]>(
    "SELECT id, account_id, rate_limit_per_minute, expires_at FROM api_keys WHERE key_hash = ? AND revoked_at IS NULL",
  );

  // Count and insert under one write lock, so parallel requests cannot both take the 10th place.
  const issue = db.transaction((accountId: string, options: KeyOptions): IssuedKey | null => {
    if (!selectAccount.get(accountId)) return null;
    const at = now();
    if (countActive.get(accountId, at)!.n >= MAX_ACTIVE_KEYS) {
      throw new KeyLimitError(`This account already has ${MAX_ACTIVE_KEYS} active keys, the most allowed. Revoke one first.`);
    }
    const id = randomId("key");
    const { key, hash, prefix, last4 } = newKey();
    const name = options.name ?? null;
    insertKey.run(id, accountId, name, hash, prefix, last4, at,
      options.rateLimitPerMinute ?? null, options.expiresAt ?? null, options.spendLimitMicro ?? null);
    return { id, key, name, created_at: iso(at)! };
  });

  return {
    createAccount(name: string, balanceMicro: number): Account {
      const id = randomId("acct");
      const at = now();
      openAccount.immediate(id, name, balanceMicro, at);
      return { id, name, balance: microToCredits(balanceMicro), created_at: iso(at)! };
    },

    getAccount(id: string): Account | null {
      const row = selectAccount.get(id);
      if (!row) return null;
      return { id: row.id, name: row.name, balance: microToCredits(row.balance_micro), created_at: iso(row.created_at)! };
    },

    findAccountByName(name: string): Account | null {
      const row = selectByName.get(name);
      return row ? this.getAccount(row.id) : null;
    },

    /** Balance, what open requests hold (`heldMicro`, from the ledger), and the keys (summaries only). */
    describeAccount(id: string, heldMicro = 0): AccountDescription | null {
      const account = this.getAccount(id);
      if (!account) return null;
      return { ...account, reserved: microToCredits(heldMicro), keys: this.listKeys(id) };
    },

    /** The plain key is returned once and never stored; only its SHA-256 is kept. Throws KeyLimitError at the cap. */
    createKey(accountId: string, options: KeyOptions | string | null = {}): IssuedKey | null {
      return issue.immediate(accountId, keyOptions(options));
    },

    listKeys(accountId: string): KeySummary[] {
      return selectKeys.all(accountId).map((k) => ({
        id: k.id,
        name: k.name,
        prefix: k.key_prefix,
        last4: k.key_last4,
        created_at: iso(k.created_at)!,
        revoked_at: iso(k.revoked_at),
        expires_at: iso(k.expires_at),
        rate_limit_per_minute: k.rate_limit_per_minute,
        spend_limit: k.spend_limit_micro === null ? null : microToCredits(k.spend_limit_micro),
        spent: microToCredits(k.spent_micro),
      }));
    },

    revokeKey(keyId: string): boolean {
      return revoke.run(now(), keyId).changes > 0;
    },

    findActiveKey(keyHash: string): ActiveKey | null {
      const row = selectActiveKey.get(keyHash);
      return row ? { keyId: row.id, accountId: row.account_id, rateLimitPerMinute: row.rate_limit_per_minute, expiresAt: row.expires_at } : null;
    },
  };
}

export type SqliteAccountStore = ReturnType<typeof createAccountStore>;
