import { CursorError, KeyLimitError, MAX_ACCOUNT_PAGE, MAX_KEY_PAGE, type AccountPatch, type AccountStore, type KeyOptions, type KeyPatch } from "../../accounts/account-store.ts";
import { AdminInputError, parseCredits, parseIdempotencyKey, parseInstant, parseMaxConcurrent, parseModelPatterns, parseName, parseRateLimit, parseSpendPeriod, parseTokensPerMinute, parseTopUp, parseUsageQuery } from "../../accounts/admin-input.ts";
import type { KeyResolver } from "../../accounts/key-resolver.ts";
import { type KnownModels, unknownModelsError } from "../../accounts/model-access.ts";
import { BalanceCapError, DebitRefusedError, IdempotencyConflictError, type Ledger } from "../../billing/ledger.ts";
import type { SpendPeriod } from "../../billing/spend-period.ts";
import { breakdownCsv, ReportTooLargeError, shapeBreakdown, type UsageBreakdown, type UsageBucketRow, type UsageQuery, type UsageReporter } from "../../billing/usage-report.ts";
import { GatewayError } from "../../streaming/gateway-error.ts";

/**
 * What the admin API does, as functions of plain inputs: the admin routes (http/routes/admin.ts) and
 * the console's JSON routes (http/console/console-api.ts) both call these, so an operator's click and a
 * curl line go through the same validation, the same ports and the same answers. Input the
 * parsers refuse becomes a 400 naming the field; unknown ids are 404s.
 */
export interface AdminOperationDeps {
  accounts: AccountStore;
  keys: KeyResolver;
  ledger: Ledger;
  usage: UsageReporter;
  breakdown: UsageBreakdown;
  now: () => number;
  /** Runs an account or key write, retrying while another connection holds the store's write lock (app.ts knows the store). */
  retryWhileBusy: <T>(write: () => T) => Promise<T>;
  /** Tells this process's caches that a write changed rows they copied (SQLite's change watch sees only other connections). */
  changed?: () => void;
  /** The configured models, which a key's model list is checked against (absent: lists are saved unchecked, as the CLI saves them). */
  knownModels?: KnownModels;
}

/** The bodies the routes validated with their schemas (http/routes/admin.ts); the parsers decide what is in range. */
export interface KeyBody {
  name?: string; rate_limit_per_minute?: number; expires_at?: string; spend_limit?: number; spend_limit_period?: SpendPeriod | null;
  models?: string[] | null; max_concurrent_requests?: number | null;
}
export interface KeyPatchBody {
  name?: string | null; spend_limit?: number | null; spend_limit_period?: SpendPeriod | null; rate_limit_per_minute?: number | null; expires_at?: string | null;
  models?: string[] | null; max_concurrent_requests?: number | null;
}
export interface AccountPatchBody {
  name?: string; spend_limit?: number | null; spend_limit_period?: SpendPeriod | null; rate_limit_per_minute?: number | null; max_concurrent_requests?: number | null;
  tokens_per_minute?: number | null; suspended?: boolean;
}
export interface AccountBody { name: string; credits: number; rate_limit_per_minute?: number | null; max_concurrent_requests?: number | null; tokens_per_minute?: number | null }
export type UsageReportInput = { from?: string; to?: string; group_by?: string; granularity?: string; format?: string; account_id?: string; key_id?: string; model?: string };

/** Runs an admin input parser; what it refuses is the client's 400, naming the field. */
export function checked<T>(parse: () => T): T {
  try {
    return parse();
  } catch (err) {
    if (err instanceof AdminInputError) throw new GatewayError(400, "invalid_request", err.message);
    throw err;
  }
}

export function micro(credits: number, field = "credits"): number {
  return checked(() => parseCredits(credits, field));
}

export function instant(value: string | undefined, field: string, fallback: number): number {
  if (value === undefined || value === "") return fallback;
  return checked(() => parseInstant(value, field));
}

/** An account's limits on all its keys together, from a create or patch body: absent stays, null clears. */
function accountLimits(body: { rate_limit_per_minute?: number | null; max_concurrent_requests?: number | null; tokens_per_minute?: number | null }): AccountPatch {
  const patch: AccountPatch = {};
  if (body.rate_limit_per_minute !== undefined) patch.rateLimitPerMinute = body.rate_limit_per_minute === null ? null : checked(() => parseRateLimit(body.rate_limit_per_minute));
  if (body.max_concurrent_requests !== undefined) {
    patch.maxConcurrentRequests = body.max_concurrent_requests === null ? null : checked(() => parseMaxConcurrent(body.max_concurrent_requests));
  }
  if (body.tokens_per_minute !== undefined) patch.tokensPerMinute = body.tokens_per_minute === null ? null : checked(() => parseTokensPerMinute(body.tokens_per_minute));
  return patch;
}

export function adminOperations(deps: AdminOperationDeps) {
  /** A key's model list, well formed and, where the catalogue is known, naming models it has. */
  const modelList = (given: unknown): string[] => {
    const patterns = checked(() => parseModelPatterns(given));
    const wrong = deps.knownModels ? unknownModelsError(patterns, deps.knownModels) : null;
    if (wrong !== null) throw new GatewayError(400, "invalid_request", wrong);
    return patterns;
  };
  /** A key's write; the account's ten keys in use already (a new key, or an expired one given a later end) is a 409. */
  const keyWrite = async <T>(write: () => T | Promise<T>): Promise<T> => {
    try {
      return await deps.retryWhileBusy(write);
    } catch (err) {
      if (err instanceof KeyLimitError) throw new GatewayError(409, "invalid_request", err.message);
      throw err;
    }
  };
  const ops = {
    /** Records are written in batches: a view asked for now includes the requests just finished. */
    flush: () => deps.ledger.flush(),

    async account(id: string) {
      const found = await deps.accounts.describeAccount(id, (await deps.ledger.balance(id))?.heldMicro ?? 0);
      if (!found) throw new GatewayError(404, "not_found", "No such account.");
      return found;
    },

    /** What a holder's key rules read: the keys with limits and those made since `madeSince` (AccountStore.listKeyLimits). */
    keyLimits: (id: string, madeSince: number) => deps.accounts.listKeyLimits(id, madeSince),

    /** As `account`, without the keys (the console reads those a page at a time: `keyPage`). */
    async accountFacts(id: string) {
      const found = await deps.accounts.accountFacts(id, (await deps.ledger.balance(id))?.heldMicro ?? 0);
      if (!found) throw new GatewayError(404, "not_found", "No such account.");
      return found;
    },

    /**
     * A page of an account's keys (account-store.ts, KeyPageQuery): in use first, then revoked and
     * expired, newest first; `offset` and `limit` as given, `next_offset` null on the last page.
     */
    async keyPage(accountId: string, query: { offset?: string; limit?: string; state?: string; search?: string }, defaultLimit = 50) {
      const whole = (value: string | undefined, fallback: number, field: string, min: number, max: number) => {
        const n = value === undefined || value === "" ? fallback : Number(value);
        if (!Number.isInteger(n) || n < min || n > max) throw new GatewayError(400, "invalid_request", `${field} must be a whole number from ${min} to ${max}.`);
        return n;
      };
      const limit = whole(query.limit, defaultLimit, "limit", 1, MAX_KEY_PAGE);
      const offset = whole(query.offset, 0, "offset", 0, 10_000_000);
      const state = query.state === undefined || query.state === "" ? null : query.state;
      if (state !== null && state !== "active" && state !== "inactive") throw new GatewayError(400, "invalid_request", "state is active (not revoked, not expired) or inactive.");
      const page = await deps.accounts.listKeyPage(accountId, { offset, limit, state, search: query.search ?? null });
      return { object: "list" as const, data: page.data, total: page.total, offset, next_offset: offset + page.data.length < page.total ? offset + page.data.length : null };
    },

    async createAccount(body: AccountBody) {
      const name = checked(() => parseName(body.name));
      const credits = micro(body.credits);
      const limits = accountLimits(body);
      const created = await deps.retryWhileBusy(() => deps.accounts.createAccount(name, credits, limits));
      return { id: created.id, name: created.name, balance: created.balance, rate_limit_per_minute: limits.rateLimitPerMinute ?? null, max_concurrent_requests: limits.maxConcurrentRequests ?? null, tokens_per_minute: limits.tokensPerMinute ?? null };
    },

    async listAccounts(query: { limit?: string; cursor?: string; name?: string }) {
      const limit = query.limit === undefined || query.limit === "" ? 50 : Number(query.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > MAX_ACCOUNT_PAGE) {
        throw new GatewayError(400, "invalid_request", `limit must be a whole number from 1 to ${MAX_ACCOUNT_PAGE}.`);
      }
      try {
        return await deps.accounts.listAccounts({ limit, cursor: query.cursor || null, name: query.name || null });
      } catch (err) {
        if (err instanceof CursorError) throw new GatewayError(400, "invalid_request", err.message);
        throw err;
      }
    },

    async patchAccount(id: string, body: AccountPatchBody) {
      await ops.updateAccount(id, body);
      return ops.account(id);
    },

    /** patchAccount's change, answered by nothing (the console answers with the account's facts). */
    async updateAccount(id: string, body: AccountPatchBody): Promise<void> {
      const patch: AccountPatch = {};
      if (body.name !== undefined) patch.name = checked(() => parseName(body.name));
      if (body.spend_limit !== undefined) patch.spendLimitMicro = body.spend_limit === null ? null : micro(body.spend_limit, "spend_limit");
      if (body.spend_limit_period !== undefined) patch.spendLimitPeriod = checked(() => parseSpendPeriod(body.spend_limit_period));
      Object.assign(patch, accountLimits(body));
      if (body.suspended !== undefined) patch.suspended = body.suspended;
      if (!(await deps.retryWhileBusy(() => deps.accounts.updateAccount(id, patch)))) throw new GatewayError(404, "not_found", "No such account.");
      // Every key lookup carries its account's limits: this process's copies go now, other
      // processes' within their change watch (SQLite) or key cache TTL (PostgreSQL).
      deps.keys.forgetAccount(id);
      deps.changed?.();
    },

    async topUp(id: string, amountGiven: number, idempotencyKey: string | undefined) {
      return ops.moveBalance("topUp", id, amountGiven, idempotencyKey);
    },

    /** Takes credits back (a top-up made by mistake): never past the balance less its holds (409). */
    async debit(id: string, amountGiven: number, idempotencyKey: string | undefined) {
      return ops.moveBalance("debit", id, amountGiven, idempotencyKey);
    },

    async moveBalance(how: "topUp" | "debit", id: string, amountGiven: number, idempotencyKey: string | undefined) {
      const amount = checked(() => parseTopUp(amountGiven));
      // A client that retries a top-up (or debit) whose answer it lost sends the same key: applied once.
      const key = idempotencyKey === undefined ? undefined : checked(() => parseIdempotencyKey(idempotencyKey));
      let done;
      try {
        done = await deps.ledger[how](id, amount, key);
      } catch (err) {
        if (err instanceof IdempotencyConflictError || err instanceof DebitRefusedError) throw new GatewayError(409, "invalid_request", err.message);
        if (err instanceof BalanceCapError) throw new GatewayError(400, "invalid_request", err.message);
        throw err;
      }
      if (!done) throw new GatewayError(404, "not_found", "No such account.");
      // A repeat answers as the first did: the account as it is now (the same body while nothing else moved it).
      const after = await ops.accountFacts(id);
      return { id: after.id, balance: after.balance, reserved: after.reserved };
    },

    async createKey(accountId: string, body: KeyBody | undefined) {
      const options: KeyOptions = {
        name: body?.name === undefined ? null : checked(() => parseName(body.name)),
        rateLimitPerMinute: body?.rate_limit_per_minute ?? null,
        expiresAt: body?.expires_at ? checked(() => parseInstant(body.expires_at!, "expires_at")) : null,
        spendLimitMicro: body?.spend_limit === undefined ? null : micro(body.spend_limit, "spend_limit"),
        spendLimitPeriod: body?.spend_limit_period ?? null,
        models: body?.models == null ? null : modelList(body.models),
        maxConcurrentRequests: body?.max_concurrent_requests == null ? null : checked(() => parseMaxConcurrent(body.max_concurrent_requests)),
      };
      const key = await keyWrite(() => deps.accounts.createKey(accountId, options));
      if (!key) throw new GatewayError(404, "not_found", "No such account.");
      return key;
    },

    async patchKey(id: string, body: KeyPatchBody) {
      const patch: KeyPatch = {};
      if (body.name !== undefined) patch.name = body.name === null ? null : checked(() => parseName(body.name));
      if (body.spend_limit !== undefined) patch.spendLimitMicro = body.spend_limit === null ? null : micro(body.spend_limit, "spend_limit");
      if (body.spend_limit_period !== undefined) patch.spendLimitPeriod = checked(() => parseSpendPeriod(body.spend_limit_period));
      if (body.rate_limit_per_minute !== undefined) patch.rateLimitPerMinute = body.rate_limit_per_minute === null ? null : checked(() => parseRateLimit(body.rate_limit_per_minute));
      if (body.expires_at !== undefined) patch.expiresAt = body.expires_at === null ? null : checked(() => parseInstant(body.expires_at!, "expires_at"));
      if (body.models !== undefined) patch.models = body.models === null ? null : modelList(body.models);
      if (body.max_concurrent_requests !== undefined) {
        patch.maxConcurrentRequests = body.max_concurrent_requests === null ? null : checked(() => parseMaxConcurrent(body.max_concurrent_requests));
      }
      const summary = await keyWrite(() => deps.accounts.updateKey(id, patch));
      if (!summary) throw new GatewayError(404, "not_found", "No such key.");
      // The next request sees the new limits: cached lookups of this key are dropped here, and
      // other processes' within their change watch (SQLite) or key cache TTL (PostgreSQL).
      deps.keys.forget(id);
      deps.changed?.();
      return summary;
    },

    async revokeKey(id: string) {
      if (!(await deps.retryWhileBusy(() => deps.accounts.revokeKey(id)))) throw new GatewayError(404, "not_found", "No such active key.");
      deps.keys.forget(id);
      return { id, revoked: true };
    },

    async accountUsage(id: string, query: { from?: string; to?: string }) {
      await ops.accountFacts(id);
      // Records are written in batches; a report asked for now includes the requests just finished.
      await deps.ledger.flush();
      return deps.usage(id, instant(query.from, "from", 0), instant(query.to, "to", deps.now() + 1));
    },

    /** The usage report: JSON, or a CSV download when `format=csv`. */
    /** The usage report's rows: its query read and checked, the records written so far included. */
    async usageRows(query: UsageReportInput): Promise<{ q: UsageQuery; rows: UsageBucketRow[] }> {
      let q: UsageQuery;
      try {
        q = parseUsageQuery(query, deps.now());
      } catch (err) {
        throw new GatewayError(400, "invalid_request", (err as Error).message);
      }
      await deps.ledger.flush();
      try {
        return { q, rows: await deps.breakdown(q) };
      } catch (err) {
        if (err instanceof ReportTooLargeError) throw new GatewayError(400, "invalid_request", err.message);
        throw err;
      }
    },

    async usageReport(query: UsageReportInput): Promise<ReturnType<typeof shapeBreakdown> | Response> {
      const { q, rows } = await ops.usageRows(query);
      if (query.format === "csv") {
        const name = `usage-${new Date(q.from).toISOString().slice(0, 10)}-${new Date(q.to).toISOString().slice(0, 10)}.csv`;
        return new Response(breakdownCsv(q, rows), { headers: { "content-type": "text/csv; charset=utf-8", "content-disposition": `attachment; filename="${name}"` } });
      }
      return shapeBreakdown(q, rows);
    },
  };
  return ops;
}

export type AdminOperations = ReturnType<typeof adminOperations>;
