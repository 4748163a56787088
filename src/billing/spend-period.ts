/**
 * Spend limits that reset by period (issue 29): a key's or an account's `spend_limit` counts what
 * was charged since the start of the current period, in UTC. Pure: the clock is an argument, so
 * roll-overs are tested with any `now` and every process (SQLite, PostgreSQL, workers) cuts the
 * periods at the same instants.
 */

export const SPEND_PERIODS = ["day", "week", "month"] as const;
/** `null` is a lifetime limit: it never resets. */
export type SpendPeriod = (typeof SPEND_PERIODS)[number];

export interface PeriodWindow {
  /** Epoch ms the current period began (inclusive). */
  start: number;
  /** Epoch ms the next period begins: when the limit resets. */
  resetsAt: number;
}

const DAY_MS = 86_400_000;

/** The period `now` falls in. Days start at 00:00 UTC, weeks on Monday, months on the 1st. */
export function periodWindow(period: SpendPeriod, now: number): PeriodWindow {
  const d = new Date(now);
  const y = d.getUTCFullYear();
  const m = d.getUTCMonth();
  const dayStart = Date.UTC(y, m, d.getUTCDate());
  switch (period) {
    case "day":
      return { start: dayStart, resetsAt: dayStart + DAY_MS };
    case "week": {
      // getUTCDay: Sunday 0 … Saturday 6; days since Monday is (day + 6) % 7.
      const start = dayStart - ((d.getUTCDay() + 6) % 7) * DAY_MS;
      return { start, resetsAt: start + 7 * DAY_MS };
    }
    case "month":
      return { start: Date.UTC(y, m, 1), resetsAt: Date.UTC(y, m + 1, 1) };
  }
}

/** The start of the window a limit counts from: the period's start, or 0 (all time) for a lifetime limit. */
export function periodStart(period: SpendPeriod | null, now: number): number {
  return period === null ? 0 : periodWindow(period, now).start;
}

export function isSpendPeriod(value: unknown): value is SpendPeriod {
  return typeof value === "string" && (SPEND_PERIODS as readonly string[]).includes(value);
}
