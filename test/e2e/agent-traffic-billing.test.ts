/**
 * Agent tools' traffic billed as the vendors bill it (a bill audit, 2026-11-30, second round): Claude
 * Code-, Codex- and SDK-shaped requests on every client format, against upstreams of both kinds
 * reporting what the vendors report (cached and written prompts, reasoning, tool calls), streamed and
 * whole; `n` answers; a stream cut after its prompt's counts; embeddings and gpt-image-1. Each charge
 * is worked by hand from the vendors' list prices (US$ 1 = 1,000 credits): gpt-4.1-mini $0.40 / $1.60,
 * cached $0.10; claude-sonnet-4-5 $3 / $15, reads $0.30, writes $3.75 (5 min) and $6 (1 h);
 * text-embedding-3-small $0.02; gpt-image-1 text input $5, image output $40.
 */
import { describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { chargeOf, post, sseFrames, useGateway } from "../helpers/gateway.ts";
import { scriptedReply, type Script } from "../helpers/scripted-answers.ts";

const upstream = useFakeUpstream();
const MINI = "audit/gpt-4.1-mini";
const SONNET = "audit/claude-sonnet-4-5";
const EMBED = "audit/text-embedding-3-small";
const IMAGE = "audit/gpt-image-1";
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  credits: 100_000,
  extraModels: [
    { id: MINI, provider: "fake-openai", upstream_model: "gpt-4.1-mini", category: "text", context_length: 1_047_576, owned_by: "openai", pricing: { input_per_mtok: 400, output_per_mtok: 1_600, cache_read_per_mtok: 100 } },
    { id: SONNET, provider: "fake-anthropic", upstream_model: "claude-sonnet-4-5", category: "text", context_length: 200_000, owned_by: "anthropic", pricing: { input_per_mtok: 3_000, output_per_mtok: 15_000, cache_read_per_mtok: 300, cache_write_per_mtok: 3_750, cache_write_1h_per_mtok: 6_000 } },
    { id: EMBED, provider: "fake-openai", upstream_model: "text-embedding-3-small", category: "embedding", context_length: 8_192, owned_by: "openai", pricing: { input_per_mtok: 20, output_per_mtok: 0 } },
    { id: IMAGE, provider: "fake-openai", upstream_model: "gpt-image-1", upstream_api: "images", category: "image", context_length: 32_000, owned_by: "openai", pricing: { input_per_mtok: 5_000, output_per_mtok: 40_000, cache_read_per_mtok: 1_250, per_image: 0 } },
  ],
}));
const PROMPT = "agent context ".repeat(20_000);

function last(): Record<string, number> {
  const db = new Database(gw.dbPath, { readonly: true });
  try {
    return db.query<Record<string, number>, []>("SELECT * FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
  } finally {
    db.close();
  }
}

function body(path: string, model: string, stream: boolean, extra: Record<string, unknown> = {}) {
  if (path === "/v1/responses") return { model, input: PROMPT, stream, ...extra };
  if (path === "/v1/messages") return { model, max_tokens: 4_000, messages: [{ role: "user", content: PROMPT }], stream, ...extra };
  return { model, messages: [{ role: "user", content: PROMPT }], stream, ...(stream ? { stream_options: { include_usage: true } } : {}), ...extra };
}

const paths = ["/v1/chat/completions", "/v1/messages", "/v1/responses"];

describe("usage through every client format and both translations", () => {
  for (const path of paths) {
    for (const stream of [false, true]) {
      test(`an OpenAI upstream's cached prompt, reasoning and tool call → ${path}, ${stream ? "streamed" : "whole"}`, async () => {
        const s: Script = { text: "Let me look.", calls: [{ id: "call_1", name: "read_file", arguments: '{"path":"a.ts"}' }], usage: { input: 2_000, cacheRead: 18_000, output: 700, reasoning: 300 } };
        upstream.reply(scriptedReply("openai", s));
        const { micro } = await chargeOf(gw, () => post(gw, path, body(path, MINI, stream, path === "/v1/chat/completions" ? { tools: [{ type: "function", function: { name: "read_file", parameters: { type: "object" } } }] } : {})));
        expect(micro).toBe(2_000 * 400 + 18_000 * 100 + 700 * 1_600);
        expect(last().reasoning_tokens).toBe(300);
      });
      test(`an Anthropic upstream's thinking, reads and 5-minute and 1-hour writes → ${path}, ${stream ? "streamed" : "whole"}`, async () => {
        const s: Script = { reasoning: "thinking hard", text: "done", usage: { input: 120, cacheRead: 30_000, cacheWrite5m: 2_000, cacheWrite1h: 1_000, output: 900, reasoning: 400 } };
        upstream.reply(scriptedReply("anthropic", s));
        const { micro } = await chargeOf(gw, () => post(gw, path, body(path, SONNET, stream)));
        expect(micro).toBe(120 * 3_000 + 30_000 * 300 + 2_000 * 3_750 + 1_000 * 6_000 + 900 * 15_000);
      });
    }
  }
});

describe("n answers", () => {
  for (const stream of [false, true]) {
    test(`n: 3 on an OpenAI upstream: the prompt once, the three answers' tokens, ${stream ? "streamed" : "whole"}`, async () => {
      upstream.reply(scriptedReply("openai", { text: "x", usage: { input: 1_000, output: 3 * 50 } }));
      const { micro } = await chargeOf(gw, () => post(gw, "/v1/chat/completions", body("/v1/chat/completions", MINI, stream, { n: 3, max_tokens: 100 })));
      expect(micro).toBe(1_000 * 400 + 150 * 1_600);
    });
  }
});

describe("a stream cut short", () => {
  test("an Anthropic stream cut after message_start and some text: its prompt as reported, the relayed text counted", async () => {
    const ev = (type: string, data: unknown) => `event: ${type}\ndata: ${JSON.stringify({ type, ...(data as object) })}\n\n`;
    upstream.reply({
      kind: "sse",
      chunks: [
        ev("message_start", { message: { id: "msg_1", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 100, cache_read_input_tokens: 40_000, cache_creation_input_tokens: 500, cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 500 }, output_tokens: 1 } } }),
        ev("content_block_start", { index: 0, content_block: { type: "text", text: "" } }),
        ev("content_block_delta", { index: 0, delta: { type: "text_delta", text: "Hello there, this is a partial answer " } }),
      ],
    });
    const before = await gw.balanceMicro();
    const res = await post(gw, "/v1/messages", body("/v1/messages", SONNET, true));
    expect(res.status).toBe(200);
    await res.text();
    const micro = before - (await gw.balanceMicro());
    // The prompt as the vendor counted it, and the answer relayed (counted by the gateway, no usage came).
    const r = last();
    expect(r).toMatchObject({ status: "stream_failed", prompt_tokens: 40_600, fresh_input_tokens: 100, cache_read_tokens: 40_000, cache_write_1h_tokens: 500 });
    expect(r.completion_tokens).toBeGreaterThan(0);
    expect(micro).toBe(100 * 3_000 + 40_000 * 300 + 500 * 6_000 + r.completion_tokens * 15_000);
  });
});

describe("embeddings and images", () => {
  test("embeddings: the reported prompt tokens at the input price", async () => {
    upstream.reply({ kind: "json", body: { object: "list", data: [0, 1, 2].map((index) => ({ object: "embedding", index, embedding: [0.1, 0.2, 0.3] })), model: "text-embedding-3-small", usage: { prompt_tokens: 1_234, total_tokens: 1_234 } } });
    const { micro } = await chargeOf(gw, () => post(gw, "/v1/embeddings", { model: EMBED, input: ["alpha beta", "gamma delta", "epsilon ".repeat(400)] }));
    expect(micro).toBe(1_234 * 20);
  });
  test("gpt-image-1: text input and image output tokens at their prices (a high-quality 1536×1024 image, 6,240 tokens)", async () => {
    upstream.reply({ kind: "json", body: { created: 1, data: [{ b64_json: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg==" }], usage: { total_tokens: 6_290, input_tokens: 50, output_tokens: 6_240, input_tokens_details: { text_tokens: 50, image_tokens: 0 } } } });
    const { micro } = await chargeOf(gw, () => post(gw, "/v1/chat/completions", { model: IMAGE, messages: [{ role: "user", content: "a lighthouse at dusk, detailed" }] }));
    expect(micro).toBe(50 * 5_000 + 6_240 * 40_000);
  });
});
