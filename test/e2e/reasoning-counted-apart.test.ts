/**
 * Reasoning counted apart from the output (a bill audit, thirty-sixth session). OpenAI counts an
 * answer's reasoning inside `completion_tokens` (`output_tokens` on the Responses API), and its
 * `total_tokens` is the prompt plus that. xAI's Grok reports `reasoning_tokens` beside
 * `completion_tokens`, not inside it, with `total_tokens` = prompt + completion + reasoning, and
 * bills the reasoning as output; so do proxies that map Gemini's thoughts to OpenAI's shape. Read as
 * OpenAI's, such an answer was charged its visible output only: 52.557 credits for the vendor's 94.692.
 */
import { describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { post, sseFrames, useGateway } from "../helpers/gateway.ts";
import { answerWith } from "../helpers/responses-wire.ts";

const upstream = useFakeUpstream();
const GROK = "test/grok";
const GROK_RESPONSES = "test/grok-responses";
const PRICING = { input_per_mtok: 3_000, output_per_mtok: 15_000, cache_read_per_mtok: 750 };
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  credits: 10_000,
  extraModels: [
    { id: GROK, provider: "fake-openai", upstream_model: "grok-4", category: "text", context_length: 256_000, owned_by: "xai", pricing: PRICING },
    { id: GROK_RESPONSES, provider: "fake-openai", upstream_model: "grok-4", upstream_api: "responses", category: "text", context_length: 256_000, owned_by: "xai", pricing: PRICING },
  ],
}));

/** A Grok answer's usage, as xAI reports it (a real one, redacted: sub2api#5771). */
const GROK_USAGE = { prompt_tokens: 10_120, completion_tokens: 1_499, total_tokens: 14_428, prompt_tokens_details: { cached_tokens: 128 }, completion_tokens_details: { reasoning_tokens: 2_809 } };
/** xAI's bill for it: the prompt less its cached part, the cached part, and output and reasoning both as output. */
const GROK_BILL = (10_120 - 128) * 3_000 + 128 * 750 + (1_499 + 2_809) * 15_000;

function lastRecord(): { cost_micro: number; completion_tokens: number; reasoning_tokens: number } {
  const db = new Database(gw.dbPath, { readonly: true });
  try {
    return db.query<{ cost_micro: number; completion_tokens: number; reasoning_tokens: number }, []>("SELECT cost_micro, completion_tokens, reasoning_tokens FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
  } finally {
    db.close();
  }
}

const PROMPT = "context ".repeat(12_000);
function body(path: string, model: string, stream: boolean) {
  if (path === "/v1/responses") return { model, input: PROMPT, stream };
  if (path === "/v1/messages") return { model, max_tokens: 8_000, messages: [{ role: "user", content: PROMPT }], stream };
  return { model, messages: [{ role: "user", content: PROMPT }], stream };
}

function chatAnswer(usage: Record<string, unknown>, stream: boolean) {
  const head = { id: "chatcmpl-grok", created: 1_764_460_800, model: "grok-4" };
  if (!stream) return { kind: "json" as const, body: { ...head, object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: "Done." }, finish_reason: "stop" }], usage } };
  const chunk = (fields: Record<string, unknown>) => `data: ${JSON.stringify({ ...head, object: "chat.completion.chunk", ...fields })}\n\n`;
  return {
    kind: "sse" as const,
    chunks: [chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "Done." }, finish_reason: null }] }), chunk({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }), chunk({ choices: [], usage }), "data: [DONE]\n\n"],
  };
}

async function charge(path: string, model: string, stream: boolean): Promise<{ micro: number; record: ReturnType<typeof lastRecord> }> {
  const before = await gw.balanceMicro();
  const res = await post(gw, path, body(path, model, stream));
  expect(res.status).toBe(200);
  await res.arrayBuffer();
  return { micro: before - (await gw.balanceMicro()), record: lastRecord() };
}

describe("reasoning a server counts apart from the output (total_tokens = prompt + output + reasoning)", () => {
  for (const stream of [false, true]) {
    for (const path of ["/v1/chat/completions", "/v1/messages", "/v1/responses"]) {
      test(`is billed as output: a chat-completions upstream, ${path}, ${stream ? "streamed" : "whole"}`, async () => {
        upstream.reply(chatAnswer(GROK_USAGE, stream));
        const { micro, record } = await charge(path, GROK, stream);
        expect(micro).toBe(GROK_BILL);
        expect(record).toEqual({ cost_micro: GROK_BILL, completion_tokens: 4_308, reasoning_tokens: 2_809 });
      });
    }
  }

  test("a chat client is shown the usage it is billed (reasoning inside completion_tokens, as OpenAI's), streamed and whole", async () => {
    for (const stream of [false, true]) {
      upstream.reply(chatAnswer(GROK_USAGE, stream));
      const res = await post(gw, "/v1/chat/completions", { model: GROK, messages: [{ role: "user", content: PROMPT }], stream, ...(stream ? { stream_options: { include_usage: true } } : {}) });
      const text = await res.text();
      const shown = stream ? sseFrames(text).filter((f) => f.data.includes('"usage":{')).map((f) => JSON.parse(f.data).usage) : [JSON.parse(text).usage];
      expect(shown).toEqual([expect.objectContaining({ prompt_tokens: 10_120, completion_tokens: 4_308, total_tokens: 14_428, prompt_tokens_details: expect.objectContaining({ cached_tokens: 128 }), completion_tokens_details: { reasoning_tokens: 2_809 } })]);
      await gw.app.services.settled();
      expect(lastRecord().cost_micro).toBe(GROK_BILL);
    }
  });

  test("on a Responses-API upstream too", async () => {
    for (const stream of [false, true]) {
      upstream.reply(answerWith({ items: [{ text: "Done." }], usage: { input_tokens: 10_120, input_tokens_details: { cached_tokens: 128 }, output_tokens: 1_499, output_tokens_details: { reasoning_tokens: 2_809 }, total_tokens: 14_428 } }));
      const { micro, record } = await charge("/v1/responses", GROK_RESPONSES, stream);
      expect(micro).toBe(GROK_BILL);
      expect(record).toEqual({ cost_micro: GROK_BILL, completion_tokens: 4_308, reasoning_tokens: 2_809 });
    }
  });

  test("OpenAI's own usage (reasoning inside completion_tokens, total = prompt + completion) is billed as it was", async () => {
    for (const stream of [false, true]) {
      upstream.reply(chatAnswer({ ...GROK_USAGE, completion_tokens: 4_308, total_tokens: 14_428 }, stream));
      const { micro, record } = await charge("/v1/chat/completions", GROK, stream);
      expect(micro).toBe(GROK_BILL);
      expect(record).toEqual({ cost_micro: GROK_BILL, completion_tokens: 4_308, reasoning_tokens: 2_809 });
      // Without total_tokens nothing says the reasoning was apart: the output is taken as reported.
      const { total_tokens: _total, ...noTotal } = GROK_USAGE;
      upstream.reply(chatAnswer(noTotal, stream));
      expect((await charge("/v1/chat/completions", GROK, stream)).record.completion_tokens).toBe(1_499);
    }
  });
});
