import { afterAll, beforeAll, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { OPENAI_MODEL, OPENAI_PRICING, post, startGateway, tokenizerLoaded, type Gateway } from "../helpers/gateway.ts";
import { rawUpstream, type RawSocket, type RawUpstream } from "../helpers/raw-upstream.ts";
import { until } from "../helpers/until.ts";

/**
 * A stream whose upstream sent its head and then fails before its first frame (a close right
 * after the head, the idle limit): nothing has reached the client yet (a direct stream's head
 * leaves with its first write), so the attempt fails like an error status, retried or moved to the
 * next model, or a 502 that costs nothing (docs/api.md), not a 200 with an error frame. A raw-TCP
 * upstream, since a Bun.serve one sends no head before its first body bytes.
 */
const healthy = useFakeUpstream();
const RAW_MODEL = "test/raw-stream";
/** The same upstream under an idle limit shorter than keepalive_ms. */
const QUICK_MODEL = "test/raw-stream-quick";
const KEEPALIVE_MS = 600;
const frame = (content: string) =>
  `data: ${JSON.stringify({ id: "chatcmpl-raw", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, delta: { content }, finish_reason: null }] })}\n\n`;
const END = `data: ${JSON.stringify({ id: "chatcmpl-raw", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, delta: {}, finish_reason: "stop" }], usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 } })}\n\ndata: [DONE]\n\n`;
const HEAD = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
/** OpenAI's first chunk: the role, no text yet. */
const ROLE = `data: ${JSON.stringify({ id: "chatcmpl-raw", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] })}\n\n`;
const anthropic = (event: string, data: unknown) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
/** Anthropic's opening events, as its API writes them before the model has produced anything. */
const MESSAGE_START =
  anthropic("message_start", { type: "message_start", message: { id: "msg_raw", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 9, output_tokens: 1 } } }) +
  anthropic("ping", { type: "ping" });
const OVERLOADED = anthropic("error", { type: "error", error: { type: "overloaded_error", message: "Overloaded" } });
/** A raw-TCP Anthropic upstream (the same server: the scripts decide what it says). */
const RAW_CLAUDE = "test/raw-claude";

/** What the raw upstream does after writing the head (in its own write, so the gateway reads it alone). */
let afterHead: (socket: RawSocket) => void = () => {};
/** When the raw upstream last wrote its head: what keepalive_ms counts from. */
let headWrittenAt = 0;
let raw: RawUpstream;
let gw: Gateway;

beforeAll(async () => {
  raw = rawUpstream((_request, socket) => {
    socket.write(HEAD);
    socket.flush();
    headWrittenAt = performance.now();
    setTimeout(() => afterHead(socket), 30);
  });
  gw = await startGateway({
    upstreamUrl: healthy.url,
    credits: 100,
    retry: { max_retries: 0 },
    server: { keepalive_ms: KEEPALIVE_MS },
    extraProviders: [
      { id: "raw", kind: "openai", base_url: `${raw.url}/v1`, api_key_env: "TEST_OPENAI_KEY", timeouts: { first_byte_ms: 5_000, whole_answer_ms: 5_000, idle_ms: 5_000, total_ms: 60_000 } },
      { id: "raw-claude", kind: "anthropic", base_url: raw.url, api_key_env: "TEST_ANTHROPIC_KEY", timeouts: { first_byte_ms: 5_000, whole_answer_ms: 5_000, idle_ms: 5_000, total_ms: 60_000 } },
      { id: "raw-quick", kind: "openai", base_url: `${raw.url}/v1`, api_key_env: "TEST_OPENAI_KEY", timeouts: { first_byte_ms: 5_000, whole_answer_ms: 5_000, idle_ms: 300, total_ms: 60_000 } },
    ],
    extraModels: [
      { id: RAW_MODEL, provider: "raw", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: OPENAI_PRICING },
      { id: QUICK_MODEL, provider: "raw-quick", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: OPENAI_PRICING },
      { id: RAW_CLAUDE, provider: "raw-claude", upstream_model: "claude-sonnet-4-5", category: "text", context_length: 200_000, pricing: OPENAI_PRICING },
    ],
  });
  // The tests of a client that leaves time its record, whose prompt is the file's first estimate:
  // the tokenizer's load (1-3 s on a loaded machine) made them fail their 600 ms bound.
  await tokenizerLoaded();
}, 15_000);
afterAll(async () => {
  await gw?.stop();
  raw?.stop();
});

const ask = (models: string[], signal?: AbortSignal) =>
  post(gw, "/v1/chat/completions", { models, messages: [{ role: "user", content: "Hello" }], stream: true, stream_options: { include_usage: true } }, {}, signal);
const records = () => gw.db.query<{ model: string; status: string; cost_micro: number }, []>("SELECT model, status, cost_micro FROM usage_records ORDER BY id").all();

/** The raw upstream, as `afterHead` scripts it, fails before the answer: the next model answers, and alone it is a 502 that costs nothing. */
async function fallsBackThenFree502(): Promise<void> {
  await nextModelAnswers();
  const balance = await gw.balanceMicro();
  const alone = await ask([RAW_MODEL]);
  expect(alone.status).toBe(502);
  expect(((await alone.json()) as any).error.type).toBe("upstream_error");
  expect(await gw.balanceMicro()).toBe(balance);
  expect(gw.app.services.ledger.openHolds()).toBe(0);
}

/** Asked of the raw upstream and then the healthy one: the second answers, cleanly, and only it is recorded. */
async function nextModelAnswers(): Promise<void> {
  const before = records().length;
  const fellBack = await ask([RAW_MODEL, OPENAI_MODEL]);
  expect(fellBack.status).toBe(200);
  const text = await fellBack.text();
  expect(text).toContain(`"model":"${OPENAI_MODEL}"`);
  expect(text).not.toContain("error");
  await gw.app.services.settled();
  expect(records().slice(before).map((r) => [r.model, r.status])).toEqual([[OPENAI_MODEL, "ok"]]);
}

test("an upstream that closes right after its head: the next model answers, and alone it is a 502 that costs nothing", async () => {
  afterHead = (socket) => socket.end();
  await fallsBackThenFree502();
});

test("an upstream silent after its head past an idle_ms shorter than keepalive_ms: a 502 timeout_error, not a 200 with a timeout frame", async () => {
  afterHead = () => {};
  const balance = await gw.balanceMicro();
  const started = performance.now();
  const res = await ask([QUICK_MODEL]);
  expect(res.status).toBe(502);
  expect(((await res.json()) as any).error.type).toBe("timeout_error");
  expect(performance.now() - started).toBeLessThan(KEEPALIVE_MS);
  expect(await gw.balanceMicro()).toBe(balance);
});

test("a first frame later than keepalive_ms: the client still gets its head and a keep-alive at keepalive_ms, then the answer, charged once", async () => {
  afterHead = (socket) => {
    setTimeout(() => {
      if (socket.data.closed) return;
      socket.write(frame("late"));
      socket.end(END);
    }, 2.5 * KEEPALIVE_MS);
  };
  const before = records().length;
  const started = performance.now();
  const res = await ask([RAW_MODEL]);
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const first = await reader.read();
  const firstAt = performance.now() - started;
  expect(new TextDecoder().decode(first.value)).toStartWith(":");
  expect(firstAt).toBeGreaterThanOrEqual(KEEPALIVE_MS - 50);
  expect(firstAt).toBeLessThan(2 * KEEPALIVE_MS);
  let rest = "";
  for (let r = await reader.read(); !r.done; r = await reader.read()) rest += new TextDecoder().decode(r.value);
  expect(rest).toContain('"content":"late"');
  expect(rest).toContain("data: [DONE]");
  await gw.app.services.settled();
  expect(records().slice(before).map((r) => [r.model, r.status])).toEqual([[RAW_MODEL, "ok"]]);
});

test("a client that leaves while the first frame is awaited is let go at once, and pays its prompt (the upstream has it)", async () => {
  afterHead = () => {};
  const before = records().length;
  const balance = await gw.balanceMicro();
  const leave = new AbortController();
  const asked = ask([RAW_MODEL], leave.signal).catch(() => undefined);
  await until("the upstream has the request", 2_000, () => raw.requests.length > 0 && gw.app.services.inflight.count === 1);
  await Bun.sleep(100);
  const left = performance.now();
  leave.abort();
  await asked;
  await until("the request ended", 1_000, () => gw.app.services.inflight.count === 0);
  expect(performance.now() - left).toBeLessThan(KEEPALIVE_MS);
  await gw.app.services.settled();
  expect(records().slice(before).map((r) => [r.model, r.status])).toEqual([[RAW_MODEL, "cancelled"]]);
  expect(balance - (await gw.balanceMicro())).toBeGreaterThan(0);
  expect(gw.app.services.ledger.openHolds()).toBe(0);
});

/**
 * The events that open an answer come at once, before the model has made anything (OpenAI's role
 * chunk, Anthropic's `message_start` and `ping`, the Responses API's `response.created`); the
 * failures that come before its first text come after them, in a later read (Anthropic's
 * `overloaded_error`, a cut). The head waits for the answer's first text, so they are still an
 * attempt that failed before anything reached the client: retried, moved to the next model, or a
 * 502 that costs nothing.
 */
test("an upstream that closes after its role chunk, before any text: the next model answers, and alone it is a 502 that costs nothing", async () => {
  afterHead = (socket) => {
    socket.write(ROLE);
    socket.flush();
    setTimeout(() => socket.end(), 30);
  };
  await fallsBackThenFree502();
});

test("Anthropic's overloaded_error after message_start, in a later read: a 502 overloaded_error the SDKs retry, not a 200 with an error frame, and it costs nothing", async () => {
  afterHead = (socket) => {
    socket.write(MESSAGE_START);
    socket.flush();
    setTimeout(() => socket.end(OVERLOADED), 30);
  };
  const balance = await gw.balanceMicro();
  const res = await post(gw, "/v1/messages", { model: RAW_CLAUDE, max_tokens: 50, messages: [{ role: "user", content: "Hello" }], stream: true });
  expect(res.status).toBe(502);
  expect(await res.json()).toMatchObject({ type: "error", error: { type: "overloaded_error" } });
  expect(await gw.balanceMicro()).toBe(balance);
  expect(gw.app.services.ledger.openHolds()).toBe(0);
});

test("the opening events and the first text leave together once the text comes; a text later than keepalive_ms finds the head gone at keepalive_ms", async () => {
  // The text comes 30 ms after message_start: the client's first read holds both.
  afterHead = (socket) => {
    socket.write(MESSAGE_START);
    socket.flush();
    setTimeout(() => {
      socket.write(anthropic("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }) +
        anthropic("content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Hi" } }));
      socket.end(anthropic("content_block_stop", { type: "content_block_stop", index: 0 }) +
        anthropic("message_delta", { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 2 } }) +
        anthropic("message_stop", { type: "message_stop" }));
    }, 30);
  };
  const ask = () => post(gw, "/v1/messages", { model: RAW_CLAUDE, max_tokens: 50, messages: [{ role: "user", content: "Hello" }], stream: true });
  const soon = await ask();
  expect(soon.status).toBe(200);
  const reader = soon.body!.getReader();
  const first = new TextDecoder().decode((await reader.read()).value);
  expect(first).toContain("event: message_start");
  expect(first).toContain('"text":"Hi"');
  for (let r = await reader.read(); !r.done; r = await reader.read());

  // Only message_start for longer than keepalive_ms: the head and message_start go out then (a
  // client and the proxies before it see the answer under way), and the text follows.
  afterHead = (socket) => {
    socket.write(MESSAGE_START);
    socket.flush();
    setTimeout(() => {
      if (socket.data.closed) return;
      socket.end(anthropic("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }) +
        anthropic("content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Late" } }) +
        anthropic("content_block_stop", { type: "content_block_stop", index: 0 }) +
        anthropic("message_delta", { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 2 } }) +
        anthropic("message_stop", { type: "message_stop" }));
    }, 2.5 * KEEPALIVE_MS);
  };
  const started = performance.now();
  const late = await ask();
  const headAt = performance.now() - started;
  expect(late.status).toBe(200);
  expect(headAt).toBeGreaterThanOrEqual(KEEPALIVE_MS - 50);
  expect(headAt).toBeLessThan(2 * KEEPALIVE_MS);
  const text = await late.text();
  expect(text).toStartWith("event: message_start");
  expect(text).toContain('"text":"Late"');
  expect(text).toContain("event: message_stop");
});

test("a stream that is only the vendor's end marker ([DONE], no finish): the next model answers, and alone it is a 502 that costs nothing, not a 200 whose only frame is an error", async () => {
  // The body stays open after the marker: before, the stage relayed it and waited for the body's
  // end, and only then found the answer unfinished, with the client's 200 already gone.
  afterHead = (socket) => socket.write("data: [DONE]\n\n");
  await nextModelAnswers();
  const balance = await gw.balanceMicro();
  for (const [path, body] of [
    ["/v1/chat/completions", { model: RAW_MODEL, messages: [{ role: "user", content: "Hello" }], stream: true }],
    ["/v1/messages", { model: RAW_MODEL, max_tokens: 50, messages: [{ role: "user", content: "Hello" }], stream: true }],
    ["/v1/responses", { model: RAW_MODEL, input: "Hello", stream: true, store: false }],
  ] as const) {
    const alone = await post(gw, path, body);
    expect(alone.status).toBe(502);
    const error = ((await alone.json()) as any).error;
    expect(error.type).toBe(path === "/v1/messages" ? "api_error" : "upstream_error");
    expect(error.message).toContain("ended the answer early");
  }
  expect(await gw.balanceMicro()).toBe(balance);
  expect(gw.app.services.ledger.openHolds()).toBe(0);
});

test("the end marker after text but before any finish: the text, then one error frame and no [DONE] before it; charged for what went out", async () => {
  afterHead = (socket) => {
    socket.write(frame("Hi"));
    setTimeout(() => socket.data.closed || socket.write("data: [DONE]\n\n"), 100);
  };
  const before = records().length;
  const started = performance.now();
  const res = await ask([RAW_MODEL]);
  expect(res.status).toBe(200);
  const text = await res.text();
  expect(text).toContain('"content":"Hi"');
  expect(text).toContain("ended the answer early");
  expect(text).not.toContain("[DONE]");
  // At the marker, not after END_GRACE_MS waiting for a body's end that was never coming.
  expect(performance.now() - started).toBeLessThan(800);
  await gw.app.services.settled();
  expect(records().slice(before).map((r) => [r.model, r.status])).toEqual([[RAW_MODEL, "stream_failed"]]);
  expect(gw.app.services.ledger.openHolds()).toBe(0);
});

const askAs = (path: "/v1/messages" | "/v1/responses", models: string[]) =>
  post(gw, path, path === "/v1/messages" ? { model: models[0], models, max_tokens: 50, messages: [{ role: "user", content: "Hello" }], stream: true } : { model: models[0], models, input: "Hello", stream: true, store: false });

for (const path of ["/v1/messages", "/v1/responses"] as const) {
  test(`${path}: OpenAI's role chunk, then a close, gives that client nothing yet: the next model answers, and alone it is a 502 that costs nothing`, async () => {
    afterHead = (socket) => {
      socket.write(ROLE);
      setTimeout(() => socket.end(), 20);
    };
    const before = records().length;
    const fellBack = await askAs(path, [RAW_MODEL, OPENAI_MODEL]);
    expect(fellBack.status).toBe(200);
    const text = await fellBack.text();
    expect(text).not.toMatch(/event: error|response\.failed/);
    await gw.app.services.settled();
    expect(records().slice(before).map((r) => [r.model, r.status])).toEqual([[OPENAI_MODEL, "ok"]]);

    const balance = await gw.balanceMicro();
    const alone = await askAs(path, [RAW_MODEL]);
    expect(alone.status).toBe(502);
    expect(((await alone.json()) as any).error.type).toBe(path === "/v1/messages" ? "api_error" : "upstream_error");
    expect(await gw.balanceMicro()).toBe(balance);
    expect(gw.app.services.ledger.openHolds()).toBe(0);
  });
}

test("the role chunk, then the answer 150 ms later: the client's stream is whole and charged once (the wait takes what comes next)", async () => {
  afterHead = (socket) => {
    socket.write(ROLE);
    setTimeout(() => socket.data.closed || socket.end(frame("Hi") + END), 150);
  };
  const before = records().length;
  const res = await askAs("/v1/messages", [RAW_MODEL]);
  expect(res.status).toBe(200);
  const text = await res.text();
  expect(text).toContain("event: message_start");
  expect(text).toContain('"text":"Hi"');
  expect(text).toContain("event: message_stop");
  expect(text).not.toContain("error");
  await gw.app.services.settled();
  expect(records().slice(before).map((r) => [r.model, r.status])).toEqual([[RAW_MODEL, "ok"]]);
});

test("the role chunk, then nothing past keepalive_ms: that client still gets its head and a keep-alive at keepalive_ms", async () => {
  afterHead = (socket) => {
    socket.write(ROLE);
    setTimeout(() => socket.data.closed || socket.end(frame("late") + END), 2.5 * KEEPALIVE_MS);
  };
  const started = performance.now();
  const res = await askAs("/v1/messages", [RAW_MODEL]);
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  // A failed check lets the stream go: left open, its answer would land in the next test's records.
  try {
    const first = await reader.read();
    const firstAt = performance.now() - started;
    expect(firstAt).toBeGreaterThanOrEqual(KEEPALIVE_MS - 50);
    // keepalive_ms after the upstream's head, not at the keep-alive clock's first tick after that (a
    // third of keepalive_ms later: 800 ms here, 20 s by default), when the wait had nothing to write.
    expect(performance.now() - headWrittenAt).toBeLessThan(KEEPALIVE_MS * 1.2);
    let rest = new TextDecoder().decode(first.value);
    for (let r = await reader.read(); !r.done; r = await reader.read()) rest += new TextDecoder().decode(r.value);
    // As Anthropic's own streams: message_start first, the keep-alive pings after it.
    expect(rest).toStartWith("event: message_start");
    expect(rest).toContain('"text":"late"');
    expect(rest).toContain("event: message_stop");
  } finally {
    await reader.cancel().catch(() => {});
  }
});

test("a client that leaves after message_start, while the head waits for the first text (an agent CLI's Esc): let go at once, the upstream closed, cancelled and paying its prompt, nothing held", async () => {
  let upstreamClosed = false;
  afterHead = (socket) => {
    socket.write(MESSAGE_START);
    socket.flush();
    const watch = setInterval(() => socket.data.closed && ((upstreamClosed = true), clearInterval(watch)), 5);
  };
  const before = records().length;
  const sent = raw.requests.length;
  const leave = new AbortController();
  const asked = post(gw, "/v1/messages", { model: RAW_CLAUDE, max_tokens: 50, messages: [{ role: "user", content: "Hello" }], stream: true }, {}, leave.signal).catch(() => undefined);
  await until("the upstream has the request", 2_000, () => raw.requests.length > sent);
  await Bun.sleep(100);
  const left = performance.now();
  leave.abort();
  await asked;
  await until("its upstream closed", 1_000, () => upstreamClosed);
  // Its own record: another test's stream that ends meanwhile is not this request ending.
  const own = () => records().slice(before).filter((r) => r.model === RAW_CLAUDE);
  await until("the request ended", 1_000, () => own().length > 0);
  expect(performance.now() - left).toBeLessThan(KEEPALIVE_MS);
  await gw.app.services.settled();
  const settled = own();
  expect(settled.map((r) => [r.model, r.status])).toEqual([[RAW_CLAUDE, "cancelled"]]);
  expect(settled[0]!.cost_micro).toBeGreaterThan(0);
  expect(gw.app.services.ledger.openHolds()).toBe(0);
});

test("Anthropic's redacted_thinking first is thinking: the head leaves with it, and a failure after it is an error frame charged as one after thinking", async () => {
  // Claude's thinking that the safety systems encrypted (and, by its name, what Claude Code's
  // redact-thinking beta asks for): the model made it and the vendor bills it, as thinking it shows.
  // The failure comes well within keepalive_ms: only the head having left makes it a frame.
  afterHead = (socket) => {
    socket.write(MESSAGE_START +
      anthropic("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "redacted_thinking", data: "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT" } }) +
      anthropic("content_block_stop", { type: "content_block_stop", index: 0 }));
    socket.flush();
    setTimeout(() => !socket.data.closed && socket.end(OVERLOADED), KEEPALIVE_MS / 3);
  };
  const before = records().length;
  const res = await post(gw, "/v1/messages", { model: RAW_CLAUDE, max_tokens: 50, messages: [{ role: "user", content: "Hello" }], stream: true });
  expect(res.status).toBe(200);
  const text = await res.text();
  expect(text).toContain('"type":"redacted_thinking"');
  expect(text).toContain("overloaded_error");
  await gw.app.services.settled();
  // The client got the model's thinking and then the failure: the prompt is paid, as after any thinking.
  const settled = records().slice(before);
  expect(settled.map((r) => [r.model, r.status])).toEqual([[RAW_CLAUDE, "stream_failed"]]);
  expect(settled[0]!.cost_micro).toBe(9 * OPENAI_PRICING.input_per_mtok);
  expect(gw.app.services.ledger.openHolds()).toBe(0);
});

// Last: the cut leaves this gateway stopping, so every request after it would be a 503.
test("the gateway's stop while only the opening events came: a 503 to retry, nothing charged", async () => {
  afterHead = (socket) => {
    socket.write(ROLE);
    socket.flush();
  };
  const balance = await gw.balanceMicro();
  const asked = ask([RAW_MODEL]);
  await until("the upstream has the request", 2_000, () => raw.requests.length > 0 && gw.app.services.inflight.count === 1);
  await Bun.sleep(100);
  const stopping = gw.app.services.inflight.cut();
  const res = await asked;
  await stopping;
  expect(res.status).toBe(503);
  expect(await gw.balanceMicro()).toBe(balance);
});
