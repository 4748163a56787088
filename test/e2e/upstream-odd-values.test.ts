/**
 * Values an upstream puts where its format says a string goes (a number, an object, null in a
 * list), and usage objects that say less than they should: what reaches clients is text and
 * counts that hold together, never a vendor's number passed on as text nor a crash reported as a
 * lost connection (a hostile raw-TCP probe, 2026-11-29).
 */
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, IMAGES_API_MODEL, OPENAI_MODEL, post, sseFrames, useGateway } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, retry: { max_retries: 0 } }));
const ask = [{ role: "user", content: "x" }];
const chunk = (delta: Record<string, unknown>, finish: string | null = null, extra: Record<string, unknown> = {}) =>
  `data: ${JSON.stringify({ id: "chatcmpl-Odd", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...extra })}\n\n`;
const usage = (u: Record<string, unknown>) => `data: ${JSON.stringify({ id: "chatcmpl-Odd", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", choices: [], usage: u })}\n\n`;
const anthropicEvent = (name: string, data: Record<string, unknown>) => `event: ${name}\ndata: ${JSON.stringify({ type: name, ...data })}\n\n`;

describe("an upstream's non-strings where strings go", () => {
  test("Anthropic text that is a number or an object reaches OpenAI and Responses clients as no text, not as that value", async () => {
    const reply = () => upstream.reply({ kind: "sse", chunks: [
      anthropicEvent("message_start", { message: { id: "msg_odd", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } } }),
      anthropicEvent("content_block_start", { index: 0, content_block: { type: "text", text: 5 } }),
      anthropicEvent("content_block_delta", { index: 0, delta: { type: "text_delta", text: { a: 1 } } }),
      anthropicEvent("content_block_delta", { index: 0, delta: { type: "text_delta", text: "ok" } }),
      anthropicEvent("content_block_stop", { index: 0 }),
      anthropicEvent("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 3 } }),
      anthropicEvent("message_stop", {}),
    ] });
    reply();
    const chat = sseFrames(await (await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: ask, stream: true })).text()).filter((f) => f.data !== "[DONE]").map((f) => JSON.parse(f.data));
    const contents = chat.flatMap((c) => c.choices ?? []).map((c: any) => c.delta?.content).filter((c: unknown) => c !== undefined && c !== null);
    expect(contents.every((c: unknown) => typeof c === "string")).toBe(true);
    expect(contents.join("")).toBe("ok");
    reply();
    const streamed = sseFrames(await (await post(gw, "/v1/responses", { model: ANTHROPIC_MODEL, input: "x", store: false, stream: true })).text());
    const deltas = streamed.filter((f) => f.event === "response.output_text.delta").map((f) => JSON.parse(f.data).delta);
    expect(deltas.every((d: unknown) => typeof d === "string")).toBe(true);
    const final = JSON.parse(streamed.at(-1)!.data).response as { output: { content?: { text: string }[] }[] };
    expect(final.output.flatMap((o) => o.content ?? []).map((c) => c.text).join("")).toBe("ok");
  });

  test("OpenAI tool-call arguments or names that are not strings reach an Anthropic client as strings; a null entry is skipped", async () => {
    upstream.reply({ kind: "sse", chunks: [
      chunk({ role: "assistant", content: null }),
      chunk({ tool_calls: [null] }),
      chunk({ tool_calls: [{ index: 0, id: "call_o", type: "function", function: { name: { n: 1 }, arguments: 5 } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: '{"a":1}' } }] }),
      chunk({}, "tool_calls"),
      usage({ prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 }),
      "data: [DONE]\n\n",
    ] });
    const frames = sseFrames(await (await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 50, messages: ask, stream: true })).text());
    expect(frames.some((f) => f.event === "error")).toBe(false);
    const data = frames.map((f) => JSON.parse(f.data));
    const start = data.find((d) => d.type === "content_block_start" && d.content_block.type === "tool_use");
    expect(start.content_block).toMatchObject({ type: "tool_use", id: "call_o", name: "" });
    const partial = data.filter((d) => d.type === "content_block_delta").map((d) => d.delta.partial_json);
    expect(partial.every((p: unknown) => typeof p === "string")).toBe(true);
    expect(partial.join("")).toBe('{"a":1}');
  });
});

describe("usage objects that say less than they should", () => {
  test("cached tokens without a prompt count are not shown or priced: the prompt is estimated, as fresh input", async () => {
    upstream.reply({ kind: "json", body: { id: "chatcmpl-Odd", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }], usage: { completion_tokens: 3, prompt_tokens_details: { cached_tokens: 5_000 } } } });
    const body = (await (await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 50, messages: ask })).json()) as { usage: Record<string, number> };
    expect(body.usage.cache_read_input_tokens ?? 0).toBe(0);
    expect(body.usage.input_tokens).toBeGreaterThan(0);
  });

  test("a later OpenAI usage report without cached parts replaces the earlier one whole: never more cached than prompt", async () => {
    upstream.reply({ kind: "sse", chunks: [
      chunk({ role: "assistant", content: "hi" }),
      usage({ prompt_tokens: 20, completion_tokens: 1, total_tokens: 21, prompt_tokens_details: { cached_tokens: 10 } }),
      chunk({}, "stop"),
      usage({ prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 }),
      "data: [DONE]\n\n",
    ] });
    const res = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "x", store: false, stream: true });
    const final = JSON.parse(sseFrames(await res.text()).at(-1)!.data).response;
    expect(final.usage).toMatchObject({ input_tokens: 5, input_tokens_details: { cached_tokens: 0 }, output_tokens: 3 });
  });

  test("an Anthropic client of an Anthropic upstream never gets a refused count: the message_delta goes out without it, and with the output the gateway counted", async () => {
    const reply = (usage: Record<string, unknown>) => upstream.reply({ kind: "sse", chunks: [
      anthropicEvent("message_start", { message: { id: "msg_odd", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 7, cache_read_input_tokens: 40, output_tokens: 1 } } }),
      anthropicEvent("content_block_start", { index: 0, content_block: { type: "text", text: "" } }),
      anthropicEvent("content_block_delta", { index: 0, delta: { type: "text_delta", text: "one two three four five six" } }),
      anthropicEvent("content_block_stop", { index: 0 }),
      anthropicEvent("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage }),
      anthropicEvent("message_stop", {}),
    ] });
    const deltaOf = async () => {
      const frames = sseFrames(await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: ask, stream: true })).text());
      expect(frames.at(-1)!.event).toBe("message_stop");
      return frames.filter((f) => f.event === "message_delta").map((f) => JSON.parse(f.data));
    };
    reply({ output_tokens: -5, input_tokens: "x", cache_read_input_tokens: 40, cache_creation: { ephemeral_5m_input_tokens: 1.5, ephemeral_1h_input_tokens: 0 } });
    const [refused] = await deltaOf();
    expect(refused.delta).toEqual({ stop_reason: "end_turn", stop_sequence: null });
    // Dropped: the client keeps message_start's input count, and with it the prompt's cache parts
    // (a refused input takes them along); the output is the gateway's estimate.
    expect(refused.usage.input_tokens).toBeUndefined();
    expect(refused.usage.cache_read_input_tokens).toBeUndefined();
    expect(refused.usage.cache_creation).toBeUndefined();
    expect(Number.isInteger(refused.usage.output_tokens) && refused.usage.output_tokens > 0).toBe(true);
    await gw.app.services.settled();
    const db = new Database(gw.dbPath, { readonly: true });
    try {
      const record = db.query<{ completion_tokens: number; estimated: number }, []>("SELECT completion_tokens, estimated FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
      expect(record).toEqual({ completion_tokens: refused.usage.output_tokens, estimated: 1 });
    } finally {
      db.close();
    }
    // A sound one still goes out byte for byte as the vendor wrote it.
    reply({ output_tokens: 6, input_tokens: 7 });
    const [sound] = await deltaOf();
    expect(sound).toEqual({ type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 6, input_tokens: 7 } });
  });

  describe("refused counts around a held message_delta (Anthropic to Anthropic)", () => {
    const start = (usage: Record<string, unknown>) =>
      anthropicEvent("message_start", { message: { id: "msg_odd", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage } });
    const text = [
      anthropicEvent("content_block_start", { index: 0, content_block: { type: "text", text: "" } }),
      anthropicEvent("content_block_delta", { index: 0, delta: { type: "text_delta", text: "one two three four five six" } }),
      anthropicEvent("content_block_stop", { index: 0 }),
    ];
    const delta = (stop: string | null, usage: Record<string, unknown>) => anthropicEvent("message_delta", { delta: { stop_reason: stop, stop_sequence: null }, usage });
    const frames = async () => sseFrames(await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: ask, stream: true })).text());
    const billed = async () => {
      await gw.app.services.settled();
      const db = new Database(gw.dbPath, { readonly: true });
      try {
        return db.query<{ completion_tokens: number; status: string }, []>("SELECT completion_tokens, status FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
      } finally {
        db.close();
      }
    };

    test("a refused output after a sound one: the client is told the count it was billed, not 0", async () => {
      upstream.reply({ kind: "sse", chunks: [start({ input_tokens: 7, output_tokens: 1 }), ...text, delta(null, { output_tokens: 50 }), delta("end_turn", { output_tokens: -1 }), anthropicEvent("message_stop", {})] });
      const deltas = (await frames()).filter((f) => f.event === "message_delta").map((f) => JSON.parse(f.data));
      expect(deltas.at(-1)).toEqual({ type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 50 } });
      expect((await billed()).completion_tokens).toBe(50);
    });

    test("a refused delta then a sound one: the sound one is the last word, the held one never follows it", async () => {
      upstream.reply({ kind: "sse", chunks: [start({ input_tokens: 7, output_tokens: 1 }), ...text, delta(null, { output_tokens: -3 }), delta("end_turn", { output_tokens: 6 }), anthropicEvent("message_stop", {})] });
      const all = await frames();
      const deltas = all.filter((f) => f.event === "message_delta").map((f) => JSON.parse(f.data));
      expect(deltas).toEqual([{ type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 6 } }]);
      expect(all.at(-1)!.event).toBe("message_stop");
    });

    test("a refused delta then a vendor error: the delta goes out before the error, as a sound one would", async () => {
      upstream.reply({ kind: "sse", chunks: [start({ input_tokens: 7, output_tokens: 1 }), ...text, delta("end_turn", { output_tokens: -1 }), anthropicEvent("error", { error: { type: "overloaded_error", message: "x" } })] });
      const all = await frames();
      expect(all.map((f) => f.event).slice(-2)).toEqual(["message_delta", "error"]);
      const sent = JSON.parse(all.at(-2)!.data);
      expect(Number.isInteger(sent.usage.output_tokens) && sent.usage.output_tokens >= 0).toBe(true);
      expect((await billed()).status).toBe("stream_failed");
    });

    test("message_start's refused counts are not shown: the prompt's becomes the estimate, a refused cache count goes", async () => {
      upstream.reply({ kind: "sse", chunks: [start({ input_tokens: -7, cache_read_input_tokens: 1e300, output_tokens: 1, service_tier: "standard" }), ...text, delta("end_turn", { output_tokens: 6 }), anthropicEvent("message_stop", {})] });
      const first = JSON.parse((await frames()).find((f) => f.event === "message_start")!.data);
      expect(first.message.usage.cache_read_input_tokens).toBeUndefined();
      expect(Number.isInteger(first.message.usage.input_tokens) && first.message.usage.input_tokens > 0).toBe(true);
      expect(first.message.usage).toMatchObject({ output_tokens: 1, service_tier: "standard" });
    });
  });

  test("a whole answer in the client's own format with a refused count is written anew with the billed counts, not relayed", async () => {
    upstream.reply({ kind: "json", body: { id: "msg_x", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [{ type: "text", text: "hi" }], stop_reason: "end_turn", stop_sequence: null,
      usage: { input_tokens: 7, output_tokens: 3, cache_read_input_tokens: -40 } } });
    const anthropic = (await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: ask })).json()) as { usage: Record<string, unknown>; content: unknown[] };
    // A cache part that is not a count leaves the prompt's size unknown: the prompt billed, and shown, is the estimate.
    await gw.app.services.settled();
    const billed = gw.db.query<{ prompt_tokens: number; estimated: number }, []>("SELECT prompt_tokens, estimated FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
    expect(billed.estimated).toBe(1);
    expect(anthropic.usage).toEqual({ input_tokens: billed.prompt_tokens, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 }, output_tokens: 3, service_tier: "standard" });
    expect(anthropic.content).toEqual([{ type: "text", text: "hi" }]);
    upstream.reply({ kind: "json", body: { id: "chatcmpl-Odd", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }],
      usage: { prompt_tokens: 20, completion_tokens: 3, total_tokens: 23, prompt_tokens_details: { cached_tokens: -5 } } } });
    const openai = (await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: ask })).json()) as { usage: { prompt_tokens: number; completion_tokens: number; prompt_tokens_details?: { cached_tokens?: number } } };
    expect(openai.usage).toMatchObject({ prompt_tokens: 20, completion_tokens: 3 });
    expect(openai.usage.prompt_tokens_details?.cached_tokens ?? 0).toBe(0);
  });
});

describe("text frames read on the answer's template (translated streams)", () => {
  /** OpenAI's chunk as its API writes it, `usage: null` and the `obfuscation` padding included, with `delta` as raw JSON. */
  const padded = (delta: string, obfuscation: string, finish = "null") =>
    `data: {"id":"chatcmpl-Tpl","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","service_tier":"default","system_fingerprint":"fp_1","choices":[{"index":0,"delta":${delta},"logprobs":null,"finish_reason":${finish}}],"usage":null,"obfuscation":"${obfuscation}"}\n\n`;
  const texts = ["Hello", ' "quoted"', " back\\slash", " line\nbreak", " é 中文 🚂", "}],\"usage\":{\"prompt_tokens\":1}", '","obfuscation":"'];
  const anthropicText = async () => {
    const frames = sseFrames(await (await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 50, messages: ask, stream: true })).text());
    const data = frames.map((f) => ({ event: f.event, data: JSON.parse(f.data) }));
    return { events: data.map((d) => d.event), text: data.filter((d) => d.data.type === "content_block_delta").map((d) => d.data.delta.text).join("") };
  };

  test("an Anthropic client on an OpenAI model gets every text exactly, whatever its escapes and padding", async () => {
    upstream.reply({ kind: "sse", chunks: [
      padded('{"role":"assistant","content":"","refusal":null}', "a"),
      ...texts.map((t, i) => padded(`{"content":${JSON.stringify(t)}}`, "x".repeat(1 + i))),
      // The same text as another vendor might escape it: read as JSON reads it.
      padded('{"content":" \\u00e9\\/"}', "yz"),
      padded("{}", "b", '"stop"'),
      usage({ prompt_tokens: 5, completion_tokens: 9, total_tokens: 14 }),
      "data: [DONE]\n\n",
    ] });
    const { events, text } = await anthropicText();
    expect(events).not.toContain("error");
    expect(text).toBe(texts.join("") + " é/");
  });

  test("a frame that fits the template's ends but is not JSON fails the answer, as it did when every frame was parsed", async () => {
    upstream.reply({ kind: "sse", chunks: [
      padded('{"content":"Hi"}', "a"),
      padded('{"content":" there"}', "bc"),
      padded('{"content":"a"b"}', "d"),
      padded("{}", "e", '"stop"'),
      "data: [DONE]\n\n",
    ] });
    const { events, text } = await anthropicText();
    expect(events).toContain("error");
    expect(text).toBe("Hi there");
  });

  test("a first text whose key is written twice teaches nothing: later frames mean what JSON says, the key's last value", async () => {
    upstream.reply({ kind: "sse", chunks: [
      padded('{"content":"Hi","content" :"Hi"}', "a"),
      padded('{"content":"EVIL","content" :"Hi"}', "bc"),
      padded("{}", "e", '"stop"'),
      usage({ prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 }),
      "data: [DONE]\n\n",
    ] });
    const { events, text } = await anthropicText();
    expect(events).not.toContain("error");
    expect(text).toBe("HiHi");
  });
});

describe("an upstream that sends far more than the answer's limit", () => {
  /** 40 frames of 16,000 characters each (640,000), against max_tokens 50: at most 50 × 256 + 65,536 may go out. */
  const flood = (format: "openai" | "anthropic") => {
    const piece = "lorem ipsum ".repeat(1_333).slice(0, 16_000);
    if (format === "openai") {
      return [chunk({ role: "assistant", content: "" }), ...Array.from({ length: 40 }, () => chunk({ content: piece })), chunk({}, "stop"), usage({ prompt_tokens: 5, completion_tokens: 50 }), "data: [DONE]\n\n"];
    }
    return [
      anthropicEvent("message_start", { message: { id: "msg_flood", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } } }),
      anthropicEvent("content_block_start", { index: 0, content_block: { type: "text", text: "" } }),
      ...Array.from({ length: 40 }, () => anthropicEvent("content_block_delta", { index: 0, delta: { type: "text_delta", text: piece } })),
      anthropicEvent("content_block_stop", { index: 0 }),
      anthropicEvent("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 50 } }),
      anthropicEvent("message_stop", {}),
    ];
  };

  test("the stream is cut with an error once past 256 characters a token (plus 64 KiB), on every path; it is charged at most the limit", async () => {
    const limit = 50 * 256 + 65_536;
    const cases = [
      { model: OPENAI_MODEL, path: "/v1/chat/completions", vendor: "openai" as const, body: { messages: ask, max_tokens: 50 } },
      { model: ANTHROPIC_MODEL, path: "/v1/chat/completions", vendor: "anthropic" as const, body: { messages: ask, max_tokens: 50 } },
      { model: ANTHROPIC_MODEL, path: "/v1/messages", vendor: "anthropic" as const, body: { messages: ask, max_tokens: 50 } },
      { model: OPENAI_MODEL, path: "/v1/responses", vendor: "openai" as const, body: { input: "x", max_output_tokens: 50, store: false } },
    ];
    for (const c of cases) {
      upstream.reply({ kind: "sse", chunks: flood(c.vendor) });
      const before = await gw.balanceMicro();
      const res = await post(gw, c.path, { model: c.model, stream: true, ...c.body });
      expect(res.status).toBe(200);
      const text = await res.text();
      const frames = sseFrames(text);
      // Cut: far less than the 640,000 characters sent, yet more than nothing; then an error, never a success.
      // (The Responses API repeats the text in its closing events: up to five copies of what was cut.)
      expect([c.path, text.length < 6 * limit]).toEqual([c.path, true]);
      expect(text).toContain("far more than the answer's token limit");
      expect(frames.some((f) => f.data === "[DONE]" || f.event === "message_stop" || f.event === "response.completed")).toBe(false);
      await gw.app.services.settled();
      const charged = before - (await gw.balanceMicro());
      // At most the limit's 50 output tokens (plus the prompt), at the model's prices.
      const db = new Database(gw.dbPath, { readonly: true });
      try {
        const row = db.query<{ completion_tokens: number; status: string }, []>("SELECT completion_tokens, status FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
        expect([c.path, row.completion_tokens <= 50, row.status]).toEqual([c.path, true, "stream_failed"]);
      } finally {
        db.close();
      }
      expect(charged).toBeGreaterThan(0);
    }
  });

  test("small frames relayed as they came (the client's own format) are cut by their text too (a raw-TCP probe: 67 MB went to a client of max_tokens 50)", async () => {
    const limit = 50 * 256 + 65_536;
    const piece = "abcdefgh".repeat(8);
    const many = 4_000;
    const cases = [
      { model: OPENAI_MODEL, path: "/v1/chat/completions", chunks: [chunk({ role: "assistant", content: "" }), ...Array.from({ length: many }, () => chunk({ content: piece })), chunk({}, "stop"), usage({ prompt_tokens: 5, completion_tokens: 50 }), "data: [DONE]\n\n"] },
      { model: ANTHROPIC_MODEL, path: "/v1/messages", chunks: [
        anthropicEvent("message_start", { message: { id: "msg_small", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } } }),
        anthropicEvent("content_block_start", { index: 0, content_block: { type: "text", text: "" } }),
        ...Array.from({ length: many }, () => anthropicEvent("content_block_delta", { index: 0, delta: { type: "text_delta", text: piece } })),
        anthropicEvent("content_block_stop", { index: 0 }),
        anthropicEvent("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 50 } }),
        anthropicEvent("message_stop", {}),
      ] },
    ];
    for (const c of cases) {
      // Each frame is small enough to escape the frame bounds (256 characters or fewer).
      expect(c.chunks[3]!.length).toBeLessThanOrEqual(256 + 40);
      upstream.reply({ kind: "sse", chunks: [c.chunks.slice(0, 500).join(""), ...c.chunks.slice(500)] });
      const text = await (await post(gw, c.path, { model: c.model, stream: true, messages: ask, max_tokens: 50 })).text();
      expect([c.path, text.includes("far more than the answer's token limit")]).toEqual([c.path, true]);
      // The text that went out is about the bound, not the 256,000 characters sent.
      const sent = sseFrames(text).filter((f) => f.data.includes(piece)).length * piece.length;
      expect([c.path, sent > limit / 2 && sent < limit + 2 * piece.length]).toEqual([c.path, true]);
    }
  });

  /** A chunk as OpenAI writes it today: ~330 characters for one token, most of it not text. */
  const realChunk = (text: string, logprobs?: unknown, role?: string) =>
    `data: ${JSON.stringify({ id: "chatcmpl-CEt0lDxIQRdnHGTrPCAc0VVj0I8Yq", object: "chat.completion.chunk", created: 1757926327, model: "gpt-4o-mini-2024-07-18", service_tier: "default", system_fingerprint: "fp_560af6e559", choices: [{ index: 0, delta: role ? { role, content: text, refusal: null } : { content: text }, logprobs: logprobs ?? null, finish_reason: null }], usage: null, obfuscation: "Xq3tr" })}\n\n`;
  /** The first chunk: the relay learns the vendor's head from it, and then passes text chunks on as they came (skim). */
  const opening = realChunk("", undefined, "assistant");
  const ending = [`data: ${JSON.stringify({ id: "chatcmpl-x", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, delta: {}, finish_reason: "length" }], usage: null })}\n\n`, usage({ prompt_tokens: 5, completion_tokens: 2_000 }), "data: [DONE]\n\n"];

  test("ordinary answers as long as their limit are relayed whole: OpenAI's own chunks, and chunks with 20 top_logprobs", async () => {
    upstream.reply({ kind: "sse", chunks: [opening, ...Array.from({ length: 2_000 }, (_, i) => realChunk(` w${i}`)), ...ending] });
    const plain = sseFrames(await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, stream: true, messages: ask, max_tokens: 2_000 })).text());
    expect(plain.at(-1)!.data).toBe("[DONE]");
    expect(plain.some((f) => f.data.includes("token limit"))).toBe(false);

    const top = Array.from({ length: 20 }, (_, k) => ({ token: ` alternative${k}`, logprob: -1.2345678 * k, bytes: [32, 97, 108, 116, 101, 114, 110, 97, 116, 105, 118, 101] }));
    const logprobs = (i: number) => ({ content: [{ token: ` w${i}`, logprob: -0.0012, bytes: [32, 119], top_logprobs: top }], refusal: null });
    expect(realChunk(" w1", logprobs(1)).length).toBeGreaterThan(2_400);
    upstream.reply({ kind: "sse", chunks: [opening, ...Array.from({ length: 600 }, (_, i) => realChunk(` w${i}`, logprobs(i))), ...ending] });
    const withLogprobs = sseFrames(await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, stream: true, messages: ask, max_tokens: 600, logprobs: true, top_logprobs: 20 })).text());
    expect(withLogprobs.at(-1)!.data).toBe("[DONE]");
    expect(withLogprobs.filter((f) => f.data.includes("top_logprobs")).length).toBe(600);
  });

  test("many frames padded under the per-frame allowance are cut by their number", async () => {
    // 3,000 frames of ~6 KB (padding in a field the client ignores) against max_tokens 50: past 50 × 4 + 1,024 frames.
    const padded = (i: number) => `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "m", pad: "p".repeat(6_000), choices: [{ index: 0, delta: { content: `w${i} ` }, finish_reason: null }] })}\n\n`;
    upstream.reply({ kind: "sse", chunks: [chunk({ role: "assistant", content: "" }), ...Array.from({ length: 3_000 }, (_, i) => padded(i)), chunk({}, "stop"), "data: [DONE]\n\n"] });
    const text = await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, stream: true, messages: ask, max_tokens: 50 })).text();
    expect(text).toContain("far more than the answer's token limit");
    expect(text.length).toBeLessThan(1_300 * 6_200);
  });

  test("an answer within the bound is relayed whole", async () => {
    // 20 frames of 1,000 characters against max_tokens 50: 20,000 characters, under 50 × 256 + 65,536.
    upstream.reply({ kind: "sse", chunks: [chunk({ role: "assistant", content: "" }), ...Array.from({ length: 20 }, () => chunk({ content: "a".repeat(1_000) })), chunk({}, "stop"), "data: [DONE]\n\n"] });
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, stream: true, messages: ask, max_tokens: 50 });
    const frames = sseFrames(await res.text());
    expect(frames.at(-1)!.data).toBe("[DONE]");
    const content = frames.filter((f) => f.data.startsWith("{")).map((f) => JSON.parse(f.data).choices?.[0]?.delta?.content ?? "").join("");
    expect(content.length).toBe(20_000);
  });
});

test("a stream whose only choice is numbered other than 0 is read as its answer, as the same body unstreamed is", async () => {
  const indexed = (delta: Record<string, unknown>, finish: string | null = null) =>
    `data: ${JSON.stringify({ id: "chatcmpl-Idx", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", choices: [{ index: 7, delta, logprobs: null, finish_reason: finish }] })}\n\n`;
  const chunks = [indexed({ role: "assistant", content: "" }), indexed({ content: "seven" }), indexed({}, "stop"), usage({ prompt_tokens: 3, completion_tokens: 1 }), "data: [DONE]\n\n"];
  upstream.reply({ kind: "sse", chunks });
  const chat = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: ask, stream: true });
  expect(chat.status).toBe(200);
  const frames = sseFrames(await chat.text());
  expect(frames.at(-1)!.data).toBe("[DONE]");
  upstream.reply({ kind: "sse", chunks });
  const messages = await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 10, messages: ask, stream: true });
  expect(messages.status).toBe(200);
  const events = sseFrames(await messages.text());
  const text = events.filter((f) => f.event === "content_block_delta").map((f) => JSON.parse(f.data).delta.text).join("");
  expect(text).toBe("seven");
  expect(events.at(-1)!.event).toBe("message_stop");
});

describe("an upstream that reports a prompt longer than the request could make", () => {
  /** The last record's prompt tokens and charge. */
  const lastRecord = async () => {
    await gw.app.services.settled();
    const db = new Database(gw.dbPath, { readonly: true });
    try {
      return db.query<{ prompt_tokens: number; cost_micro: number; status: string }, []>("SELECT prompt_tokens, cost_micro, status FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
    } finally {
      db.close();
    }
  };
  /** The most prompt tokens a body of `bytes` with `messages` messages is billed: a token a byte, 8 a message and 8 more, and 1,024 the vendor may add. */
  const bound = (body: unknown, messages: number) => Buffer.byteLength(JSON.stringify(body)) + 8 * messages + 8 + 1024;

  test("99,999,999 prompt tokens or 99,999,000 cached for \"hi\" are billed as the bound, not up to the hold; within the bound a count is billed as reported", async () => {
    const openai = { model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 1000 };
    upstream.reply({ kind: "json", body: { id: "chatcmpl-big", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "Hi" }, finish_reason: "stop" }], usage: { prompt_tokens: 99_999_999, completion_tokens: 5, total_tokens: 100_000_004 } } });
    expect((await post(gw, "/v1/chat/completions", openai)).status).toBe(200);
    const inflated = await lastRecord();
    expect(inflated.prompt_tokens).toBeLessThanOrEqual(bound(openai, 1));
    // The same count in a stream's usage chunk.
    upstream.reply({ kind: "sse", chunks: [chunk({ role: "assistant", content: "Hi" }), chunk({}, "stop"), usage({ prompt_tokens: 99_999_999, completion_tokens: 5 }), "data: [DONE]\n\n"] });
    const streamed = { ...openai, stream: true, stream_options: { include_usage: true } };
    await (await post(gw, "/v1/chat/completions", streamed)).text();
    expect((await lastRecord()).prompt_tokens).toBeLessThanOrEqual(bound(streamed, 1));
    // An honest count a little above the body's bytes (a vendor's framing, tools' system prompt) stays as it came.
    upstream.reply({ kind: "json", body: { id: "chatcmpl-ok", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "Hi" }, finish_reason: "stop" }], usage: { prompt_tokens: 400, completion_tokens: 5, total_tokens: 405 } } });
    expect((await post(gw, "/v1/chat/completions", openai)).status).toBe(200);
    const honest = await lastRecord();
    expect(honest.prompt_tokens).toBe(400);
    // The inflated one cost no more than a prompt of the bound would, far from the 1,000-token answer's share of the hold.
    expect(inflated.cost_micro).toBeLessThan(honest.cost_micro * (bound(openai, 1) / 400) + 1);

    const anthropic = { model: ANTHROPIC_MODEL, max_tokens: 1000, messages: [{ role: "user", content: "hi" }] };
    upstream.reply({ kind: "json", body: { id: "msg_big", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [{ type: "text", text: "Hi" }], stop_reason: "end_turn", stop_sequence: null, usage: { input_tokens: 10, output_tokens: 5, cache_read_input_tokens: 99_999_000 } } });
    expect((await post(gw, "/v1/messages", anthropic)).status).toBe(200);
    const cached = await lastRecord();
    expect(cached.prompt_tokens).toBeLessThanOrEqual(bound(anthropic, 1));
    // At most the bound's tokens at the input price and the 5 answered at the output price (the
    // test model's 3,000 and 15,000 credits a million): the hold, which 99,999,010 tokens would take, is 15.5 million.
    expect(cached.cost_micro).toBeLessThanOrEqual(bound(anthropic, 1) * 3000 + 5 * 15_000);
  });
});

describe("prompts a vendor legitimately makes longer than the request's bytes are billed as reported", () => {
  const record = async () => {
    await gw.app.services.settled();
    const db = new Database(gw.dbPath, { readonly: true });
    try {
      return db.query<{ prompt_tokens: number }, []>("SELECT prompt_tokens FROM usage_records ORDER BY id DESC LIMIT 1").get()!.prompt_tokens;
    } finally {
      db.close();
    }
  };

  test("Anthropic's own tools (bash, text editor, computer) add their schemas and system prompt: 3,900 tokens for a 300-byte request", async () => {
    upstream.reply({ kind: "json", body: { id: "msg_tools", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [{ type: "text", text: "ok" }], stop_reason: "end_turn", stop_sequence: null, usage: { input_tokens: 3_900, output_tokens: 2 } } });
    const res = await post(gw, "/v1/messages", {
      model: ANTHROPIC_MODEL, max_tokens: 2, messages: [{ role: "user", content: "hi" }],
      tools: [{ type: "bash_20250124", name: "bash" }, { type: "text_editor_20250728", name: "str_replace_based_edit_tool" }, { type: "computer_20250124", name: "computer", display_width_px: 1024, display_height_px: 768 }],
    });
    expect(res.status).toBe(200);
    expect(await record()).toBe(3_900);
    // And charged for them: the hold covered what the vendor adds, so the charge is the bill, not the hold.
    await gw.app.services.settled();
    const db = new Database(gw.dbPath, { readonly: true });
    try {
      expect(db.query<{ cost_micro: number }, []>("SELECT cost_micro FROM usage_records ORDER BY id DESC LIMIT 1").get()!.cost_micro).toBe(3_900 * 3_000 + 2 * 15_000);
    } finally {
      db.close();
    }
  });

  test("a Responses request whose translation is larger than it (custom tools gain a description and a schema) is bounded by what is sent", async () => {
    const tools = Array.from({ length: 128 }, (_, i) => ({ type: "custom", name: `t${i}` }));
    upstream.reply({ kind: "json", body: { id: "chatcmpl-custom", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }], usage: { prompt_tokens: 9_000, completion_tokens: 1, total_tokens: 9_001 } } });
    const body = { model: OPENAI_MODEL, input: "hi", tools, store: false, max_output_tokens: 16 };
    expect(Buffer.byteLength(JSON.stringify(body)) + 1024 + 16).toBeLessThan(9_000);
    const res = await post(gw, "/v1/responses", body);
    expect(res.status).toBe(200);
    expect(await record()).toBe(9_000);
  });
});

describe("an upstream's JSON nested far deeper than any answer", () => {
  /** An answer with a field of the vendor's own nesting `depth` arrays (two characters a level). */
  const deep = (depth: number) => "[".repeat(depth) + "]".repeat(depth);
  const openaiAnswer = (depth: number) =>
    `{"id":"chatcmpl-deep","object":"chat.completion","created":1,"model":"gpt-4o-mini","x":${deep(depth)},"choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`;

  test("a whole answer 30,000 or 45,000 levels deep is a free 502, answered at once; 200 levels still passes", async () => {
    for (const depth of [30_000, 45_000]) {
      upstream.reply({ kind: "text", headers: { "content-type": "application/json" }, body: openaiAnswer(depth) });
      const before = await gw.balanceMicro();
      const started = performance.now();
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: ask });
      // JSON.stringify of 30,000 levels alone takes a second, and throws past ~40,000 (a paid 500).
      expect([depth, res.status]).toEqual([depth, 502]);
      expect(performance.now() - started).toBeLessThan(500);
      expect(((await res.json()) as any).error.type).toBe("upstream_error");
      await gw.app.services.settled();
      expect(await gw.balanceMicro()).toBe(before);
    }
    upstream.reply({ kind: "text", headers: { "content-type": "application/json" }, body: openaiAnswer(200) });
    const ok = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: ask });
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as any).choices[0].message.content).toBe("Hi");
  });

  test("a stream frame nested that deep ends the answer as a failure, never relayed or re-written", async () => {
    const deepFrame = `data: {"id":"chatcmpl-Odd","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","x":${deep(30_000)},"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":null}]}\n\n`;
    upstream.reply({ kind: "sse", chunks: [chunk({ role: "assistant", content: "a" }), deepFrame, chunk({}, "stop"), usage({ prompt_tokens: 3, completion_tokens: 2 }), "data: [DONE]\n\n"], delayMs: 20 });
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: ask, stream: true });
    const text = await res.text();
    expect(text).not.toContain("[[[[");
    expect(text).not.toContain("data: [DONE]");
    expect(text).toContain("malformed");
    const anthropicDeep = anthropicEvent("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: -5 } }).replace('"type":"message_delta"', `"type":"message_delta","x":${deep(30_000)}`);
    upstream.reply({ kind: "sse", delayMs: 20, chunks: [
      anthropicEvent("message_start", { message: { id: "msg_deep", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } } }),
      anthropicEvent("content_block_start", { index: 0, content_block: { type: "text", text: "" } }),
      anthropicEvent("content_block_delta", { index: 0, delta: { type: "text_delta", text: "Hello" } }),
      anthropicEvent("content_block_stop", { index: 0 }),
      anthropicDeep,
      anthropicEvent("message_stop", {}),
    ] });
    const frames = sseFrames(await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: ask, stream: true })).text());
    // An error event ends it, as any failure mid-stream does; no message_stop, nothing deep.
    expect(frames.at(-1)!.event).toBe("error");
    expect(frames.some((f) => f.event === "message_stop" || f.data.includes("[[[["))).toBe(false);
  });
});

describe("counts and images that are not what they say", () => {
  test("count_tokens: a vendor count that is negative, fractional, absurd or past the request's bytes is not passed on; the gateway's estimate answers", async () => {
    const body = { model: ANTHROPIC_MODEL, messages: [{ role: "user", content: "hello there" }] };
    const count = async () => ((await (await post(gw, "/v1/messages/count_tokens", body)).json()) as { input_tokens: number }).input_tokens;
    upstream.reply({ kind: "json", body: { input_tokens: 9 } });
    expect(await count()).toBe(9);
    const estimates: number[] = [];
    for (const input_tokens of [-5, 12.7, 1e308, "12", 5_000]) {
      upstream.reply({ kind: "json", body: { input_tokens } });
      estimates.push(await count());
    }
    // The same estimate each time: a whole count of the prompt, never the vendor's number.
    expect(new Set(estimates).size).toBe(1);
    expect(Number.isInteger(estimates[0]) && estimates[0]! > 0 && estimates[0]! < 100).toBe(true);
  });

  test("an image whose base64 carries text after a valid start is refused (502, free), not wrapped into markdown beside the image", async () => {
    const before = await gw.balanceMicro();
    upstream.reply({ kind: "json", body: { created: 1, data: [{ b64_json: "iVBORw0KGgoAAAANSUhEUgAA)![x](https://tracker.example/p.gif)" }] } });
    const res = await post(gw, "/v1/chat/completions", { model: IMAGES_API_MODEL, messages: ask });
    expect(res.status).toBe(502);
    expect(await res.text()).not.toContain("tracker.example");
    await gw.app.services.settled();
    expect(await gw.balanceMicro()).toBe(before);
    // Without its padding (some encoders leave it off) it is still base64, and goes out.
    upstream.reply({ kind: "json", body: { created: 1, data: [{ b64_json: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg" }] } });
    expect((await post(gw, "/v1/chat/completions", { model: IMAGES_API_MODEL, messages: ask })).status).toBe(200);
    // A whole PNG in base64 still goes out.
    upstream.reply({ kind: "json", body: { created: 1, data: [{ b64_json: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==" }] } });
    const ok = await post(gw, "/v1/chat/completions", { model: IMAGES_API_MODEL, messages: ask });
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as any).choices[0].message.content).toStartWith("![image](data:image/png;base64,iVBOR");
  });
});

test("a whole answer far larger than its request could be given (a 4 MiB gzip bomb against max_tokens 50) is a free 502, cut where it passes the bound; a large answer a request asked for is relayed (a raw-TCP probe: 60 MiB went out with a 200)", async () => {
  const answer = (content: string) => JSON.stringify({ id: "chatcmpl-big", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }], usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } });
  const bomb = Bun.gzipSync(answer("a".repeat(4 * 1024 * 1024)));
  expect(bomb.byteLength).toBeLessThan(64 * 1024);
  const before = await gw.balanceMicro();
  upstream.reply({ kind: "bytes", headers: { "content-type": "application/json", "content-encoding": "gzip" }, body: bomb });
  const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: ask, max_tokens: 50 });
  expect(res.status).toBe(502);
  expect(((await res.json()) as any).error.message).toContain("larger than the gateway accepts");
  expect(await gw.balanceMicro()).toBe(before);
  // With logprobs the answer's size is the vendor's (indented, 20 alternatives a token): not bounded so (a review).
  upstream.reply({ kind: "bytes", headers: { "content-type": "application/json", "content-encoding": "gzip" }, body: bomb });
  expect((await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: ask, max_tokens: 50, logprobs: true, top_logprobs: 20 })).status).toBe(200);
  // The same bytes for a request whose limit allows them (4,096 tokens × 2 KiB each): read and relayed.
  upstream.reply({ kind: "bytes", headers: { "content-type": "application/json", "content-encoding": "gzip" }, body: bomb });
  const big = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: ask, max_tokens: 4096 });
  expect(big.status).toBe(200);
  expect(((await big.json()) as any).choices[0].message.content).toHaveLength(4 * 1024 * 1024);
});

describe("an Anthropic frame whose `event:` line and data type disagree (a raw-TCP probe, thirty-second session)", () => {
  // The decoder reads the data's type; an SDK dispatches on the event name. Relayed under its own
  // name, a text delta sent as `event: ping` was counted and shown to chat clients, skipped by the SDK.
  const named = (name: string, data: Record<string, unknown>) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
  test("the relay names it by its data, so an Anthropic client reads what a chat client reads and what was counted", async () => {
    const reply = () => upstream.reply({ kind: "sse", chunks: [
      anthropicEvent("message_start", { message: { id: "msg_odd", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } } }),
      anthropicEvent("content_block_start", { index: 0, content_block: { type: "text", text: "" } }),
      anthropicEvent("content_block_delta", { index: 0, delta: { type: "text_delta", text: "one " } }),
      named("ping", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "two " } }),
      named("message_stop", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "three" } }),
      anthropicEvent("content_block_stop", { index: 0 }),
      anthropicEvent("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 3 } }),
      anthropicEvent("message_stop", {}),
    ] });
    reply();
    const messages = await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, stream: true, messages: ask }, { "anthropic-version": "2023-06-01" })).text();
    const deltas = sseFrames(messages).filter((f) => f.event === "content_block_delta").map((f) => JSON.parse(f.data).delta.text);
    expect(deltas.join("")).toBe("one two three");
    // Every frame's name is its data's type.
    for (const f of sseFrames(messages)) expect(JSON.parse(f.data).type).toBe(f.event!);
    reply();
    const chat = await (await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, max_tokens: 50, stream: true, messages: ask })).text();
    const text = sseFrames(chat).filter((f) => f.data !== "[DONE]").map((f) => JSON.parse(f.data).choices?.[0]?.delta?.content ?? "").join("");
    expect(text).toBe("one two three");
  });
});
