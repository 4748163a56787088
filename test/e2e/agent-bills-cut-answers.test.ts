/**
 * Answers cut short and usage reported in odd places, on the built-in catalogue's prices (a bill
 * audit, fourth round; US$ 1 = 1,000 credits): each charge is the vendor's price list applied to
 * the record's token classes, to the micro-credit.
 * - Claude Sonnet 5.5: $2 / $10, reads $0.10, writes $2.50 (5 min) / $4 (1 h).
 * - GPT-6 Sol: $2 / $10, cached $0.20, writes $2.50; GPT-6.1 Sol the same with cached $0.10.
 * - GPT Image 2.6 Flare: text input $5, image output tokens $30; text-embedding-3-small $0.02, -large $0.13.
 */
import { describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { leaveAfter, post, useGateway } from "../helpers/gateway.ts";
import { anthropicStream, openaiStream } from "../helpers/scripted-answers.ts";
import { responsesFrames } from "../helpers/responses-wire.ts";
import { builtInModel as model } from "../helpers/built-in-models.ts";

const upstream = useFakeUpstream();
const SONNET = "audit/anthropic/claude-sonnet-5-5";
const SOL = "audit/openai/gpt-6-sol";
const SOL61 = "audit/openai/gpt-6.1-sol";
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  credits: 100_000,
  retry: { max_retries: 0 },
  extraModels: [
    model("anthropic/claude-sonnet-5-5", "fake-anthropic"),
    model("openai/gpt-6-sol", "fake-openai"),
    model("openai/gpt-6.1-sol", "fake-openai"),
    model("openai/gpt-image-2.6-flare", "fake-openai"),
    model("openai/text-embedding-3-small", "fake-openai"),
    model("openai/text-embedding-3-large", "fake-openai"),
  ],
}));

interface Row { status: string; prompt_tokens: number; fresh_input_tokens: number; cache_read_tokens: number; cache_write_5m_tokens: number; cache_write_1h_tokens: number; completion_tokens: number; estimated: number }
function last(): Row {
  const db = new Database(gw.dbPath, { readonly: true });
  try {
    return db.query<Row, []>("SELECT * FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
  } finally {
    db.close();
  }
}

/** Enough prompt that the counts reported are within what the request could hold. */
const PROMPT = "agent context ".repeat(30_000);
function body(path: string, m: string, stream: boolean) {
  if (path === "/v1/responses") return { model: m, input: PROMPT, stream, store: false };
  if (path === "/v1/messages") return { model: m, max_tokens: 8_000, messages: [{ role: "user", content: PROMPT }], stream };
  return { model: m, messages: [{ role: "user", content: PROMPT }], stream, ...(stream ? { stream_options: { include_usage: true } } : {}) };
}
const paths = ["/v1/messages", "/v1/chat/completions", "/v1/responses"];

/** A Claude Code turn: 300 fresh, 60,000 read, 3,000 written for 5 minutes and 2,000 for an hour; 1,200 out. */
const CLAUDE_USAGE = { input: 300, cacheRead: 60_000, cacheWrite5m: 3_000, cacheWrite1h: 2_000, output: 1_200 };
const sonnetBill = (r: Row) => r.fresh_input_tokens * 2_000 + r.cache_read_tokens * 100 + r.cache_write_5m_tokens * 2_500 + r.cache_write_1h_tokens * 4_000 + r.completion_tokens * 10_000;

async function charged(send: () => Promise<Response>): Promise<number> {
  const before = await gw.balanceMicro();
  const res = await send();
  expect(res.status).toBe(200);
  await res.arrayBuffer();
  await gw.app.services.settled();
  return before - (await gw.balanceMicro());
}

describe("a Claude stream that fails after its text began (message_start's counts, then overloaded_error)", () => {
  for (const path of paths) {
    test(`${path}: its prompt at each cache class's price (the counts message_start reported), its output as relayed`, async () => {
      const chunks = (anthropicStream({ text: "Reading the file now, and then some more words.", usage: CLAUDE_USAGE }) as { chunks: string[] }).chunks.slice(0, 5);
      chunks.push(`event: error\ndata: ${JSON.stringify({ type: "error", error: { type: "overloaded_error", message: "Overloaded" } })}\n\n`);
      upstream.reply({ kind: "sse", chunks });
      const micro = await charged(() => post(gw, path, body(path, SONNET, true)));
      const r = last();
      expect(r).toMatchObject({ status: "stream_failed", prompt_tokens: 65_300, fresh_input_tokens: 300, cache_read_tokens: 60_000, cache_write_5m_tokens: 3_000, cache_write_1h_tokens: 2_000, estimated: 1 });
      expect(r.completion_tokens).toBeGreaterThan(0);
      expect(r.completion_tokens).toBeLessThan(20);
      expect(micro).toBe(sonnetBill(r));
    });
  }
});

describe("a Claude answer whose client leaves after its first text", () => {
  for (const path of paths) {
    test(`${path}: Sonnet 5.5 thinks unasked, so the rest is read and the vendor's whole count charged, its 1-hour writes at $4`, async () => {
      const { chunks } = anthropicStream({ text: "Reading the file now." + " more".repeat(50), usage: CLAUDE_USAGE }) as { chunks: string[] };
      // Slow enough that the client has left before the rest comes, on a loaded machine too.
      upstream.reply({ kind: "sse", chunks, delayMs: 60 });
      const before = await gw.balanceMicro();
      const leave = new AbortController();
      const res = await post(gw, path, body(path, SONNET, true), {}, leave.signal);
      await leaveAfter(gw, res, leave, "Reading");
      expect(last()).toMatchObject({ status: "cancelled", prompt_tokens: 65_300, cache_write_1h_tokens: 2_000, completion_tokens: 1_200, estimated: 0 });
      expect(before - (await gw.balanceMicro())).toBe(300 * 2_000 + 60_000 * 100 + 3_000 * 2_500 + 2_000 * 4_000 + 1_200 * 10_000);
    });
  }
});

describe("usage in every chunk (vLLM's continuous_usage_stats, proxies that repeat it)", () => {
  for (const path of paths) {
    test(`${path}: the last report is the answer's, its cached and written parts priced apart (earlier ones said none)`, async () => {
      const chunks = (openaiStream({ text: "Running it now.", usage: { input: 2_000, cacheRead: 36_000, cacheWrite5m: 2_000, output: 900, reasoning: 600 } }) as { chunks: string[] }).chunks;
      // Every chunk before the usage chunk carries the counts so far, without the cached parts.
      const running = chunks.map((c, i) => (i < chunks.length - 2 ? c.replace('"usage":null', `"usage":{"prompt_tokens":40000,"completion_tokens":${i},"total_tokens":${40_000 + i}}`) : c));
      upstream.reply({ kind: "sse", chunks: running });
      const micro = await charged(() => post(gw, path, body(path, SOL, true)));
      expect(last()).toMatchObject({ status: "ok", prompt_tokens: 40_000, cache_read_tokens: 36_000, cache_write_5m_tokens: 2_000, completion_tokens: 900 });
      expect(micro).toBe(2_000 * 2_000 + 36_000 * 200 + 2_000 * 2_500 + 900 * 10_000);
    });
  }
});

describe("a Responses answer that fails after its text, with the usage the vendor reports for it", () => {
  for (const path of paths) {
    test(`${path}: the vendor's counts of the failed answer, cached and written input and reasoning each at its price`, async () => {
      const usage = { input_tokens: 60_000, input_tokens_details: { cached_tokens: 52_000, cache_write_tokens: 6_000 }, output_tokens: 300, output_tokens_details: { reasoning_tokens: 100 }, total_tokens: 60_300 };
      upstream.reply({ kind: "sse", chunks: responsesFrames({ items: [{ text: "Partial answer here" }], status: "failed", usage }) });
      const before = await gw.balanceMicro();
      const res = await post(gw, path, body(path, SOL61, true));
      await res.text();
      await gw.app.services.settled();
      expect(last()).toMatchObject({ status: "stream_failed", prompt_tokens: 60_000, cache_read_tokens: 52_000, cache_write_5m_tokens: 6_000, completion_tokens: 300, estimated: 0 });
      expect(before - (await gw.balanceMicro())).toBe(2_000 * 2_000 + 52_000 * 100 + 6_000 * 2_500 + 300 * 10_000);
    });
  }
});

test("GPT Image 2.6 Flare: text input at $5, image output tokens at $30, no price per image", async () => {
  const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
  upstream.reply({ kind: "json", body: { created: 1, data: [{ b64_json: png }], usage: { total_tokens: 4_210, input_tokens: 50, output_tokens: 4_160, input_tokens_details: { text_tokens: 50, image_tokens: 0 } } } });
  expect(await charged(() => post(gw, "/v1/chat/completions", { model: "audit/openai/gpt-image-2.6-flare", messages: [{ role: "user", content: "a lighthouse at dusk" }] }))).toBe(50 * 5_000 + 4_160 * 30_000);
});

for (const [size, price] of [["small", 20], ["large", 130]] as const) {
  test(`text-embedding-3-${size}: the reported prompt tokens at $${price / 1_000}`, async () => {
    const before = await gw.balanceMicro();
    const res = await post(gw, "/v1/embeddings", { model: `audit/openai/text-embedding-3-${size}`, input: ["hello world ".repeat(500), "x"] });
    const { usage } = (await res.json()) as { usage: { prompt_tokens: number } };
    await gw.app.services.settled();
    expect(usage.prompt_tokens).toBeGreaterThan(1_000);
    expect(before - (await gw.balanceMicro())).toBe(usage.prompt_tokens * price);
  });
}
