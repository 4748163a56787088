import type { GatewayMetrics } from "./gateway-metrics.ts";

/**
 * Each model's recent health for the console's catalogue: error rate and time-to-first-byte p50 /
 * p99, from the counters the gateway keeps anyway (ops/gateway-metrics.ts). Nothing is added to
 * the request path: figures are read when the console asks, and "recent" is the difference from
 * a snapshot taken at an earlier read (one a minute at most, kept 15 minutes) at least 5 minutes
 * old; before there is one, since the process started. Per process, as /metrics is.
 */
export interface ModelTotals {
  requests: number;
  /** Answers with a 5xx status (upstream failures, the gateway's own). */
  errors: number;
  /** Time-to-first-byte counts per bucket (not cumulative; the last is past every bound). */
  buckets: number[];
}

export interface ModelHealth {
  model: string;
  requests: number;
  error_rate: number | null;
  latency_p50_ms: number | null;
  latency_p99_ms: number | null;
  /**
   * The first bucket's bound: a latency at or below it says only "under this" (a quantile inside
   * that bucket is interpolated from 0, so every model answering in 1 ms showed p50 13 ms and p99
   * 25 ms; a console probe).
   */
  latency_floor_ms: number | null;
  /** Since when the figures count (ISO 8601). */
  since: string;
}

/**
 * A quantile from histogram buckets, interpolated inside its bucket as Prometheus's
 * histogram_quantile does; null without observations. Past the last bound, the last bound.
 */
export function bucketQuantile(q: number, bounds: readonly number[], buckets: readonly number[]): number | null {
  const total = buckets.reduce((a, b) => a + b, 0);
  if (total === 0) return null;
  const rank = q * total;
  let seen = 0;
  for (let i = 0; i < buckets.length; i++) {
    const count = buckets[i]!;
    if (seen + count >= rank && count > 0) {
      if (i >= bounds.length) return bounds[bounds.length - 1]!;
      const lower = i === 0 ? 0 : bounds[i - 1]!;
      return lower + (bounds[i]! - lower) * ((rank - seen) / count);
    }
    seen += count;
  }
  return bounds[bounds.length - 1]!;
}

/** What the metrics hold per model, summed over routes, providers and statuses. */
export function modelTotals(metrics: GatewayMetrics): Map<string, ModelTotals> {
  const totals = new Map<string, ModelTotals>();
  const size = metrics.families.ttft.bounds.length + 1;
  const of = (model: string) => {
    let t = totals.get(model);
    if (!t) totals.set(model, (t = { requests: 0, errors: 0, buckets: new Array(size).fill(0) }));
    return t;
  };
  const { model: modelDim } = metrics.dims;
  metrics.families.requests.each(([, model, , status], value) => {
    // Requests the gateway refused before the model was asked (401, 402, 403, 404, 413, 429…) say
    // nothing of the model's health: counted, 28 refused requests of an account out of credit
    // doubled a model's count and halved its error rate (a console probe). A client that left (499)
    // had reached it.
    if (status! >= 400 && status! < 500 && status !== 499) return;
    const t = of(modelDim.label(model!));
    t.requests += value;
    if (status! >= 500) t.errors += value;
  });
  metrics.families.ttft.each(([, model], buckets) => {
    const t = of(modelDim.label(model!));
    buckets.forEach((n, i) => (t.buckets[i]! += n));
  });
  return totals;
}

const SNAPSHOT_EVERY_MS = 60_000;
/** The shortest window "recent" figures count: snapshots younger than this are not a base yet. */
const MIN_WINDOW_MS = 5 * 60_000;
const KEEP_MS = 15 * 60_000;

export function createModelHealth(o: { metrics: () => GatewayMetrics | undefined; models: readonly string[]; now: () => number; startedAt: number }) {
  const snapshots: { at: number; totals: Map<string, ModelTotals> }[] = [];
  return (): ModelHealth[] => {
    const metrics = o.metrics();
    const at = o.now();
    // A snapshot past KEEP_MS goes once the next is old enough to be the base in its place: with
    // sparse looks, dropping it left only young ones, and the figures fell back to since the start.
    while (snapshots.length > 1 && at - snapshots[0]!.at > KEEP_MS && at - snapshots[1]!.at >= MIN_WINDOW_MS) snapshots.shift();
    const current = metrics ? modelTotals(metrics) : new Map<string, ModelTotals>();
    // The oldest snapshot kept, once it is old enough to say something: a base seconds old showed
    // an operator who reloaded to confirm an outage a clean bill of health (a console probe).
    // Younger than that, the figures count since the process started.
    const base = snapshots.length > 0 && at - snapshots[0]!.at >= MIN_WINDOW_MS ? snapshots[0] : undefined;
    if (metrics && (snapshots.length === 0 || at - snapshots[snapshots.length - 1]!.at >= SNAPSHOT_EVERY_MS)) snapshots.push({ at, totals: current });
    const bounds = metrics?.families.ttft.bounds ?? [];
    return o.models.map((model) => {
      const now = current.get(model) ?? { requests: 0, errors: 0, buckets: [] };
      const before = base?.totals.get(model);
      const requests = now.requests - (before?.requests ?? 0);
      const errors = now.errors - (before?.errors ?? 0);
      const buckets = now.buckets.map((n, i) => n - (before?.buckets[i] ?? 0));
      const ms = (q: number) => {
        const s = bucketQuantile(q, bounds, buckets);
        return s === null ? null : Math.round(s * 1000);
      };
      return {
        model, requests, error_rate: requests > 0 ? errors / requests : null, latency_p50_ms: ms(0.5), latency_p99_ms: ms(0.99),
        latency_floor_ms: bounds.length > 0 ? Math.round(bounds[0]! * 1000) : null, since: new Date(base?.at ?? o.startedAt).toISOString(),
      };
    });
  };
}
