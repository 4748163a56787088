import { expect, test } from "bun:test";
import { chartPeriods, MAX_CHART_PERIODS, summarizeUsage } from "../../../src/console/usage-summary.ts";
import { usageSums, type UsageBucketRow } from "../../../src/billing/usage-report.ts";

const HOUR = 3_600_000;
const row = (hour: number, key: string, costMicro: number): UsageBucketRow => ({ ...usageSums({ requests: 1, cost_micro: costMicro }), period: hour * HOUR, key_id: key, key_name: key === "k0" ? "laptop" : null });

test("the console's usage summary: per-period totals, the 7 dearest groups as lines and the rest as one, groups by cost", () => {
  // Ten keys over three hours; key kN costs N+1 micro-credits an hour, so k9 is the dearest.
  const rows: UsageBucketRow[] = [];
  for (let h = 0; h < 3; h++) for (let k = 0; k < 10; k++) rows.push(row(100 + h, `k${k}`, (k + 1) * 100_000));
  const s = summarizeUsage({ from: 100 * HOUR, to: 104 * HOUR, granularity: "hour", groupBy: ["key"] }, rows, "key");
  expect(s.period_costs).toEqual([5.5, 5.5, 5.5, 0]);
  expect(s.total).toMatchObject({ requests: 30, cost: 16.5 });
  expect(s.lines.map((l) => l.id)).toEqual(["k9", "k8", "k7", "k6", "k5", "k4", "k3", "others"]);
  expect(s.lines[0]!.costs).toEqual([1, 1, 1, 0]);
  // k0, k1, k2: 0.1 + 0.2 + 0.3 an hour, summed in micro-credits (no 0.6000000000000001).
  expect(s.lines.at(-1)).toEqual({ id: "others", name: "3 others", costs: [0.6, 0.6, 0.6, 0] });
  expect(s.groups.map((g) => [g.id, g.name, g.requests, g.cost])).toEqual([
    ["k9", null, 3, 3], ["k8", null, 3, 2.7], ["k7", null, 3, 2.4], ["k6", null, 3, 2.1], ["k5", null, 3, 1.8],
    ["k4", null, 3, 1.5], ["k3", null, 3, 1.2], ["k2", null, 3, 0.9], ["k1", null, 3, 0.6], ["k0", "laptop", 3, 0.3],
  ]);
});

test("a range of more periods than a chart may have is refused before any array is made", () => {
  // Hourly over millennia was 87.6 million periods: 350 MB of JSON and 4.7 GB of memory.
  const q = { from: Date.UTC(0, 0, 1), to: Date.UTC(9999, 11, 31), granularity: "hour" as const, groupBy: [] };
  expect(chartPeriods(q)).toBeGreaterThan(MAX_CHART_PERIODS);
  expect(() => summarizeUsage(q, [], null)).toThrow(RangeError);
  const year = { from: 0, to: MAX_CHART_PERIODS * HOUR, granularity: "hour" as const, groupBy: [] };
  expect(summarizeUsage(year, [], null).period_costs).toHaveLength(MAX_CHART_PERIODS);
});

test("a split over a thousand keys: lines for the drawn ones and the others, exact, whatever the number of groups", () => {
  const rows: UsageBucketRow[] = [];
  for (let h = 0; h < 24; h++) for (let k = 0; k < 1_000; k++) rows.push(row(h, `k${k}`, 1 + ((k * 7 + h) % 13)));
  const s = summarizeUsage({ from: 0, to: 24 * HOUR, granularity: "hour", groupBy: ["key"] }, rows, "key");
  expect(s.lines).toHaveLength(8);
  expect(s.groups).toHaveLength(1_000);
  // Per period, the lines (drawn and others) add up to the period's total, to the micro-credit.
  for (let i = 0; i < 24; i++) {
    const micro = Math.round(s.lines.reduce((sum, l) => sum + l.costs[i]! * 1e6, 0));
    expect(micro).toBe(Math.round(s.period_costs[i]! * 1e6));
  }
});

test("a range of part periods draws the periods it touches: the periods add up to the total", () => {
  // 5.2 hours from 100:00 (the route's default ends now, mid-hour), and 0.3 of an hour.
  const rows = [row(100, "k1", 1_000_000), row(104, "k1", 2_500_000), row(105, "k1", 700_000)];
  const s = summarizeUsage({ from: 100 * HOUR, to: 105.2 * HOUR, granularity: "hour", groupBy: ["key"] }, rows, "key");
  expect(s.period_costs).toEqual([1, 0, 0, 0, 2.5, 0.7]);
  expect(s.period_costs.reduce((a, b) => a + b, 0)).toBeCloseTo(s.total.cost, 9);
  const short = summarizeUsage({ from: 105.1 * HOUR, to: 105.4 * HOUR, granularity: "hour", groupBy: [] }, [row(105, "k1", 98_720)], null);
  expect(short.period_costs).toEqual([0.09872]);
  expect(chartPeriods({ from: 100 * HOUR, to: 104 * HOUR, granularity: "hour", groupBy: [] })).toBe(4);
});

test("the table lists the dearest groups and sums the rest exactly as one 'others' entry; every group when asked", () => {
  const rows: UsageBucketRow[] = [];
  // 150 keys; key kN costs 100_001 + N micro-credits, so no two tie.
  for (let k = 0; k < 150; k++) rows.push({ ...row(1, `k${k}`, 100_001 + k), prompt_tokens: 3, completion_tokens: 2 });
  const q = { from: 0, to: 2 * HOUR, granularity: "hour" as const, groupBy: ["key" as const] };
  const top = summarizeUsage(q, rows, "key", 100);
  expect(top.groups).toHaveLength(100);
  expect(top.group_count).toBe(150);
  expect(top.groups[0]!.id).toBe("k149");
  expect(top.groups.at(-1)!.id).toBe("k50");
  // k0..k49: 50 × 100_001 + (0 + … + 49) micro-credits, summed before turned into credits.
  expect(top.others).toMatchObject({ groups: 50, requests: 50, prompt_tokens: 150, completion_tokens: 100, cost: (50 * 100_001 + 1_225) / 1_000_000 });
  // Listed and others add up to the total, to the micro-credit.
  const micro = (n: number) => Math.round(n * 1_000_000);
  expect(top.groups.reduce((sum, g) => sum + micro(g.cost), 0) + micro(top.others!.cost)).toBe(micro(top.total.cost));
  const every = summarizeUsage(q, rows, "key");
  expect([every.groups.length, every.group_count, every.others]).toEqual([150, 150, null]);
  // Fewer groups than the table lists: no others.
  expect(summarizeUsage(q, rows.slice(0, 10), "key", 100).others).toBeNull();
});
