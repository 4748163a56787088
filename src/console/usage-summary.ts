import { microToCredits } from "../billing/money.ts";
import { PERIOD_MS, shownSums, totalOf, usageSums, type UsageBucketRow, type UsageGroup, type UsageQuery, type UsageSums } from "../billing/usage-report.ts";

/** Lines drawn on the console's chart; the other groups are summed into one "others" line. */
export const CHART_LINES = 7;

/**
 * What the console's usage view shows, from the usage report's rows (the same rows, so the same
 * figures as `GET /v1/admin/usage`): the totals, one entry per group with its sums, and per period
 * the charges of all groups and of the largest ones. A 30-day report split by key over a thousand
 * keys is 30,000 rows (9 MB of JSON); this is a few hundred numbers. Money is summed in
 * micro-credits and turned into credits last, so a period's figure is the report's to the unit.
 */
/** Periods a chart may have, as many as a report's rows (MAX_REPORT_ROWS): 5 years of hours, 136 of days. */
export const MAX_CHART_PERIODS = 50_000;

/**
 * The range's periods at its granularity (what `summarizeUsage` draws): from the one `from` falls
 * in to the one `to` ends in, so a range of part periods (the route's default ends now) keeps the
 * charges of its first and last (rounded, a 5.2-hour range lost some, a 0.3-hour one all).
 */
export function chartPeriods(q: UsageQuery): number {
  const size = PERIOD_MS[q.granularity];
  return Math.max(0, Math.ceil(q.to / size) - Math.floor(q.from / size));
}

/**
 * How many groups the view's table lists at first, the dearest; the rest are one "others" row of
 * exact sums, and "Show all" asks for every one. A table of 2,000 keys (24,000 elements) took
 * 3.6–9.8 s to show, the page stuck meanwhile (a console probe). The CSV has every row.
 */
export const TABLE_GROUPS = 100;

/** `top`: list the dearest `top` groups and sum the rest as `others` (null: list every group). */
export function summarizeUsage(q: UsageQuery, rows: UsageBucketRow[], split: UsageGroup | null, top: number | null = null) {
  const size = PERIOD_MS[q.granularity];
  const periods = chartPeriods(q);
  // Refused by the route before this is called; a caller that did not check gets no giant arrays.
  if (periods > MAX_CHART_PERIODS) throw new RangeError(`${periods} periods, more than ${MAX_CHART_PERIODS}`);
  const first = Math.floor(q.from / size) * size;
  const at = (period: number) => Math.round((period - first) / size);
  const groupOf = (r: UsageBucketRow): { id: string; name: string | null } =>
    split === "account" ? { id: r.account_id!, name: r.account_name ?? null }
    : split === "key" ? { id: r.key_id!, name: r.key_name ?? null }
    : split === "model" ? { id: r.model!, name: null }
    : { id: "", name: null };

  // Two passes: every group's sums first, then per-period lines only for the groups drawn, so a
  // report split over thousands of keys holds a few arrays of `periods`, not one per key.
  type Group = { name: string | null; sums: UsageSums; micro?: number[] };
  const groups = new Map<string, Group>();
  /** Each row's group, for the second pass. */
  const groupOfRow: Group[] = [];
  const all = new Array<number>(periods).fill(0);
  for (const r of rows) {
    const g = groupOf(r);
    let entry = groups.get(g.id);
    if (!entry) groups.set(g.id, (entry = { name: g.name, sums: usageSums({}) }));
    groupOfRow.push(entry);
    for (const f of Object.keys(entry.sums) as (keyof UsageSums)[]) entry.sums[f] += r[f];
    const i = at(r.period);
    if (i >= 0 && i < periods) all[i]! += r.cost_micro;
  }
  const ranked = [...groups].sort((a, b) => b[1].sums.cost_micro - a[1].sums.cost_micro || (a[0] < b[0] ? -1 : 1));
  const drawn = ranked.slice(0, CHART_LINES);
  for (const [, g] of drawn) g.micro = new Array<number>(periods).fill(0);
  rows.forEach((r, row) => {
    const micro = groupOfRow[row]!.micro;
    const i = at(r.period);
    if (micro && i >= 0 && i < periods) micro[i]! += r.cost_micro;
  });
  const lines = drawn.map(([id, g]) => ({ id, name: g.name, costs: g.micro!.map(microToCredits) }));
  if (ranked.length > CHART_LINES) {
    // The others: every group's charges less the lines drawn, period by period (integers, exact).
    const rest = all.slice();
    for (const [, g] of drawn) g.micro!.forEach((m, i) => (rest[i]! -= m));
    lines.push({ id: "others", name: `${ranked.length - CHART_LINES} others`, costs: rest.map(microToCredits) });
  }
  // The groups not listed, summed in micro-credits (so the listed ones and this add up to the total exactly).
  const listed = top === null ? ranked : ranked.slice(0, top);
  const unlisted = ranked.slice(listed.length);
  return {
    object: "console_usage",
    from: new Date(q.from).toISOString(),
    to: new Date(q.to).toISOString(),
    granularity: q.granularity,
    split,
    total: shownSums(totalOf(rows)),
    /** Charges of each period (every group), from `from`, one per `granularity`. */
    period_costs: all.map(microToCredits),
    lines,
    groups: listed.map(([id, g]) => ({ id, name: g.name, ...shownSums(g.sums) })),
    /** How many groups there are, listed or not. */
    group_count: ranked.length,
    /** The groups not in `groups`, summed (null: every group is listed). */
    others: unlisted.length === 0 ? null : { groups: unlisted.length, ...shownSums(totalOf(unlisted.map(([, g]) => g.sums))) },
  };
}

export type UsageSummary = ReturnType<typeof summarizeUsage>;
