import {
  activeKey, accountPageOf, keyInUseSql, keySearchTerm, keyLimitError, revivesKey, type AccountFacts, type KeyPage, type KeyPageQuery, asciiLower, periodSpentSql, decodeAccountCursor, iso, keyOptions, keySummary, MAX_ACTIVE_KEYS, newKey, periodResetsAt,
  type Account, type AccountDescription, type AccountListQuery, type AccountPage, type AccountPatch, type AccountOpening, type AccountStore, type ActiveKey, type IssuedKey, type KeyOptions, type KeyPatch, type KeyRow, type KeySummary, type SpendStatus, keyLimits, type KeyLimits,
} from "../../accounts/account-store.ts";
import { microToCredits } from "../../billing/money.ts";
import { periodStart, windowStarts, type SpendPeriod } from "../../billing/spend-period.ts";
import { randomId } from "../ids.ts";
import { modelsColumn } from "../../accounts/model-access.ts";
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
  const keyRow = (k: Record<string, unknown>): KeyRow => ({
    id: k.id as string,
    name: k.name as string | null,
    key_prefix: k.key_prefix as string,
    key_last4: k.key_last4 as string,
    created_at: int(k.created_at),
    revoked_at: nullable(k.revoked_at),
    expires_at: nullable(k.expires_at),
    rate_limit_per_minute: nullable(k.rate_limit_per_minute),
    spend_limit_micro: nullable(k.spend_limit_micro),
    spent_micro: int(k.spent_micro),
    spend_limit_period: k.spend_limit_period as SpendPeriod | null,
    period_spent: int(k.period_spent),
    allowed_models: (k.allowed_models as string | null) ?? null,
    max_concurrent_requests: nullable(k.max_concurrent_requests),
  });
  /** Key summaries, each limit counted over its own window (store SQLite's `keyColumns` says how). */
  const selectKeys = (where: "account" | "id", id: string) => {
    const s = windowStarts(now());
    const column = where === "account" ? sql`k.account_id` : sql`k.id`;
    return sql`
      SELECT k.id, k.name, k.key_prefix, k.key_last4, k.created_at, k.revoked_at, k.expires_at, k.rate_limit_per_minute, k.spend_limit_micro, k.spent_micro, k.spend_limit_period,
             k.allowed_models, k.max_concurrent_requests, ${sql.unsafe(periodSpentSql("k", `${s.day}::bigint`, `${s.week}::bigint`, `${s.month}::bigint`))} AS period_spent
        FROM api_keys k WHERE ${column} = ${id} ORDER BY k.created_at, k.id`;
  };
  /**
   * Changes the columns given, the row locked first: a settlement that lands meanwhile either
   * committed before the recount (and is in it) or adds to the recounted total after.
   */
  const patchRow = (table: "api_keys" | "accounts", id: string, columns: Record<string, unknown>, period: SpendPeriod | null | undefined, expiresAt?: number | null) =>
    sql.begin(async (tx) => {
      const [current] = table === "api_keys"
        ? await tx`SELECT spend_limit_period, account_id, revoked_at, expires_at FROM api_keys WHERE id = ${id} FOR UPDATE`
        : await tx`SELECT spend_limit_period FROM accounts WHERE id = ${id} FOR UPDATE`;
      if (!current) return false;
      // A later end for an expired key counts against the cap as a new key does, under the lock key creation takes.
      const at = now();
      if (table === "api_keys" && expiresAt !== undefined && revivesKey({ revoked_at: nullable(current.revoked_at), expires_at: nullable(current.expires_at) }, expiresAt, at)) {
        await tx`SELECT pg_advisory_xact_lock(hashtextextended(${current.account_id}, 0))`;
        const [active] = await tx`SELECT COUNT(*) AS n FROM api_keys WHERE account_id = ${current.account_id} AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ${at})`;
        if (int(active.n) >= MAX_ACTIVE_KEYS) throw keyLimitError(true);
      }
      if (period !== undefined && period !== current.spend_limit_period) {
        const start = periodStart(period, now());
        const [spent] = table === "api_keys"
          ? await tx`SELECT COALESCE(SUM(u.cost_micro), 0) AS s FROM api_keys k JOIN usage_records u ON u.account_id = k.account_id AND u.key_id = k.id WHERE k.id = ${id} AND u.created_at >= ${start}`
          : await tx`SELECT COALESCE(SUM(cost_micro), 0) AS s FROM usage_records WHERE account_id = ${id} AND created_at >= ${start}`;
        columns.period_start = start;
        columns.period_spent_micro = int(spent.s);
      }
      if (Object.keys(columns).length === 0) return true;
      if (table === "api_keys") await tx`UPDATE api_keys SET ${tx(columns)} WHERE id = ${id}`;
      else await tx`UPDATE accounts SET ${tx(columns)} WHERE id = ${id}`;
      return true;
    });

  const store: AccountStore = {
    async createAccount(name: string, balanceMicro: number, limits: AccountOpening = {}): Promise<Account> {
      const id = randomId("acct");
      const at = now();
      const rate = limits.rateLimitPerMinute ?? null;
      const cap = limits.maxConcurrentRequests ?? null;
      const tokens = limits.tokensPerMinute ?? null;
      // The opening credit is an entry like any top-up, so the audit can sum what went in.
      await bounded(sql`
        WITH opened AS (INSERT INTO accounts (id, name, balance_micro, created_at, rate_limit_per_minute, max_concurrent_requests, tokens_per_minute) VALUES (${id}, ${name}, ${balanceMicro}, ${at}, ${rate}, ${cap}, ${tokens}) RETURNING id)
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
      const facts = await store.accountFacts(id, heldMicro);
      return facts && { ...facts, keys: await store.listKeys(id) };
    },

    async accountFacts(id: string, heldMicro?: number): Promise<AccountFacts | null> {
      const at = now();
      const s = windowStarts(at);
      const [row] = await bounded(sql`
        SELECT id, name, balance_micro, held_micro, created_at, spend_limit_micro, spend_limit_period, rate_limit_per_minute, max_concurrent_requests, tokens_per_minute, suspended_at,
               ${sql.unsafe(periodSpentSql("a", `${s.day}::bigint`, `${s.week}::bigint`, `${s.month}::bigint`))} AS period_spent
          FROM accounts a WHERE id = ${id}`, "account");
      if (!row) return null;
      return {
        ...account(row),
        // Every process's holds are in the database's held total.
        reserved: microToCredits(heldMicro ?? int(row.held_micro)),
        spend_limit: row.spend_limit_micro === null ? null : microToCredits(int(row.spend_limit_micro)),
        spend_limit_period: row.spend_limit_period,
        spent_in_period: microToCredits(int(row.period_spent)),
        period_resets_at: periodResetsAt(row.spend_limit_period, at, row.spend_limit_micro === null ? null : int(row.spend_limit_micro)),
        rate_limit_per_minute: nullable(row.rate_limit_per_minute),
        max_concurrent_requests: nullable(row.max_concurrent_requests),
        tokens_per_minute: nullable(row.tokens_per_minute),
        suspended_at: iso(nullable(row.suspended_at)),
      };
    },

    async createKey(accountId: string, options: KeyOptions | string | null = {}): Promise<IssuedKey | null> {
      const o = keyOptions(options);
      const id = randomId("key");
      const { key, hash, prefix, last4 } = newKey();
      const name = o.name ?? null;
      const at = now();
      const period = o.spendLimitPeriod ?? null;
      return bounded(sql.begin(async (tx) => {
        await tx`SELECT pg_advisory_xact_lock(hashtextextended(${accountId}, 0))`;
        const [exists] = await tx`SELECT 1 AS one FROM accounts WHERE id = ${accountId}`;
        if (!exists) return null;
        const [active] = await tx`SELECT COUNT(*) AS n FROM api_keys WHERE account_id = ${accountId} AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ${at})`;
        if (int(active.n) >= MAX_ACTIVE_KEYS) {
          throw keyLimitError();
        }
        // A new key has spent nothing: its count is valid for the window it starts in.
        await tx`INSERT INTO api_keys (id, account_id, name, key_hash, key_prefix, key_last4, created_at, rate_limit_per_minute, expires_at, spend_limit_micro, spend_limit_period, period_start, allowed_models, max_concurrent_requests)
                 VALUES (${id}, ${accountId}, ${name}, ${hash}, ${prefix}, ${last4}, ${at}, ${o.rateLimitPerMinute ?? null}, ${o.expiresAt ?? null}, ${o.spendLimitMicro ?? null}, ${period}, ${periodStart(period, at)},
                         ${modelsColumn(o.models)}, ${o.maxConcurrentRequests ?? null})`;
        return { id, key, name, created_at: iso(at)! };
      }), "create key");
    },

    async listKeys(accountId: string): Promise<KeySummary[]> {
      const at = now();
      const rows = await bounded(selectKeys("account", accountId), "keys");
      return rows.map((k: Record<string, unknown>) => keySummary(keyRow(k), at));
    },

    async listKeyLimits(accountId: string, madeSince: number): Promise<KeyLimits[]> {
      const rows = await bounded(sql`SELECT created_at, allowed_models, rate_limit_per_minute, max_concurrent_requests FROM api_keys
        WHERE account_id = ${accountId} AND (created_at >= ${madeSince} OR allowed_models IS NOT NULL OR rate_limit_per_minute IS NOT NULL OR max_concurrent_requests IS NOT NULL)`, "keys");
      return rows.map((k: Record<string, unknown>) => keyLimits({ created_at: int(k.created_at), allowed_models: (k.allowed_models as string | null) ?? null, rate_limit_per_minute: nullable(k.rate_limit_per_minute), max_concurrent_requests: nullable(k.max_concurrent_requests) }));
    },

    async listKeyPage(accountId: string, q: KeyPageQuery): Promise<KeyPage> {
      const at = now();
      const s = windowStarts(at);
      const raw = (q.search ?? "").trim();
      const term = keySearchTerm(raw);
      const inUse = sql.unsafe(keyInUseSql("k", `${at}::bigint`));
      // translate(): ASCII letters only, as SQLite's lower() (keySearchTerm), so both stores find the same keys.
      const lower = (text: unknown) => sql`translate(${text}, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')`;
      const filter = sql`k.account_id = ${accountId}
        AND ${q.state ? sql`(${inUse}) = ${q.state === "active"}` : sql`TRUE`}
        AND ${term === "" ? sql`TRUE` : sql`(strpos(${lower(sql`coalesce(k.name, '')`)}, ${term}) > 0 OR strpos(${lower(sql`k.key_prefix || '…' || k.key_last4`)}, ${term}) > 0 OR k.id = ${raw})`}`;
      const [rows, [count]] = await Promise.all([
        bounded(sql`
          SELECT k.id, k.name, k.key_prefix, k.key_last4, k.created_at, k.revoked_at, k.expires_at, k.rate_limit_per_minute, k.spend_limit_micro, k.spent_micro, k.spend_limit_period,
                 k.allowed_models, k.max_concurrent_requests, ${sql.unsafe(periodSpentSql("k", `${s.day}::bigint`, `${s.week}::bigint`, `${s.month}::bigint`))} AS period_spent
            FROM api_keys k WHERE ${filter}
           ORDER BY ${inUse} DESC, k.created_at DESC, k.id DESC LIMIT ${q.limit} OFFSET ${q.offset}`, "keys"),
        bounded(sql`SELECT COUNT(*) AS n FROM api_keys k WHERE ${filter}`, "keys"),
      ]);
      return { data: rows.map((k: Record<string, unknown>) => keySummary(keyRow(k), at)), total: int(count.n) };
    },

    async getKey(keyId: string): Promise<KeySummary | null> {
      const at = now();
      const [row] = await bounded(selectKeys("id", keyId), "key");
      return row ? keySummary(keyRow(row), at) : null;
    },

    async updateKey(keyId: string, p: KeyPatch): Promise<KeySummary | null> {
      const columns: Record<string, unknown> = {};
      if (p.name !== undefined) columns.name = p.name;
      if (p.rateLimitPerMinute !== undefined) columns.rate_limit_per_minute = p.rateLimitPerMinute;
      if (p.expiresAt !== undefined) columns.expires_at = p.expiresAt;
      if (p.spendLimitMicro !== undefined) columns.spend_limit_micro = p.spendLimitMicro;
      if (p.spendLimitPeriod !== undefined) columns.spend_limit_period = p.spendLimitPeriod;
      if (p.models !== undefined) columns.allowed_models = modelsColumn(p.models);
      if (p.maxConcurrentRequests !== undefined) columns.max_concurrent_requests = p.maxConcurrentRequests;
      // A limit below what was spent is kept, as on SQLite: the key is refused (402) until the period resets or the limit rises.
      if (!(await bounded(patchRow("api_keys", keyId, columns, p.spendLimitPeriod, p.expiresAt), "update key"))) return null;
      return store.getKey(keyId);
    },

    async updateAccount(accountId: string, p: AccountPatch): Promise<boolean> {
      const columns: Record<string, unknown> = {};
      if (p.name !== undefined) columns.name = p.name;
      if (p.spendLimitMicro !== undefined) columns.spend_limit_micro = p.spendLimitMicro;
      if (p.spendLimitPeriod !== undefined) columns.spend_limit_period = p.spendLimitPeriod;
      if (p.rateLimitPerMinute !== undefined) columns.rate_limit_per_minute = p.rateLimitPerMinute;
      if (p.maxConcurrentRequests !== undefined) columns.max_concurrent_requests = p.maxConcurrentRequests;
      if (p.tokensPerMinute !== undefined) columns.tokens_per_minute = p.tokensPerMinute;
      // Suspended again, it stays suspended since the first time (a retried PATCH changes nothing), as on SQLite.
      if (p.suspended !== undefined) {
        const [row] = p.suspended ? await bounded(sql`SELECT suspended_at FROM accounts WHERE id = ${accountId}`, "account") : [];
        columns.suspended_at = p.suspended ? (nullable(row?.suspended_at) ?? now()) : null;
      }
      return bounded(patchRow("accounts", accountId, columns, p.spendLimitPeriod), "update account");
    },

    async listAccounts(q: AccountListQuery): Promise<AccountPage> {
      const after = q.cursor ? decodeAccountCursor(q.cursor) : { createdAt: -1, id: "" };
      const name = asciiLower(q.name ?? "");
      // translate(): ASCII letters only, as SQLite's lower(), so both stores match the same names.
      const rows = await bounded(sql`
        SELECT id, name, balance_micro, created_at, spend_limit_micro, spend_limit_period, rate_limit_per_minute, max_concurrent_requests, tokens_per_minute, suspended_at FROM accounts
         WHERE (created_at > ${after.createdAt} OR (created_at = ${after.createdAt} AND id > ${after.id}))
           AND (${name} = '' OR strpos(translate(name, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz'), ${name}) > 0)
         ORDER BY created_at, id LIMIT ${q.limit + 1}`, "accounts");
      return accountPageOf(rows.map((r: Record<string, unknown>) => ({
        id: r.id as string,
        name: r.name as string,
        balance_micro: int(r.balance_micro),
        created_at: int(r.created_at),
        spend_limit_micro: nullable(r.spend_limit_micro),
        spend_limit_period: r.spend_limit_period as SpendPeriod | null,
        rate_limit_per_minute: nullable(r.rate_limit_per_minute),
        max_concurrent_requests: nullable(r.max_concurrent_requests),
        tokens_per_minute: nullable(r.tokens_per_minute),
        suspended_at: nullable(r.suspended_at),
      })), q.limit);
    },

    async spendStatus(scope: "key" | "account", id: string): Promise<SpendStatus | null> {
      const at = now();
      const s = windowStarts(at);
      // As SQLite's: the ledger's count for the current window, one row read.
      const spentSql = (alias: string) => sql.unsafe(periodSpentSql(alias, `${s.day}::bigint`, `${s.week}::bigint`, `${s.month}::bigint`));
      const [row] = scope === "account"
        ? await bounded(sql`SELECT a.id AS account_id, a.name, a.balance_micro, a.spend_limit_micro, a.spend_limit_period, ${spentSql("a")} AS period_spent FROM accounts a WHERE a.id = ${id}`, "account")
        : await bounded(sql`SELECT k.account_id, k.name, NULL AS balance_micro, k.spend_limit_micro, k.spend_limit_period, ${spentSql("k")} AS period_spent FROM api_keys k WHERE k.id = ${id}`, "key");
      if (!row) return null;
      const period = row.spend_limit_period as SpendPeriod | null;
      return {
        id, name: row.name, accountId: row.account_id, balanceMicro: nullable(row.balance_micro), limitMicro: nullable(row.spend_limit_micro), period,
        windowStart: periodStart(period, at), spentInPeriodMicro: int(row.period_spent),
      };
    },

    async revokeKey(keyId: string): Promise<boolean> {
      const rows = await bounded(sql`UPDATE api_keys SET revoked_at = ${now()} WHERE id = ${keyId} AND revoked_at IS NULL RETURNING id`, "revoke key");
      return rows.length > 0;
    },

    async findActiveKey(keyHash: string): Promise<ActiveKey | null> {
      // The key's account's limits come with it, as on SQLite.
      const [row] = await bounded(sql`
        SELECT k.id, k.account_id, k.rate_limit_per_minute, k.expires_at, k.allowed_models, k.max_concurrent_requests,
               a.rate_limit_per_minute AS account_rate_limit_per_minute, a.max_concurrent_requests AS account_max_concurrent_requests,
               a.tokens_per_minute AS account_tokens_per_minute,
               a.suspended_at AS account_suspended_at
          FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE k.key_hash = ${keyHash} AND k.revoked_at IS NULL`, "key lookup");
      return row ? activeKey({
        id: row.id, account_id: row.account_id, allowed_models: row.allowed_models, rate_limit_per_minute: nullable(row.rate_limit_per_minute), expires_at: nullable(row.expires_at),
        max_concurrent_requests: nullable(row.max_concurrent_requests), account_rate_limit_per_minute: nullable(row.account_rate_limit_per_minute),
        account_max_concurrent_requests: nullable(row.account_max_concurrent_requests), account_suspended_at: nullable(row.account_suspended_at),
        account_tokens_per_minute: nullable(row.account_tokens_per_minute),
      }) : null;
    },
  };
  return store;
}
