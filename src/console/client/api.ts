/** The console's calls to its JSON routes (/console/api): the session's CSRF token rides on every change. */

export class ApiError extends Error {
  /** `gatewaySaid`: the message is the gateway's own (a JSON error body), not a proxy's status alone. */
  constructor(readonly status: number, message: string, readonly gatewaySaid = true, readonly code: string | null = null) {
    super(message);
  }

  /** Another sign-in in this browser replaced the page's session (console-api.ts, SESSION_REPLACED_CODE); not the API's other 409s. */
  get sessionReplaced(): boolean {
    return this.status === 409 && this.code === "session_replaced";
  }
}

let csrf = "";
export function setCsrf(token: string): void {
  csrf = token;
}

/**
 * What the page does when a change, or a read made inside a view (`readInView`), finds its session
 * gone (401) or replaced by another sign-in (409): main.ts sets it. `read`: nothing was changed.
 */
let sessionLost: ((status: 401 | 409, read: boolean) => void) | undefined;
export function onSessionLost(handler: (status: 401 | 409, read: boolean) => void): void {
  sessionLost = handler;
}

/**
 * A read a view makes by itself (a page of keys, every usage group), not the view's own load
 * (main.ts's route, which follows a lost session itself): a lost session moves the page to the
 * sign-in or to whoever is signed in now, as a change's does. Its button did nothing at all (a console probe).
 */
export async function readInView<T>(path: string): Promise<T> {
  try {
    return await api<T>("GET", path);
  } catch (err) {
    const handler = sessionLost;
    if (handler && err instanceof ApiError && (err.status === 401 || err.sessionReplaced)) setTimeout(() => handler(err.status as 401 | 409, true), 0);
    throw err;
  }
}

export async function api<T>(method: "GET" | "POST" | "PATCH" | "DELETE", path: string, body?: unknown, extra?: Record<string, string>): Promise<T> {
  const headers: Record<string, string> = { accept: "application/json", ...extra };
  // On reads too: it says whose view the page shows, and the gateway answers 409 when another
  // sign-in in this browser has replaced that session (main.ts then reads who is signed in now).
  if (method !== "GET" || csrf) headers["x-csrf-token"] = csrf;
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`/console/api${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: "same-origin" });
  const text = await res.text();
  let parsed: unknown = undefined;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = undefined;
  }
  if (!res.ok) {
    // A form's change refused because the page's session ended or was replaced: the form says
    // why, and the page then moves to the sign-in or to whoever is signed in now, instead of
    // leaving forms that can only fail (a console probe). Not sign-in's or sign-out's own answers.
    const error = (parsed as { error?: { message?: string; code?: unknown } } | undefined)?.error;
    const code = typeof error?.code === "string" ? error.code : null;
    const replaced = res.status === 409 && code === "session_replaced";
    if (csrf && method !== "GET" && (res.status === 401 || replaced) && path !== "/sign-out" && !path.startsWith("/sign-in")) {
      const handler = sessionLost;
      if (handler) setTimeout(() => handler(res.status as 401 | 409, false), 0);
    }
    const said = typeof error?.message === "string" ? consoleWords(error.message) : undefined;
    throw new ApiError(res.status, said ?? `The gateway answered ${res.status}.`, said !== undefined, code);
  }
  // The overview of a browser signed out (no session cookie): read as the 401 it was before, so
  // every caller goes on to the sign-in as it did.
  if (path === "/overview" && (parsed as { session?: unknown } | undefined)?.session === null) throw new ApiError(401, "Not signed in: sign in.", true, null);
  return parsed as T;
}

/** The API's field names that begin its refusals, as the console's forms name the fields. */
const FIELDS: Record<string, string> = {
  spend_limit: "Spend limit", spend_limit_period: "Period", name: "Name", models: "Models", amount: "Credits", credits: "Credits",
  rate_limit_per_minute: "Requests a minute", max_concurrent_requests: "Requests at once", tokens_per_minute: "Tokens a minute", expires_at: "Last day", login: "Login", password: "Password",
};

/**
 * A refusal in the console's words: the console API shares the admin API's checks, whose words name
 * JSON fields ("Invalid request: spend_limit: must be … or null for none."), which the page's
 * forms do not show (a console probe).
 */
export function consoleWords(message: string): string {
  return message
    .replace(/^Invalid request: /, "")
    .replace(/^([a-z_]+)(?=:? )/, (field) => FIELDS[field] ?? field)
    .replace(/,? or null for (none|every model|a lifetime limit)/, (_, what: string) => (what === "none" ? ", or empty for none" : what === "every model" ? ", or empty for every model" : ", or lifetime"));
}

/** The shapes the routes answer with (http/console/console-api.ts and the admin API). */
export interface Session { kind: "operator" | "holder"; login: string | null; account_id: string | null; csrf: string; expires_at: string }
export interface KeySummary {
  id: string; name: string | null; prefix: string; last4: string; created_at: string; revoked_at: string | null; expires_at: string | null;
  rate_limit_per_minute: number | null; max_concurrent_requests?: number | null; spend_limit: number | null; spent: number; models?: string[] | null; spend_limit_period: "day" | "week" | "month" | null; spent_in_period: number; period_resets_at: string | null;
}
export interface Account {
  id: string; name: string; balance: number; reserved: number; created_at: string; spend_limit: number | null; spend_limit_period: "day" | "week" | "month" | null;
  spent_in_period: number; period_resets_at: string | null;
  /** The keys in use, then the first page of the revoked and expired ones (newest first); more are read by `keys_page.next_offset`. */
  keys: KeySummary[];
  /** How many keys are in use and how many revoked or expired, and where the next page of those starts (null: none). */
  keys_page?: { active: number; inactive: number; next_offset: number | null };
  /** Limits on all the account's keys together; null: the gateway's default. */
  rate_limit_per_minute?: number | null; max_concurrent_requests?: number | null;
  /** Prompt and answer tokens a minute, all its keys together; null: the gateway's default. */
  tokens_per_minute?: number | null;
  /** The gateway's limits, which the unset ones above and on keys mean (null: none). */
  default_limits?: DefaultLimits;
  /** A holder's page: what a key they make may reach, as the operator limited the account's keys (accounts/holder-keys.ts). */
  new_key?: { models?: string[]; rate_limit_per_minute?: number; max_concurrent_requests?: number };
  /** Since when the operator has suspended the account (its keys refused); null: it is not. */
  suspended_at?: string | null;
  /** Requests refused before any upstream call in the 24 hours before the account was read, by status (402, 429…). */
  refused_last_24h?: Record<string, number>;
  /** When each status's latest of those was (ISO, the start of its minute). */
  refused_latest?: Record<string, string>;
  /** Credits opened with, added and taken back (not requests' charges), newest first, the latest 20. */
  credit_history?: { created_at: string; kind: "opening" | "top_up" | "debit"; credits: number }[];
}
export interface DefaultLimits {
  key_requests_per_minute: number; key_max_concurrent_requests: number | null;
  account_requests_per_minute: number | null; account_max_concurrent_requests: number | null;
  account_tokens_per_minute?: number | null;
}
/** An account's console logins and open invites (operators). */
export interface AccountLogins {
  logins: { login: string; created_at: string }[];
  invites: { login: string; created_at: string; expires_at: string }[];
}
export interface AccountPage { data: { id: string; name: string; balance: number; created_at: string; spend_limit: number | null; spend_limit_period: string | null; suspended_at?: string | null }[]; next_cursor: string | null }
export interface Overview { session: Session; account?: Account; accounts?: AccountPage }
export interface Sums {
  requests: number; prompt_tokens: number; completion_tokens: number; fresh_input_tokens: number; cache_read_tokens: number; cache_write_5m_tokens: number;
  cache_write_1h_tokens: number; reasoning_tokens: number; images: number; cost: number; cache_savings: number;
  /** Of `requests`, those whose counts the gateway estimated (the vendor sent none). */
  estimated_requests: number;
}
/** The usage view's data (console/usage-summary.ts): the usage report's rows, summed per group and period. */
export interface UsageSummary {
  from: string; to: string; granularity: "hour" | "day"; split: "model" | "key" | "account" | null; total: Sums;
  period_costs: number[];
  lines: { id: string; name: string | null; costs: number[] }[];
  groups: (Sums & { id: string; name: string | null })[];
  /** How many groups there are; `groups` lists the dearest of them unless all were asked for. */
  group_count: number;
  /** The groups not listed, summed (null: all are listed). */
  others: (Sums & { groups: number }) | null;
  /** One account's view only: requests refused before any upstream call, by status (never charged). */
  rejected?: Record<string, number>;
}
export interface RecentRequest {
  request_id: string; created_at: string; account_id: string; account_name: string | null; key_id: string; key_name: string | null; model: string; status: string; latency_ms: number; prompt_tokens: number;
  fresh_input_tokens: number; cache_read_tokens: number; cache_write_5m_tokens: number; cache_write_1h_tokens: number; completion_tokens: number; estimated: boolean; cost: number;
}
/** A pooled vendor key's state, by the env name that holds it (never its value). */
export interface VendorKey { provider: string; key: string; state: "usable" | "cooling" | "disabled"; until?: string; since?: string; next_probe?: string; models_cooling?: { model: string; until: string }[] }
export interface Catalogue { data: CatalogueEntry[]; vendor_keys?: VendorKey[] }
/** Credits per million tokens of each class. */
export interface Prices { input_per_mtok: number; output_per_mtok: number; cache_read_per_mtok?: number; cache_write_per_mtok?: number; cache_write_1h_per_mtok?: number }
/** `provider` and `health` are the operator's only (a holder's catalogue is the prices). */
export interface CatalogueEntry {
  id: string; provider?: string; category: string; context_length: number;
  pricing: (Prices & { per_image?: number; long_context?: Prices & { above_tokens: number } }) | null;
  health?: { requests: number; error_rate: number | null; latency_p50_ms: number | null; latency_p99_ms: number | null; latency_floor_ms?: number | null; since: string } | null;
}
