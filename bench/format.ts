/** How the bench prints figures: shared by the orchestrator (bench/run.ts) and its target table (bench/issue-30.ts). */
import type { Summary } from "./stats.ts";

export const f = (x: number, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : "n/a");
/** A median with the spread of its rounds, the shape every figure is printed in. */
export const range = (s: Summary, d = 3) => `${f(s.median, d)} [${f(s.min, d)}–${f(s.max, d)}]`;
export const pad = (s: string, n: number) => s.padEnd(n);
export const lpad = (s: string, n: number) => s.padStart(n);
