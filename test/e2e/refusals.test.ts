/**
 * An OpenAI model's refusal (`message.refusal` / `delta.refusal`, `content: null`) is what it said
 * instead of an answer. OpenAI clients get it as sent; clients of formats without a refusal field
 * (Anthropic messages, the Responses API over chat) get its words as the answer's text, never an
 * empty answer that was charged.
 */
import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { OPENAI_MODEL, post, useGateway } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, retry: { max_retries: 0 } }));
const REFUSAL = "I'm sorry, I can't help with that.";
const usage = { prompt_tokens: 12, completion_tokens: 9, total_tokens: 21 };

const whole = () => ({
  kind: "json" as const,
  body: { id: "chatcmpl-R", object: "chat.completion", created: 1761565012, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: null, refusal: REFUSAL, annotations: [] }, logprobs: null, finish_reason: "stop" }], usage },
});
const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: "chatcmpl-R", object: "chat.completion.chunk", created: 1761565012, model: "gpt-4o-mini", choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;
const streamed = () => ({
  kind: "sse" as const,
  chunks: [
    chunk({ role: "assistant", content: null, refusal: null }),
    chunk({ refusal: "I'm sorry, " }),
    chunk({ refusal: "I can't help with that." }),
    chunk({}, "stop"),
    `data: ${JSON.stringify({ id: "chatcmpl-R", object: "chat.completion.chunk", created: 1761565012, model: "gpt-4o-mini", choices: [], usage })}\n\n`,
    "data: [DONE]\n\n",
  ],
});

describe("an OpenAI refusal", () => {
  test("reaches an Anthropic client as the answer's text, whole and streamed", async () => {
    upstream.reply(whole());
    const res = await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 50, messages: [{ role: "user", content: "x" }] });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { content: unknown[] }).content).toEqual([{ type: "text", text: REFUSAL }]);

    upstream.reply(streamed());
    const text = await (await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 50, stream: true, messages: [{ role: "user", content: "x" }] })).text();
    const deltas = text.split("\n").filter((l) => l.startsWith("data: ")).map((l) => JSON.parse(l.slice(6))).filter((d) => d.type === "content_block_delta");
    expect(deltas.map((d) => d.delta.text).join("")).toBe(REFUSAL);
  });

  test("reaches a Responses API client as the answer's text", async () => {
    upstream.reply(whole());
    const res = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "x", store: false });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { output: { type: string; content?: { type: string; text?: string }[] }[] };
    expect(body.output.flatMap((o) => o.content ?? []).map((c) => c.text).join("")).toBe(REFUSAL);
  });

  test("reaches an OpenAI client as the vendor sent it", async () => {
    upstream.reply(whole());
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "x" }] });
    expect(((await res.json()) as { choices: { message: unknown }[] }).choices[0]!.message).toEqual({ role: "assistant", content: null, refusal: REFUSAL, annotations: [] });
  });
});
