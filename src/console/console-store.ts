import { iso } from "../accounts/account-store.ts";
import { microToCredits } from "../billing/money.ts";

/**
 * The ConsoleStore port: what the web console keeps beside the ledger — account holders' logins,
 * their one-time invites, signed-in sessions — and the recent-requests view of the usage records.
 * Implementations: store/sqlite/sqlite-console-store.ts and store/postgres/pg-console-store.ts, in
 * the ledger's own database, so sessions survive a restart and every worker and replica sees them.
 *
 * Secrets are never stored: invites and sessions are found by the SHA-256 of their token, and
 * passwords are argon2id hashes (Bun.password) made by the caller.
 */

export type SessionKind = "operator" | "holder";

export interface ConsoleSession {
  tokenHash: string;
  kind: SessionKind;
  /** The holder's account; null for an operator. */
  accountId: string | null;
  login: string | null;
  /** The session's CSRF token: every change must echo it in `x-csrf-token`. */
  csrf: string;
  createdAt: number;
  expiresAt: number;
}

export interface ConsoleInvite {
  tokenHash: string;
  accountId: string;
  login: string;
  createdAt: number;
  expiresAt: number;
}

export interface ConsoleUser {
  login: string;
  accountId: string;
  passwordHash: string;
}

/** One finished request as the console lists it: never the prompt or the answer (the records hold neither). */
export interface RecentRequest {
  request_id: string;
  created_at: string;
  account_id: string;
  /** The account's and the key's names now (null: none, or a 401's unknown key), read with the record. */
  account_name: string | null;
  key_id: string;
  key_name: string | null;
  model: string;
  status: string;
  latency_ms: number;
  prompt_tokens: number;
  /**
   * The prompt's fresh input: `prompt_tokens` less its cache reads and writes, the line a vendor's
   * invoice calls input (the usage report's column of the same name; the download had none, and
   * checking a request against an invoice took a subtraction per row: a bill audit, fifth round).
   */
  fresh_input_tokens: number;
  /**
   * The prompt's tokens read from and written to the vendor's cache (part of `prompt_tokens`), each
   * at its own price: without them a request's credits could not be checked against the prices (a
   * prompt of 3,600 tokens at 3 a million cost 0.003375, 3,000 of them read from the cache).
   */
  cache_read_tokens: number;
  cache_write_5m_tokens: number;
  cache_write_1h_tokens: number;
  completion_tokens: number;
  /**
   * The token counts are the gateway's estimate, not the vendor's: it reported none (an answer cut
   * short, a vendor that leaves usage out). Billed as estimated, so said beside the figures.
   */
  estimated: boolean;
  cost: number;
}

export interface RecentQuery {
  /** Only this account's requests (a holder's view); all accounts otherwise. */
  accountId?: string;
  limit: number;
}

/** An account's holder logins and its invites not yet used, as the admin API and console list them. */
export interface AccountLogins {
  logins: { login: string; created_at: string }[];
  /** Unused and unexpired; an invite for a login the account has already resets its password. */
  invites: { login: string; created_at: string; expires_at: string }[];
}

/** Why an invite could not be taken. */
export type AcceptOutcome = { ok: true; accountId: string; login: string } | { ok: false; reason: "invalid" | "login_taken" };

type MaybePromise<T> = T | Promise<T>;

export interface ConsoleStore {
  /**
   * False when the login is another account's, or another account has an open invite for it. For
   * a login the account has already, the invite is a password reset: a holder who forgot theirs is
   * sent a new link. The account's earlier open invites for the login are cancelled: one link a
   * login at a time.
   */
  createInvite(invite: ConsoleInvite): MaybePromise<boolean>;
  /**
   * Takes an unused, unexpired invite and makes its user, in one transaction: an invite works once,
   * even when two browsers open it at the same moment. For a login the account has already, it
   * sets the new password and ends that login's sessions. The login's other open invites, at any
   * account, are cancelled.
   */
  acceptInvite(tokenHash: string, passwordHash: string, now: number): MaybePromise<AcceptOutcome>;
  /** The account's logins and open invites. */
  listLogins(accountId: string, now: number): MaybePromise<AccountLogins>;
  /**
   * Removes the account's login (its password and its sessions, which end at once) and cancels its
   * open invites to the account, in one transaction; false when the account had neither.
   */
  removeLogin(accountId: string, login: string): MaybePromise<boolean>;
  /** Cancels the account's open (unused, unexpired) invites for the login and leaves the login as it is; false when there were none. */
  cancelInvites(accountId: string, login: string, now: number): MaybePromise<boolean>;
  findUser(login: string): MaybePromise<ConsoleUser | null>;
  /** An unused, unexpired invite (what its page shows before a password is typed), else null. */
  findInvite(tokenHash: string, now: number): MaybePromise<{ login: string; expiresAt: number; reset: boolean } | null>;
  loginTaken(login: string): MaybePromise<boolean>;
  /** Also deletes sessions that expired (an index on the expiry keeps it cheap). */
  createSession(session: ConsoleSession): MaybePromise<void>;
  /** The session while it has not expired, else null. */
  findSession(tokenHash: string, now: number): MaybePromise<ConsoleSession | null>;
  deleteSession(tokenHash: string): MaybePromise<void>;
  /** Newest first, through indexes: the records' primary key, or (account_id, created_at). */
  recentRequests(query: RecentQuery): MaybePromise<RecentRequest[]>;
  /** The account's credit entries, newest first, at most `limit` (through the account's index). */
  creditEntries(accountId: string, limit: number): MaybePromise<CreditEntry[]>;
}

/**
 * A movement of an account's credits that is not a request's charge: what it opened with, what an
 * operator added or took back. A holder saw the balance jump after a top-up with nothing saying
 * why, and an operator could not look back at what was added (a console probe).
 */
export interface CreditEntry {
  created_at: string;
  kind: "opening" | "top_up" | "debit";
  /** Signed: a debit is negative. */
  credits: number;
}

/** Most credit entries an account's page lists. */
export const CREDIT_ENTRIES_SHOWN = 20;

/** A credit_entries row as the console lists it (`initial` and the migration's `opening` are both the opening balance). */
export function creditEntryOf(r: { amount_micro: unknown; kind: unknown; created_at: unknown }): CreditEntry {
  const kind = r.kind === "top_up" || r.kind === "debit" ? r.kind : "opening";
  return { created_at: iso(Number(r.created_at))!, kind, credits: microToCredits(Number(r.amount_micro)) };
}

/** Most requests one recent-requests page lists. */
export const MAX_RECENT = 200;

/** A usage record as the console lists it; the id a client knows (its x-request-id) when it sent one. */
export function recentRequestOf(r: Record<string, unknown>): RecentRequest {
  return {
    request_id: String(r.client_request_id ?? r.request_id),
    created_at: iso(Number(r.created_at))!,
    account_id: String(r.account_id),
    account_name: typeof r.account_name === "string" ? r.account_name : null,
    key_id: String(r.key_id),
    key_name: typeof r.key_name === "string" ? r.key_name : null,
    model: String(r.model),
    status: String(r.status),
    latency_ms: Number(r.latency_ms),
    prompt_tokens: Number(r.prompt_tokens),
    // A record's classes add up to its prompt (the audit checks it); one older than the classes has
    // none, and its prompt is fresh input, as the usage report reads it.
    fresh_input_tokens: Number(r.prompt_tokens) - Number(r.cache_read_tokens ?? 0) - Number(r.cache_write_5m_tokens ?? 0) - Number(r.cache_write_1h_tokens ?? 0),
    cache_read_tokens: Number(r.cache_read_tokens ?? 0),
    cache_write_5m_tokens: Number(r.cache_write_5m_tokens ?? 0),
    cache_write_1h_tokens: Number(r.cache_write_1h_tokens ?? 0),
    completion_tokens: Number(r.completion_tokens),
    // SQLite stores 0/1, PostgreSQL a boolean.
    estimated: r.estimated === true || Number(r.estimated) === 1,
    cost: microToCredits(Number(r.cost_micro)),
  };
}

