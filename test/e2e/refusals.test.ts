/**
 * An OpenAI model's refusal (`message.refusal` / `delta.refusal`, `content: null`) is what it said
 * instead of an answer. OpenAI chat clients get it as OpenAI writes it (`refusal`, never
 * `content`), relayed or written by the gateway; Responses API clients as OpenAI's refusal content
 * part, so `responses.parse` leaves it unparsed; Anthropic clients, whose format has no such field,
 * as the answer's text with `stop_reason: "refusal"`. Never an empty answer that was charged.
 */
import { describe, expect, test } from "bun:test";
import OpenAI from "openai";
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

/** Whole, without usage: the gateway counts it and writes the answer itself (not the vendor's body). */
const wholeWithoutUsage = () => {
  const { usage: _, ...body } = whole().body;
  return { kind: "json" as const, body };
};
const frames = (text: string) => text.split("\n").filter((l) => l.startsWith("data: ")).map((l) => JSON.parse(l.slice(6)));
const schema = { type: "object", properties: { a: { type: "string" } }, required: ["a"], additionalProperties: false };
const sdk = () => new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });

describe("an OpenAI refusal", () => {
  test("reaches an Anthropic client as the answer's text, with stop_reason refusal, whole and streamed", async () => {
    upstream.reply(whole());
    const res = await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 50, messages: [{ role: "user", content: "x" }] });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { content: unknown[]; stop_reason: string };
    expect(body.content).toEqual([{ type: "text", text: REFUSAL }]);
    expect(body.stop_reason).toBe("refusal");

    upstream.reply(streamed());
    const text = await (await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 50, stream: true, messages: [{ role: "user", content: "x" }] })).text();
    const deltas = frames(text).filter((d) => d.type === "content_block_delta");
    expect(deltas.map((d) => d.delta.text).join("")).toBe(REFUSAL);
    expect(frames(text).find((d) => d.type === "message_delta").delta.stop_reason).toBe("refusal");
  });

  test("reaches a Responses API client as OpenAI's refusal part: responses.parse leaves it unparsed", async () => {
    upstream.reply(whole());
    const res = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "x", store: false });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { status: string; output: { type: string; role: string; content: unknown[] }[] };
    expect(body.status).toBe("completed");
    expect(body.output).toMatchObject([{ type: "message", role: "assistant", status: "completed", content: [{ type: "refusal", refusal: REFUSAL }] }]);

    upstream.reply(whole());
    const parsed = await sdk().responses.parse({ model: OPENAI_MODEL, input: "x", store: false, text: { format: { type: "json_schema", name: "o", schema, strict: true } } } as never);
    expect((parsed.output[0] as { content: unknown[] }).content).toEqual([{ type: "refusal", refusal: REFUSAL }]);
    expect(parsed.output_parsed).toBeNull();
  });

  test("streams to a Responses API client as OpenAI's refusal events, which the SDK's stream gathers", async () => {
    upstream.reply(streamed());
    const text = await (await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "x", store: false, stream: true })).text();
    const events = frames(text);
    const id = events.find((e) => e.type === "response.output_item.added").item.id;
    expect(events.find((e) => e.type === "response.content_part.added")).toMatchObject({ item_id: id, output_index: 0, content_index: 0, part: { type: "refusal", refusal: "" } });
    const deltas = events.filter((e) => e.type === "response.refusal.delta");
    expect(deltas.map((e) => e.delta).join("")).toBe(REFUSAL);
    for (const d of deltas) expect(Object.keys(d).sort()).toEqual(["content_index", "delta", "item_id", "output_index", "sequence_number", "type"]);
    expect(events.find((e) => e.type === "response.refusal.done")).toMatchObject({ item_id: id, output_index: 0, content_index: 0, refusal: REFUSAL });
    expect(events.find((e) => e.type === "response.content_part.done")).toMatchObject({ part: { type: "refusal", refusal: REFUSAL } });
    expect(events.some((e) => String(e.type).startsWith("response.output_text"))).toBe(false);

    upstream.reply(streamed());
    const stream = sdk().responses.stream({ model: OPENAI_MODEL, input: "x", store: false, text: { format: { type: "json_schema", name: "o", schema, strict: true } } } as never);
    const final = await stream.finalResponse();
    expect((final.output[0] as { content: unknown[] }).content).toEqual([{ type: "refusal", refusal: REFUSAL }]);
    expect(final.output_parsed).toBeNull();
  });

  test("reaches an OpenAI client as the vendor sent it", async () => {
    upstream.reply(whole());
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "x" }] });
    expect(((await res.json()) as { choices: { message: unknown }[] }).choices[0]!.message).toEqual({ role: "assistant", content: null, refusal: REFUSAL, annotations: [] });
  });

  test("reaches an OpenAI client as OpenAI writes it when the gateway writes the answer itself (no usage from the upstream)", async () => {
    upstream.reply(wholeWithoutUsage());
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "x" }] });
    expect(((await res.json()) as { choices: { message: unknown }[] }).choices[0]!.message).toEqual({ role: "assistant", content: null, refusal: REFUSAL });
  });
});
