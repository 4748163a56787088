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

/** A spend limit and what counts against it, as a store keeps it (a key's or an account's row). */
export interface SpendBudget {
  /** null: no limit. */
  limitMicro: number | null;
  period: SpendPeriod | null;
  /** Charged since `periodStart`. */
  periodSpentMicro: number;
  /** The window `periodSpentMicro` counts (0 for a lifetime limit). */
  periodStart: number;
}

/**
 * What counts against the limit at `now`: the stored count while its window is the current one,
 * or a later one (the clock stepped back across a period's start: the count it made since still
 * holds; read as 0, a 1-credit daily limit let 1.8 through, a fault probe); 0 once the period rolled over.
 */
export function spentInPeriod(b: SpendBudget, now: number): number {
  return staleWindow(b, periodStart(b.period, now)) ? 0 : b.periodSpentMicro;
}

/** The longest each period runs (a month: 31 days), and 0 for a lifetime limit (its window is always 0). */
const PERIOD_SPAN_MS = { day: 86_400_000, week: 7 * 86_400_000, month: 31 * 86_400_000, lifetime: 0 } as const;

/**
 * Whether a count's window is not the one starting at `start`, nor the next: past (the period
 * rolled over), or further ahead than the next, made by a clock that ran far ahead and was put
 * right (its count would lock the limit until that day came; a hostile-tenant probe's 30-day
 * step). The next window counts: a clock stepped back across a period's start.
 */
function staleWindow(b: SpendBudget, start: number): boolean {
  return b.periodStart < start || b.periodStart > start + PERIOD_SPAN_MS[b.period ?? "lifetime"];
}

/** SQL for staleWindow: a row's (`row`; "" for the statement's own table) `period_start` against `window`, an SQL expression of its current window's start. */
export function staleWindowSql(row: string, window: string): string {
  const column = (name: string) => (row ? `${row}.${name}` : name);
  const span = `(CASE ${column("spend_limit_period")} WHEN 'day' THEN ${PERIOD_SPAN_MS.day} WHEN 'week' THEN ${PERIOD_SPAN_MS.week} WHEN 'month' THEN ${PERIOD_SPAN_MS.month} ELSE 0 END)`;
  return `(${column("period_start")} < ${window} OR ${column("period_start")} > ${window} + ${span})`;
}

/**
 * A charge of `amount` settled at `at`, as the stores write it: into the window `at` falls in when
 * that is the count's; a later window starts a new count; an earlier one (a charge stamped before
 * the count's window began: another process's, or a clock stepped back) belongs to that closed
 * window and moves nothing. Never backwards.
 */
export function chargeBudget(b: SpendBudget, amount: number, at: number): void {
  const start = periodStart(b.period, at);
  if (b.periodStart === start) b.periodSpentMicro += amount;
  // A stale window starts again, a far-ahead one too: read as 0, its count would never move (a reviewer).
  else if (staleWindow(b, start)) {
    b.periodSpentMicro = amount;
    b.periodStart = start;
  }
}

/**
 * A ledger's clock: never earlier than it said before. A clock stepped back across a period's start
 * (NTP, a VM restored) stamped charges into the window before the count's, where they moved no
 * count: a key charged while the clock was behind spent without limit (a reviewer's finding). With
 * this clock a process's charges stay in the window it had reached; across processes (PostgreSQL
 * workers on hosts whose clocks differ) a charge stamped before the count's window still moves
 * nothing, within the hosts' skew.
 */
export function monotonicClock(now: () => number, maxHoldMs = MAX_CLOCK_HOLD_MS): () => number {
  let last = Number.NEGATIVE_INFINITY;
  return () => {
    const t = now();
    // A clock put back by more than an hour is followed: it ran ahead (a 30-day step, then
    // corrected), and holding its time would stamp a month of records in the future.
    if (t > last || last - t > maxHoldMs) last = t;
    return last;
  };
}

/** How far back a ledger's clock is held (monotonicClock): NTP corrections, a VM's pause, an hour's zone mistake. */
export const MAX_CLOCK_HOLD_MS = 3_600_000;

/** Each period's window start at `at`, for a statement that picks one by a row's period (lifetime: 0). */
export function windowStarts(at: number): { day: number; week: number; month: number } {
  return { day: periodWindow("day", at).start, week: periodWindow("week", at).start, month: periodWindow("month", at).start };
}

/**
 * SQL for the start of a row's current window: the start of its `spend_limit_period` among the
 * three given (statement parameters or literals of `windowStarts`), 0 for a lifetime limit. Every
 * statement that reads or moves a period count (both ledgers, both account stores) uses it.
 */
export function windowSql(row: string, day: string, week: string, month: string): string {
  const period = row ? `${row}.spend_limit_period` : "spend_limit_period";
  return `(CASE ${period} WHEN 'day' THEN ${day} WHEN 'week' THEN ${week} WHEN 'month' THEN ${month} ELSE 0 END)`;
}

/** A row's value of `spend_limit_period`, checked (the stores' CHECK constraints allow nothing else). */
export function storedPeriod(value: unknown): SpendPeriod | null {
  return isSpendPeriod(value) ? value : null;
}
