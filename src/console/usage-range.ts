const HOUR = 3_600_000;
const DAY = 86_400_000;

/** The usage view's periods: the last 24 hours by hour, or the last 30 days by day. */
export type UsageRange = "24h" | "30d";

/**
 * A period of whole hours or days (UTC) ending with the one `now` is in: the report reads the
 * hourly rollup, and the chart's buckets are whole. The console's page and its JSON route both
 * use it: the view's `now` is the gateway's (the route's `last=`), the CSV's the view's own end.
 */
export function rangeOf(range: UsageRange, now: number): { from: number; to: number; granularity: "hour" | "day" } {
  if (range === "24h") {
    const to = Math.ceil((now + 1) / HOUR) * HOUR;
    return { from: to - 24 * HOUR, to, granularity: "hour" };
  }
  const to = Math.ceil((now + 1) / DAY) * DAY;
  return { from: to - 30 * DAY, to, granularity: "day" };
}
