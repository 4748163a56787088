/**
 * Issue 30's targets: what `bun run bench` must show met with the gateway's defaults (access log
 * at info written to a file, metrics on, durable settlement), each as the median of ≥ 5 paired
 * rounds. One catalogue, so that the scenarios measuring them (bench/run.ts) and the table printed
 * at the end of a run name every target the same way, and a target that this run did not measure
 * still shows in the table, as not measured, instead of dropping out of it.
 */
import { f, pad } from "./format.ts";

export type Path = "same" | "cc";
export type Mode = "non-stream" | "stream-20";

/** A figure checked against a target, as every scenario reports it (issue 30's carry rounds and settings). */
export interface Target {
  id: string;
  what: string;
  target: string;
  value: number;
  unit: string;
  met: boolean;
  /** Paired rounds whose median `value` is; issue 30 counts a target as met only with ≥ MIN_ROUNDS. */
  rounds?: number;
  /** How the figure was taken: load, rounds, what it is paired with. */
  settings?: string;
  /** Why the figure, whatever it is, cannot count as met (too few streams for the target, say). */
  short?: string;
  /** Within its limit, whether or not it counts as met (issue 30's: too few rounds, or short). */
  within?: boolean;
}

interface Def {
  id: string;
  what: string;
  limit: number;
  unit: "×" | "ms" | "MB";
  target: string;
  /** A ratio or difference against the floor (or another checkout) in the same rounds: needs ≥ MIN_ROUNDS. */
  paired: boolean;
  /** The command that measures it, for the rows a run leaves out. */
  command: string;
}

export const MIN_ROUNDS = 5;
export const SLOW_STREAMS = 20_000;
/** The commit issue 30's figures start from: defaults must cost no more per response than there. */
export const BASELINE_REF = "e085163";

const PATHS: Record<Path, string> = { same: "same format", cc: "Claude Code path" };
const MODES: Mode[] = ["non-stream", "stream-20"];
const CONNS = [32, 128];

export const cpuId = (path: Path, mode: Mode, conns: number) => `B.cpu${path === "cc" ? ".cc" : ""}.${mode}@${conns}`;
export const latencyId = (path: Path, stat: "p50" | "p99", mode: Mode) => `A.${stat}${path === "cc" ? ".cc" : ""}.${mode}`;
export const baselineId = (mode: Mode, conns: number) => `P.${BASELINE_REF}.${mode}@${conns}`;
export const SLOW_RSS_ID = "S.rss";

const CATALOGUE: Def[] = [
  ...(["same", "cc"] as const).flatMap((path) =>
    MODES.flatMap((mode) =>
      CONNS.map((conns): Def => {
        const limit = mode === "non-stream" ? 2 : 3;
        return { id: cpuId(path, mode, conns), what: `B CPU/response ÷ floor's, ${mode}, ${conns} conns, ${PATHS[path]}`, limit, unit: "×", target: `≤ ${limit}×`, paired: true, command: "bun run bench --only B" };
      }),
    ),
  ),
  ...(["same", "cc"] as const).flatMap((path) =>
    MODES.flatMap((mode) =>
      (["p50", "p99"] as const).map((stat): Def => {
        const limit = stat === "p50" ? 0.15 : 0.5;
        return { id: latencyId(path, stat, mode), what: `A added latency ${stat} (gateway − floor), ${mode}, ${PATHS[path]}`, limit, unit: "ms", target: `≤ ${limit} ms`, paired: true, command: "bun run bench --only A" };
      }),
    ),
  ),
  { id: SLOW_RSS_ID, what: `S gateway peak RSS, ${SLOW_STREAMS.toLocaleString("en-US")} slow streams`, limit: 1024, unit: "MB", target: "≤ 1 GB", paired: false, command: "bun run bench --only S" },
  ...MODES.flatMap((mode) =>
    CONNS.map((conns): Def => ({ id: baselineId(mode, conns), what: `P CPU/response ÷ ${BASELINE_REF}'s, ${mode}, ${conns} conns`, limit: 1, unit: "×", target: "≤ 1.00×", paired: true, command: `bun run bench --compare ${BASELINE_REF}` })),
  ),
];

const byId = new Map(CATALOGUE.map((d) => [d.id, d]));

/** One of issue 30's figures, checked against its target: met only when within it, on enough rounds, and not short. */
export function issue30Target(id: string, value: number, rounds: number, settings: string, short?: string): Target {
  const d = byId.get(id);
  if (!d) throw new Error(`not one of issue 30's targets: ${id}`);
  const within = value <= d.limit;
  const enough = !d.paired || rounds >= MIN_ROUNDS;
  return { id, what: d.what, target: d.target, value, unit: d.unit, met: within && enough && !short, within, rounds, settings, ...(short ? { short } : {}) };
}

export function formatValue(t: Pick<Target, "value" | "unit">): string {
  if (t.unit === "%") return `${f(t.value, 0)} %`;
  if (t.unit === "×") return `${f(t.value, 2)}×`;
  if (t.unit === "complete") return `${t.value}`;
  return `${f(t.value, t.unit === "µs" ? 1 : t.unit === "MB" ? 2 : 3)} ${t.unit}`;
}

export interface Issue30Row {
  id: string;
  what: string;
  target: string;
  value: number | null;
  unit: string;
  status: "met" | "missed" | "unproven" | "not measured";
  /** Why a figure within its target does not count (too few rounds, too few streams), or how to measure a missing one. */
  note: string;
  rounds: number | null;
  settings: string;
}

/**
 * Every issue-30 target in catalogue order, from what this run measured: the lines to print and
 * the rows to keep as JSON. `load` is /proc/loadavg's 1, 5 and 15 min figures at the run's start and end;
 * `caveat` (a quick run, a run beside other load) keeps any target from counting as met.
 */
export function issue30Table(measured: Target[], load: { start: number[]; end: number[] }, caveat?: string): { lines: string[]; rows: Issue30Row[] } {
  const rows = CATALOGUE.map((d): Issue30Row => {
    const t = measured.find((x) => x.id === d.id);
    if (!t) return { id: d.id, what: d.what, target: d.target, value: null, unit: d.unit, status: "not measured", note: `not in this run: ${d.command}`, rounds: null, settings: "" };
    const within = t.value <= d.limit;
    const fewRounds = d.paired && (t.rounds ?? 0) < MIN_ROUNDS ? `${t.rounds ?? 0} rounds < ${MIN_ROUNDS}` : "";
    const why = [fewRounds, t.short ?? "", caveat ?? ""].filter(Boolean).join("; ");
    const status = !Number.isFinite(t.value) ? "not measured" : !within ? "missed" : t.met && !caveat ? "met" : "unproven";
    return { id: d.id, what: d.what, target: d.target, value: Number.isFinite(t.value) ? t.value : null, unit: d.unit, status, note: why, rounds: t.rounds ?? null, settings: t.settings ?? "" };
  });
  const la = (x: number[]) => x.map((v) => f(v, 2)).join(" / ");
  const lines = [
    `Issue 30's targets${caveat ? ` (${caveat}: indicative only)` : ""} — the gateway's defaults (access log at info written to a file, metrics on, durable settlement);`,
    `   value = median of the rounds; met only within the target on ≥ ${MIN_ROUNDS} paired rounds. Load average (1 / 5 / 15 min): ${la(load.start)} at the start, ${la(load.end)} at the end`,
    `   ${pad("status", 12)} ${pad("target", 68)} ${pad("value", 10)} ${pad("limit", 9)} ${pad("rounds", 6)}  settings`,
  ];
  for (const r of rows) {
    const value = r.value === null ? "—" : formatValue({ value: r.value, unit: r.unit });
    const status = r.status === "met" ? "met" : r.status === "missed" ? "MISSED" : r.status === "unproven" ? "unproven" : "—";
    const detail = [r.settings, r.note].filter(Boolean).join("; ");
    lines.push(`   ${pad(status, 12)} ${pad(r.what, 68)} ${pad(value, 10)} ${pad(r.target, 9)} ${pad(r.rounds === null ? "" : String(r.rounds), 6)}  ${detail}`);
  }
  const count = (s: Issue30Row["status"]) => rows.filter((r) => r.status === s).length;
  lines.push(`   ${count("met")} met, ${count("missed")} missed, ${count("unproven")} within target but unproven, ${count("not measured")} not measured, of ${rows.length}`);
  return { lines, rows };
}
