/**
 * What a client that leaves is charged (billing-session.ts, billing/prompt-memory.ts): once the
 * upstream has its request, the prompt, answer or not (the vendor processes and bills it; leaving
 * before the first byte was free prompt processing); nothing while no upstream has it (waiting to
 * retry after a refusal). A prompt the gateway had to estimate takes the conversation's last
 * reported prompt as read from the vendor's cache, priced as a read (a bill audit, 2026-11-30), as
 * does that of a stream that failed after some of it went out (a bill audit, fourth round).
 */
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { rawUpstream } from "../helpers/raw-upstream.ts";
import { ANTHROPIC_MODEL, IMAGE_CHAT_MODEL, OPENAI_MODEL, post, startGateway, useGateway, type Gateway } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, credits: 1_000, retry: { max_retries: 2, max_wait_ms: 10_000 } }));

interface Row { status: string; cost_micro: number; prompt_tokens: number; completion_tokens: number; cache_read_tokens: number; fresh_input_tokens: number; estimated: number }
function lastRecord(g: Gateway): Row | undefined {
  const db = new Database(g.dbPath, { readonly: true });
  try {
    return db.query<Row, []>("SELECT status, cost_micro, prompt_tokens, completion_tokens, cache_read_tokens, fresh_input_tokens, estimated FROM usage_records ORDER BY id DESC LIMIT 1").get() ?? undefined;
  } finally {
    db.close();
  }
}

/**
 * Sends to `on` (the file's gateway by default), waits until the upstream has the request (or
 * `whenSent` says so) and `waitMs` more, leaves; the settled record and what it cost.
 */
async function leaveAfterSent(
  path: string,
  body: Record<string, unknown>,
  o: { on?: Gateway; whenSent?: () => boolean; waitMs?: number } = {},
): Promise<{ row: Row; charged: number }> {
  const g = o.on ?? gw;
  const sentBefore = upstream.requests.length;
  const whenSent = o.whenSent ?? (() => upstream.requests.length > sentBefore);
  const before = await g.balanceMicro();
  const leave = new AbortController();
  const asked = post(g, path, body, {}, leave.signal).then((res) => res.body?.cancel()).catch(() => {});
  for (const until = Date.now() + 3_000; !whenSent() && Date.now() < until; ) await Bun.sleep(2);
  expect(whenSent()).toBe(true);
  await Bun.sleep(o.waitMs ?? 20);
  leave.abort();
  await asked;
  for (const until = Date.now() + 3_000; g.app.services.inflight.count > 0 && Date.now() < until; ) await Bun.sleep(5);
  await g.app.services.settled();
  return { row: lastRecord(g)!, charged: before - (await g.balanceMicro()) };
}

/** About 2,000 tokens: vendors cache no prompt under 1,024. */
const PROMPT = "a conversation so far ".repeat(400);
const messages = (text = PROMPT) => [{ role: "user", content: text }];
const chunk = (text: string) => `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":${JSON.stringify(text)}},"finish_reason":null}]}\n\n`;

/**
 * An Anthropic stream whose thinking is omitted (an empty block and its signature), then a text
 * with the marker "<END>", filler, and the vendor's usage: 30 in, 2,500 out (the thinking billed).
 */
function omittedThinkingAnswer(model: string): string[] {
  const event = (name: string, data: Record<string, unknown>) => `event: ${name}\ndata: ${JSON.stringify({ type: name, ...data })}\n\n`;
  return [
    event("message_start", { message: { id: "msg_t", type: "message", role: "assistant", model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 30, output_tokens: 1 } } }),
    event("content_block_start", { index: 0, content_block: { type: "thinking", thinking: "", signature: "" } }),
    event("content_block_delta", { index: 0, delta: { type: "signature_delta", signature: "sig" } }),
    event("content_block_stop", { index: 0 }),
    event("content_block_start", { index: 1, content_block: { type: "text", text: "" } }),
    event("content_block_delta", { index: 1, delta: { type: "text_delta", text: "The answer. <END>" } }),
    ...Array.from({ length: 20 }, () => event("content_block_delta", { index: 1, delta: { type: "text_delta", text: " filler" } })),
    event("content_block_stop", { index: 1 }),
    event("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 2_500 } }),
    event("message_stop", {}),
  ];
}

describe("a client that leaves before any answer came", () => {
  test("non-stream, while the upstream works on it: the prompt is charged (estimated, as fresh input), no output", async () => {
    upstream.reply({ kind: "hang" });
    const { row, charged } = await leaveAfterSent("/v1/chat/completions", { model: OPENAI_MODEL, messages: messages() });
    expect(row).toMatchObject({ status: "cancelled", completion_tokens: 0, estimated: 1, cache_read_tokens: 0 });
    expect(row.prompt_tokens).toBeGreaterThan(600);
    // gpt-4o-mini's input price: 150 credits per million tokens.
    expect(charged).toBe(Math.ceil(row.prompt_tokens * 150));
    expect(gw.app.services.ledger.openHolds()).toBe(0);
  });

  test("a stream whose head came but no frame yet: the prompt is charged", async () => {
    upstream.reply({ kind: "sse", holdOpen: true, chunks: [] });
    const { row, charged } = await leaveAfterSent("/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 100, messages: messages(), stream: true });
    expect(row).toMatchObject({ status: "cancelled", completion_tokens: 0 });
    expect(charged).toBe(Math.ceil(row.prompt_tokens * 3_000));
    expect(charged).toBeGreaterThan(0);
  });

  test("while the gateway waits to retry after the upstream refused: nothing is charged (no upstream has the request)", async () => {
    upstream.reply({ kind: "json", status: 429, headers: { "retry-after": "2" }, body: { error: { message: "Rate limit reached", type: "requests" } } });
    const { row, charged } = await leaveAfterSent("/v1/chat/completions", { model: OPENAI_MODEL, messages: messages() });
    expect(upstream.requests.length).toBe(1);
    expect(row).toMatchObject({ status: "cancelled", cost_micro: 0 });
    expect(charged).toBe(0);
  });
});

test("through fetch (a proxy configured), a request counts as sent once handed over: a client that leaves before the head pays for its prompt", async () => {
  const proxied = await startGateway({ upstreamUrl: upstream.url, credits: 100, upstreamViaProxy: true });
  try {
    upstream.reply({ kind: "hang" });
    const { row, charged } = await leaveAfterSent("/v1/chat/completions", { model: OPENAI_MODEL, messages: messages() }, { on: proxied });
    expect(row).toMatchObject({ status: "cancelled", completion_tokens: 0 });
    expect(charged).toBe(Math.ceil(row.prompt_tokens * 150));
    expect(row.prompt_tokens).toBeGreaterThan(1_000);
  } finally {
    await proxied.stop();
  }
});

test("a whole answer whose body is arriving when the client leaves is read and charged in full: an image at its price, not the prompt alone", async () => {
  // The vendor made the image (and bills it); its body comes in two pieces 300 ms apart, and the client leaves between them.
  const pixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
  const body = JSON.stringify({ id: "c", object: "chat.completion", created: 1, model: "flux-chat", choices: [{ index: 0, message: { role: "assistant", content: "Here it is.", images: [{ type: "image_url", image_url: { url: `data:image/png;base64,${pixel}` } }] }, finish_reason: "stop" }], usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } });
  upstream.reply({ kind: "sse", headers: { "content-type": "application/json" }, chunks: [body.slice(0, 60), body.slice(60)], delayMs: 300 });
  const { row, charged } = await leaveAfterSent("/v1/chat/completions", { model: IMAGE_CHAT_MODEL, messages: [{ role: "user", content: "a red pixel" }] }, { waitMs: 100 });
  expect(row).toMatchObject({ status: "cancelled", prompt_tokens: 7, completion_tokens: 3 });
  // flux-chat: 100 credits per million tokens each way, 0.25 credits an image.
  expect(charged).toBe(7 * 100 + 3 * 100 + 250_000);
});

test("so is one with a Content-Length (our HTTP/1.1 client reads it whole before handing it over): the head's arrival, not the hand-over, decides", async () => {
  const pixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
  const body = JSON.stringify({ id: "c", object: "chat.completion", created: 1, model: "flux-chat", choices: [{ index: 0, message: { role: "assistant", content: "Here it is.", images: [{ type: "image_url", image_url: { url: `data:image/png;base64,${pixel}` } }] }, finish_reason: "stop" }], usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } });
  // The head and 60 bytes, the rest 300 ms later; the client leaves 100 ms after the head.
  let answered = false;
  const raw = rawUpstream((_request, socket) => {
    socket.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body.slice(0, 60)}`);
    answered = true;
    setTimeout(() => socket.write(body.slice(60)), 300);
  });
  const g = await startGateway({ upstreamUrl: raw.url, credits: 1_000, retry: { max_retries: 0 } });
  try {
    const { row, charged } = await leaveAfterSent("/v1/chat/completions", { model: IMAGE_CHAT_MODEL, messages: [{ role: "user", content: "a red pixel" }] }, { on: g, whenSent: () => answered, waitMs: 100 });
    expect(row).toMatchObject({ status: "cancelled", prompt_tokens: 7, completion_tokens: 3 });
    expect(charged).toBe(7 * 100 + 3 * 100 + 250_000);
  } finally {
    await g.stop();
    raw.stop();
  }
});

test("a client that leaves before the upstream has the whole request (its TLS handshake stalls) pays nothing", async () => {
  // A server that takes the connection and never answers the TLS handshake: the request is never written.
  const silent = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const stalled = await startGateway({ upstreamUrl: `https://127.0.0.1:${silent.port}`, credits: 100 });
  try {
    const { row, charged } = await leaveAfterSent("/v1/chat/completions", { model: OPENAI_MODEL, messages: messages() }, { on: stalled, whenSent: () => stalled.app.services.inflight.count > 0, waitMs: 100 });
    expect(row).toMatchObject({ status: "cancelled", cost_micro: 0 });
    expect(charged).toBe(0);
  } finally {
    await stalled.stop();
    silent.stop(true);
  }
});

describe("a cancelled answer's estimated prompt, in a conversation whose last answer reported what the vendor cached", () => {
  /** A whole OpenAI answer of conversation `conversation` (sent as `field`) that reports its prompt and what of it was cached. */
  async function answered(conversation: Record<string, string>, promptTokens: number, cachedTokens: number): Promise<void> {
    upstream.reply({ kind: "json", body: { id: "chatcmpl-1", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }], usage: { prompt_tokens: promptTokens, completion_tokens: 5, total_tokens: promptTokens + 5, prompt_tokens_details: { cached_tokens: cachedTokens } } } });
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: messages(), ...conversation });
    expect(res.status).toBe(200);
    await res.json();
  }

  /** The next turn of the conversation, streamed and left after its first frame (an OpenAI upstream reports usage only at its end). */
  function interrupted(conversation: Record<string, string>) {
    upstream.reply({ kind: "sse", holdOpen: true, chunks: [chunk("Partial answer")] });
    return leaveAfterSent("/v1/chat/completions", { model: OPENAI_MODEL, messages: messages(PROMPT + " and one more turn"), stream: true, ...conversation });
  }

  test("what the vendor said it cached is taken as read and priced as a read; another conversation, or none, pays it as fresh input", async () => {
    await answered({ prompt_cache_key: "conversation-a" }, 1_500, 1_280);
    const cached = await interrupted({ prompt_cache_key: "conversation-a" });
    expect(cached.row).toMatchObject({ status: "cancelled", estimated: 1, cache_read_tokens: 1_280 });
    expect(cached.row.fresh_input_tokens).toBe(cached.row.prompt_tokens - 1_280);
    // gpt-4o-mini: input 150, cache reads 75 (its 50 %), output 600.
    expect(cached.charged).toBe(Math.ceil((cached.row.prompt_tokens - 1_280) * 150 + 1_280 * 75 + cached.row.completion_tokens * 600));
    // Used up: a second cancelled turn after it (nothing answered in between) pays its estimate as fresh input.
    expect((await interrupted({ prompt_cache_key: "conversation-a" })).row.cache_read_tokens).toBe(0);

    for (const other of [{ prompt_cache_key: "conversation-b" }, {}] as Record<string, string>[]) {
      const fresh = await interrupted(other);
      expect([other, fresh.row.cache_read_tokens]).toEqual([other, 0]);
      expect(fresh.charged).toBe(Math.ceil(fresh.row.prompt_tokens * 150 + fresh.row.completion_tokens * 600));
    }
  });

  test("so does a stream that fails after some of it went out (an upstream error frame before its usage): it pays its prompt as a cancelled one would", async () => {
    await answered({ prompt_cache_key: "conversation-f" }, 1_500, 1_280);
    upstream.reply({ kind: "sse", chunks: [chunk("Partial answer"), `data: ${JSON.stringify({ error: { message: "The server had an error while processing your request.", type: "server_error" } })}\n\n`] });
    const before = await gw.balanceMicro();
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: messages(PROMPT + " and one more turn"), stream: true, prompt_cache_key: "conversation-f" });
    expect(await res.text()).toContain("upstream_error");
    await gw.app.services.settled();
    const row = lastRecord(gw)!;
    expect(row).toMatchObject({ status: "stream_failed", estimated: 1, cache_read_tokens: 1_280 });
    expect(before - (await gw.balanceMicro())).toBe(Math.ceil((row.prompt_tokens - 1_280) * 150 + 1_280 * 75 + row.completion_tokens * 600));
  });

  test("and so does a stream that ended whole without its usage (cut after the finish chunk): recorded ok, its prompt read as the cancelled one's is", async () => {
    await answered({ prompt_cache_key: "conversation-g" }, 1_500, 1_280);
    const finish = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n`;
    // The usage chunk (and [DONE]) never comes: the connection ends after the finish chunk.
    upstream.reply({ kind: "sse", chunks: [chunk("The whole answer."), finish] });
    const before = await gw.balanceMicro();
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: messages(PROMPT + " and one more turn"), stream: true, stream_options: { include_usage: true }, prompt_cache_key: "conversation-g" });
    expect(res.status).toBe(200);
    await res.text();
    await gw.app.services.settled();
    const row = lastRecord(gw)!;
    expect(row).toMatchObject({ status: "ok", estimated: 1, cache_read_tokens: 1_280 });
    expect(before - (await gw.balanceMicro())).toBe(Math.ceil((row.prompt_tokens - 1_280) * 150 + 1_280 * 75 + row.completion_tokens * 600));
  });

  test("a prompt that does not start as the cached one read nothing from that cache, whatever conversation id it names", async () => {
    await answered({ prompt_cache_key: "conversation-e" }, 1_500, 1_280);
    // An unrelated prompt under the cached one's id (the id is the client's to choose).
    upstream.reply({ kind: "sse", holdOpen: true, chunks: [chunk("Partial answer")] });
    const unrelated = await leaveAfterSent("/v1/chat/completions", { model: OPENAI_MODEL, messages: messages("something else entirely ".repeat(400)), stream: true, prompt_cache_key: "conversation-e" });
    expect(unrelated.row).toMatchObject({ status: "cancelled", estimated: 1, cache_read_tokens: 0 });
    expect(unrelated.charged).toBe(Math.ceil(unrelated.row.prompt_tokens * 150 + unrelated.row.completion_tokens * 600));
  });

  test("an agent's turn (its tools' JSON, most of the prompt, and the conversation so far) left before its usage still reads the last turn's cache", async () => {
    // Tools as an agent sends them: dense JSON, most of what is cached.
    const tools = Array.from({ length: 40 }, (_, i) => ({ type: "function", function: { name: `tool_${i}`, description: `Does thing ${i} to the workspace, carefully, with options`, parameters: { type: "object", properties: { path: { type: "string" }, mode: { type: "string", enum: ["a", "b", "c"] } }, required: ["path"] } } }));
    upstream.reply({ kind: "json", body: { id: "chatcmpl-1", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }], usage: { prompt_tokens: 6_000, completion_tokens: 5, total_tokens: 6_005, prompt_tokens_details: { cached_tokens: 5_900 } } } });
    const first = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: messages(), tools, prompt_cache_key: "agent-1" });
    expect(first.status).toBe(200);
    await first.json();
    upstream.reply({ kind: "sse", holdOpen: true, chunks: [chunk("Partial answer")] });
    const next = await leaveAfterSent("/v1/chat/completions", { model: OPENAI_MODEL, messages: [...messages(), { role: "assistant", content: "ok" }, { role: "user", content: "and the next step" }], tools, stream: true, prompt_cache_key: "agent-1" });
    expect(next.row).toMatchObject({ status: "cancelled", estimated: 1 });
    expect(next.row.cache_read_tokens).toBeGreaterThan(0);
  });

  test("a conversation the vendor cached nothing of gets nothing; OpenAI's `user` names a person, not a conversation", async () => {
    await answered({ prompt_cache_key: "conversation-d" }, 1_500, 0);
    expect((await interrupted({ prompt_cache_key: "conversation-d" })).row.cache_read_tokens).toBe(0);
    await answered({ user: "someone" }, 1_500, 1_280);
    expect((await interrupted({ user: "someone" })).row.cache_read_tokens).toBe(0);
  });

  test("never more read than the estimate; a reported prompt is never changed", async () => {
    await answered({ prompt_cache_key: "conversation-c" }, 1_000_000, 999_000);
    const capped = await interrupted({ prompt_cache_key: "conversation-c" });
    expect(capped.row.cache_read_tokens).toBe(capped.row.prompt_tokens);
    // A reported answer of the same conversation keeps its own counts.
    await answered({ prompt_cache_key: "conversation-c" }, 1_700, 0);
    expect(lastRecord(gw)).toMatchObject({ status: "ok", prompt_tokens: 1_700, cache_read_tokens: 0, estimated: 0 });
  });
});

test("a prompt carried in an assistant's refusal is counted when the client leaves before any usage (the vendor reads and bills it)", async () => {
  upstream.reply({ kind: "hang" });
  const refusal = "refused words ".repeat(4_000); // ~56 KB, ~8,000 tokens
  const { row } = await leaveAfterSent("/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }, { role: "assistant", content: [{ type: "refusal", refusal }] }, { role: "assistant", content: null, refusal }, { role: "user", content: "again" }] });
  expect(row).toMatchObject({ status: "cancelled", estimated: 1 });
  expect(row.prompt_tokens).toBeGreaterThan(12_000);
});

describe("a client that leaves an answer that reasons out of sight, after its text, before its usage", () => {
  /** An o-series model: OpenAI never streams its reasoning, and bills it. */
  const O3 = "test/o3";
  const o3 = { id: O3, provider: "fake-openai", upstream_model: "o3", category: "text", context_length: 200_000, pricing: { input_per_mtok: 2_000, output_per_mtok: 8_000 } };
  let g: Gateway;
  const word = (text: string) => `data: ${JSON.stringify({ id: "chatcmpl-r", object: "chat.completion.chunk", created: 1, model: "o3", choices: [{ index: 0, delta: { content: text }, finish_reason: null }] })}\n\n`;

  /** Streams `body` to `path`, reads until `seen` shows, leaves; the settled record. */
  async function leaveAfter(path: string, body: Record<string, unknown>, seen: string, headers: Record<string, string> = {}) {
    const before = await g.balanceMicro();
    const leave = new AbortController();
    const res = await post(g, path, body, headers, leave.signal);
    const reader = res.body!.getReader();
    let text = "";
    while (!text.includes(seen)) text += new TextDecoder().decode((await reader.read()).value);
    leave.abort();
    await reader.cancel().catch(() => {});
    for (const until = Date.now() + 5_000; g.app.services.inflight.count > 0 && Date.now() < until; ) await Bun.sleep(10);
    await g.app.services.settled();
    return { row: lastRecord(g)!, charged: before - (await g.balanceMicro()) };
  }

  test("OpenAI o3: the rest is read, not relayed, and the answer is charged the vendor's count, reasoning included (was 0.1 % of the bill)", async () => {
    g = await startGateway({ upstreamUrl: upstream.url, credits: 1_000, retry: { max_retries: 0 }, extraModels: [o3] });
    try {
      // The visible answer, then filler the client never wanted, then the usage: 3,000 tokens of reasoning behind it.
      upstream.reply({ kind: "sse", delayMs: 20, chunks: [
        `data: ${JSON.stringify({ id: "chatcmpl-r", object: "chat.completion.chunk", created: 1, model: "o3", choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] })}\n\n`,
        word("The answer."), word(" <END>"), ...Array.from({ length: 20 }, () => word(" filler")),
        `data: ${JSON.stringify({ id: "chatcmpl-r", object: "chat.completion.chunk", created: 1, model: "o3", choices: [{ index: 0, delta: {}, finish_reason: "stop" }] })}\n\n`,
        `data: ${JSON.stringify({ id: "chatcmpl-r", object: "chat.completion.chunk", created: 1, model: "o3", choices: [], usage: { prompt_tokens: 24, completion_tokens: 3_025, total_tokens: 3_049, completion_tokens_details: { reasoning_tokens: 3_000 } } })}\n\n`,
        "data: [DONE]\n\n",
      ] });
      const { row, charged } = await leaveAfter("/v1/chat/completions", { model: O3, max_completion_tokens: 4_000, messages: [{ role: "user", content: "answer, then <END>, then filler" }], stream: true, stream_options: { include_usage: true } }, "<END>");
      expect(row).toMatchObject({ status: "cancelled", prompt_tokens: 24, completion_tokens: 3_025, estimated: 0 });
      expect(charged).toBe(24 * 2_000 + 3_025 * 8_000);
    } finally {
      await g.stop();
    }
  });

  test("OpenAI o3, not streamed: a client that leaves while it reasons (before the head) leaves the answer read and charged in full", async () => {
    const body = JSON.stringify({ id: "chatcmpl-r", object: "chat.completion", created: 1, model: "o3", choices: [{ index: 0, message: { role: "assistant", content: "The answer." }, finish_reason: "stop" }], usage: { prompt_tokens: 24, completion_tokens: 1_503, total_tokens: 1_527, completion_tokens_details: { reasoning_tokens: 1_500 } } });
    let asked = false;
    const raw = rawUpstream((_request, socket) => {
      asked = true;
      // 400 ms of reasoning, then the whole answer.
      setTimeout(() => socket.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`), 400);
    });
    g = await startGateway({ upstreamUrl: raw.url, credits: 1_000, retry: { max_retries: 0 }, extraModels: [o3] });
    try {
      const { row, charged } = await leaveAfterSent("/v1/chat/completions", { model: O3, max_completion_tokens: 4_000, messages: [{ role: "user", content: "think" }] }, { on: g, whenSent: () => asked, waitMs: 100 });
      expect(row).toMatchObject({ status: "cancelled", prompt_tokens: 24, completion_tokens: 1_503, estimated: 0 });
      expect(charged).toBe(24 * 2_000 + 1_503 * 8_000);
    } finally {
      await g.stop();
      raw.stop();
    }
  });

  test("through a proxy (a plain stream reader), the rest is read in order; a frame past the size cap after the client left ends it, never the process", async () => {
    g = await startGateway({ upstreamUrl: upstream.url, credits: 1_000, retry: { max_retries: 0 }, extraModels: [o3], upstreamViaProxy: true, maxFrameBytes: 4_096 });
    try {
      const opening = `data: ${JSON.stringify({ id: "chatcmpl-r", object: "chat.completion.chunk", created: 1, model: "o3", choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] })}\n\n`;
      const usageChunk = `data: ${JSON.stringify({ id: "chatcmpl-r", object: "chat.completion.chunk", created: 1, model: "o3", choices: [], usage: { prompt_tokens: 24, completion_tokens: 1_025, total_tokens: 1_049, completion_tokens_details: { reasoning_tokens: 1_000 } } })}\n\n`;
      upstream.reply({ kind: "sse", delayMs: 20, chunks: [opening, word("The answer."), word(" <END>"), ...Array.from({ length: 5 }, () => word(" filler")), usageChunk, "data: [DONE]\n\n"] });
      const read = await leaveAfter("/v1/chat/completions", { model: O3, max_completion_tokens: 2_000, messages: [{ role: "user", content: "x" }], stream: true, stream_options: { include_usage: true } }, "<END>");
      expect(read.row).toMatchObject({ status: "cancelled", completion_tokens: 1_025, estimated: 0 });
      // A frame larger than the cap once the client has left: the answer ends, settled, nothing escapes.
      upstream.reply({ kind: "sse", delayMs: 20, chunks: [opening, word("The answer."), word(" <END>"), word("x".repeat(10_000)), usageChunk, "data: [DONE]\n\n"] });
      const cut = await leaveAfter("/v1/chat/completions", { model: O3, max_completion_tokens: 2_000, messages: [{ role: "user", content: "x" }], stream: true, stream_options: { include_usage: true } }, "<END>");
      expect(cut.row.status).toBe("cancelled");
      expect(g.app.services.inflight.count).toBe(0);
    } finally {
      await g.stop();
    }
  });

  test("a client gone before the first attempt (its place taken slowly, as a shared store may): nothing is sent, nothing is charged", async () => {
    let asked = 0;
    const raw = rawUpstream(() => {
      asked++;
    });
    // A store that answers after 300 ms; the client leaves at 100.
    const slowStore = { acquire: async () => (await Bun.sleep(300), { release() {} }), acquireBoth: async () => (await Bun.sleep(300), { slot: { release() {} } }) };
    g = await startGateway({ upstreamUrl: raw.url, credits: 1_000, retry: { max_retries: 0 }, extraModels: [o3], maxConcurrentRequests: 5, concurrency: slowStore });
    try {
      const before = await g.balanceMicro();
      const leave = new AbortController();
      const asking = post(g, "/v1/chat/completions", { model: O3, max_completion_tokens: 1_000, messages: [{ role: "user", content: "think" }] }, {}, leave.signal).catch(() => {});
      await Bun.sleep(100);
      leave.abort();
      await asking;
      await Bun.sleep(500);
      await g.app.services.settled();
      expect(asked).toBe(0);
      expect(await g.balanceMicro()).toBe(before);
    } finally {
      await g.stop();
      raw.stop();
    }
  });

  test("a client that stops reading (and never leaves) is given up after client_idle_ms: the rest is read the same way, and charged the vendor's count (a hostile-tenant probe, twelfth)", async () => {
    // A long visible answer fills the sockets' buffers, so the client's silence holds the relay
    // back; then 40,000 tokens of reasoning are billed with the usage at the end. Given up as a
    // cancelled stream, the answer was charged what had been relayed: the eighth probe's leak,
    // reached by not reading instead of leaving.
    // A word a frame, padded as OpenAI's `obfuscation` field pads chunks (here to 64 KB): the
    // sockets fill while what was relayed is a few hundred tokens.
    const frame = (text: string) => `data: ${JSON.stringify({ id: "chatcmpl-r", object: "chat.completion.chunk", created: 1, model: "o3", choices: [{ index: 0, delta: { content: text }, finish_reason: null }], obfuscation: "x".repeat(65_000) })}\n\n`;
    const chunked = (text: string) => `${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n`;
    const big = chunked(frame("word "));
    const FRAMES = 256;
    const tail = chunked(`data: ${JSON.stringify({ id: "chatcmpl-r", object: "chat.completion.chunk", created: 1, model: "o3", choices: [{ index: 0, delta: {}, finish_reason: "stop" }] })}\n\n`)
      + chunked(`data: ${JSON.stringify({ id: "chatcmpl-r", object: "chat.completion.chunk", created: 1, model: "o3", choices: [], usage: { prompt_tokens: 24, completion_tokens: 60_000, total_tokens: 60_024, completion_tokens_details: { reasoning_tokens: 40_000 } } })}\n\n`)
      + chunked("data: [DONE]\n\n") + "0\r\n\r\n";
    const raw = rawUpstream((_request, socket) => {
      socket.write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n");
      // As fast as the gateway takes it; what a write does not take is written again later.
      let rest = big;
      let sent = 0;
      const pump = () => {
        if (socket.data.closed) return;
        const wrote = Math.max(0, socket.write(rest));
        if (wrote < rest.length) {
          rest = rest.slice(wrote);
          return void setTimeout(pump, 5);
        }
        if (++sent < FRAMES) rest = big;
        else if (rest !== tail) rest = tail;
        else return;
        setImmediate(pump);
      };
      pump();
    });
    g = await startGateway({ upstreamUrl: raw.url, credits: 1_000, retry: { max_retries: 0 }, extraModels: [o3], clientIdleMs: 300, idleMs: 10_000, limits: { max_tokens_cap: 1_000_000 } });
    try {
      const before = await g.balanceMicro();
      const res = await post(g, "/v1/chat/completions", { model: O3, max_completion_tokens: 100_000, messages: [{ role: "user", content: "a long answer" }], stream: true, stream_options: { include_usage: true } });
      const reader = res.body!.getReader();
      await reader.read(); // the first bytes; nothing more is read, and the connection stays open
      for (const until = Date.now() + 20_000; g.app.services.inflight.count > 0 && Date.now() < until; ) await Bun.sleep(20);
      await g.app.services.settled();
      const row = lastRecord(g)!;
      expect(row).toMatchObject({ status: "cancelled", prompt_tokens: 24, completion_tokens: 60_000, estimated: 0 });
      expect(before - (await g.balanceMicro())).toBe(24 * 2_000 + 60_000 * 8_000);
      reader.cancel().catch(() => {});
    } finally {
      await g.stop();
      raw.stop();
    }
  }, 30_000);

  test("Anthropic with thinking (summarised or omitted): the same; without thinking, a stream left is charged what was relayed, as before", async () => {
    g = await startGateway({ upstreamUrl: upstream.url, credits: 1_000, retry: { max_retries: 0 } });
    const answer = () => omittedThinkingAnswer("claude-sonnet-4-5");
    try {
      upstream.reply({ kind: "sse", delayMs: 20, chunks: answer() });
      const thinking = await leaveAfter("/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 4_000, thinking: { type: "enabled", budget_tokens: 2_000, display: "omitted" }, messages: [{ role: "user", content: "x" }], stream: true }, "<END>");
      expect(thinking.row).toMatchObject({ status: "cancelled", prompt_tokens: 30, completion_tokens: 2_500, estimated: 0 });
      // Without thinking nothing is out of sight: the rest is not read, the estimate of what went out stands.
      upstream.reply({ kind: "sse", delayMs: 20, chunks: answer() });
      const plain = await leaveAfter("/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 4_000, messages: [{ role: "user", content: "x" }], stream: true }, "<END>");
      expect(plain.row.status).toBe("cancelled");
      expect(plain.row.completion_tokens).toBeLessThan(100);
    } finally {
      await g.stop();
    }
  });

  test("Claude models that think with no `thinking` named (Opus 5.5 always, Sonnet 5.5 by default) read to the end too: their thinking is billed and never shown (a bill audit, third round)", async () => {
    // Claude Code's quick requests and an OpenAI SDK without `reasoning_effort` name no thinking;
    // Opus 5.5 thinks anyway (and cannot be turned off), Sonnet 5.5 thinks unless told
    // `between_tools`, Sonnet 4.5 does not. Left after its text, such an answer was charged what
    // was relayed: a few tokens for 2,500 the vendor billed.
    const models = [
      { id: "audit/claude-opus-5-5", provider: "fake-anthropic", upstream_model: "claude-opus-5-5", category: "text", context_length: 1_000_000, pricing: { input_per_mtok: 4_000, output_per_mtok: 20_000 } },
      { id: "audit/claude-sonnet-5-5", provider: "fake-anthropic", upstream_model: "claude-sonnet-5-5", category: "text", context_length: 1_000_000, pricing: { input_per_mtok: 2_000, output_per_mtok: 10_000 } },
    ];
    g = await startGateway({ upstreamUrl: upstream.url, credits: 1_000, retry: { max_retries: 0 }, extraModels: models });
    // Thinking omitted (these models' default display): an empty block and its signature.
    const answer = omittedThinkingAnswer;
    try {
      for (const [model, output] of [["claude-opus-5-5", 20_000], ["claude-sonnet-5-5", 10_000]] as const) {
        for (const path of ["/v1/messages", "/v1/chat/completions"]) {
          upstream.reply({ kind: "sse", delayMs: 20, chunks: answer(model) });
          const body = path === "/v1/messages"
            ? { model: `audit/${model}`, max_tokens: 4_000, messages: [{ role: "user", content: "x" }], stream: true }
            : { model: `audit/${model}`, max_tokens: 4_000, messages: [{ role: "user", content: "x" }], stream: true, stream_options: { include_usage: true } };
          const { row, charged } = await leaveAfter(path, body, "<END>");
          expect({ model, path, ...row }).toMatchObject({ model, path, status: "cancelled", prompt_tokens: 30, completion_tokens: 2_500, estimated: 0 });
          expect(charged).toBe(30 * (output / 5) + 2_500 * output);
        }
      }
    } finally {
      await g.stop();
    }
  });
});
