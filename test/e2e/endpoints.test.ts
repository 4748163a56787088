import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { useGateway, ANTHROPIC_MODEL, OPENAI_MODEL, post, sseFrames, VENDOR_ANTHROPIC_KEY, VENDOR_OPENAI_KEY } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url }));

const question = [{ role: "user", content: "Hello there gateway" }];

/** The text an OpenAI client reconstructs from a stream. */
function openaiStreamText(body: string) {
  const frames = sseFrames(body);
  expect(frames.at(-1)!.data).toBe("[DONE]");
  const chunks = frames.slice(0, -1).map((f) => JSON.parse(f.data));
  return {
    chunks,
    text: chunks.map((c) => c.choices[0]?.delta?.content ?? "").join(""),
    finish: chunks.map((c) => c.choices[0]?.finish_reason).find(Boolean),
  };
}

/** The text an Anthropic client reconstructs from a stream. */
function anthropicStreamText(body: string) {
  const frames = sseFrames(body);
  const events = frames.map((f) => ({ name: f.event, data: JSON.parse(f.data) }));
  for (const e of events) expect(e.data.type).toBe(e.name);
  const delta = events.find((e) => e.name === "message_delta")!.data;
  return {
    events,
    names: events.map((e) => e.name),
    text: events.filter((e) => e.name === "content_block_delta").map((e) => e.data.delta.text ?? "").join(""),
    stop: delta.delta.stop_reason,
    usage: delta.usage,
    start: events[0]!.data,
  };
}

describe.each([
  ["openai upstream", OPENAI_MODEL, "/v1/chat/completions"],
  ["anthropic upstream", ANTHROPIC_MODEL, "/v1/messages"],
])("OpenAI client, %s", (_name, model, upstreamPath) => {
  test("non-stream", async () => {
    const res = await post(gw, "/v1/chat/completions", { model, messages: question });
    expect(res.status).toBe(200);
    const body = (await res.json()) as any;
    expect(body.object).toBe("chat.completion");
    expect(body.model).toBe(model);
    expect(body.choices[0].message).toMatchObject({ role: "assistant", content: "Echo: Hello there gateway" });
    expect(body.choices[0].finish_reason).toBe("stop");
    expect(body.usage.completion_tokens).toBe(4);
    expect(body.usage.total_tokens).toBe(body.usage.prompt_tokens + body.usage.completion_tokens);
    expect(upstream.requests[0]!.path).toBe(upstreamPath);
  });

  test("stream", async () => {
    const res = await post(gw, "/v1/chat/completions", { model, messages: question, stream: true });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("text/event-stream");
    const { chunks, text, finish } = openaiStreamText(await res.text());
    expect(text).toBe("Echo: Hello there gateway");
    expect(finish).toBe("stop");
    for (const c of chunks) expect(c).toMatchObject({ object: "chat.completion.chunk", model });
    // No usage chunk: the client did not ask for one, even though the upstream was asked.
    expect(chunks.some((c) => c.usage)).toBe(false);
    expect(upstream.requests[0]!.path).toBe(upstreamPath);
  });

  test("stream with include_usage gets one usage chunk at the end", async () => {
    const res = await post(gw, "/v1/chat/completions", { model, messages: question, stream: true, stream_options: { include_usage: true } });
    const { chunks } = openaiStreamText(await res.text());
    const usage = chunks.filter((c) => c.usage);
    expect(usage.length).toBe(1);
    expect(usage[0].choices).toEqual([]);
    expect(usage[0].usage.completion_tokens).toBe(4);
    expect(chunks.at(-1)).toBe(usage[0]);
  });
});

describe.each([
  ["openai upstream", OPENAI_MODEL, "/v1/chat/completions"],
  ["anthropic upstream", ANTHROPIC_MODEL, "/v1/messages"],
])("Anthropic client, %s", (_name, model, upstreamPath) => {
  test("non-stream", async () => {
    const res = await post(gw, "/v1/messages", { model, max_tokens: 100, messages: question }, { "anthropic-version": "2023-06-01" });
    expect(res.status).toBe(200);
    const body = (await res.json()) as any;
    expect(body).toMatchObject({ type: "message", role: "assistant", model, stop_reason: "end_turn", stop_sequence: null });
    expect(body.id).toMatch(/^msg_/);
    expect(body.content).toEqual([{ type: "text", text: "Echo: Hello there gateway" }]);
    expect(body.usage.output_tokens).toBe(4);
    expect(body.usage.input_tokens).toBeGreaterThan(0);
    expect(upstream.requests[0]!.path).toBe(upstreamPath);
  });

  test("stream", async () => {
    const res = await post(gw, "/v1/messages", { model, max_tokens: 100, messages: question, stream: true });
    expect(res.status).toBe(200);
    const s = anthropicStreamText(await res.text());
    expect(s.names[0]).toBe("message_start");
    expect(s.names).toContain("content_block_start");
    expect(s.names).toContain("content_block_stop");
    expect(s.names.at(-2)).toBe("message_delta");
    expect(s.names.at(-1)).toBe("message_stop");
    expect(s.text).toBe("Echo: Hello there gateway");
    expect(s.stop).toBe("end_turn");
    expect(s.usage.output_tokens).toBe(4);
    expect(s.start.message.model).toBe(model);
    // Real input tokens in message_start or message_delta.
    expect(Math.max(s.start.message.usage.input_tokens, s.usage.input_tokens ?? 0)).toBeGreaterThan(0);
    expect(upstream.requests[0]!.path).toBe(upstreamPath);
  });
});

describe("what the upstream receives", () => {
  test("OpenAI upstream: vendor key, upstream model name, capped max_tokens, include_usage forced, unknown fields kept", async () => {
    await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true, max_tokens: 50_000, seed: 7, logit_bias: { "42": 1 } })).text();
    const r = upstream.requests[0]!;
    expect(r.headers.authorization).toBe(`Bearer ${VENDOR_OPENAI_KEY}`);
    expect(r.body.model).toBe("gpt-4o-mini");
    expect(r.body.max_tokens).toBe(8192);
    expect(r.body.stream_options).toEqual({ include_usage: true });
    expect(r.body.seed).toBe(7);
    expect(r.body.logit_bias).toEqual({ "42": 1 });
  });

  test("requests without max_tokens get the 8192 cap", async () => {
    await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
    expect(upstream.requests[0]!.body.max_tokens).toBe(8192);
  });

  test("Anthropic upstream: x-api-key, anthropic-version and anthropic-beta forwarded, client key not", async () => {
    await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 9000, messages: question }, { "anthropic-version": "2023-06-01", "anthropic-beta": "prompt-caching-2024-07-31" });
    const r = upstream.requests[0]!;
    expect(r.headers["x-api-key"]).toBe(VENDOR_ANTHROPIC_KEY);
    expect(r.headers["anthropic-version"]).toBe("2023-06-01");
    expect(r.headers["anthropic-beta"]).toBe("prompt-caching-2024-07-31");
    expect(r.headers.authorization).toBeUndefined();
    expect(r.body.max_tokens).toBe(8192);
    expect(r.body.model).toBe("claude-sonnet-4-5");
  });

  test("OpenAI client → Anthropic upstream is translated", async () => {
    await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: [{ role: "system", content: "Be brief." }, ...question], temperature: 1.5 });
    const r = upstream.requests[0]!;
    expect(r.body.system).toBe("Be brief.");
    // Marked for Anthropic's prompt cache: the client's format has no way to say it.
    expect(r.body.messages).toEqual([{ role: "user", content: [{ type: "text", text: "Hello there gateway", cache_control: { type: "ephemeral" } }] }]);
    expect(r.body.temperature).toBe(1);
    expect(r.headers["anthropic-version"]).toBe("2023-06-01");
  });

  test("OpenAI content given as text parts is accepted", async () => {
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: [{ type: "text", text: "Hello " }, { type: "text", text: "parts" }] }] });
    expect(res.status).toBe(200);
    const translated = await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: [{ role: "user", content: [{ type: "text", text: "Hello parts" }] }] });
    expect(((await translated.json()) as any).choices[0].message.content).toBe("Echo: Hello parts");
  });
});
