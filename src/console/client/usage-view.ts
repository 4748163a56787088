import uPlot from "uplot";
import { api, ApiError, readInView, type Session, type Sums, type UsageSummary } from "./api.ts";
import { announce, credits, errorBox, failure, field, h, labelColumns } from "./dom.ts";
import { rangeOf } from "../usage-range.ts";
import { refusalsSaid } from "./refusals-said.ts";

const HOUR = 3_600_000;
const DAY = 86_400_000;

export interface UsageChoice {
  range: "24h" | "30d";
  split: "model" | "key" | "account";
}

export function usageQuery(choice: UsageChoice, now: number): string {
  const r = rangeOf(choice.range, now);
  return `from=${r.from}&to=${r.to}&granularity=${r.granularity}&group_by=${choice.split}`;
}

const COLOURS = ["#1f5fbf", "#b3361b", "#2b7a3d", "#7a3db3", "#a86b00", "#00788a", "#8a2c5c", "#4d4d4d"];
type Named = { id: string; name: string | null };

/**
 * Each group's label: its name, with its id's end where another group of the report has the same
 * name (two accounts' keys both called "ci" were two identical rows and chart lines; a console probe).
 */
function labeller(report: UsageSummary): (g: Named, cut?: boolean) => string {
  const seen = new Map<string, Set<string>>();
  for (const g of [...report.groups, ...report.lines]) {
    if (g.name === null) continue;
    let ids = seen.get(g.name);
    if (!ids) seen.set(g.name, (ids = new Set()));
    ids.add(g.id);
  }
  // `cut`: the legend's shorter name, the id's end kept where it tells two apart.
  return (g, cut = false) => {
    if (g.name === null) return g.id || "—";
    const name = cut ? shortened(g.name) : g.name;
    return (seen.get(g.name)?.size ?? 0) > 1 ? `${name} (…${g.id.slice(-6)})` : name;
  };
}

/** A legend's name: a long one (names may have 200 characters) is cut, whole in the table below the chart. */
export function shortened(name: string, most = LEGEND_NAME_CHARS): string {
  const chars = Array.from(name);
  return chars.length <= most ? name : `${chars.slice(0, most - 1).join("")}…`;
}

/** The most characters of a name the chart's legend shows. */
const LEGEND_NAME_CHARS = 40;

/** An axis tick's time as the tables write it (UTC, 24 h): the hour on the 24-hour view, the day on the 30-day one. */
function tickTime(seconds: number, hourly: boolean): string {
  const iso = new Date(seconds * 1000).toISOString();
  return hourly ? `${iso.slice(5, 10)} ${iso.slice(11, 16)}` : iso.slice(0, 10);
}

/** Usage over time (uPlot) with totals and the cost classes, from one request (the report's summary). */
export function usageView(session: Session, report: UsageSummary, choice: UsageChoice, rerun: (choice: UsageChoice, focus: string) => void): HTMLElement {
  const split = choice.split;
  const label = labeller(report);
  const range = h("select", { id: "usage-range", "data-testid": "usage-range" }, h("option", { value: "24h", selected: choice.range === "24h" }, "Last 24 hours, by hour"), h("option", { value: "30d", selected: choice.range === "30d" }, "Last 30 days, by day"));
  const by = h("select", { id: "usage-split", "data-testid": "usage-split" }, ...(["model", "key", ...(session.kind === "operator" ? ["account"] : [])] as const).map((s) => h("option", { value: s, selected: split === s }, `by ${s}`)));
  // The view is shown again with the new figures, focus back on the select that changed: a
  // keyboard user steps through a select's options with the arrow keys, each step a change.
  const change = (select: HTMLSelectElement) => () => rerun({ range: range.value as UsageChoice["range"], split: by.value as UsageChoice["split"] }, `#${select.id}`);
  range.addEventListener("change", change(range));
  by.addEventListener("change", change(by));
  const csv = `/console/api/usage?${usageQuery(choice, Date.parse(report.to) - 1)}&format=csv`;

  // One line per large group (the rest summed as one), credits per period.
  const step = report.granularity === "hour" ? HOUR : DAY;
  const from = Date.parse(report.from);
  const xs = report.period_costs.map((_, i) => (from + i * step) / 1000);
  const name = `Credits per ${report.granularity} from ${report.from} to ${report.to}, ${credits(report.total.cost)} in all`;
  const chartBox = h("div", {
    class: "chart", role: "img", "data-testid": "usage-chart", "data-from": report.from, "data-to": report.to, "data-granularity": report.granularity, "data-group-by": split,
    // What the chart draws, per period (all groups together), for anyone checking it against the report.
    "data-period-costs": JSON.stringify(report.period_costs),
    "aria-label": name,
  });
  // The legend shows each value as the tables do (credits to the micro-credit), not uPlot's 3 decimals.
  const value = (_: uPlot, v: number | null) => (v === null ? "—" : credits(v));
  // The legend's time as the ticks and tables write it (UTC, 24 h), not uPlot's "2:00pm".
  const time = (_: uPlot, v: number | null) => (v === null ? "—" : `${tickTime(v, report.granularity === "hour")} UTC`);
  // A period without a charge has no group to draw: its chart was an empty box without a credits
  // axis, its first time cut at the left edge (a new holder's first look at Usage; a console
  // probe). It draws the total then, a line at 0 on an axis of 0 to 1 credit (uPlot's own was 0 to 100).
  const lines = report.lines.length > 0 ? report.lines : [{ id: "", name: "Total", costs: report.period_costs }];
  const series: uPlot.Series[] = [{ label: "Time", value: time }, ...lines.map((g, i) => ({ label: label(g, true), stroke: COLOURS[i % COLOURS.length], width: 2, value }))];
  const data: uPlot.AlignedData = [xs, ...lines.map((g) => g.costs)];
  const widthOf = () => Math.max(280, chartBox.clientWidth || 800);
  // Drawn once the box is in the page: its width is the box's, and follows it (a window made
  // narrower, a phone turned), so the page never scrolls sideways for the chart.
  queueMicrotask(() => {
    // Hours and days are UTC's, as every table and bucket here: the axis too, whatever the browser's zone.
    // Ticks as the tables write them: times in UTC and 24 h, credits to the micro-credit (an axis
    // of 0.000153-credit hours read "0" at every tick).
    const hourly = report.granularity === "hour";
    // Ticks spaced for their labels ("11-30 18:00", "2026-11-30"): uPlot's default spacing is for
    // its own short ones, and ours ran together below ~1,100 px (a console probe).
    const axes: uPlot.Axis[] = [
      { label: "UTC", space: hourly ? 90 : 100, values: (_u, ticks) => ticks.map((t) => tickTime(t, hourly)) },
      { label: "credits", size: 70, values: (_u, ticks) => ticks.map((t) => credits(t)) },
    ];
    // Room on the right for the last tick's label ("11-30 12:00" was cut at the edge).
    const chart = new uPlot({ width: widthOf(), height: 260, series, axes, padding: [12, 36, 0, 0], scales: { x: { time: true }, ...(report.lines.length === 0 ? { y: { range: [0, 1] as uPlot.Range.MinMax } } : {}) }, tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), "Etc/UTC") }, data, chartBox);
    // The plot is the image, named by the total (the table below has every figure). The legend
    // beside it (uPlot's table of each line's colour and hovered value) hid or showed a line on a
    // click only: each line's name is now a switch a keyboard reaches and turns with Enter or
    // Space, as a click does (a console probe). Its hovered values, "—" without a mouse, and the
    // time row are for the eye alone.
    const plot = chartBox.querySelector(".u-wrap");
    if (plot) {
      chartBox.removeAttribute("role");
      chartBox.removeAttribute("aria-label");
      plot.setAttribute("role", "img");
      plot.setAttribute("aria-label", name);
    }
    const legend = chartBox.querySelector(".u-legend");
    legend?.setAttribute("aria-label", "Lines drawn: each one's name shows or hides it");
    const switches: [HTMLElement, number][] = [];
    // Every switch, from the lines as drawn: a Ctrl- or Cmd-click turns the others off (uPlot isolates the line).
    const sync = () => {
      for (const [th, i] of switches) th.setAttribute("aria-checked", String(chart.series[i]?.show !== false));
    };
    legend?.querySelectorAll("tr.u-series").forEach((row, i) => {
      for (const value of row.querySelectorAll(".u-value")) value.setAttribute("aria-hidden", "true");
      const th = row.querySelector("th");
      if (i === 0 || !th) return row.setAttribute("aria-hidden", "true");
      switches.push([th, i]);
      th.tabIndex = 0;
      th.setAttribute("role", "switch");
      // After uPlot's own click handler (registered first), which turns the line.
      th.addEventListener("click", sync);
      th.addEventListener("keydown", (e) => {
        if (e.key !== "Enter" && e.key !== " ") return;
        e.preventDefault();
        th.click();
      });
    });
    sync();
    const resized = new ResizeObserver(() => {
      if (!chartBox.isConnected) return resized.disconnect();
      if (Math.abs(widthOf() - chart.width) > 1) chart.setSize({ width: widthOf(), height: 260 });
    });
    resized.observe(chartBox);
  });

  const empty = report.total.requests === 0 ? h("p", { class: "note", "data-testid": "usage-empty" }, "No charged requests in this period yet.") : null;
  return h("section", { "aria-labelledby": "usage-title" },
    h("h1", { id: "usage-title" }, session.kind === "operator" ? "Usage across accounts" : "Your usage"),
    h("div", { class: "controls" }, field("Period", range), field("Split", by), h("a", { href: csv, download: "" }, "Download CSV")),
    h("p", { class: "total" }, "Charged: ", h("strong", { "data-testid": "usage-total-credits" }, credits(report.total.cost)), " credits for ", report.total.requests.toLocaleString("en-US"), report.total.requests === 1 ? " request" : " requests", " (every one recorded, failed and cancelled ones too)", ...estimatedNote(report.total), "; cache savings ", h("span", { "data-testid": "usage-cache-savings" }, credits(report.total.cache_savings)), " credits."),
    // What the cache columns and the savings are: a holder checking a bill saw "cache savings" and
    // prompt tokens split four ways with no word on how either is priced (a console probe).
    h("p", { class: "note", "data-testid": "usage-cache-note" }, "Cache reads and writes are prompt tokens the vendor read from or wrote to its prompt cache, each billed at its own price (Models); fresh input is the rest of the prompt. Cache savings: what those tokens would have cost at the input price, less what they cost. Estimated: requests whose vendor sent no token count, billed on the gateway's own count."),
    refusals(report.rejected),
    empty,
    chartBox,
    breakdown(report, split, label, choice),
  );
}

/**
 * How many of the requests were billed on the gateway's estimate of their tokens: their vendor
 * sent no count (a compatible server that reports none, a stream cut before its usage). Their
 * figures are not the vendor's, and a bill checked against the vendor's invoice differs by them
 * (Requests marks each one).
 */
function estimatedNote(total: Sums): (string | HTMLElement)[] {
  const n = total.estimated_requests;
  if (!n) return [];
  const what = total.requests === 1 ? "its tokens estimated by the gateway" : `${n.toLocaleString("en-US")} of them with tokens estimated by the gateway`;
  return [", ", h("span", { "data-testid": "usage-estimated" }, `${what} (the vendor sent no count)`)];
}

/** One account's requests refused before any upstream call, by status: none cost anything. */
function refusals(rejected: Record<string, number> | undefined): HTMLElement | null {
  if (!rejected) return null;
  const said = refusalsSaid(rejected);
  if (said === null) return h("p", { class: "note", "data-testid": "usage-refused" }, "No requests refused in this period.");
  return h("p", { "data-testid": "usage-refused" }, said);
}

/**
 * Per group: requests, the prompt by price class, output, and money. The gateway lists the
 * dearest groups (TABLE_GROUPS) and sums the rest as one row, so the total stays exact; "Show
 * all" asks for every one (a split over 2,000 keys drawn whole took 3.6–9.8 s; a console probe).
 */
function breakdown(report: UsageSummary, split: UsageChoice["split"], label: (g: Named) => string, choice: UsageChoice): HTMLElement {
  const cols = ["Requests", "Estimated", "Fresh input", "Cache reads", "Cache writes (5 min)", "Cache writes (1 h / 12 h)", "Output", "Reasoning", "Images", "Credits", "Cache savings"];
  const cells = (s: Sums) => [s.requests, s.estimated_requests, s.fresh_input_tokens, s.cache_read_tokens, s.cache_write_5m_tokens, s.cache_write_1h_tokens, s.completion_tokens, s.reasoning_tokens, s.images, credits(s.cost), credits(s.cache_savings)].map((v) => h("td", { class: "num" }, typeof v === "number" ? v.toLocaleString("en-US") : v));
  const count = (n: number) => n.toLocaleString("en-US");
  const rowsOf = (groups: UsageSummary["groups"]) => groups.map((g) => h("tr", { "data-testid": "usage-row" }, h("th", { scope: "row", class: "name" }, label(g)), ...cells(g)));
  const othersRow = (others: UsageSummary["others"]) => others
    ? [h("tr", { "data-testid": "usage-others" }, h("th", { scope: "row", class: "name" }, `${count(others.groups)} other ${split}s`), ...cells(others))]
    : [];
  const caption = h("caption", {});
  const captionOf = (listed: number) => {
    caption.textContent = listed < report.group_count ? `By ${split}, tokens by price class: the ${count(listed)} dearest of ${count(report.group_count)}, the others summed` : `By ${split}, tokens by price class`;
  };
  captionOf(report.groups.length);
  const body = h("tbody", {}, ...rowsOf(report.groups), ...othersRow(report.others));
  const table = h("table", { class: "wide" },
    caption,
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, split), ...cols.map((c) => h("th", { scope: "col" }, c)))),
    body,
    h("tfoot", {}, h("tr", {}, h("th", { scope: "row" }, "Total"), ...cells(report.total))),
  );
  const box = h("div", { class: "scroll" }, table);
  if (!report.others) return box;
  const all = h("button", { type: "button", "data-testid": "usage-show-all" }, `Show all ${count(report.group_count)} ${split}s`);
  const out = h("div", { class: "form-out" });
  all.addEventListener("click", async () => {
    out.replaceChildren();
    all.disabled = true;
    try {
      // The same period as shown (not a new "now"): the rows add up to the total above.
      const whole = await readInView<UsageSummary>(`/usage?${usageQuery(choice, Date.parse(report.to) - 1)}&groups=all`);
      const rows = rowsOf(whole.groups);
      labelColumns(table, rows);
      body.replaceChildren(...rows);
      captionOf(whole.groups.length);
      box.setAttribute("aria-label", caption.textContent ?? "");
      all.remove();
      box.focus();
      announce(`All ${count(whole.groups.length)} ${split}s shown.`);
    } catch (err) {
      all.disabled = false;
      if (!(err instanceof ApiError && (err.status === 401 || err.sessionReplaced))) out.append(errorBox(failure(err, "try again.")));
    }
  });
  return h("div", {}, box, all, out);
}

/**
 * The view's period ends at the gateway's clock (`last=`), not the browser's: a browser a minute
 * behind, just before the hour (or the day), asked for a period that ended before the requests of
 * the last minute, and showed 0 requests while Requests listed them (a console probe). The CSV and
 * "Show all" then ask for the period the answer names.
 */
export function loadUsage(choice: UsageChoice): Promise<UsageSummary> {
  return api<UsageSummary>("GET", `/usage?last=${choice.range}&group_by=${choice.split}`);
}
