/**
 * A latency quantile as the Models view shows it. One at or below the histogram's first bound
 * (`floor`) says only that it is under that bound: a quantile inside the first bucket is
 * interpolated from 0, and every model answering in 1 ms showed p50 13 ms, p99 25 ms (a console probe).
 */
export function latencySaid(ms: number | null, floor: number | null | undefined): string {
  if (ms === null) return "—";
  if (floor != null && ms <= floor) return `under ${floor.toLocaleString("en-US")} ms`;
  return `${ms.toLocaleString("en-US")} ms`;
}
