import { expect } from "bun:test";
import type { FakeUpstream } from "./fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, type Gateway } from "./gateway.ts";

/** A raw usage record, as the report tests recompute reports from. */
export interface RawRecord {
  account_id: string;
  key_id: string;
  model: string;
  prompt_tokens: number;
  completion_tokens: number;
  fresh_input_tokens: number;
  cache_read_tokens: number;
  cache_write_5m_tokens: number;
  cache_write_1h_tokens: number;
  reasoning_tokens: number;
  images: number;
  cost_micro: number;
  cache_savings_micro: number;
  /** 1 when the gateway estimated the record's counts (the vendor sent none), else 0: summed, it is the report's `estimated_requests`. */
  estimated_requests: number;
  created_at: number;
}

/** The records as both stores hold them (a record older than the token classes counts its prompt as fresh input). */
export const RAW_RECORDS_SQL = `SELECT account_id, key_id, model, prompt_tokens, completion_tokens, COALESCE(fresh_input_tokens, prompt_tokens) AS fresh_input_tokens,
  cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens, reasoning_tokens, images, cost_micro, cache_savings_micro,
  CASE WHEN estimated THEN 1 ELSE 0 END AS estimated_requests, created_at FROM usage_records`;

const SUMMED = ["prompt_tokens", "completion_tokens", "fresh_input_tokens", "cache_read_tokens", "cache_write_5m_tokens", "cache_write_1h_tokens", "reasoning_tokens", "images", "cost_micro", "cache_savings_micro", "estimated_requests"] as const;

/** A row of RAW_RECORDS_SQL with numbers as numbers (PostgreSQL's bigints arrive as strings). */
export function rawRecord(r: Record<string, unknown>): RawRecord {
  const record = { account_id: String(r.account_id), key_id: String(r.key_id), model: String(r.model), created_at: Number(r.created_at) } as RawRecord;
  for (const f of SUMMED) record[f] = Number(r[f]);
  return record;
}

export const DAY1 = Date.parse("2026-03-01T00:00:00Z");
const HOUR = 3_600_000;

/**
 * Requests from two accounts (the gateway's own, and one made here with two keys) at known
 * times, on two models, over two days and three hours. `setClock` moves the gateway's clock
 * (records take their `created_at` from it). One answer comes without the vendor's counts, so its
 * record's are the gateway's estimate (`estimated`): the reports count such requests apart.
 */
export async function runUsageScenario(gw: Gateway, upstream: FakeUpstream, setClock: (ms: number) => void, adminToken: string): Promise<{ otherAccount: string; keys: string[] }> {
  const admin = { authorization: `Bearer ${adminToken}`, "content-type": "application/json" };
  const account = (await (await fetch(`${gw.url}/v1/admin/accounts`, { method: "POST", headers: admin, body: JSON.stringify({ name: "=acme, \"west\"", credits: 1000 }) })).json()) as { id: string };
  const keys: string[] = [];
  const keyIds: string[] = [];
  for (const name of ["ci", "staging"]) {
    const key = (await (await fetch(`${gw.url}/v1/admin/accounts/${account.id}/keys`, { method: "POST", headers: admin, body: JSON.stringify({ name }) })).json()) as { key: string; id: string };
    keys.push(key.key);
    keyIds.push(key.id);
  }
  const ask = async (at: number, model: string, key = gw.key, countless = false) => {
    setClock(at);
    if (countless) {
      upstream.reply({ kind: "json", body: { id: "chatcmpl-countless", object: "chat.completion", created: Math.floor(at / 1000), model: "gpt-4o-mini",
        choices: [{ index: 0, message: { role: "assistant", content: "An answer whose counts the vendor did not send." }, finish_reason: "stop" }] } });
    }
    const res = await post(gw, "/v1/chat/completions", { model, messages: [{ role: "user", content: `usage at ${at}` }] }, { authorization: `Bearer ${key}` });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    await gw.app.services.settled();
  };
  await ask(DAY1 + 10 * HOUR + 5 * 60_000, OPENAI_MODEL);
  await ask(DAY1 + 10 * HOUR + 50 * 60_000, OPENAI_MODEL, gw.key, true);
  await ask(DAY1 + 10 * HOUR + 55 * 60_000, ANTHROPIC_MODEL);
  await ask(DAY1 + 11 * HOUR + 30 * 60_000, OPENAI_MODEL);
  await ask(DAY1 + 24 * HOUR + 9 * HOUR, OPENAI_MODEL, keys[0]);
  await ask(DAY1 + 24 * HOUR + 9 * HOUR + 1, ANTHROPIC_MODEL, keys[1]);
  await ask(DAY1 + 24 * HOUR + 23 * HOUR + 59 * 60_000, ANTHROPIC_MODEL, keys[1]);
  // Outside the range the tests ask for.
  await ask(DAY1 + 3 * 24 * HOUR, OPENAI_MODEL);
  setClock(DAY1 + 4 * 24 * HOUR);
  return { otherAccount: account.id, keys: keyIds };
}

/** The report recomputed from raw records in plain JavaScript: what the SQL must agree with. */
export function expectedReport(records: RawRecord[], q: { from: number; to: number; groupBy: string[]; granularity: "day" | "hour"; accountId?: string }, names: Record<string, string | null>) {
  const size = q.granularity === "day" ? 86_400_000 : HOUR;
  const rows = new Map<string, Record<string, any>>();
  for (const r of records) {
    if (r.created_at < q.from || r.created_at >= q.to) continue;
    if (q.accountId && r.account_id !== q.accountId) continue;
    const period = Math.floor(r.created_at / size) * size;
    const row: Record<string, any> = { period_start: new Date(period).toISOString() };
    if (q.groupBy.includes("account")) Object.assign(row, { account_id: r.account_id, account_name: names[r.account_id] ?? null });
    if (q.groupBy.includes("key")) Object.assign(row, { key_id: r.key_id, key_name: names[r.key_id] ?? null });
    if (q.groupBy.includes("model")) row.model = r.model;
    const id = JSON.stringify(row);
    const sums = rows.get(id) ?? { ...row, requests: 0, ...Object.fromEntries(SUMMED.map((f) => [f, 0])) };
    sums.requests++;
    for (const f of SUMMED) sums[f] += r[f];
    rows.set(id, sums);
  }
  const order = (row: Record<string, any>) => [row.period_start, row.account_id ?? "", row.key_id ?? "", row.model ?? ""].join("\u0000");
  return [...rows.values()]
    .sort((a, b) => (order(a) < order(b) ? -1 : order(a) > order(b) ? 1 : 0))
    .map(({ cost_micro, cache_savings_micro, estimated_requests, ...rest }): Record<string, any> => ({ ...rest, cost: cost_micro / 1e6, cache_savings: cache_savings_micro / 1e6, estimated_requests }));
}
