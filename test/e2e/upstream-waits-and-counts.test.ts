import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { OPENAI_PRICING, post, sseFrames, startGateway, tokenizerLoaded, type Gateway } from "../helpers/gateway.ts";
import { rawUpstream, type RawRequest, type RawSocket, type RawUpstream } from "../helpers/raw-upstream.ts";

/**
 * What a raw-TCP upstream tells the gateway that it must not take at its word (a seventh raw-TCP
 * probe, twenty-first session): a wait of nothing in a 429, and counts in Anthropic's
 * message_delta lower than the ones before them. Every byte is the test's own (`Bun.listen`).
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
  const timeouts = { first_byte_ms: 2_000, whole_answer_ms: 2_000, idle_ms: 2_000, total_ms: 10_000 };
  gw = await startGateway({
    upstreamUrl: raw.url,
    credits: 100,
    retry: { max_retries: 2, max_wait_ms: 5_000 },
    server: { keepalive_ms: 1_000 },
    extraProviders: [
      { id: "raw-openai", kind: "openai", base_url: `${raw.url}/v1`, api_key_env: "TEST_OPENAI_KEY", timeouts },
      { id: "raw-anthropic", kind: "anthropic", base_url: raw.url, api_key_env: "TEST_ANTHROPIC_KEY", timeouts },
    ],
    extraModels: [
      { id: "test/raw-chat", provider: "raw-openai", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: OPENAI_PRICING },
      { id: "test/raw-claude", provider: "raw-anthropic", upstream_model: "claude-sonnet-4-5", category: "text", context_length: 200_000, pricing: OPENAI_PRICING },
    ],
  });
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
      const res = await post(gw, "/v1/chat/completions", { model: "test/raw-chat", messages: [{ role: "user", content: "Hi" }] });
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
