/**
 * What a vendor may send that is valid but unusual, or out of order, as the same-format relays
 * and the decoders meet it: data in several `data:` lines, frames without their `event:` line, a
 * media type in capitals, Anthropic events out of their order, cache counts that add up past
 * belief, a repeated Retry-After, and an answer cut off after its head.
 */
import { afterEach, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, sseFrames, startGateway, useGateway, type Gateway } from "../helpers/gateway.ts";
import { rawUpstream, type RawSocket, type RawUpstream } from "../helpers/raw-upstream.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, retry: { max_retries: 0 } }));
const question = [{ role: "user" as const, content: "Hello" }];

const chunk = (body: object) => `data: ${JSON.stringify({ id: "chatcmpl-up", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", ...body })}\n\n`;
const ev = (type: string, data: object, named = true) => `${named ? `event: ${type}\n` : ""}data: ${JSON.stringify({ type, ...data })}\n\n`;
const anthropicAnswer = (text: string, named = true) => [
  ev("message_start", { message: { id: "msg_up", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 12, output_tokens: 1 } } }, named),
  ev("content_block_start", { index: 0, content_block: { type: "text", text: "" } }, named),
  ev("content_block_delta", { index: 0, delta: { type: "text_delta", text } }, named),
  ev("content_block_stop", { index: 0 }, named),
  ev("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 5 } }, named),
  ev("message_stop", {}, named),
];
/** A frame's JSON split over two `data:` lines before `key` (valid SSE: the lines join with "\n"). */
const splitBefore = (frame: string, key: string) => frame.replace(`,"${key}"`, `\ndata: ,"${key}"`);

const lastRecord = () => {
  return gw.db.query<{ status: string; prompt_tokens: number; completion_tokens: number; cost_micro: number }, []>(
    "SELECT status, prompt_tokens, completion_tokens, cost_micro FROM usage_records ORDER BY id DESC LIMIT 1",
  ).get()!;
};

describe("data in several lines, relayed", () => {
  test("OpenAI: every line the client gets is a field, and the SDK reads the text", async () => {
    const frames = () => [
      splitBefore(chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "Hello" }, finish_reason: null }] }), "choices"),
      splitBefore(chunk({ choices: [{ index: 0, delta: { content: " there" }, finish_reason: null }] }), "finish_reason"),
      splitBefore(chunk({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }), "finish_reason"),
      "data: [DONE]\n\n",
    ];
    upstream.reply({ kind: "sse", chunks: frames() });
    const text = await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true })).text();
    for (const line of text.split("\n")) expect(line === "" || line.startsWith("data: ") || line.startsWith(":")).toBe(true);
    upstream.reply({ kind: "sse", chunks: frames() });
    const sdk = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
    const completion = await sdk.chat.completions.stream({ model: OPENAI_MODEL, messages: question }).finalChatCompletion();
    expect(completion.choices[0]!.message.content).toBe("Hello there");
  });

  test("Anthropic: the SDK reads the message, text deltas in several lines included", async () => {
    upstream.reply({ kind: "sse", chunks: anthropicAnswer("Hi there").map((f) => splitBefore(splitBefore(f, "index"), "delta")) });
    const sdk = new Anthropic({ baseURL: gw.url, apiKey: gw.key, maxRetries: 0 });
    const message = await sdk.messages.stream({ model: ANTHROPIC_MODEL, max_tokens: 50, messages: question }).finalMessage();
    expect(message.content.map((b) => (b.type === "text" ? b.text : b.type))).toEqual(["Hi there"]);
    expect(message.id).toMatch(/^msg_/);
    expect(message.id).not.toBe("msg_up");
  });
});

describe("Anthropic frames without their event line", () => {
  test("are named by their type: the SDK reads the message, with the gateway's id and model", async () => {
    upstream.reply({ kind: "sse", chunks: anthropicAnswer("Named by type", false) });
    const sdk = new Anthropic({ baseURL: gw.url, apiKey: gw.key, maxRetries: 0 });
    const message = await sdk.messages.stream({ model: ANTHROPIC_MODEL, max_tokens: 50, messages: question }).finalMessage();
    expect(message.content.map((b) => (b.type === "text" ? b.text : b.type))).toEqual(["Named by type"]);
    expect(message.id).not.toBe("msg_up");
    expect(message.model).toBe(ANTHROPIC_MODEL);
    expect(message.stop_reason).toBe("end_turn");
  });
});

test("an event stream's media type in capitals is an event stream (media types are case-insensitive)", async () => {
  upstream.reply({ kind: "sse", headers: { "content-type": "Text/Event-Stream; charset=UTF-8" }, chunks: [
    chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "Fine" }, finish_reason: null }] }),
    chunk({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }),
    "data: [DONE]\n\n",
  ] });
  const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true });
  expect(res.status).toBe(200);
  const frames = sseFrames(await res.text());
  expect(frames.some((f) => f.data.includes('"content":"Fine"'))).toBe(true);
});

describe("Anthropic events out of their order fail the answer as malformed", () => {
  test("a second message_start: the answer fails, and the prompt billed is the first one's", async () => {
    const [start, blockStart, delta, ...rest] = anthropicAnswer("Some text that went out");
    const second = ev("message_start", { message: { id: "msg_2", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 900000, output_tokens: 1 } } });
    upstream.reply({ kind: "sse", chunks: [start!, blockStart!, delta!, second, ...rest] });
    const frames = sseFrames(await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: question, stream: true })).text());
    expect(frames.filter((f) => f.event === "message_start")).toHaveLength(1);
    expect(frames.at(-1)!.event).toBe("error");
    expect(JSON.parse(frames.at(-1)!.data).error.message).toMatch(/malformed/);
    await gw.app.services.settled();
    expect(lastRecord()).toMatchObject({ status: "stream_failed", prompt_tokens: 12 });
  });

  test("a text delta before its block started: the client never gets it as sent; the answer fails", async () => {
    const [start, blockStart, delta, ...rest] = anthropicAnswer("Went out");
    // The first block's text went out; a delta of a second block comes before that block started.
    const early = ev("content_block_delta", { index: 1, delta: { type: "text_delta", text: "Too early" } });
    upstream.reply({ kind: "sse", chunks: [start! + blockStart! + delta!, early, ...rest] });
    const frames = sseFrames(await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: question, stream: true })).text());
    expect(frames.map((f) => f.event)).toEqual(["message_start", "content_block_start", "content_block_delta", "error"]);
    expect(frames.some((f) => f.data.includes("Too early"))).toBe(false);
    await gw.app.services.settled();
    expect(lastRecord().status).toBe("stream_failed");
  });

  test("the same delta in a read of its own, before any of the answer went out: a 502 that costs nothing, not a 200 with an error frame", async () => {
    const [start, blockStart, delta, ...rest] = anthropicAnswer("Too early");
    upstream.reply({ kind: "sse", chunks: [start!, delta!, blockStart!, ...rest] });
    const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: question, stream: true });
    expect(res.status).toBe(502);
    expect(await res.json()).toMatchObject({ type: "error", error: { message: expect.stringMatching(/malformed/) } });
    await gw.app.services.settled();
    expect(lastRecord()).toMatchObject({ status: "upstream_error", cost_micro: 0 });
  });
});

describe("cache counts that add up past what the meter takes", () => {
  const usage = { input_tokens: 5, cache_read_input_tokens: 60_000_000, cache_creation_input_tokens: 60_000_000, output_tokens: 7 };
  test("are not shown beside the estimate that was billed, in either format", async () => {
    const body = { id: "msg_up", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [{ type: "text", text: "ok" }], stop_reason: "end_turn", stop_sequence: null, usage };
    upstream.reply({ kind: "json", body });
    const chat = (await (await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: question })).json()) as any;
    expect(chat.usage.prompt_tokens_details.cached_tokens).toBe(0);
    expect(chat.usage.prompt_tokens_details.cache_write_tokens).toBeUndefined();
    expect(chat.usage.prompt_tokens).toBeLessThan(1000);

    upstream.reply({ kind: "json", body });
    const message = (await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: question })).json()) as any;
    expect(message.usage.cache_read_input_tokens ?? 0).toBe(0);
    expect(message.usage.cache_creation_input_tokens ?? 0).toBe(0);

    const [, ...rest] = anthropicAnswer("ok");
    upstream.reply({ kind: "sse", chunks: [ev("message_start", { message: { id: "msg_up", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage } }), ...rest] });
    const frames = sseFrames(await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: question, stream: true })).text());
    const started = JSON.parse(frames.find((f) => f.event === "message_start")!.data).message.usage;
    expect(started.cache_read_input_tokens).toBeUndefined();
    expect(started.cache_creation_input_tokens).toBeUndefined();
    expect(started.input_tokens).toBeGreaterThan(0);
    expect(started.input_tokens).toBeLessThan(1000);
    await gw.app.services.settled();
    expect(lastRecord().prompt_tokens).toBeLessThan(1000);
  });

  test("an input count refused on its own takes the cache counts with it too, in a relayed message_start", async () => {
    const [, ...rest] = anthropicAnswer("ok");
    upstream.reply({ kind: "sse", chunks: [ev("message_start", { message: { id: "msg_up", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: -1, cache_read_input_tokens: 60000, output_tokens: 1 } } }), ...rest] });
    const frames = sseFrames(await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: question, stream: true })).text());
    const started = JSON.parse(frames.find((f) => f.event === "message_start")!.data).message.usage;
    expect(started.cache_read_input_tokens).toBeUndefined();
    expect(started.input_tokens).toBeGreaterThan(0);
  });
});

describe("an answer cut off after its head", () => {
  const raws: RawUpstream[] = [];
  afterEach(() => {
    for (const r of raws.splice(0)) r.stop();
  });
  /** A gateway in front of a raw upstream that answers each request with `answer`; stopped once `use` is done. */
  async function againstRaw(answer: (socket: RawSocket) => void, use: (g: Gateway) => Promise<void>): Promise<void> {
    const raw = rawUpstream((_req, socket) => answer(socket));
    raws.push(raw);
    const g = await startGateway({ upstreamUrl: raw.url, retry: { max_retries: 0 } });
    try {
      await use(g);
    } finally {
      await g.stop();
    }
  }
  /** One chunk of a chunked body (`pad`: leading zeros on its size). */
  const sized = (text: string, pad = "") => `${pad}${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n`;
  const SSE_HEAD = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

  test("is an unreadable answer from an upstream that was reached, not one that could not be reached", async () => {
    const answer = (socket: RawSocket) => {
      socket.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 300\r\n\r\n{"id":');
      socket.end();
    };
    await againstRaw(answer, async (g) => {
      const before = await g.balanceMicro();
      const res = await post(g, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
      expect(res.status).toBe(502);
      expect(((await res.json()) as any).error.message).toBe("The upstream provider sent an unreadable answer. Retrying is appropriate.");
      // A failure before any answer costs nothing.
      expect(await g.balanceMicro()).toBe(before);
    });
  });
  test("frames in the same read as the bytes that break the framing are the answer's: a whole stream whose last chunk is broken is answered and charged, not a free 502", async () => {
    const frames = [
      chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "Hello" }, finish_reason: null }] }),
      chunk({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }], usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 } }),
      "data: [DONE]\n\n",
    ];
    // One write: the head, every frame, then a chunk size that is not hex where the last chunk goes.
    await againstRaw((socket) => socket.write(`${SSE_HEAD}${frames.map((f) => sized(f)).join("")}zz\r\n`), async (g) => {
      const before = await g.balanceMicro();
      const res = await post(g, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true });
      // Without the fix: 502 "malformed data", nothing charged, the vendor's answer thrown away.
      expect(res.status).toBe(200);
      const got = sseFrames(await res.text());
      expect(got.some((f) => f.data.includes('"content":"Hello"'))).toBe(true);
      expect(got.at(-1)!.data).toBe("[DONE]");
      expect(before - (await g.balanceMicro())).toBeGreaterThan(0);
      const record = g.db.query<{ status: string; prompt_tokens: number; completion_tokens: number }, []>("SELECT status, prompt_tokens, completion_tokens FROM usage_records").get()!;
      expect(record).toEqual({ status: "ok", prompt_tokens: 9, completion_tokens: 2 });
    });
  });

  test("a break mid-stream: the frames of the read that broke go out before the error frame", async () => {
    const text = (t: string) => chunk({ choices: [{ index: 0, delta: { content: t }, finish_reason: null }] });
    const answer = (socket: RawSocket) => {
      socket.write(SSE_HEAD + sized(text("Hel")));
      // One later read: a whole frame, then a chunk size that is not hex.
      setTimeout(() => socket.write(`${sized(text("lo"))}zz\r\n`), 30);
    };
    await againstRaw(answer, async (g) => {
      const res = await post(g, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true });
      expect(res.status).toBe(200);
      const frames = sseFrames(await res.text());
      const contents = frames.slice(0, -1).map((f) => JSON.parse(f.data).choices?.[0]?.delta?.content).filter(Boolean);
      // Without the fix "lo" was dropped with the bytes after it.
      expect(contents.join("")).toBe("Hello");
      expect(JSON.parse(frames.at(-1)!.data).error.message).toContain("malformed data");
    });
  });

  test("broken chunk framing after the stream started is told as malformed data, not a lost connection; chunk sizes with leading zeros are read", async () => {
    const frame = chunk({ choices: [{ index: 0, delta: { content: "Hello" }, finish_reason: null }] });
    const answer = (socket: RawSocket) => {
      socket.write(SSE_HEAD + sized(frame, "0000000000"));
      setTimeout(() => socket.write("zz\r\nnot a chunk\r\n"), 30);
    };
    await againstRaw(answer, async (g) => {
      const res = await post(g, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true });
      expect(res.status).toBe(200);
      const frames = sseFrames(await res.text());
      expect(frames.some((f) => f.data.includes('"content":"Hello"'))).toBe(true);
      expect(JSON.parse(frames.at(-1)!.data).error.message).toContain("malformed data");
    });
  });
});

test("a whole JSON answer that starts with a byte-order mark is read, sized, chunked or split over reads, in both formats: answered and charged (it was a free 502 'unreadable answer'; a raw-TCP probe)", async () => {
  const completion = JSON.stringify({ id: "chatcmpl-bom", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "Marked" }, finish_reason: "stop" }], usage: { prompt_tokens: 9, completion_tokens: 1, total_tokens: 10 } });
  const message = JSON.stringify({ id: "msg_bom", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [{ type: "text", text: "Marked" }], stop_reason: "end_turn", stop_sequence: null, usage: { input_tokens: 9, output_tokens: 1 } });
  let framing: "sized" | "chunked" | "split" = "sized";
  const raw = rawUpstream((req, socket) => {
    const json = req.raw.startsWith("POST /v1/messages") ? message : completion;
    const body = "\uFEFF" + json;
    const bytes = Buffer.byteLength(body);
    if (framing === "split") {
      // The mark's first byte alone in the first chunk, in a read of its own; the rest later.
      const rest = Buffer.concat([Buffer.from([0xbb, 0xbf]), Buffer.from(json)]);
      socket.write(Buffer.concat([Buffer.from("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n1\r\n"), Buffer.from([0xef]), Buffer.from("\r\n")]));
      setTimeout(() => socket.write(Buffer.concat([Buffer.from(`${rest.length.toString(16)}\r\n`), rest, Buffer.from("\r\n0\r\n\r\n")])), 50);
      return;
    }
    socket.write(framing === "chunked"
      ? `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n${bytes.toString(16)}\r\n${body}\r\n0\r\n\r\n`
      : `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${bytes}\r\n\r\n${body}`);
  });
  const g = await startGateway({ upstreamUrl: raw.url, retry: { max_retries: 0 } });
  try {
    for (const way of ["sized", "chunked", "split"] as const) {
      framing = way;
      const before = await g.balanceMicro();
      const chat = await post(g, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
      expect(chat.status).toBe(200);
      expect(((await chat.json()) as any).choices[0].message.content).toBe("Marked");
      const messages = await post(g, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 20, messages: question }, { "anthropic-version": "2023-06-01" });
      expect(messages.status).toBe(200);
      expect(((await messages.json()) as any).content[0].text).toBe("Marked");
      await g.app.services.settled();
      expect(await g.balanceMicro()).toBeLessThan(before);
    }
  } finally {
    await g.stop();
    raw.stop();
  }
});

describe("a relayed text frame that is not JSON (a billing probe: never charged, its hold kept until a restart)", () => {
  const held = async () => (await gw.app.services.ledger.balance(gw.accountId))!.heldMicro;
  const settledRecord = async () => {
    await gw.app.services.settled();
    return lastRecord();
  };

  test("Anthropic to an Anthropic client: the stream fails where the frame comes, the client never gets it, what went out is charged, the hold lifts", async () => {
    const [start, blockStart, delta, stop, , end] = anthropicAnswer("one ");
    // The same delta with its outer brace missing: it starts and ends as a text delta does.
    const broken = delta!.replace("one ", "oops").replace(/}\n\n$/, "\n\n");
    expect(broken).toEndWith('"text":"oops"}\n\n');
    // Usage without counts: the answer's text must be counted (the frames were decoded only then).
    const noCounts = ev("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: {} });
    upstream.reply({ kind: "sse", chunks: [start!, blockStart!, delta!, delta!, broken, stop!, noCounts, end!], delayMs: 3 });
    const before = await gw.balanceMicro();
    const frames = sseFrames(await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: question, stream: true })).text());
    expect(frames.filter((f) => f.event === "content_block_delta")).toHaveLength(2);
    expect(frames.some((f) => f.data.includes("oops"))).toBe(false);
    expect(frames.at(-1)!.event).toBe("error");
    for (const f of frames) JSON.parse(f.data);
    const record = await settledRecord();
    expect(record).toMatchObject({ status: "stream_failed", prompt_tokens: 12 });
    expect(record.cost_micro).toBeGreaterThan(0);
    expect(await gw.balanceMicro()).toBe(before - record.cost_micro);
    expect(await held()).toBe(0);
  });

  test("OpenAI to an OpenAI client: the same, a chunk without its closing ]} after the text went out", async () => {
    const text = (content: string) => chunk({ choices: [{ index: 0, delta: { content }, logprobs: null, finish_reason: null }] });
    const broken = text("oops").replace(/]}\n\n$/, "\n\n");
    upstream.reply({ kind: "sse", chunks: [chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }] }), text("one "), text("two "), broken, chunk({ choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: "stop" }] }), "data: [DONE]\n\n"], delayMs: 3 });
    const before = await gw.balanceMicro();
    const frames = sseFrames(await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true })).text());
    expect(frames.some((f) => f.data.includes("oops"))).toBe(false);
    for (const f of frames) if (f.data !== "[DONE]") JSON.parse(f.data);
    expect(frames.map((f) => f.data).join("")).toContain("error");
    const record = await settledRecord();
    expect(record.status).toBe("stream_failed");
    expect(record.cost_micro).toBeGreaterThan(0);
    expect(await gw.balanceMicro()).toBe(before - record.cost_micro);
    expect(await held()).toBe(0);
  });
});

describe("Anthropic cache counts that are not counts (a billing probe: -30,000 cache reads dropped 30,000 prompt tokens from the bill)", () => {
  const record = async () => {
    await gw.app.services.settled();
    return gw.db.query<{ status: string; prompt_tokens: number; cache_read_tokens: number; cache_write_5m_tokens: number; cache_write_1h_tokens: number; estimated: number }, []>(
      "SELECT status, prompt_tokens, cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens, estimated FROM usage_records ORDER BY id DESC LIMIT 1",
    ).get()!;
  };
  const body = (usage: object) => ({ id: "msg_up", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [{ type: "text", text: "ok" }], stop_reason: "end_turn", stop_sequence: null, usage });

  for (const [what, usage] of [
    ["cache reads of -30,000", { input_tokens: 10, cache_read_input_tokens: -30_000, output_tokens: 3 }],
    ["cache writes as a string", { input_tokens: 10, cache_creation_input_tokens: "30000", output_tokens: 3 }],
  ] as const) {
    test(`${what}: the prompt is estimated whole and marked so, whole answer and stream`, async () => {
      upstream.reply({ kind: "json", body: body(usage) });
      expect((await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: question })).status).toBe(200);
      const whole = await record();
      expect(whole).toMatchObject({ status: "ok", estimated: 1, cache_read_tokens: 0, cache_write_5m_tokens: 0 });
      expect(whole.prompt_tokens).not.toBe(10);

      const [, ...rest] = anthropicAnswer("ok");
      upstream.reply({ kind: "sse", chunks: [ev("message_start", { message: { ...body(usage), content: [], stop_reason: null } }), ...rest] });
      const frames = sseFrames(await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: question, stream: true })).text());
      expect(await record()).toMatchObject({ status: "ok", estimated: 1, prompt_tokens: whole.prompt_tokens, cache_read_tokens: 0 });
      // The client is shown the gateway's estimate, not the vendor's parts (a review: it kept input_tokens 10).
      const shown = JSON.parse(frames.find((f) => f.event === "message_start")!.data).message.usage;
      expect(shown.input_tokens).not.toBe(10);
      expect(shown.input_tokens).toBeGreaterThan(0);
      expect(shown.cache_read_input_tokens).toBeUndefined();
      expect(shown.cache_creation_input_tokens).toBeUndefined();
    });
  }

  test("a split of the writes sent without their total, one part not a count: the prompt is estimated", async () => {
    upstream.reply({ kind: "json", body: body({ input_tokens: 10, cache_creation: { ephemeral_5m_input_tokens: 1000, ephemeral_1h_input_tokens: -3 }, output_tokens: 3 }) });
    expect((await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: question })).status).toBe(200);
    const billed = await record();
    expect(billed).toMatchObject({ status: "ok", estimated: 1, cache_write_5m_tokens: 0, cache_write_1h_tokens: 0 });
    expect(billed.prompt_tokens).not.toBe(1010);
  });

  test("a split of the writes sent without their total: the writes are the split's sum, in the prompt and priced by lifetime", async () => {
    upstream.reply({ kind: "json", body: body({ input_tokens: 10, cache_read_input_tokens: 2000, cache_creation: { ephemeral_5m_input_tokens: 1000, ephemeral_1h_input_tokens: 500 }, output_tokens: 3 }) });
    // A prompt long enough for 3,510 tokens to be believed (the meter takes no more than a prompt of its size could be).
    const long = [{ role: "user" as const, content: "word ".repeat(4000) }];
    expect((await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: long })).status).toBe(200);
    expect(await record()).toMatchObject({ status: "ok", estimated: 0, prompt_tokens: 3510, cache_read_tokens: 2000, cache_write_5m_tokens: 1000, cache_write_1h_tokens: 500 });
  });
});

test("a text delta with a second \"delta\" key (JSON keeps the last) is not relayed as it came: the client reads what the meter counted (a raw-TCP probe)", async () => {
  const [start, blockStart, delta, stop, usage, end] = anthropicAnswer("one");
  const dup = `event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" there"},"delta":5}\n\n`;
  upstream.reply({ kind: "sse", chunks: [start!, blockStart!, delta!, delta!.replace("one", "two"), dup, delta!.replace("one", "three"), stop!, usage!, end!], delayMs: 2 });
  const frames = sseFrames(await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: question, stream: true })).text());
  const texts = frames.filter((f) => f.event === "content_block_delta").map((f) => JSON.parse(f.data).delta.text);
  expect(texts).toEqual(["one", "two", "three"]);
  expect(frames.at(-1)!.event).toBe("message_stop");
});

test("text deltas each in two data lines, split at the same place: every one is written anew in one line, none relayed as it came (a review: a template learnt from such a frame matched the next)", async () => {
  const [start, blockStart, delta, stop, usage, end] = anthropicAnswer("one");
  const split = (text: string) => splitBefore(delta!.replace("one", text), "delta");
  upstream.reply({ kind: "sse", chunks: [start!, blockStart!, split("one"), split("two"), split("three"), stop!, usage!, end!], delayMs: 2 });
  const text = await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: question, stream: true })).text();
  const frames = sseFrames(text);
  for (const f of frames) JSON.parse(f.data);
  expect(frames.filter((f) => f.event === "content_block_delta").map((f) => JSON.parse(f.data).delta.text)).toEqual(["one", "two", "three"]);
});
