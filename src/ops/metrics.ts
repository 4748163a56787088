/**
 * A Prometheus registry written for the request path: every series is a plain number (or one
 * Float64Array per histogram series) in a Map keyed by a number computed from label indices, so
 * counting a request allocates nothing and costs a few Map operations. Label values are fixed
 * lists (the configured model and provider ids, the routes the app serves, status codes);
 * anything outside a list counts as "other", so no client input can grow the series count.
 * Text is only built when /metrics is scraped. prom-client was not used: it keys every
 * observation by a labels object it hashes into a string, which is per-request allocation and
 * hashing on the hot path, and it brings a dependency for what fits in this file.
 */

/** One label's possible values. The last value is what unknown inputs count as. */
export class Dimension {
  readonly #index = new Map<string, number>();
  readonly size: number;
  constructor(
    readonly name: string,
    readonly values: readonly string[],
  ) {
    values.forEach((v, i) => {
      if (!this.#index.has(v)) this.#index.set(v, i);
    });
    this.size = values.length;
  }
  /** The index of `value`, or of the last value ("other") when it is not in the list. */
  indexOf(value: string): number {
    return this.#index.get(value) ?? this.size - 1;
  }
  label(i: number): string {
    return this.values[i]!;
  }
}

/** HTTP status codes as a dimension: 0–599 by number, no lookup. */
export class StatusDimension extends Dimension {
  constructor() {
    super("status", Array.from({ length: 600 }, (_, i) => String(i)));
  }
  static clamp(status: number): number {
    return status >= 0 && status < 600 ? status | 0 : 0;
  }
}

type Sample = { labels: string; value: number };

interface Family {
  readonly name: string;
  readonly help: string;
  readonly type: "counter" | "gauge" | "histogram";
  render(out: string[]): void;
}

/** Up to four labels; `key` turns their indices into one number without allocating. */
abstract class Series {
  readonly #s1: number;
  readonly #s2: number;
  readonly #s3: number;
  constructor(readonly dims: readonly Dimension[]) {
    if (dims.length > 4) throw new Error("at most four labels");
    this.#s1 = dims[1]?.size ?? 1;
    this.#s2 = dims[2]?.size ?? 1;
    this.#s3 = dims[3]?.size ?? 1;
  }
  protected key(a: number, b: number, c: number, d: number): number {
    return ((a * this.#s1 + b) * this.#s2 + c) * this.#s3 + d;
  }
  /** The label indices a key stands for (read off the request path only: the console's health view). */
  protected indices(key: number): number[] {
    const idx: number[] = new Array(this.dims.length);
    for (let i = this.dims.length - 1; i >= 0; i--) {
      const size = this.dims[i]!.size;
      idx[i] = key % size;
      key = Math.floor(key / size);
    }
    return idx;
  }
  /** `name="value",…` for a key, built at scrape time only. */
  protected labels(key: number, extra = ""): string {
    const parts: string[] = [];
    const sizes = this.dims.map((d) => d.size);
    const idx: number[] = new Array(this.dims.length);
    for (let i = this.dims.length - 1; i >= 0; i--) {
      idx[i] = key % sizes[i]!;
      key = Math.floor(key / sizes[i]!);
    }
    this.dims.forEach((d, i) => parts.push(`${d.name}="${escapeLabel(d.label(idx[i]!))}"`));
    if (extra) parts.push(extra);
    return parts.length ? `{${parts.join(",")}}` : "";
  }
}

export class Counter extends Series implements Family {
  readonly type = "counter";
  readonly #values = new Map<number, number>();
  constructor(
    readonly name: string,
    readonly help: string,
    dims: readonly Dimension[] = [],
    /** Values are kept as integers and divided by this when shown (micro-credits → credits). */
    readonly scale = 1,
  ) {
    super(dims);
  }
  inc(by = 1, a = 0, b = 0, c = 0, d = 0): void {
    const key = this.key(a, b, c, d);
    this.#values.set(key, (this.#values.get(key) ?? 0) + by);
  }
  /** The current value of one series (tests, and gauges derived from counters). */
  get(a = 0, b = 0, c = 0, d = 0): number {
    return (this.#values.get(this.key(a, b, c, d)) ?? 0) / this.scale;
  }
  /** Every series: its label indices and value. */
  each(fn: (indices: number[], value: number) => void): void {
    for (const [key, value] of this.#values) fn(this.indices(key), value / this.scale);
  }
  samples(): Sample[] {
    return [...this.#values].map(([key, value]) => ({ labels: this.labels(key), value: value / this.scale }));
  }
  render(out: string[]): void {
    for (const [key, value] of this.#values) out.push(`${this.name}${this.labels(key)} ${formatNumber(value / this.scale)}`);
  }
}

/** A gauge whose value is read when scraped (queue depths, open streams, memory). */
export class Gauge implements Family {
  readonly type = "gauge";
  constructor(
    readonly name: string,
    readonly help: string,
    readonly read: () => number | undefined,
  ) {}
  render(out: string[]): void {
    const value = this.read();
    if (value !== undefined && Number.isFinite(value)) out.push(`${this.name} ${formatNumber(value)}`);
  }
}

/** A counter whose value is read when scraped (process CPU). */
export class CollectedCounter implements Family {
  readonly type = "counter";
  constructor(
    readonly name: string,
    readonly help: string,
    readonly read: () => number,
  ) {}
  render(out: string[]): void {
    out.push(`${this.name} ${formatNumber(this.read())}`);
  }
}

/**
 * Series read when scraped whose label values come from configuration but are not known to the
 * registry up front (a vendor key's env name): the reader lists them, each with its value.
 */
export class CollectedSeries implements Family {
  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: "counter" | "gauge",
    readonly read: () => { labels: Record<string, string>; value: number }[],
  ) {}
  render(out: string[]): void {
    for (const { labels, value } of this.read()) {
      const text = Object.entries(labels).map(([k, v]) => `${k}="${escapeLabel(v)}"`).join(",");
      out.push(`${this.name}{${text}} ${formatNumber(value)}`);
    }
  }
}

export class Histogram extends Series implements Family {
  readonly type = "histogram";
  /** Per series: a count per bucket (not cumulative), then the total count, then the sum. */
  readonly #series = new Map<number, Float64Array>();
  readonly #bounds: Float64Array;
  constructor(
    readonly name: string,
    readonly help: string,
    bounds: readonly number[],
    dims: readonly Dimension[] = [],
  ) {
    super(dims);
    this.#bounds = Float64Array.from(bounds);
  }
  observe(value: number, a = 0, b = 0, c = 0): void {
    const key = this.key(a, b, c, 0);
    const bounds = this.#bounds;
    let series = this.#series.get(key);
    if (!series) this.#series.set(key, (series = new Float64Array(bounds.length + 2)));
    let i = 0;
    while (i < bounds.length && value > bounds[i]!) i++;
    if (i < bounds.length) series[i]!++;
    series[bounds.length]!++;
    series[bounds.length + 1]! += value;
  }
  get bounds(): readonly number[] {
    return [...this.#bounds];
  }
  /** Every series: its label indices and its per-bucket counts (not cumulative; the last is past every bound). */
  each(fn: (indices: number[], buckets: number[]) => void): void {
    const n = this.#bounds.length;
    for (const [key, series] of this.#series) {
      const buckets = Array.from(series.subarray(0, n));
      buckets.push(series[n]! - buckets.reduce((a, b) => a + b, 0));
      fn(this.indices(key), buckets);
    }
  }
  /** Count and sum of one series (tests). */
  stats(a = 0, b = 0, c = 0): { count: number; sum: number } {
    const series = this.#series.get(this.key(a, b, c, 0));
    const n = this.#bounds.length;
    return series ? { count: series[n]!, sum: series[n + 1]! } : { count: 0, sum: 0 };
  }
  render(out: string[]): void {
    const n = this.#bounds.length;
    for (const [key, series] of this.#series) {
      let cumulative = 0;
      for (let i = 0; i < n; i++) {
        cumulative += series[i]!;
        out.push(`${this.name}_bucket${this.labels(key, `le="${formatNumber(this.#bounds[i]!)}"`)} ${cumulative}`);
      }
      out.push(`${this.name}_bucket${this.labels(key, 'le="+Inf"')} ${series[n]}`);
      out.push(`${this.name}_sum${this.labels(key)} ${formatNumber(series[n + 1]!)}`);
      out.push(`${this.name}_count${this.labels(key)} ${series[n]}`);
    }
  }
}

export class Registry {
  readonly #families: Family[] = [];
  add<F extends Family>(family: F): F {
    this.#families.push(family);
    return family;
  }
  /** The Prometheus text exposition format, version 0.0.4. */
  expose(): string {
    const out: string[] = [];
    for (const f of this.#families) {
      out.push(`# HELP ${f.name} ${f.help.replaceAll("\\", "\\\\").replaceAll("\n", "\\n")}`);
      out.push(`# TYPE ${f.name} ${f.type}`);
      f.render(out);
    }
    return out.join("\n") + "\n";
  }
}

export const PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

function escapeLabel(value: string): string {
  return value.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n");
}

function formatNumber(n: number): string {
  if (n === Number.POSITIVE_INFINITY) return "+Inf";
  if (n === Number.NEGATIVE_INFINITY) return "-Inf";
  return String(n);
}
