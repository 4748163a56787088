/**
 * The AccountStore port (keys and accounts), its types, and the pure pieces both implementations
 * share: store/sqlite/sqlite-accounts.ts and store/postgres/pg-accounts.ts implement it.
 */
import { microToCredits } from "../billing/money.ts";
import { periodWindow, staleWindowSql, windowSql, type SpendPeriod } from "../billing/spend-period.ts";
import { readModelsColumn } from "./model-access.ts";

export const KEY_PREFIX = "svc-sk-";
/** Spec 5.4: at most 10 active keys per account. */
export const MAX_ACTIVE_KEYS = 10;

export interface Account { id: string; name: string; balance: number; created_at: string }
export interface IssuedKey { id: string; key: string; name: string | null; created_at: string }
/** Why a suspended account's keys are refused (403): at admission, and when a request under way would ask its upstream again (gateway/forward.ts). */
export const ACCOUNT_SUSPENDED = "This API key's account is suspended by the gateway's operator: its requests are refused until the operator resumes it.";
/**
 * Why a key is refused (401): missing, malformed, unknown, revoked or expired alike, so a revoked key
 * looks like one that never existed. At admission, on GET /v1/key, and when a request under way
 * would ask its upstream again after its key stopped being good (gateway/forward.ts).
 */
export const INVALID_KEY = "Invalid API key: send a key of the form svc-sk-… in the Authorization (Bearer) or x-api-key header.";

export interface ActiveKey {
  keyId: string;
  accountId: string;
  /** Per-key override of limits.requests_per_minute. */
  rateLimitPerMinute: number | null;
  /** Epoch ms after which the key stops working. */
  expiresAt: number | null;
  /** Model ids and `prefix*` patterns the key may use (accounts/model-access.ts); null: every model. */
  models: string[] | null;
  /** Per-key override of limits.max_concurrent_requests. */
  maxConcurrentRequests: number | null;
  /** The account's own override of limits.account_requests_per_minute: all its keys' requests together. */
  accountRateLimitPerMinute: number | null;
  /** The account's own override of limits.account_max_concurrent_requests: all its keys' requests under way together. */
  accountMaxConcurrentRequests: number | null;
  /** The account's own override of limits.account_tokens_per_minute: all its keys' prompt and answer tokens together (limits/token-budget.ts). */
  accountTokensPerMinute: number | null;
  /** The operator suspended the account: its keys are refused (403) until it is resumed. */
  accountSuspended: boolean;
}
export interface KeyOptions {
  name?: string | null;
  rateLimitPerMinute?: number | null;
  expiresAt?: number | null;
  spendLimitMicro?: number | null;
  /** The period `spendLimitMicro` resets by; null or absent: a lifetime limit. */
  spendLimitPeriod?: SpendPeriod | null;
  /** Model ids and `prefix*` patterns; null or absent: every model. */
  models?: string[] | null;
  maxConcurrentRequests?: number | null;
}
/** A key's settings to change: absent fields stay as they are, null clears. */
export interface KeyPatch {
  name?: string | null;
  rateLimitPerMinute?: number | null;
  expiresAt?: number | null;
  spendLimitMicro?: number | null;
  spendLimitPeriod?: SpendPeriod | null;
  models?: string[] | null;
  maxConcurrentRequests?: number | null;
}
/** An account's limits given when it is opened (absent: the gateway's defaults). */
export type AccountOpening = Pick<AccountPatch, "rateLimitPerMinute" | "maxConcurrentRequests" | "tokensPerMinute">;
/** An account's settings to change: absent fields stay as they are. */
export interface AccountPatch {
  name?: string;
  spendLimitMicro?: number | null;
  spendLimitPeriod?: SpendPeriod | null;
  /** Requests a minute for all the account's keys together; null: limits.account_requests_per_minute. */
  rateLimitPerMinute?: number | null;
  /** Requests under way at once for all its keys together; null: limits.account_max_concurrent_requests. */
  maxConcurrentRequests?: number | null;
  /** Prompt and answer tokens a minute for all its keys together; null: limits.account_tokens_per_minute. */
  tokensPerMinute?: number | null;
  /** true: suspended from now (a suspended account stays suspended since its first suspension); false: resumed. */
  suspended?: boolean;
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
  /** null: the limit (if any) is over the key's life. */
  spend_limit_period: SpendPeriod | null;
  /** Charged since the current period began; for a lifetime limit, everything charged. */
  spent_in_period: number;
  /** When the period's count starts again; null for a lifetime limit. */
  period_resets_at: string | null;
  /** Model ids and `prefix*` patterns the key may use; null: every model. */
  models: string[] | null;
  /** The key's own cap on requests at once; null: the gateway's default (limits.max_concurrent_requests). */
  max_concurrent_requests: number | null;
}

/** An account as the admin API shows it: balance, what open requests hold, its limit, keys (summaries only). */
export interface AccountDescription extends AccountFacts {
  keys: KeySummary[];
}

/** An account's description without its keys (the console reads those a page at a time: `listKeyPage`). */
export interface AccountFacts extends Account, AccountLimits, AccountSuspension {
  reserved: number;
  spend_limit: number | null;
  spend_limit_period: SpendPeriod | null;
  spent_in_period: number;
  period_resets_at: string | null;
}

/**
 * A page of an account's keys: those in use (not revoked, not expired) first, then the revoked and
 * expired ones, newest first within each. `state` keeps only one of the two; `search` only keys whose
 * name contains it (ASCII letters in any case), whose shown form `svc-sk-abcd…wxyz` contains it, or
 * whose id it is. An account that rotates a key every hour has 10,000 in 14 months: read whole, its
 * console page was a 3.5 MB answer on each view and after each change (a console probe).
 */
export interface KeyPageQuery {
  offset: number;
  limit: number;
  state?: KeyState | null;
  search?: string | null;
}
export type KeyState = "active" | "inactive";
/** `total`: the keys the query matches, on every page. */
export interface KeyPage {
  data: KeySummary[];
  total: number;
}

/** The largest page of keys. */
export const MAX_KEY_PAGE = 500;

/** SQL true for a key (`alias`) in use at `now` (a parameter): not revoked, not expired. What MAX_ACTIVE_KEYS counts. */
export function keyInUseSql(alias: string, now: string): string {
  return `(${alias}.revoked_at IS NULL AND (${alias}.expires_at IS NULL OR ${alias}.expires_at > ${now}))`;
}

/** What a key search looks for, as both stores compare it: trimmed, ASCII letters lower-cased (asciiLower). */
export function keySearchTerm(search: string | null | undefined): string {
  return asciiLower((search ?? "").trim());
}

/**
 * An account's own limits on all its keys' requests together, as stored: null leaves it to the
 * gateway's default (limits.account_requests_per_minute, limits.account_max_concurrent_requests).
 */
export interface AccountLimits {
  rate_limit_per_minute: number | null;
  max_concurrent_requests: number | null;
  tokens_per_minute: number | null;
}

/** Since when the operator has suspended the account (its keys refused with a 403); null: it is not. */
export interface AccountSuspension {
  suspended_at: string | null;
}

/** One entry of the account list. */
export interface AccountListEntry extends Account, AccountLimits, AccountSuspension {
  spend_limit: number | null;
  spend_limit_period: SpendPeriod | null;
}

/** A page of accounts, oldest first; `next_cursor` asks for the page after it (null: this was the last). */
export interface AccountPage {
  object: "list";
  data: AccountListEntry[];
  next_cursor: string | null;
}

export interface AccountListQuery {
  limit: number;
  /** A `next_cursor` from the page before. */
  cursor?: string | null;
  /** Only accounts whose name contains this, ignoring the case of ASCII letters. */
  name?: string | null;
}

/**
 * A key's or an account's spend limit and what was charged in its current window, as the admin
 * API counts `spent_in_period` (usage records since the window's start; a key's lifetime limit
 * counts `spent_micro`). Read by spend alerts after charges (alerts/alert-monitor.ts): a row
 * without a limit is not summed.
 */
export interface SpendStatus {
  id: string;
  name: string | null;
  /** The account's id (for a key, its owner's). */
  accountId: string;
  /** Accounts only: the balance as written (null for a key). */
  balanceMicro: number | null;
  limitMicro: number | null;
  period: SpendPeriod | null;
  /** Epoch ms the window began (0 for a lifetime limit). */
  windowStart: number;
  /** Charged in the current window (the ledger's count; kept whether or not there is a limit). */
  spentInPeriodMicro: number;
}

export class KeyLimitError extends Error {}

/** Why a key cannot be made, or an expired one given a later end: the account has MAX_ACTIVE_KEYS in use. */
export function keyLimitError(reviving = false): KeyLimitError {
  return new KeyLimitError(`This account already has ${MAX_ACTIVE_KEYS} active keys, the most allowed. Revoke one first${reviving ? ", then give this expired key a later end" : ""}.`);
}

/**
 * Whether a new expiry puts an expired key back in use: it is not revoked, its end has passed,
 * and the new one is later than now (or none). Such a change counts against MAX_ACTIVE_KEYS as a
 * new key does: an account with ten keys in use and an expired one had eleven once it was given a
 * later end (a holder may set an expiry; a console probe). Pure.
 */
export function revivesKey(current: { revoked_at: number | null; expires_at: number | null }, expiresAt: number | null, now: number): boolean {
  return current.revoked_at === null && current.expires_at !== null && current.expires_at <= now && (expiresAt === null || expiresAt > now);
}
/** A cursor this store did not make. */
export class CursorError extends Error {}

type MaybePromise<T> = T | Promise<T>;

/** A key's creation time and the limits it carries (AccountStore.listKeyLimits). */
export type KeyLimits = Pick<KeySummary, "created_at" | "models" | "rate_limit_per_minute" | "max_concurrent_requests">;

/** The api_keys columns KeyLimits is read from (both stores). */
export interface KeyLimitsRow {
  created_at: number;
  allowed_models: string | null;
  rate_limit_per_minute: number | null;
  max_concurrent_requests: number | null;
}

export function keyLimits(k: KeyLimitsRow): KeyLimits {
  return { created_at: iso(k.created_at)!, models: readModelsColumn(k.allowed_models), rate_limit_per_minute: k.rate_limit_per_minute, max_concurrent_requests: k.max_concurrent_requests };
}

/**
 * The AccountStore port: accounts and keys. SQLite answers synchronously (one process, one file:
 * the key lookup on a cache miss costs no await); PostgreSQL (store/postgres/pg-accounts.ts)
 * answers with promises. Callers await every method except where the synchronous answer is
 * worth keeping (the key resolver, accounts/key-resolver.ts). Both keep at most
 * MAX_ACTIVE_KEYS active keys per account, atomically: parallel requests cannot both take the
 * last place.
 */
export interface AccountStore {
  /** `limits`: the account's own request limits (AccountPatch's fields), written with it. */
  createAccount(name: string, balanceMicro: number, limits?: AccountOpening): MaybePromise<Account>;
  getAccount(id: string): MaybePromise<Account | null>;
  /** The oldest account with this name (the demo account), or null. */
  findAccountByName(name: string): MaybePromise<Account | null>;
  describeAccount(id: string, heldMicro?: number): MaybePromise<AccountDescription | null>;
  /** As describeAccount, without the keys. */
  accountFacts(id: string, heldMicro?: number): MaybePromise<AccountFacts | null>;
  /** The plain key is returned once and never stored; only its SHA-256 is kept. Throws KeyLimitError at the cap. */
  createKey(accountId: string, options?: KeyOptions | string | null): MaybePromise<IssuedKey | null>;
  listKeys(accountId: string): MaybePromise<KeySummary[]>;
  /**
   * The account's keys (revoked ones too) that carry a limit (a model list, a rate, a cap on
   * requests at once) or were made at or after `madeSince` (ms): all the holder's key rules read
   * (accounts/holder-keys.ts), from the keys' own columns. listKeys reads every key and counts each
   * one's spend over its window: at 10,000 keys 12–38 ms of the event loop against 2–5 for this (a busy machine),
   * on a path a holder may call as often as they like (its 429 included).
   */
  listKeyLimits(accountId: string, madeSince: number): MaybePromise<KeyLimits[]>;
  /** A page of the account's keys (KeyPageQuery says which and in what order). */
  listKeyPage(accountId: string, query: KeyPageQuery): MaybePromise<KeyPage>;
  revokeKey(keyId: string): MaybePromise<boolean>;
  findActiveKey(keyHash: string): MaybePromise<ActiveKey | null>;
  /** One key's summary (revoked keys too), or null. */
  getKey(keyId: string): MaybePromise<KeySummary | null>;
  /**
   * Changes what the patch names, in one transaction; a new spend_limit_period recounts the
   * key's period_spent_micro from its usage records over the new window. Null for an unknown key.
   */
  updateKey(keyId: string, patch: KeyPatch): MaybePromise<KeySummary | null>;
  /** As updateKey, for an account; false for an unknown account. */
  updateAccount(accountId: string, patch: AccountPatch): MaybePromise<boolean>;
  /** Accounts oldest first (created_at, then id). Throws CursorError for a cursor it did not make. */
  listAccounts(query: AccountListQuery): MaybePromise<AccountPage>;
  /** A key's or an account's limit and what its current window was charged (SpendStatus); null when unknown. */
  spendStatus(scope: "key" | "account", id: string): MaybePromise<SpendStatus | null>;
}

/** Largest page of the account list. */
export const MAX_ACCOUNT_PAGE = 500;

/**
 * The account list's cursor: the last entry's created_at and id, opaque to clients (base64url),
 * so a page starts exactly after it even when accounts are created meanwhile.
 */
export function encodeAccountCursor(createdAtMs: number, id: string): string {
  return Buffer.from(`${createdAtMs}:${id}`).toString("base64url");
}

export function decodeAccountCursor(cursor: string): { createdAt: number; id: string } {
  const text = /^[A-Za-z0-9_-]{1,400}$/.test(cursor) ? Buffer.from(cursor, "base64url").toString() : "";
  const m = /^(\d{1,16}):(.{1,200})$/.exec(text);
  if (!m) throw new CursorError("cursor must be a next_cursor from a previous page.");
  return { createdAt: Number(m[1]), id: m[2]! };
}

/** Lower-cases ASCII letters only: the name filter matches the same on SQLite (whose lower() does only these) and PostgreSQL. */
export function asciiLower(text: string): string {
  return text.replace(/[A-Z]/g, (c) => c.toLowerCase());
}

/**
 * SQL for what a key's or an account's row (`alias`) spent in its limit's current window: the
 * ledger's count (`period_spent_micro`, moved with every charge) while its window is the current
 * one, else 0 (the period rolled over). ?2, ?3, ?4: the current day's, week's and month's starts
 * (`windowStarts`); a lifetime limit's window is 0, so it counts everything.
 */
export function periodSpentSql(alias: string, day = "?2", week = "?3", month = "?4"): string {
  // The current window, or the next (spend-period.ts, spentInPeriod).
  return `CASE WHEN ${staleWindowSql(alias, windowSql(alias, day, week, month))} THEN 0 ELSE ${alias}.period_spent_micro END`;
}

/**
 * `period_resets_at` of a limit: the end of its current window; null for a lifetime limit, and for
 * no limit at all (a period kept from a limit since removed resets nothing).
 */
export function periodResetsAt(period: SpendPeriod | null, now: number, limitMicro: number | null): string | null {
  return period === null || limitMicro === null ? null : iso(periodWindow(period, now).resetsAt);
}

/** A key row as both stores read it (numbers already numbers). */
export interface KeyRow {
  id: string; name: string | null; key_prefix: string; key_last4: string; created_at: number; revoked_at: number | null;
  expires_at: number | null; rate_limit_per_minute: number | null; spend_limit_micro: number | null; spent_micro: number;
  spend_limit_period: SpendPeriod | null; period_spent: number; allowed_models: string | null; max_concurrent_requests: number | null;
}

/** A key lookup's row (the key's columns and its account's limits) as both stores read it. */
export interface ActiveKeyRow {
  id: string; account_id: string; rate_limit_per_minute: number | null; expires_at: number | null; allowed_models: string | null; max_concurrent_requests: number | null;
  account_rate_limit_per_minute: number | null; account_max_concurrent_requests: number | null; account_suspended_at: number | null;
  account_tokens_per_minute: number | null;
}

/** A key lookup's row as the request path uses it (both stores). */
export function activeKey(row: ActiveKeyRow): ActiveKey {
  return {
    keyId: row.id, accountId: row.account_id, rateLimitPerMinute: row.rate_limit_per_minute, expiresAt: row.expires_at,
    models: readModelsColumn(row.allowed_models), maxConcurrentRequests: row.max_concurrent_requests,
    accountRateLimitPerMinute: row.account_rate_limit_per_minute, accountMaxConcurrentRequests: row.account_max_concurrent_requests,
    accountTokensPerMinute: row.account_tokens_per_minute,
    // PostgreSQL's BIGINT comes back as a string: only its presence matters here.
    accountSuspended: row.account_suspended_at !== null,
  };
}

export function keySummary(k: KeyRow, now: number): KeySummary {
  return {
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
    spend_limit_period: k.spend_limit_period,
    spent_in_period: microToCredits(k.period_spent),
    period_resets_at: periodResetsAt(k.spend_limit_period, now, k.spend_limit_micro),
    models: readModelsColumn(k.allowed_models),
    max_concurrent_requests: k.max_concurrent_requests,
  };
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

/** The range an ISO date with a four-digit year can name (as accounts/admin-input.ts accepts). */
const EARLIEST_ISO_MS = Date.parse("0000-01-01T00:00:00Z");
const LATEST_ISO_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

/**
 * A stored epoch-ms time as ISO 8601. Rows written by an older version may hold times out of
 * range (an expiry of 99999999999999999 was accepted once): they are clamped to year 0 or 9999,
 * which is what they mean in effect (never expires), so reading them never throws. A value that
 * is no number at all reads as null.
 */
export function iso(ms: number | null): string | null {
  if (ms === null || typeof ms !== "number" || Number.isNaN(ms)) return null;
  return new Date(Math.min(LATEST_ISO_MS, Math.max(EARLIEST_ISO_MS, ms))).toISOString();
}

/** A page from `limit + 1` rows (the extra one only says that there is more). */
export function accountPageOf(
  rows: ({ id: string; name: string; balance_micro: number; created_at: number; spend_limit_micro: number | null; spend_limit_period: SpendPeriod | null; suspended_at: number | null } & AccountLimits)[],
  limit: number,
): AccountPage {
  const page = rows.slice(0, limit);
  const last = page.at(-1);
  return {
    object: "list",
    data: page.map((r) => ({
      id: r.id,
      name: r.name,
      balance: microToCredits(r.balance_micro),
      created_at: iso(r.created_at)!,
      spend_limit: r.spend_limit_micro === null ? null : microToCredits(r.spend_limit_micro),
      spend_limit_period: r.spend_limit_period,
      rate_limit_per_minute: r.rate_limit_per_minute,
      max_concurrent_requests: r.max_concurrent_requests,
      tokens_per_minute: r.tokens_per_minute,
      suspended_at: iso(r.suspended_at),
    })),
    next_cursor: rows.length > limit && last ? encodeAccountCursor(last.created_at, last.id) : null,
  };
}
