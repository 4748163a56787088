import type { Database } from "bun:sqlite";
import { ledgerFiles } from "./file-identity.ts";
import { randomId } from "../ids.ts";
import { microToCredits } from "../../billing/money.ts";
import { periodStart, windowStarts, type SpendPeriod } from "../../billing/spend-period.ts";
import {
  activeKey, MAX_ACTIVE_KEYS, decodeAccountCursor, asciiLower, periodSpentSql, periodResetsAt, keySummary, keyOptions, newKey, iso, accountPageOf, type Account, type IssuedKey, type ActiveKey, type KeyOptions, type KeyPatch, type AccountPatch, type KeySummary, type AccountDescription, type AccountPage, type AccountListQuery, type SpendStatus, type AccountStore, type KeyRow, type AccountFacts, type KeyPage, type KeyPageQuery, keyInUseSql, keySearchTerm, keyLimitError, revivesKey, type ActiveKeyRow, type AccountLimits, type AccountOpening, keyLimits, type KeyLimits, type KeyLimitsRow,
} from "../../accounts/account-store.ts";
import { modelsColumn } from "../../accounts/model-access.ts";

/** The SQLite AccountStore: synchronous, on the gateway's own connection. */
export function createAccountStore(db: Database, now: () => number) {
  // Accounts, keys and their changes are not written into a ledger file that is gone (file-identity.ts).
  const sameFiles = ledgerFiles(db, now);
  const insertAccount = db.query("INSERT INTO accounts (id, name, balance_micro, created_at, rate_limit_per_minute, max_concurrent_requests, tokens_per_minute) VALUES (?, ?, ?, ?, ?, ?, ?)");
  const insertCredit = db.query("INSERT INTO credit_entries (account_id, amount_micro, kind, created_at) VALUES (?, ?, 'initial', ?)");
  // The opening credit is an entry like any top-up, so the audit can sum what went in.
  const openAccount = db.transaction((id: string, name: string, balanceMicro: number, at: number, rate: number | null, cap: number | null, tokens: number | null) => {
    insertAccount.run(id, name, balanceMicro, at, rate, cap, tokens);
    insertCredit.run(id, balanceMicro, at);
  });
  const selectAccount = db.query<{ id: string; name: string; balance_micro: number; created_at: number }, [string]>(
    "SELECT id, name, balance_micro, created_at FROM accounts WHERE id = ?",
  );
  // What the account spent in its limit's current window: the ledger's count while its window is
  // the current one (?2, ?3, ?4: the current day's, week's and month's starts), else 0 (rolled over).
  const selectAccountLimit = db.query<{ spend_limit_micro: number | null; spend_limit_period: SpendPeriod | null; period_spent: number; suspended_at: number | null } & AccountLimits, [string, number, number, number]>(
    `SELECT spend_limit_micro, spend_limit_period, ${periodSpentSql("a")} AS period_spent, rate_limit_per_minute, max_concurrent_requests, tokens_per_minute, suspended_at FROM accounts a WHERE a.id = ?1`,
  );
  const countActive = db.query<{ n: number }, [string, number]>(
    "SELECT COUNT(*) AS n FROM api_keys WHERE account_id = ? AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)",
  );
  const insertKey = db.query(
    `INSERT INTO api_keys (id, account_id, name, key_hash, key_prefix, key_last4, created_at, rate_limit_per_minute, expires_at, spend_limit_micro, spend_limit_period, period_start, allowed_models, max_concurrent_requests)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const keyColumns = `k.id, k.name, k.key_prefix, k.key_last4, k.created_at, k.revoked_at, k.expires_at, k.rate_limit_per_minute, k.spend_limit_micro, k.spent_micro, k.spend_limit_period,
    k.allowed_models, k.max_concurrent_requests, ${periodSpentSql("k")} AS period_spent`;
  const selectKeys = db.query<KeyRow, [string, number, number, number]>(`SELECT ${keyColumns} FROM api_keys k WHERE k.account_id = ?1 ORDER BY k.created_at, k.id`);
  const selectKeyLimits = db.query<KeyLimitsRow, [string, number]>(
    `SELECT created_at, allowed_models, rate_limit_per_minute, max_concurrent_requests FROM api_keys
      WHERE account_id = ?1 AND (created_at >= ?2 OR allowed_models IS NOT NULL OR rate_limit_per_minute IS NOT NULL OR max_concurrent_requests IS NOT NULL)`,
  );
  const selectKey = db.query<KeyRow, [string, number, number, number]>(`SELECT ${keyColumns} FROM api_keys k WHERE k.id = ?1`);
  // A page of keys (account-store.ts, KeyPageQuery): ?5 now, ?6 the state ('' either), ?7 the search term, ?8 the search as typed (an id).
  const keyFilter = `k.account_id = ?1 AND (?6 = '' OR (?6 = 'active') = ${keyInUseSql("k", "?5")})
      AND (?7 = '' OR instr(lower(coalesce(k.name, '')), ?7) > 0 OR instr(lower(k.key_prefix || '…' || k.key_last4), ?7) > 0 OR k.id = ?8)`;
  const selectKeyPage = db.query<KeyRow, [string, number, number, number, number, string, string, string, number, number]>(
    `SELECT ${keyColumns} FROM api_keys k WHERE ${keyFilter} ORDER BY ${keyInUseSql("k", "?5")} DESC, k.created_at DESC, k.id DESC LIMIT ?9 OFFSET ?10`,
  );
  const countKeyPage = db.query<{ n: number }, [string, number, number, number, number, string, string, string]>(
    `SELECT COUNT(*) AS n FROM api_keys k WHERE ${keyFilter}`,
  );
  const selectByName = db.query<{ id: string }, [string]>("SELECT id FROM accounts WHERE name = ? ORDER BY created_at LIMIT 1");
  const revoke = db.query("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL");
  // The key's account's limits come with it: every request checks them, and one lookup caches both.
  const selectActiveKey = db.query<ActiveKeyRow, [string]>(
    `SELECT k.id, k.account_id, k.rate_limit_per_minute, k.expires_at, k.allowed_models, k.max_concurrent_requests,
            a.rate_limit_per_minute AS account_rate_limit_per_minute, a.max_concurrent_requests AS account_max_concurrent_requests,
            a.tokens_per_minute AS account_tokens_per_minute,
            a.suspended_at AS account_suspended_at
       FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE k.key_hash = ? AND k.revoked_at IS NULL`,
  );
  const keyPeriod = db.query<{ spend_limit_period: SpendPeriod | null }, [string]>("SELECT spend_limit_period FROM api_keys WHERE id = ?");
  const accountPeriod = db.query<{ spend_limit_period: SpendPeriod | null }, [string]>("SELECT spend_limit_period FROM accounts WHERE id = ?");
  // A key's records are found through its account's (account_id, created_at) index: no index of
  // their own to keep on every insert for this rare recount.
  const keySpentSince = db.query<{ s: number }, [string, number]>(
    "SELECT COALESCE(SUM(u.cost_micro), 0) AS s FROM api_keys k JOIN usage_records u ON u.account_id = k.account_id AND u.key_id = k.id WHERE k.id = ?1 AND u.created_at >= ?2",
  );
  const accountSpentSince = db.query<{ s: number }, [string, number]>("SELECT COALESCE(SUM(cost_micro), 0) AS s FROM usage_records WHERE account_id = ? AND created_at >= ?");
  type StatusRow = { account_id: string; name: string | null; balance_micro: number | null; spend_limit_micro: number | null; spend_limit_period: SpendPeriod | null; period_spent: number };
  const accountStatus = db.query<StatusRow, [string, number, number, number]>(
    `SELECT a.id AS account_id, a.name, a.balance_micro, a.spend_limit_micro, a.spend_limit_period, ${periodSpentSql("a")} AS period_spent FROM accounts a WHERE a.id = ?1`,
  );
  const keyStatus = db.query<StatusRow, [string, number, number, number]>(
    `SELECT k.account_id, k.name, NULL AS balance_micro, k.spend_limit_micro, k.spend_limit_period, ${periodSpentSql("k")} AS period_spent FROM api_keys k WHERE k.id = ?1`,
  );
  const accountPage = db.query<{ id: string; name: string; balance_micro: number; created_at: number; spend_limit_micro: number | null; spend_limit_period: SpendPeriod | null; suspended_at: number | null } & AccountLimits, [number, string, string, number]>(
    `SELECT id, name, balance_micro, created_at, spend_limit_micro, spend_limit_period, rate_limit_per_minute, max_concurrent_requests, tokens_per_minute, suspended_at FROM accounts
      WHERE (created_at > ?1 OR (created_at = ?1 AND id > ?2)) AND (?3 = '' OR instr(lower(name), ?3) > 0)
      ORDER BY created_at, id LIMIT ?4`,
  );

  // Count and insert under one write lock, so parallel requests cannot both take the 10th place.
  const issue = db.transaction((accountId: string, options: KeyOptions): IssuedKey | null => {
    if (!selectAccount.get(accountId)) return null;
    const at = now();
    if (countActive.get(accountId, at)!.n >= MAX_ACTIVE_KEYS) {
      throw keyLimitError();
    }
    const id = randomId("key");
    const { key, hash, prefix, last4 } = newKey();
    const name = options.name ?? null;
    const period = options.spendLimitPeriod ?? null;
    // A new key has spent nothing: its count is valid for the window it starts in.
    insertKey.run(id, accountId, name, hash, prefix, last4, at,
      options.rateLimitPerMinute ?? null, options.expiresAt ?? null, options.spendLimitMicro ?? null, period, periodStart(period, at),
      modelsColumn(options.models), options.maxConcurrentRequests ?? null);
    return { id, key, name, created_at: iso(at)! };
  });

  /**
   * One UPDATE with the columns given; a period that changes recounts what was spent in the new
   * window from the usage records, under the same write lock as the change.
   */
  const patchRow = (table: "api_keys" | "accounts", id: string, columns: Record<string, unknown>, period: SpendPeriod | null | undefined): boolean => {
    const current = (table === "api_keys" ? keyPeriod : accountPeriod).get(id);
    if (!current) return false;
    if (period !== undefined && period !== current.spend_limit_period) {
      const start = periodStart(period, now());
      columns.period_start = start;
      columns.period_spent_micro = (table === "api_keys" ? keySpentSince : accountSpentSince).get(id, start)!.s;
    }
    const names = Object.keys(columns);
    if (names.length === 0) return true;
    db.query(`UPDATE ${table} SET ${names.map((n) => `${n} = ?`).join(", ")} WHERE id = ?`).run(...(Object.values(columns) as never[]), id as never);
    return true;
  };
  const patch = db.transaction(patchRow);
  const keyUse = db.query<{ account_id: string; revoked_at: number | null; expires_at: number | null }, [string]>("SELECT account_id, revoked_at, expires_at FROM api_keys WHERE id = ?");
  /** A key's change; a later end for an expired key is refused while its account has MAX_ACTIVE_KEYS in use (counted under the same write lock). */
  const patchKey = db.transaction((keyId: string, columns: Record<string, unknown>, period: SpendPeriod | null | undefined, expiresAt: number | null | undefined): boolean => {
    const current = expiresAt === undefined ? null : keyUse.get(keyId);
    const at = now();
    if (current && revivesKey(current, expiresAt!, at) && countActive.get(current.account_id, at)!.n >= MAX_ACTIVE_KEYS) throw keyLimitError(true);
    return patchRow("api_keys", keyId, columns, period);
  });
  const suspendedSince = db.query<{ suspended_at: number | null }, [string]>("SELECT suspended_at FROM accounts WHERE id = ?");

  const store = {
    createAccount(name: string, balanceMicro: number, limits: AccountOpening = {}): Account {
      const id = randomId("acct");
      const at = now();
      sameFiles(true);
      openAccount.immediate(id, name, balanceMicro, at, limits.rateLimitPerMinute ?? null, limits.maxConcurrentRequests ?? null, limits.tokensPerMinute ?? null);
      return { id, name, balance: microToCredits(balanceMicro), created_at: iso(at)! };
    },

    getAccount(id: string): Account | null {
      const row = selectAccount.get(id);
      if (!row) return null;
      return { id: row.id, name: row.name, balance: microToCredits(row.balance_micro), created_at: iso(row.created_at)! };
    },

    findAccountByName(name: string): Account | null {
      const row = selectByName.get(name);
      return row ? store.getAccount(row.id) : null;
    },

    /** Balance, what open requests hold (`heldMicro`, from the ledger), the limit, and the keys (summaries only). */
    describeAccount(id: string, heldMicro = 0): AccountDescription | null {
      const facts = store.accountFacts(id, heldMicro);
      return facts && { ...facts, keys: store.listKeys(id) };
    },

    accountFacts(id: string, heldMicro = 0): AccountFacts | null {
      const account = store.getAccount(id);
      if (!account) return null;
      const at = now();
      const starts = windowStarts(at);
      const limit = selectAccountLimit.get(id, starts.day, starts.week, starts.month)!;
      return {
        ...account,
        reserved: microToCredits(heldMicro),
        spend_limit: limit.spend_limit_micro === null ? null : microToCredits(limit.spend_limit_micro),
        spend_limit_period: limit.spend_limit_period,
        spent_in_period: microToCredits(limit.period_spent),
        period_resets_at: periodResetsAt(limit.spend_limit_period, at, limit.spend_limit_micro),
        rate_limit_per_minute: limit.rate_limit_per_minute,
        max_concurrent_requests: limit.max_concurrent_requests,
        tokens_per_minute: limit.tokens_per_minute,
        suspended_at: iso(limit.suspended_at),
      };
    },

    /** The plain key is returned once and never stored; only its SHA-256 is kept. Throws KeyLimitError at the cap. */
    createKey(accountId: string, options: KeyOptions | string | null = {}): IssuedKey | null {
      sameFiles(true);
      return issue.immediate(accountId, keyOptions(options));
    },

    listKeys(accountId: string): KeySummary[] {
      const at = now();
      const starts = windowStarts(at);
      return selectKeys.all(accountId, starts.day, starts.week, starts.month).map((k) => keySummary(k, at));
    },

    listKeyLimits(accountId: string, madeSince: number): KeyLimits[] {
      return selectKeyLimits.all(accountId, madeSince).map(keyLimits);
    },

    listKeyPage(accountId: string, q: KeyPageQuery): KeyPage {
      const at = now();
      const starts = windowStarts(at);
      const search = (q.search ?? "").trim();
      const args = [accountId, starts.day, starts.week, starts.month, at, q.state ?? "", keySearchTerm(search), search] as const;
      const rows = selectKeyPage.all(...args, q.limit, q.offset);
      return { data: rows.map((k) => keySummary(k, at)), total: countKeyPage.get(...args)!.n };
    },

    getKey(keyId: string): KeySummary | null {
      const at = now();
      const starts = windowStarts(at);
      const row = selectKey.get(keyId, starts.day, starts.week, starts.month);
      return row ? keySummary(row, at) : null;
    },

    updateKey(keyId: string, p: KeyPatch): KeySummary | null {
      const columns: Record<string, unknown> = {};
      if (p.name !== undefined) columns.name = p.name;
      if (p.rateLimitPerMinute !== undefined) columns.rate_limit_per_minute = p.rateLimitPerMinute;
      if (p.expiresAt !== undefined) columns.expires_at = p.expiresAt;
      if (p.spendLimitMicro !== undefined) columns.spend_limit_micro = p.spendLimitMicro;
      if (p.spendLimitPeriod !== undefined) columns.spend_limit_period = p.spendLimitPeriod;
      if (p.models !== undefined) columns.allowed_models = modelsColumn(p.models);
      if (p.maxConcurrentRequests !== undefined) columns.max_concurrent_requests = p.maxConcurrentRequests;
      sameFiles(true);
      return patchKey.immediate(keyId, columns, p.spendLimitPeriod, p.expiresAt) ? store.getKey(keyId) : null;
    },

    updateAccount(accountId: string, p: AccountPatch): boolean {
      const columns: Record<string, unknown> = {};
      if (p.name !== undefined) columns.name = p.name;
      if (p.spendLimitMicro !== undefined) columns.spend_limit_micro = p.spendLimitMicro;
      if (p.spendLimitPeriod !== undefined) columns.spend_limit_period = p.spendLimitPeriod;
      if (p.rateLimitPerMinute !== undefined) columns.rate_limit_per_minute = p.rateLimitPerMinute;
      if (p.maxConcurrentRequests !== undefined) columns.max_concurrent_requests = p.maxConcurrentRequests;
      if (p.tokensPerMinute !== undefined) columns.tokens_per_minute = p.tokensPerMinute;
      // Suspended again, it stays suspended since the first time (a retried PATCH changes nothing).
      if (p.suspended !== undefined) columns.suspended_at = p.suspended ? (suspendedSince.get(accountId)?.suspended_at ?? now()) : null;
      sameFiles(true);
      return patch.immediate("accounts", accountId, columns, p.spendLimitPeriod);
    },

    listAccounts(q: AccountListQuery): AccountPage {
      const after = q.cursor ? decodeAccountCursor(q.cursor) : { createdAt: -1, id: "" };
      const rows = accountPage.all(after.createdAt, after.id, asciiLower(q.name ?? ""), q.limit + 1);
      return accountPageOf(rows.map((r) => ({ ...r })), q.limit);
    },

    spendStatus(scope: "key" | "account", id: string): SpendStatus | null {
      const at = now();
      const starts = windowStarts(at);
      const row = (scope === "account" ? accountStatus : keyStatus).get(id, starts.day, starts.week, starts.month);
      if (!row) return null;
      return {
        id, name: row.name ?? null, accountId: row.account_id, balanceMicro: row.balance_micro, limitMicro: row.spend_limit_micro, period: row.spend_limit_period,
        windowStart: periodStart(row.spend_limit_period, at), spentInPeriodMicro: row.period_spent,
      };
    },

    revokeKey(keyId: string): boolean {
      sameFiles(true);
      return revoke.run(now(), keyId).changes > 0;
    },

    findActiveKey(keyHash: string): ActiveKey | null {
      const row = selectActiveKey.get(keyHash);
      return row ? activeKey(row) : null;
    },
  };
  return store;
}

export type SqliteAccountStore = ReturnType<typeof createAccountStore>;
