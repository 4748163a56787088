import uPlot from "uplot";
import { api, type Session, type Sums, type UsageReport, type UsageRow } from "./api.ts";
import { credits, field, h } from "./dom.ts";

const HOUR = 3_600_000;
const DAY = 86_400_000;

export interface UsageChoice {
  range: "24h" | "30d";
  split: "model" | "key" | "account";
}

/** Whole hours or days (UTC): the report reads the hourly rollup, and the chart's buckets are whole. */
export function rangeOf(choice: UsageChoice, now: number): { from: number; to: number; granularity: "hour" | "day" } {
  if (choice.range === "24h") {
    const to = Math.ceil((now + 1) / HOUR) * HOUR;
    return { from: to - 24 * HOUR, to, granularity: "hour" };
  }
  const to = Math.ceil((now + 1) / DAY) * DAY;
  return { from: to - 30 * DAY, to, granularity: "day" };
}

export function usageQuery(choice: UsageChoice, now: number): string {
  const r = rangeOf(choice, now);
  return `from=${r.from}&to=${r.to}&granularity=${r.granularity}&group_by=${choice.split}`;
}

const groupName = (row: UsageRow, split: UsageChoice["split"]) =>
  split === "model" ? row.model ?? "" : split === "key" ? row.key_name ?? row.key_id ?? "" : row.account_name ?? row.account_id ?? "";

const COLOURS = ["#1f5fbf", "#b3361b", "#2b7a3d", "#7a3db3", "#a86b00", "#00788a", "#8a2c5c", "#4d4d4d"];

/** Usage over time (uPlot) with totals and the cost classes, from one report request. */
export function usageView(session: Session, report: UsageReport, choice: UsageChoice, rerun: (choice: UsageChoice) => void): HTMLElement {
  const split = choice.split;
  const range = h("select", {}, h("option", { value: "24h", selected: choice.range === "24h" }, "Last 24 hours, by hour"), h("option", { value: "30d", selected: choice.range === "30d" }, "Last 30 days, by day"));
  const by = h("select", {}, ...(["model", "key", ...(session.kind === "operator" ? ["account"] : [])] as const).map((s) => h("option", { value: s, selected: split === s }, `by ${s}`)));
  const change = () => rerun({ range: range.value as UsageChoice["range"], split: by.value as UsageChoice["split"] });
  range.addEventListener("change", change);
  by.addEventListener("change", change);
  const csv = `/console/api/usage?${usageQuery(choice, Date.parse(report.to) - 1)}&format=csv`;

  // One line per group (the 7 largest by cost, the rest together), credits per period.
  const step = report.granularity === "hour" ? HOUR : DAY;
  const from = Date.parse(report.from), to = Date.parse(report.to);
  const xs: number[] = [];
  for (let t = from; t < to; t += step) xs.push(t / 1000);
  const byGroup = new Map<string, number>();
  for (const r of report.data) byGroup.set(groupName(r, split), (byGroup.get(groupName(r, split)) ?? 0) + r.cost);
  const groups = [...byGroup].sort((a, b) => b[1] - a[1]).map(([g]) => g);
  const shown = groups.slice(0, 7);
  const lines = shown.map(() => new Array<number>(xs.length).fill(0));
  const rest = new Array<number>(xs.length).fill(0);
  for (const r of report.data) {
    const i = Math.round((Date.parse(r.period_start) - from) / step);
    const g = shown.indexOf(groupName(r, split));
    if (i >= 0 && i < xs.length) (g >= 0 ? lines[g]! : rest)[i]! += r.cost;
  }
  // What the chart draws, per period (all groups together), for anyone checking it against the report.
  const perPeriod = xs.map((_, i) => lines.reduce((n, line) => n + line[i]!, rest[i]!));
  const chartBox = h("div", {
    "data-period-costs": JSON.stringify(perPeriod.map((n) => Math.round(n * 1e6) / 1e6)),
    class: "chart", role: "img", "data-testid": "usage-chart", "data-from": report.from, "data-to": report.to, "data-granularity": report.granularity, "data-group-by": split,
    "data-total-cost": String(report.total.cost), "aria-label": `Credits per ${report.granularity} from ${report.from} to ${report.to}, ${credits(report.total.cost)} in all`,
  });
  const series: uPlot.Series[] = [{}, ...shown.map((g, i) => ({ label: g || "—", stroke: COLOURS[i], width: 2 }))];
  const data: uPlot.AlignedData = [xs, ...lines];
  if (groups.length > 7) {
    series.push({ label: "others", stroke: COLOURS[7], width: 2 });
    data.push(rest);
  }
  // Drawn once the box is in the page (uPlot measures nothing, but the width is the box's).
  queueMicrotask(() => {
    const width = Math.max(320, chartBox.clientWidth || 800);
    new uPlot({ width, height: 260, series, axes: [{}, { label: "credits" }], scales: { x: { time: true } } }, data, chartBox);
  });

  return h("section", { "aria-labelledby": "usage-title" },
    h("h1", { id: "usage-title" }, session.kind === "operator" ? "Usage across accounts" : "Your usage"),
    h("div", { class: "controls" }, field("Period", range), field("Split", by), h("a", { href: csv, download: "" }, "Download CSV")),
    h("p", { class: "total" }, "Charged: ", h("strong", { "data-testid": "usage-total-credits" }, credits(report.total.cost)), " credits in ", String(report.total.requests), " requests; cache savings ", h("span", { "data-testid": "usage-cache-savings" }, credits(report.total.cache_savings)), " credits."),
    chartBox,
    breakdown(report, split, groups),
  );
}

/** Per group: requests, the prompt by price class, output, and money. */
function breakdown(report: UsageReport, split: UsageChoice["split"], groups: string[]): HTMLElement {
  const sums = new Map<string, Sums>();
  for (const r of report.data) {
    const g = groupName(r, split);
    const s = sums.get(g) ?? { requests: 0, prompt_tokens: 0, completion_tokens: 0, fresh_input_tokens: 0, cache_read_tokens: 0, cache_write_5m_tokens: 0, cache_write_1h_tokens: 0, reasoning_tokens: 0, images: 0, cost: 0, cache_savings: 0 };
    for (const k of Object.keys(s) as (keyof Sums)[]) s[k] += r[k];
    sums.set(g, s);
  }
  const cols = ["Requests", "Fresh input", "Cache reads", "Cache writes (5 min)", "Cache writes (1 h)", "Output", "Reasoning", "Images", "Credits", "Cache savings"];
  const cells = (s: Sums) => [s.requests, s.fresh_input_tokens, s.cache_read_tokens, s.cache_write_5m_tokens, s.cache_write_1h_tokens, s.completion_tokens, s.reasoning_tokens, s.images, credits(s.cost), credits(s.cache_savings)].map((v) => h("td", { class: "num" }, typeof v === "number" ? v.toLocaleString("en-US") : v));
  return h("table", {},
    h("caption", {}, `By ${split}, tokens by price class`),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, split), ...cols.map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, ...groups.map((g) => h("tr", { "data-testid": "usage-row" }, h("th", { scope: "row" }, g || "—"), ...cells(sums.get(g)!)))),
    h("tfoot", {}, h("tr", {}, h("th", { scope: "row" }, "Total"), ...cells(report.total))),
  );
}

export function loadUsage(choice: UsageChoice): Promise<UsageReport> {
  return api<UsageReport>("GET", `/usage?${usageQuery(choice, Date.now())}`);
}
