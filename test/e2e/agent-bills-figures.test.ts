/**
 * One bill, every place it is shown (a bill audit, fifth round; US$ 1 = 1,000 credits): agent
 * traffic on the built-in catalogue's prices, through same-format and translated paths, a retry, a
 * fallback and a token count, and then what the usage records, the balance, the account's usage
 * report (JSON and CSV), the console's downloads and /metrics say. Each must give the same figures,
 * split as a vendor's invoice splits them: fresh input, cache reads, 5-minute and long-lived cache
 * writes, output.
 * - Claude Sonnet 5.5: $2 / $10, reads $0.10, writes $2.50 (5 min) / $4 (1 h).
 * - GPT-6 Sol: $2 / $10, cached $0.20, writes $2.50; GPT-6.1 Sol (Responses API) the same with cached $0.10.
 */
import { describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { post, useGateway } from "../helpers/gateway.ts";
import { scriptedReply } from "../helpers/scripted-answers.ts";
import { answerWith } from "../helpers/responses-wire.ts";
import { ConsoleClient } from "../helpers/console-client.ts";
import { builtInModel as model } from "../helpers/built-in-models.ts";
import type { Logger } from "../../src/log/log.ts";

const ADMIN = "admin-bills-0123456789abcdef0123456789abcdef";
/** The access log's request lines (the fields as they would be written). */
const accessLines: Record<string, unknown>[] = [];
const capture: Logger = (_level, message, fields) => {
  if (message === "request") accessLines.push(JSON.parse(JSON.stringify(fields ?? {})));
};
const upstream = useFakeUpstream();
const SONNET = "audit/anthropic/claude-sonnet-5-5";
const SOL = "audit/openai/gpt-6-sol";
const SOL61 = "audit/openai/gpt-6.1-sol";
const HALVES = "audit/halves";
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  credits: 100_000,
  adminToken: ADMIN,
  log: capture,
  retry: { max_retries: 1, max_wait_ms: 1_000 },
  extraModels: [
    model("anthropic/claude-sonnet-5-5", "fake-anthropic"), model("openai/gpt-6-sol", "fake-openai"), model("openai/gpt-6.1-sol", "fake-openai"),
    // Prices with half a micro-credit a token, as a factor makes them (Flex's 0.5 × GPT-6 Luna's $0.125 writes).
    { id: HALVES, provider: "fake-openai", upstream_model: "gpt-6-luna", category: "text", context_length: 1_050_000, owned_by: "openai",
      pricing: { input_per_mtok: 50, output_per_mtok: 250, cache_read_per_mtok: 5, cache_write_per_mtok: 62.5, cache_write_1h_per_mtok: 125 } },
  ],
}));

const PROMPT = "agent context ".repeat(30_000);
const messages = [{ role: "user", content: PROMPT }];

/** What each vendor bills, by class (credits per million tokens). */
const PRICES = {
  [SONNET]: { fresh: 2_000, read: 100, w5: 2_500, w1: 4_000, out: 10_000 },
  [SOL]: { fresh: 2_000, read: 200, w5: 2_500, w1: 5_000, out: 10_000 },
  [SOL61]: { fresh: 2_000, read: 100, w5: 2_500, w1: 5_000, out: 10_000 },
} as const;

interface UsageRow { model: string; status: string; prompt_tokens: number; fresh_input_tokens: number; cache_read_tokens: number; cache_write_5m_tokens: number; cache_write_1h_tokens: number; completion_tokens: number; reasoning_tokens: number; cost_micro: number }
const CLASSES = ["fresh_input_tokens", "cache_read_tokens", "cache_write_5m_tokens", "cache_write_1h_tokens", "completion_tokens"] as const;

function records(): UsageRow[] {
  const db = new Database(gw.dbPath, { readonly: true });
  try {
    return db.query<UsageRow, []>("SELECT * FROM usage_records ORDER BY id").all();
  } finally {
    db.close();
  }
}

const billOf = (r: UsageRow) => {
  const p = PRICES[r.model as keyof typeof PRICES];
  return r.fresh_input_tokens * p.fresh + r.cache_read_tokens * p.read + r.cache_write_5m_tokens * p.w5 + r.cache_write_1h_tokens * p.w1 + r.completion_tokens * p.out;
};

async function send(path: string, body: Record<string, unknown>): Promise<void> {
  const res = await post(gw, path, body, { "x-request-id": `bills-${++sentCount}` });
  expect(res.status).toBe(200);
  await res.arrayBuffer();
  await gw.app.services.settled();
}

/** `name{labels}` → value, from Prometheus' text format. */
async function scrape(): Promise<Map<string, number>> {
  const samples = new Map<string, number>();
  for (const line of (await (await fetch(`${gw.url}/metrics`)).text()).split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const space = line.lastIndexOf(" ");
    samples.set(line.slice(0, space), Number(line.slice(space + 1)));
  }
  return samples;
}

/** A CSV's rows as objects keyed by its header (no quoted fields in what is read here). */
function csvRows(text: string): Record<string, string>[] {
  const [head, ...lines] = text.trimEnd().split("\r\n");
  const columns = head!.split(",");
  return lines.map((l) => Object.fromEntries(l.split(",").map((v, i) => [columns[i]!, v])));
}

const sum = (rows: UsageRow[], f: keyof UsageRow) => rows.reduce((n, r) => n + Number(r[f]), 0);

const HOUR = 3_600_000;
const perModel = (rows: UsageRow[], model: string) => rows.filter((r) => r.model === model);
/** The report's range: the hours around now, by hour and model. */
function range(): string {
  const from = Math.floor(Date.now() / HOUR) * HOUR - HOUR;
  return `from=${from}&to=${from + 3 * HOUR}&group_by=model&granularity=hour`;
}

/**
 * The traffic, sent once for the file: the balance it cost and its records. A Claude Code turn
 * same format and from an OpenAI-format client after a retry; a translated turn on an OpenAI
 * upstream; a Codex turn on the Responses upstream; a fallback; a token count.
 */
let sentCount = 0;
let traffic: Promise<{ spent: number; rows: UsageRow[] }> | undefined;
async function sendTraffic(): Promise<{ spent: number; rows: UsageRow[] }> {
  const before = await gw.balanceMicro();
  // A Claude Code turn, same format, streamed: reads, 5-minute and 1-hour writes.
  upstream.reply(scriptedReply("anthropic", { text: "Reading the file.", usage: { input: 300, cacheRead: 60_000, cacheWrite5m: 3_000, cacheWrite1h: 2_000, output: 1_200 } }));
  await send("/v1/messages", { model: SONNET, max_tokens: 8_000, messages, stream: true });
  // The same turn from an OpenAI-format client, whole, after an overloaded answer it retried.
  upstream.reply({ kind: "json", status: 529, headers: { "retry-after-ms": "5" }, body: { type: "error", error: { type: "overloaded_error", message: "Overloaded" } } });
  upstream.reply(scriptedReply("anthropic", { text: "Done.", usage: { input: 120, cacheRead: 65_000, cacheWrite5m: 800, output: 400 } }));
  await send("/v1/chat/completions", { model: SONNET, messages });
  // A Claude Code-shaped client on an OpenAI upstream (translated), streamed: cached, written, reasoning.
  upstream.reply(scriptedReply("openai", { text: "Running it.", usage: { input: 2_000, cacheRead: 36_000, cacheWrite5m: 2_000, output: 900, reasoning: 600 } }));
  await send("/v1/messages", { model: SOL, max_tokens: 8_000, messages, stream: true });
  // A Codex turn on the Responses upstream, streamed.
  upstream.reply(answerWith({ items: [{ text: "Patched." }], usage: { input_tokens: 60_000, input_tokens_details: { cached_tokens: 52_000 }, output_tokens: 1_500, output_tokens_details: { reasoning_tokens: 800 }, total_tokens: 61_500 } }));
  await send("/v1/responses", { model: SOL61, input: PROMPT, stream: true, store: false });
  // A fallback: GPT-6 Sol fails, Sonnet answers; charged at Sonnet's prices.
  upstream.reply({ kind: "json", status: 500, body: { error: { message: "boom", type: "server_error", param: null, code: null } } });
  upstream.reply(scriptedReply("anthropic", { text: "Fell back.", usage: { input: 100, cacheRead: 20_000, cacheWrite5m: 500, output: 300 } }));
  await send("/v1/chat/completions", { model: SOL, models: [SONNET], messages, stream: true, stream_options: { include_usage: true } });
  // A token count costs nothing and leaves no record.
  const count = await post(gw, "/v1/messages/count_tokens", { model: SONNET, messages });
  expect(count.status).toBe(200);
  await count.arrayBuffer();
  await gw.app.services.settled();
  return { spent: before - (await gw.balanceMicro()), rows: records() };
}
const sent = () => (traffic ??= sendTraffic());

describe("agent traffic's bill, the same in every place it is shown", () => {
  test("the records: each class as the vendor reported it, each charge the vendor's price list, the balance their sum", async () => {
    const { spent, rows } = await sent();
    expect(rows.map((r) => [r.model, r.status])).toEqual([[SONNET, "ok"], [SONNET, "ok"], [SOL, "ok"], [SOL61, "ok"], [SONNET, "ok"]]);
    expect(rows.map((r) => CLASSES.map((c) => r[c]))).toEqual([
      [300, 60_000, 3_000, 2_000, 1_200],
      [120, 65_000, 800, 0, 400],
      [2_000, 36_000, 2_000, 0, 900],
      [8_000, 52_000, 0, 0, 1_500],
      [100, 20_000, 500, 0, 300],
    ]);
    for (const r of rows) {
      expect(r.prompt_tokens).toBe(r.fresh_input_tokens + r.cache_read_tokens + r.cache_write_5m_tokens + r.cache_write_1h_tokens);
      expect([r.model, r.cost_micro]).toEqual([r.model, billOf(r)]);
    }
    expect(spent).toBe(sum(rows, "cost_micro"));
  });

  test("the account's usage report: per model, each class and the charge", async () => {
    const { rows } = await sent();
    const report = (await (await fetch(`${gw.url}/v1/admin/usage?${range()}`, { headers: { authorization: `Bearer ${ADMIN}` } })).json()) as any;
    for (const m of [SONNET, SOL, SOL61]) {
      const line = report.data.find((d: any) => d.model === m);
      for (const c of CLASSES) expect([m, c, line[c]]).toEqual([m, c, sum(perModel(rows, m), c)]);
      expect(line.reasoning_tokens).toBe(sum(perModel(rows, m), "reasoning_tokens"));
      expect(Math.round(line.cost * 1e6)).toBe(sum(perModel(rows, m), "cost_micro"));
    }
    expect(Math.round(report.total.cost * 1e6)).toBe(sum(rows, "cost_micro"));
  });

  test("the console's downloads: the usage CSV per model, and the requests CSV row by row with its fresh input", async () => {
    const { rows } = await sent();
    const operator = new ConsoleClient(gw.url);
    await operator.signIn({ token: ADMIN });
    const usageCsv = csvRows(await (await operator.call("GET", `/console/api/usage?${range()}&format=csv`)).text());
    for (const m of [SONNET, SOL, SOL61]) {
      const line = usageCsv.find((d) => d.model === m)!;
      for (const c of CLASSES) expect([m, c, Number(line[c])]).toEqual([m, c, sum(perModel(rows, m), c)]);
      expect(Math.round(Number(line.cost) * 1e6)).toBe(sum(perModel(rows, m), "cost_micro"));
    }
    const requestsCsv = csvRows(await (await operator.call("GET", "/console/api/requests?format=csv&limit=10")).text()).reverse();
    expect(requestsCsv.length).toBe(rows.length);
    requestsCsv.forEach((line, i) => {
      const r = rows[i]!;
      for (const c of CLASSES) expect([i, c, Number(line[c])]).toEqual([i, c, r[c]]);
      expect(Math.round(Number(line.cost) * 1e6)).toBe(r.cost_micro);
    });
  });

  test("/metrics: the prompt by class adds up to the input tokens, and the charges to the records'", async () => {
    const { rows } = await sent();
    const metrics = await scrape();
    const METRIC_CLASS = { fresh_input_tokens: "fresh_input", cache_read_tokens: "cache_read", cache_write_5m_tokens: "cache_write_5m", cache_write_1h_tokens: "cache_write_1h" } as const;
    for (const m of [SONNET, SOL, SOL61]) {
      expect(metrics.get(`switchyard_tokens_total{model="${m}",direction="input"}`)).toBe(sum(perModel(rows, m), "prompt_tokens"));
      expect(metrics.get(`switchyard_tokens_total{model="${m}",direction="output"}`)).toBe(sum(perModel(rows, m), "completion_tokens"));
      for (const [column, label] of Object.entries(METRIC_CLASS)) {
        const tokens = sum(perModel(rows, m), column as keyof UsageRow);
        expect([m, label, metrics.get(`switchyard_prompt_tokens_total{model="${m}",class="${label}"}`) ?? 0]).toEqual([m, label, tokens]);
      }
      expect(Math.round(metrics.get(`switchyard_credits_charged_total{model="${m}"}`)! * 1e6)).toBe(sum(perModel(rows, m), "cost_micro"));
    }
  });

  test("the access log: each request's line has its prompt's cached classes and its charge", async () => {
    const { rows } = await sent();
    rows.forEach((r, i) => {
      const line = accessLines.find((l) => l.clientRequestId === `bills-${i + 1}`)!;
      expect(line).toMatchObject({ promptTokens: r.prompt_tokens, completionTokens: r.completion_tokens, credits: r.cost_micro / 1e6 });
      expect([i, line.cacheReadTokens ?? 0, line.cacheWrite5mTokens ?? 0, line.cacheWrite1hTokens ?? 0]).toEqual([i, r.cache_read_tokens, r.cache_write_5m_tokens, r.cache_write_1h_tokens]);
    });
  });
});

describe("rounding: many small answers against one large one", () => {
  /** The balance a run of answers costs, each with `usage`, and the records it left. */
  async function bill(model: string, n: number, usage: { input: number; cacheRead: number; cacheWrite5m: number; output: number }): Promise<{ spent: number; records: UsageRow[] }> {
    const seen = records().length;
    const before = await gw.balanceMicro();
    const dialect = model === SONNET ? "anthropic" : "openai";
    for (let i = 0; i < n; i++) {
      upstream.reply(scriptedReply(dialect, { text: "ok", usage }));
      await send("/v1/chat/completions", { model, messages: [{ role: "user", content: "a short turn" }] });
    }
    return { spent: before - (await gw.balanceMicro()), records: records().slice(seen) };
  }

  test("at whole micro-credits a token (Sonnet 5.5) 40 small answers cost exactly what one answer of their sum does, and the report sums them exactly", async () => {
    const small = await bill(SONNET, 40, { input: 3, cacheRead: 7, cacheWrite5m: 1, output: 2 });
    const large = await bill(SONNET, 1, { input: 120, cacheRead: 280, cacheWrite5m: 40, output: 80 });
    expect(small.spent).toBe(40 * (3 * 2_000 + 7 * 100 + 2_500 + 2 * 10_000));
    expect(large.spent).toBe(small.spent);
    expect(sum(small.records, "cost_micro")).toBe(small.spent);
  });

  test("at half a micro-credit a token each answer rounds up once, by less than one micro-credit: 40 answers drift 20 micro-credits ($0.00000002), never more than one each", async () => {
    const small = await bill(HALVES, 40, { input: 1, cacheRead: 1, cacheWrite5m: 1, output: 1 });
    const large = await bill(HALVES, 1, { input: 40, cacheRead: 40, cacheWrite5m: 40, output: 40 });
    // 50 + 5 + 62.5 + 250 = 367.5 a turn, charged 368; the large one is 40 × 367.5 = 14,700 exactly.
    expect(small.records.map((r) => r.cost_micro)).toEqual(Array(40).fill(368));
    expect(large.spent).toBe(14_700);
    expect(small.spent - large.spent).toBe(20);
  });
});
