import { creditsToMicro } from "../billing/money.ts";
import { isSpendPeriod, SPEND_PERIODS, type SpendPeriod } from "../billing/spend-period.ts";

/**
 * What the admin API and the admin CLI accept for keys and accounts, checked the same way by
 * both: a value that is wrong is refused with a message naming the field, never stored, never
 * a 500. Pure.
 */
export class AdminInputError extends Error {}

/** The latest instant an ISO date can name with a four-digit year (9999-12-31T23:59:59.999Z). */
const LATEST_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);
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
    const daysInMonth = new Date(Date.UTC(year!, month!, 0)).getUTCDate();
    if (month! < 1 || month! > 12 || day! < 1 || day! > daysInMonth || hour > 23 || minute > 59 || second > 59) {
      throw new AdminInputError(`${field} is not a date on the calendar: ${text.slice(0, 40)}.`);
    }
    // Without a zone, UTC (as a date alone is): never the host's local time.
    ms = Date.parse(m[4] === undefined ? `${m[1]}-${m[2]}-${m[3]}T00:00:00Z` : text.replace(" ", "T") + (m[7] === undefined ? "Z" : ""));
  }
  if (!Number.isFinite(ms) || ms > LATEST_MS) throw new AdminInputError(`${field} must be a date before the year 10000.`);
  return ms;
}

export function parseSpendPeriod(value: unknown, field = "spend_limit_period"): SpendPeriod | null {
  if (value === null) return null;
  if (isSpendPeriod(value)) return value;
  throw new AdminInputError(`${field} must be one of ${SPEND_PERIODS.join(", ")}, or null for a lifetime limit.`);
}

/** Credits (at most 6 decimals, 0 to MAX_CREDITS) as micro-credits. */
export function parseCredits(value: number, field: string): number {
  try {
    return creditsToMicro(value);
  } catch (err) {
    throw new AdminInputError(`${field}: ${(err as Error).message}`);
  }
}

export function parseRateLimit(value: unknown, field = "rate_limit_per_minute"): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 1 || value > 1_000_000) {
    throw new AdminInputError(`${field} must be a whole number from 1 to 1000000.`);
  }
  return value;
}
