/**
 * An OpenAI model's refusal (`message.refusal` / `delta.refusal`, `content: null`) is what it said
 * instead of an answer. OpenAI chat clients get it as OpenAI writes it (`refusal`, never
 * `content`), relayed or written by the gateway; Responses API clients that asked for structured
 * output as OpenAI's refusal content part, so `responses.parse` leaves it unparsed, others (Codex)
 * as text they show; Anthropic clients, whose format has no such field, as the answer's text with
 * the upstream's own stop (`end_turn`: Claude Code takes `refusal` for its own safety classifier's).
 * Never an empty answer that was charged. An Anthropic model's `refusal` stop is a completed answer
 * for a Responses client (not an incomplete one, which Codex sent again five times).
 */
import { describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, useGateway } from "../helpers/gateway.ts";

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
  test("reaches an Anthropic client as the answer's text, with the upstream's own stop (end_turn), whole and streamed", async () => {
    upstream.reply(whole());
    const res = await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 50, messages: [{ role: "user", content: "x" }] });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { content: unknown[]; stop_reason: string };
    expect(body.content).toEqual([{ type: "text", text: REFUSAL }]);
    expect(body.stop_reason).toBe("end_turn");

    upstream.reply(streamed());
    const text = await (await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 50, stream: true, messages: [{ role: "user", content: "x" }] })).text();
    const deltas = frames(text).filter((d) => d.type === "content_block_delta");
    expect(deltas.map((d) => d.delta.text).join("")).toBe(REFUSAL);
    expect(frames(text).find((d) => d.type === "message_delta").delta.stop_reason).toBe("end_turn");
  });

  test("reaches a Responses API client that asked for structured output as OpenAI's refusal part (responses.parse leaves it unparsed); one that did not (Codex) as text it shows", async () => {
    upstream.reply(whole());
    const res = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "x", store: false });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { status: string; output: { type: string; role: string; content: unknown[] }[] };
    expect(body.status).toBe("completed");
    expect(body.output).toMatchObject([{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: REFUSAL }] }]);
    upstream.reply(whole());
    const asked = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "x", store: false, text: { format: { type: "json_schema", name: "o", schema, strict: true } } });
    expect(((await asked.json()) as { output: unknown[] }).output).toMatchObject([{ type: "message", role: "assistant", status: "completed", content: [{ type: "refusal", refusal: REFUSAL }] }]);

    upstream.reply(whole());
    const parsed = await sdk().responses.parse({ model: OPENAI_MODEL, input: "x", store: false, text: { format: { type: "json_schema", name: "o", schema, strict: true } } } as never);
    expect((parsed.output[0] as { content: unknown[] }).content).toEqual([{ type: "refusal", refusal: REFUSAL }]);
    expect(parsed.output_parsed).toBeNull();
  });

  test("streams to a Responses API client that asked for structured output as OpenAI's refusal events, which the SDK's stream gathers; to one that did not as text deltas", async () => {
    upstream.reply(streamed());
    const plain = frames(await (await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "x", store: false, stream: true })).text());
    expect(plain.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("")).toBe(REFUSAL);
    expect(plain.some((e) => String(e.type).startsWith("response.refusal"))).toBe(false);

    upstream.reply(streamed());
    const text = await (await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "x", store: false, stream: true, text: { format: { type: "json_schema", name: "o", schema, strict: true } } })).text();
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

describe("an Anthropic model's refusal (stop_reason refusal)", () => {
  const refused = () => ({
    kind: "json" as const,
    body: { id: "msg_R", type: "message", role: "assistant", model: "claude-x", content: [{ type: "text", text: REFUSAL }], stop_reason: "refusal", stop_sequence: null, usage: { input_tokens: 12, output_tokens: 9 } },
  });

  test("is a completed answer for a Responses client (an incomplete one made Codex send the request again five times); chat clients still read content_filter; Anthropic clients refusal", async () => {
    upstream.reply(refused());
    const res = await post(gw, "/v1/responses", { model: ANTHROPIC_MODEL, input: "x", store: false });
    const body = (await res.json()) as { status: string; incomplete_details?: unknown; output: unknown[] };
    expect(body.status).toBe("completed");
    expect(body.incomplete_details ?? null).toBeNull();
    expect(body.output).toMatchObject([{ type: "message", content: [{ type: "output_text", text: REFUSAL }] }]);

    upstream.reply(refused());
    const chat = await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: [{ role: "user", content: "x" }] });
    expect(((await chat.json()) as { choices: { finish_reason: string }[] }).choices[0]!.finish_reason).toBe("content_filter");

    upstream.reply(refused());
    const anthropic = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: [{ role: "user", content: "x" }] });
    expect(((await anthropic.json()) as { stop_reason: string }).stop_reason).toBe("refusal");
  });
});
