import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { runAdmin } from "../../src/cli/admin.ts";
import { breakdownCsv } from "../../src/billing/usage-report.ts";
import { parseUsageQuery } from "../../src/accounts/admin-input.ts";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { useGateway } from "../helpers/gateway.ts";
import { DAY1, expectedReport, RAW_RECORDS_SQL, rawRecord, runUsageScenario, type RawRecord } from "../helpers/usage-scenario.ts";

const ADMIN = "admin-secret-0123456789abcdef0123456789abcdef";
let clock = DAY1;
const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, adminToken: ADMIN, now: () => clock }));
const admin = { authorization: `Bearer ${ADMIN}` };
const DAY = 86_400_000;

let scenario: Promise<{ otherAccount: string; keys: string[] }> | undefined;
/** The scenario's records, once, for every test of the file. */
async function records(): Promise<{ raw: RawRecord[]; names: Record<string, string | null>; otherAccount: string }> {
  const { otherAccount } = await (scenario ??= runUsageScenario(gw, upstream, (ms) => (clock = ms), ADMIN));
  const db = new Database(gw.dbPath, { readonly: true });
  try {
    const raw = db.query<Record<string, unknown>, []>(RAW_RECORDS_SQL).all().map(rawRecord);
    const names: Record<string, string | null> = {};
    for (const r of db.query<{ id: string; name: string | null }, []>("SELECT id, name FROM accounts UNION ALL SELECT id, name FROM api_keys").all()) names[r.id] = r.name;
    return { raw, names, otherAccount };
  } finally {
    db.close();
  }
}

const report = async (query: string) => {
  const res = await fetch(`${gw.url}/v1/admin/usage?${query}`, { headers: admin });
  return { status: res.status, type: res.headers.get("content-type"), disposition: res.headers.get("content-disposition"), body: await res.text() };
};

describe("GET /v1/admin/usage", () => {
  test("per account, key and model, per day: the records summed by period and group", async () => {
    const { raw, names } = await records();
    const from = DAY1, to = DAY1 + 2 * DAY;
    const res = await report(`from=${new Date(from).toISOString()}&to=${new Date(to).toISOString()}&group_by=account,key,model&granularity=day`);
    expect(res.status).toBe(200);
    const body = JSON.parse(res.body);
    const expected = expectedReport(raw, { from, to, groupBy: ["account", "key", "model"], granularity: "day" }, names);
    expect(expected.length).toBe(4);
    expect(body.data).toEqual(expected);
    expect(body).toMatchObject({ object: "usage_report", from: new Date(from).toISOString(), to: new Date(to).toISOString(), granularity: "day", group_by: ["account", "key", "model"] });
    expect(body.columns).toEqual(["period_start", "account_id", "account_name", "key_id", "key_name", "model", "requests", "prompt_tokens", "completion_tokens",
      "fresh_input_tokens", "cache_read_tokens", "cache_write_5m_tokens", "cache_write_1h_tokens", "reasoning_tokens", "images", "cost", "cache_savings", "estimated_requests"]);
    expect(body.total.requests).toBe(7);
    expect(body.total.cost).toBeCloseTo(expected.reduce((n, r) => n + r.cost, 0), 9);
  });

  test("per hour, per model only, one account; and with no split at all", async () => {
    const { raw, names, otherAccount } = await records();
    const from = DAY1, to = DAY1 + 2 * DAY;
    const hourly = JSON.parse((await report(`from=${from}&to=${to}&group_by=model&granularity=hour&account_id=${gw.accountId}`)).body);
    const expectedHourly = expectedReport(raw, { from, to, groupBy: ["model"], granularity: "hour", accountId: gw.accountId }, names);
    expect(expectedHourly.map((r) => r.period_start)).toEqual(["2026-03-01T10:00:00.000Z", "2026-03-01T10:00:00.000Z", "2026-03-01T11:00:00.000Z"]);
    expect(hourly.data).toEqual(expectedHourly);
    const other = JSON.parse((await report(`from=${from}&to=${to}&group_by=key&account_id=${otherAccount}`)).body);
    expect(other.data).toEqual(expectedReport(raw, { from, to, groupBy: ["key"], granularity: "day", accountId: otherAccount }, names));
    expect(other.data.map((r: any) => r.key_name).sort()).toEqual(["ci", "staging"]);
    const totals = JSON.parse((await report(`from=${from}&to=${to}&group_by=`)).body);
    expect(totals.data).toEqual(expectedReport(raw, { from, to, groupBy: [], granularity: "day" }, names));
    expect(totals.data.map((r: any) => r.requests)).toEqual([4, 3]);
  });

  test("as CSV: a header row and the same numbers, quoted where needed, spreadsheet formulas defused", async () => {
    const { raw, names } = await records();
    const from = DAY1, to = DAY1 + 2 * DAY;
    const query = `from=${from}&to=${to}&group_by=account,model`;
    const json = JSON.parse((await report(query)).body);
    const csv = await report(`${query}&format=csv`);
    expect(csv.status).toBe(200);
    expect(csv.type).toBe("text/csv; charset=utf-8");
    expect(csv.disposition).toBe('attachment; filename="usage-2026-03-01-2026-03-03.csv"');
    const lines = csv.body.split("\r\n");
    expect(lines.at(-1)).toBe("");
    expect(lines[0]).toBe("period_start,account_id,account_name,model,requests,prompt_tokens,completion_tokens,fresh_input_tokens,cache_read_tokens,cache_write_5m_tokens,cache_write_1h_tokens,reasoning_tokens,images,cost,cache_savings,estimated_requests");
    expect(lines.length - 2).toBe(json.data.length);
    // The account named `=acme, "west"` is quoted and cannot run as a formula.
    expect(csv.body).toContain(`,"'=acme, ""west""",`);
    const expected = expectedReport(raw, { from, to, groupBy: ["account", "model"], granularity: "day" }, names);
    lines.slice(1, -1).forEach((line, i) => {
      const cells = line.match(/("([^"]|"")*"|[^,]*)(,|$)/g)!.map((c) => c.replace(/,$/, ""));
      const row = expected[i]!;
      expect(cells[0]).toBe(row.period_start);
      expect(cells[1]).toBe(row.account_id);
      expect(Number(cells[4])).toBe(row.requests);
      expect(Number(cells[13])).toBeCloseTo(row.cost, 9);
      expect(Number(cells[15])).toBe(row.estimated_requests);
    });
    // The scenario's one answer without the vendor's counts is counted as estimated, in its row and in the total.
    expect(expected.filter((r) => r.estimated_requests > 0).map((r) => [r.account_id, r.model, r.estimated_requests])).toEqual([[gw.accountId, "test/gpt", 1]]);
    expect(json.total.estimated_requests).toBe(1);
  });

  test("bad queries are 400s that say what to fix", async () => {
    for (const [query, words] of [
      ["granularity=week", "granularity"],
      ["group_by=account,team", "group_by"],
      ["from=2026-03-02&to=2026-03-01", "from must be before to"],
      ["from=yesterday", "from must be an ISO 8601 date"],
      ["format=xml", "format"],
    ] as const) {
      const res = await report(query);
      expect([query, res.status]).toEqual([query, 400]);
      expect(JSON.parse(res.body).error.message).toContain(words);
    }
    expect((await fetch(`${gw.url}/v1/admin/usage`)).status).toBe(401);
  });

  test("without from: the last 30 days from the start of a period", () => {
    const now = Date.parse("2026-05-10T13:45:00Z");
    const q = parseUsageQuery({}, now);
    expect(q).toMatchObject({ to: now + 1, groupBy: ["account", "key", "model"], granularity: "day" });
    expect(new Date(q.from).toISOString()).toBe("2026-04-10T00:00:00.000Z");
  });

  test("the account's usage totals keep their shape", async () => {
    await records();
    const res = await fetch(`${gw.url}/v1/admin/accounts/${gw.accountId}/usage?from=${DAY1}&to=${DAY1 + 2 * DAY}`, { headers: admin });
    const body = (await res.json()) as Record<string, unknown>;
    expect(Object.keys(body)).toEqual(["account_id", "from", "to", "total", "rejected", "rejected_latest", "models"]);
    expect((body.total as { requests: number }).requests).toBe(4);
  });
});

describe("bun run admin report", () => {
  test("the same report from the SQLite file, as JSON and as CSV", async () => {
    const { raw, names } = await records();
    const env = { SWITCHYARD_DB: gw.dbPath };
    const from = "2026-03-01", to = "2026-03-03";
    const json = await runAdmin(["report", "--from", from, "--to", to, "--group-by", "key,model", "--granularity", "hour"], env);
    expect(json.code).toBe(0);
    expect(JSON.parse(json.out).data).toEqual(expectedReport(raw, { from: Date.parse(from), to: Date.parse(to), groupBy: ["key", "model"], granularity: "hour" }, names));
    const csv = await runAdmin(["report", "--from", from, "--to", to, "--format", "csv", "--account", gw.accountId], env);
    expect(csv.code).toBe(0);
    const q = parseUsageQuery({ from, to, account_id: gw.accountId }, Date.now());
    const api = await report(`from=${from}&to=${to}&account_id=${gw.accountId}&format=csv`);
    // Byte for byte what the API sends, line endings and the last one included.
    expect(csv.out).toBe(api.body);
    expect(breakdownCsv(q, []).trim()).toBe(csv.out.split("\r\n")[0]!);
    const bad = await runAdmin(["report", "--granularity", "minute"], env);
    expect(bad.code).toBe(2);
    expect(bad.out).toContain("granularity");
  });
});
