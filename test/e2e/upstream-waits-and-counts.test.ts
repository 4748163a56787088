import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, sseFrames, startGateway, tokenizerLoaded, type Gateway } from "../helpers/gateway.ts";
import { pump, rawUpstream, type RawRequest, type RawSocket, type RawUpstream } from "../helpers/raw-upstream.ts";

/**
 * What a raw-TCP upstream tells the gateway that it must not take at its word (a seventh raw-TCP
 * probe, twenty-first session): a wait of nothing in a 429, and counts in Anthropic's
 * message_delta lower than the ones before them; and a token count's answer with no end (the
 * thirty-sixth session's). Every byte is the test's own (`Bun.listen`).
 */
const json = JSON.stringify;
const ev = (name: string, data: Record<string, unknown>) => `event: ${name}\ndata: ${json({ type: name, ...data })}\n\n`;
const whole = (status: string, body: string, headers: Record<string, string> = {}) =>
  `HTTP/1.1 ${status}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join("")}\r\n${body}`;
const CHAT = json({ id: "chatcmpl-raw", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "Hello" }, logprobs: null, finish_reason: "stop" }], usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 } });
const RATE_LIMITED = json({ error: { message: "Rate limit reached", type: "requests", param: null, code: "rate_limit_exceeded" } });

/** What the upstream does with each request; the test sets it. */
let script: (request: RawRequest, socket: RawSocket) => void = () => {};
/** When each request arrived (performance.now()). */
let arrivals: number[] = [];
let raw: RawUpstream;
let gw: Gateway;

beforeAll(async () => {
  await tokenizerLoaded();
  raw = rawUpstream((request, socket) => {
    arrivals.push(performance.now());
    script(request, socket);
  });
  // Both providers (fake-openai, fake-anthropic) are this upstream.
  gw = await startGateway({ upstreamUrl: raw.url, credits: 100, retry: { max_retries: 2, max_wait_ms: 5_000 } });
});
afterAll(async () => {
  await gw?.stop();
  raw?.stop();
});

describe("a 429 whose Retry-After asks for no wait", () => {
  for (const [name, headers] of [
    ["a date already past (the upstream's clock behind ours), after a 100 Continue", { "retry-after": new Date(Date.now() - 3_600_000).toUTCString() }],
    ["`retry-after: 0`", { "retry-after": "0" }],
    ["`retry-after-ms: 0`", { "retry-after-ms": "0" }],
  ] as const) {
    test(`${name}: the retries back off as without one, never asked again at once`, async () => {
      arrivals = [];
      let refused = 0;
      script = (_request, socket) => {
        if (refused++ < 2) socket.write(`HTTP/1.1 100 Continue\r\n\r\n${whole("429 Too Many Requests", RATE_LIMITED, headers)}`);
        else socket.write(whole("200 OK", CHAT));
      };
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "Hi" }] });
      expect(res.status).toBe(200);
      expect(((await res.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content).toBe("Hello");
      expect(arrivals).toHaveLength(3);
      // The backoff: 125–250 ms, then 250–500 ms (retry-policy.ts, backoffMs). Taken as "now",
      // the three sends came within a few milliseconds.
      expect(arrivals[1]! - arrivals[0]!).toBeGreaterThanOrEqual(100);
      expect(arrivals[2]! - arrivals[1]!).toBeGreaterThanOrEqual(200);
    });
  }
});

describe("Anthropic's message_delta with counts lower than before, relayed to an Anthropic client", () => {
  const start = ev("message_start", { message: { id: "msg_raw", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 9, cache_read_input_tokens: 100, cache_creation_input_tokens: 0, output_tokens: 1 } } });
  const text = ev("content_block_start", { index: 0, content_block: { type: "text", text: "" } }) + ev("content_block_delta", { index: 0, delta: { type: "text_delta", text: "Hello" } }) + ev("content_block_stop", { index: 0 });
  const stop = ev("message_stop", {});
  const head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
  const chunked = (s: string) => `${Buffer.byteLength(s).toString(16)}\r\n${s}\r\n`;

  /** The usage an Anthropic SDK ends with: message_start's, then each message_delta's fields overwriting (its stream helper's rule). */
  function finalUsage(body: string): Record<string, number> {
    const usage: Record<string, number> = {};
    for (const f of sseFrames(body)) {
      const data = JSON.parse(f.data);
      const u = f.event === "message_start" ? data.message.usage : f.event === "message_delta" ? data.usage : undefined;
      for (const [k, v] of Object.entries(u ?? {})) if (typeof v === "number") usage[k] = v;
    }
    return usage;
  }

  test("SGLang's `input_tokens: 0` (and cache reads 0), then a second delta with a smaller output: the client is told the counts it was billed", async () => {
    script = (_request, socket) => {
      const deltas = [
        ev("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 30 } }),
        ev("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 3 } }),
      ];
      socket.write(head + [start, text, ...deltas, stop].map(chunked).join("") + "0\r\n\r\n");
    };
    const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: [{ role: "user", content: "Hi" }], stream: true });
    expect(res.status).toBe(200);
    const usage = finalUsage(await res.text());
    await gw.app.services.settled();
    const record = gw.db.query<{ fresh: number; cached: number; out: number }, []>("SELECT fresh_input_tokens AS fresh, cache_read_tokens AS cached, completion_tokens AS out FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
    // Relayed as they came, the SDK ended with input 0, cache reads 0 and output 3.
    expect(usage).toMatchObject({ input_tokens: 9, cache_read_input_tokens: 100, output_tokens: 30 });
    expect(record).toEqual({ fresh: usage.input_tokens!, cached: usage.cache_read_input_tokens!, out: usage.output_tokens! });
  });

  test("counts that only grow are relayed as they came, byte for byte", async () => {
    const deltas = [
      ev("message_delta", { delta: { stop_reason: null, stop_sequence: null }, usage: { output_tokens: 2 } }),
      ev("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { input_tokens: 9, output_tokens: 4 } }),
    ];
    script = (_request, socket) => socket.write(head + [start, text, ...deltas, stop].map(chunked).join("") + "0\r\n\r\n");
    const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: [{ role: "user", content: "Hi" }], stream: true });
    const body = await res.text();
    for (const delta of deltas) expect(body).toContain(delta);
    expect(finalUsage(body)).toMatchObject({ input_tokens: 9, cache_read_input_tokens: 100, output_tokens: 4 });
  });
});

describe("count_tokens: an upstream count's answer", () => {
  test("that never ends is read no further than a count can be (64 KiB), not to the transport's 64 MiB cap: the estimate answers (a raw-TCP probe: forty gzip bombs stalled the gateway 2.6 s)", async () => {
    let accepted: Promise<number> = Promise.resolve(0);
    script = (_request, socket) => {
      socket.write("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n");
      const chunk = (text: string) => new TextEncoder().encode(`${text.length.toString(16)}\r\n${text}\r\n`);
      const piece = chunk(" ".repeat(0x10000));
      let sent = 0;
      // A count's JSON opened and then padded for good (80 MiB at most, past the transport's cap).
      accepted = pump(socket, () => (sent++ === 0 ? chunk('{"input_tokens":5,"x":') : sent > 1280 ? null : piece));
    };
    const res = await post(gw, "/v1/messages/count_tokens", { model: ANTHROPIC_MODEL, messages: [{ role: "user", content: "Hi there" }] });
    expect(res.status).toBe(200);
    const { input_tokens } = (await res.json()) as { input_tokens: number };
    expect(input_tokens).toBeGreaterThan(0);
    expect(input_tokens).not.toBe(5);
    // What the kernel's buffers take besides the 64 KiB read: a few MiB at most; unbounded, 64 MiB.
    expect(await accepted).toBeLessThan(16 * 1024 * 1024);
  });
});
