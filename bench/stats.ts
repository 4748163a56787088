/** Small statistics helpers shared by the benchmark's orchestrator and its client. */

/** Nearest-rank percentile of an ascending array (p in 0..100). */
export function pct(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}

export function sortNum(xs: number[]): number[] {
  return Float64Array.from(xs).sort() as unknown as number[];
}

export function median(xs: number[]): number {
  const s = [...xs].filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

export function min(xs: number[]): number {
  return xs.reduce((a, b) => Math.min(a, b), Infinity);
}

export function max(xs: number[]): number {
  return xs.reduce((a, b) => Math.max(a, b), -Infinity);
}

/** Median with the spread across rounds, the shape every figure is reported in. */
export interface Summary {
  median: number;
  min: number;
  max: number;
  rounds: number[];
}

export function summarize(rounds: number[]): Summary {
  return { median: median(rounds), min: min(rounds), max: max(rounds), rounds };
}
