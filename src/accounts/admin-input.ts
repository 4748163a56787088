import { creditsToMicro, MAX_CREDITS, MICRO_PER_CREDIT } from "../billing/money.ts";
import { isSpendPeriod, SPEND_PERIODS, type SpendPeriod } from "../billing/spend-period.ts";
import { PERIOD_MS, USAGE_GROUPS, type Granularity, type UsageGroup, type UsageQuery } from "../billing/usage-report.ts";

/**
 * What the admin API and the admin CLI accept for keys and accounts, checked the same way by
 * both: a value that is wrong is refused with a message naming the field, never stored, never
 * a 500. Pure.
 */
export class AdminInputError extends Error {}

/** The latest instant an ISO date can name with a four-digit year (9999-12-31T23:59:59.999Z). */
export const LATEST_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);
/** The earliest: 0000-01-01T00:00:00Z (Date.UTC would read year 0 as 1900). */
export const EARLIEST_MS = Date.parse("0000-01-01T00:00:00Z");
const ISO = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?)?$/i;

/**
 * An ISO 8601 date or date-time (or epoch milliseconds) as epoch ms. Stricter than `Date.parse`,
 * which turns 2026-02-30 into March 2nd: every part must exist on the calendar.
 */
export function parseInstant(value: string, field: string): number {
  const text = value.trim();
  let ms: number;
  if (/^\d{1,16}$/.test(text)) {
    ms = Number(text);
  } else {
    const m = ISO.exec(text);
    if (!m) throw new AdminInputError(`${field} must be an ISO 8601 date (2027-01-31 or 2027-01-31T12:00:00Z) or epoch milliseconds.`);
    const [year, month, day, hour = 0, minute = 0, second = 0] = [m[1], m[2], m[3], m[4], m[5], m[6]].map((p) => (p === undefined ? undefined : Number(p))) as number[];
    // setUTCFullYear, not Date.UTC: that reads years 0–99 as 1900–1999 (and 1900 was no leap year, 0 was).
    const daysInMonth = new Date(new Date(0).setUTCFullYear(year!, month!, 0)).getUTCDate();
    if (month! < 1 || month! > 12 || day! < 1 || day! > daysInMonth || hour > 23 || minute > 59 || second > 59) {
      throw new AdminInputError(`${field} is not a date on the calendar: ${text.slice(0, 40)}.`);
    }
    // Without a zone, UTC (as a date alone is): never the host's local time.
    ms = Date.parse(m[4] === undefined ? `${m[1]}-${m[2]}-${m[3]}T00:00:00Z` : text.replace(" ", "T") + (m[7] === undefined ? "Z" : ""));
  }
  if (!Number.isFinite(ms) || ms > LATEST_MS || ms < EARLIEST_MS) throw new AdminInputError(`${field} must be a date before the year 10000.`);
  return ms;
}

export function parseSpendPeriod(value: unknown, field = "spend_limit_period"): SpendPeriod | null {
  if (value === null) return null;
  if (isSpendPeriod(value)) return value;
  throw new AdminInputError(`${field} must be one of ${SPEND_PERIODS.join(", ")}, or null for a lifetime limit.`);
}

/**
 * Credits (at most 6 decimals, 0 to MAX_CREDITS) as micro-credits. An amount above zero but
 * below one micro-credit (5e-10) is refused: it would be stored as 0 and look applied.
 */
export function parseCredits(value: unknown, field: string): number {
  if (typeof value !== "number") throw new AdminInputError(`${field} must be a number of credits from 0 to ${MAX_CREDITS}.`);
  let micro: number;
  try {
    micro = creditsToMicro(value);
  } catch (err) {
    throw new AdminInputError(`${field}: ${(err as Error).message}`);
  }
  if (micro === 0 && value > 0) throw new AdminInputError(`${field} must be 0 or at least one micro-credit (${1 / MICRO_PER_CREDIT}).`);
  return micro;
}

/** A top-up: at least one micro-credit, at most MAX_CREDITS. */
export function parseTopUp(value: unknown, field = "amount"): number {
  const micro = parseCredits(value, field);
  if (micro < 1) throw new AdminInputError(`${field} must be at least one micro-credit (${1 / MICRO_PER_CREDIT}).`);
  return micro;
}

/**
 * Credits typed in a shell, as a plain decimal (an exponent allowed): Number() would also take
 * "", " ", "0x10" and "Infinity".
 */
export function creditsText(text: string | undefined, field: string): number {
  if (text === undefined || !/^\d+(\.\d+)?(e[+-]?\d+)?$/i.test(text.trim())) throw new AdminInputError(`${field} must be a number of credits (a decimal such as 25 or 0.5).`);
  return Number(text.trim());
}

/**
 * Account and key names: 1 to 200 characters (UTF-16 units, as the API's schema counts them), not
 * all blank: a name of spaces shows as nothing, and an operator could not pick it from a list.
 */
export function parseName(value: unknown, field = "name"): string {
  if (typeof value !== "string" || value.length < 1 || value.length > 200) throw new AdminInputError(`${field} must be 1 to 200 characters.`);
  if (value.trim() === "") throw new AdminInputError(`${field} must hold more than spaces.`);
  if (HIDDEN_CONTROL.test(value)) throw new AdminInputError(`${field} may not hold control or text-direction characters (line breaks, tabs, U+202E and the like).`);
  return value;
}

/**
 * Control and format characters (Unicode's Cc and Cf: the invisible marks that reorder text,
 * zero-width spaces, soft hyphens, tags…) and line and paragraph separators: a key a holder names
 * `…U+202E gnp.exe` shows to the operator as `exe.png` (a console probe, 2026-11-30), and a line
 * break splits a name across a list's rows. The zero-width joiner and non-joiner stay: Persian
 * and Indic names and emoji sequences ("👩‍💻 team") need them.
 */
const HIDDEN_CONTROL = /(?![\u200c\u200d])[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u;

/**
 * An Idempotency-Key: 1 to 200 printable ASCII characters (a UUID fits), so it can be stored and
 * shown as it came.
 */
export function parseIdempotencyKey(value: unknown, field = "Idempotency-Key"): string {
  if (typeof value !== "string" || !/^[\x21-\x7e]{1,200}$/.test(value)) throw new AdminInputError(`${field} must be 1 to 200 printable ASCII characters without spaces.`);
  return value;
}

export function parseRateLimit(value: unknown, field = "rate_limit_per_minute"): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 1 || value > 1_000_000) {
    throw new AdminInputError(`${field} must be a whole number from 1 to 1000000.`);
  }
  return value;
}

/** Reads a report query from strings (the admin API's query, the CLI's flags); throws a message for the caller to show. */
export function parseUsageQuery(input: { from?: string; to?: string; group_by?: string; granularity?: string; account_id?: string; key_id?: string; model?: string }, now: number): UsageQuery {
  // The admin input's own parser: a date past the year 9999 would pass Date.parse and then make
  // the report's toISOString() throw (a 500).
  const instant = (value: string | undefined, field: string, fallback: number) => (value === undefined || value === "" ? fallback : parseInstant(value, field));
  const granularity = (input.granularity || "day") as Granularity;
  if (granularity !== "day" && granularity !== "hour") throw new RangeError("granularity must be day or hour.");
  const groupBy = (input.group_by ?? "account,key,model").split(",").map((g) => g.trim()).filter((g) => g !== "");
  for (const g of groupBy) if (!(USAGE_GROUPS as readonly string[]).includes(g)) throw new RangeError(`group_by takes account, key and model (comma-separated), not "${g.slice(0, 40)}".`);
  // Without `from`: the last 30 days, from the start of a period (so the first row is a whole one).
  const size = PERIOD_MS[granularity];
  const to = instant(input.to, "to", now + 1);
  const from = instant(input.from, "from", Math.floor((to - 30 * 86_400_000) / size) * size);
  if (from >= to) throw new RangeError("from must be before to.");
  return { from, to, groupBy: groupBy as UsageGroup[], granularity, accountId: input.account_id || undefined, keyId: input.key_id || undefined, model: input.model || undefined };
}

/** Most entries in a key's model list: a handful is the use; thousands would slow every request's check. */
export const MAX_KEY_MODELS = 100;
/** A model id (`vendor/name`, as config/schema.ts takes) or a `prefix*` pattern; no spaces, `*` only at the end. */
const MODEL_PATTERN = /^[^\s*]{1,200}\*?$|^\*$/;

/**
 * A key's model list (accounts/model-access.ts): 1 to MAX_KEY_MODELS exact model ids or `prefix*`
 * patterns, duplicates dropped, order kept. Null (every model) is the caller's to allow: an empty
 * list is refused, since a key that may use no model is a mistake, not a setting.
 */
export function parseModelPatterns(value: unknown, field = "models"): string[] {
  const what = `${field} must be a list of 1 to ${MAX_KEY_MODELS} model ids or prefix* patterns (such as "anthropic/*" or "openai/gpt-4.1-mini")`;
  if (!Array.isArray(value) || value.length < 1 || value.length > MAX_KEY_MODELS) throw new AdminInputError(`${what}, or null for every model.`);
  for (const entry of value) {
    if (typeof entry !== "string" || !MODEL_PATTERN.test(entry)) {
      throw new AdminInputError(`${what}: ${JSON.stringify(String(entry).slice(0, 60))} is not one (no spaces; * only at the end).`);
    }
  }
  return [...new Set(value as string[])];
}

/** Model patterns typed in a shell: comma-separated (`anthropic/*,openai/gpt-4.1-mini`). */
export function modelPatternsText(text: string | undefined, field = "--models"): string[] {
  if (text === undefined) throw new AdminInputError(`${field} needs a comma-separated list of model ids or prefix* patterns.`);
  return parseModelPatterns(text.split(",").map((p) => p.trim()).filter((p) => p !== ""), field);
}

/** Most requests one key may have under way at once. */
export const MAX_CONCURRENT_REQUESTS = 100_000;
/** The largest tokens a minute an account may be given: a vendor's largest tiers are tens of millions. */
export const MAX_TOKENS_PER_MINUTE = 1_000_000_000;

/** An account's tokens a minute (limits/token-budget.ts): a whole number from 1 to MAX_TOKENS_PER_MINUTE. */
export function parseTokensPerMinute(value: unknown, field = "tokens_per_minute"): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 1 || value > MAX_TOKENS_PER_MINUTE) {
    throw new AdminInputError(`${field} must be a whole number from 1 to ${MAX_TOKENS_PER_MINUTE}.`);
  }
  return value;
}

export function parseMaxConcurrent(value: unknown, field = "max_concurrent_requests"): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 1 || value > MAX_CONCURRENT_REQUESTS) {
    throw new AdminInputError(`${field} must be a whole number from 1 to ${MAX_CONCURRENT_REQUESTS}.`);
  }
  return value;
}
