/**
 * What the official SDKs make of every refusal the gateway answers, as their users meet it: the
 * typed error class each SDK raises for the status, carrying the gateway's own message, its
 * `code`/`type`, and the request id the SDK reads (`x-request-id` for openai, `request-id` for
 * Anthropic), on the three endpoints; and the SDKs' own retries, left at work as users leave them
 * (maxRetries > 0): a 429 is retried after the gateway's `retry-after` and then answered, a 402 is
 * not retried (`x-should-retry: false`), a 502 is ("Retrying is appropriate").
 */
import { beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { useFakeUpstream, type Reply } from "../helpers/fake-upstream.ts";
import { useGateway, post, startGateway, ANTHROPIC_MODEL, OPENAI_MODEL } from "../helpers/gateway.ts";
import { scripted } from "../helpers/scripted-answers.ts";
import { until } from "../helpers/until.ts";

const upstream = useFakeUpstream();
const MAX_BODY = 64 * 1024;
const gw = useGateway(() => ({ upstreamUrl: upstream.url, retry: { max_retries: 0 }, limits: { max_body_bytes: MAX_BODY } }));

const keys = { poor: "", restricted: "", limited: "", oneAtATime: "" };
beforeAll(async () => {
  const accounts = gw.app.services.accounts;
  const poor = await accounts.createAccount("poor", 0);
  keys.poor = (await accounts.createKey(poor.id, "poor"))!.key;
  keys.restricted = (await accounts.createKey(gw.accountId, { name: "openai only", models: [OPENAI_MODEL] }))!.key;
  // One a minute: once spent, no token comes back while the file runs.
  keys.limited = (await accounts.createKey(gw.accountId, { name: "limited", rateLimitPerMinute: 1 }))!.key;
  // One request under way at a time: a second is refused with `retry-after: 1` until the first ends.
  keys.oneAtATime = (await accounts.createKey(gw.accountId, { name: "one at a time", maxConcurrentRequests: 1 }))!.key;
});

/** Spends the limited key's bucket with free requests until the gateway answers 429. */
async function spendLimitedKey(): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const res = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${keys.limited}` } });
    await res.arrayBuffer();
    if (res.status === 429) return;
  }
  throw new Error("the limited key was never refused");
}

/** A fetch that records the status of every attempt the SDK makes (and lets `onStatus` act on it). */
function recordingFetch(statuses: number[], onStatus?: (status: number) => void): typeof fetch {
  return (async (input: any, init?: any) => {
    const res = await fetch(input, init);
    statuses.push(res.status);
    onStatus?.(res.status);
    return res;
  }) as typeof fetch;
}

/** Holds a request of the one-at-a-time key open at the upstream; `finishHeld()` lets it end. */
async function holdTheKeysSlot(): Promise<Response> {
  const answer = scripted("openai", { text: "held" }) as Extract<Reply, { kind: "sse" }>;
  // The role chunk and the first text: the gateway's head waits for the answer's first text.
  upstream.reply({ ...answer, chunks: answer.chunks.slice(0, 2), holdOpen: true, afterHold: answer.chunks.slice(2) });
  const held = fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${keys.oneAtATime}`, "content-type": "application/json" },
    body: JSON.stringify({ model: OPENAI_MODEL, messages: [{ role: "user", content: "hold" }], stream: true }),
  });
  await until("the held request is under way", 5_000, () => upstream.openStreams() === 1);
  return held;
}

interface Case {
  status: number;
  /** The key the request is sent with (the file's funded key unless said). */
  key?: keyof typeof keys | "bad";
  /** How the request is made wrong; `model` replaces the model. */
  model?: string;
  body?: Record<string, unknown>;
  before?: () => Promise<void> | void;
  openai: { class: Function; code: string | null; type: string; message: RegExp };
  anthropic: { class: Function; type: string; message: RegExp };
}

const BIG = "x".repeat(MAX_BODY + 1);
const CASES: Case[] = [
  { status: 400, body: { temperature: 7 }, openai: { class: OpenAI.BadRequestError, code: null, type: "invalid_request_error", message: /temperature/ }, anthropic: { class: Anthropic.BadRequestError, type: "invalid_request_error", message: /temperature/ } },
  { status: 401, key: "bad", openai: { class: OpenAI.AuthenticationError, code: "invalid_api_key", type: "authentication_error", message: /Invalid API key/ }, anthropic: { class: Anthropic.AuthenticationError, type: "authentication_error", message: /Invalid API key/ } },
  // OpenAI never answers 402 (it says 429 insufficient_quota): the openai SDK has no class of its
  // own for it and raises its APIError, status and code intact.
  { status: 402, key: "poor", openai: { class: OpenAI.APIError, code: "insufficient_quota", type: "insufficient_quota", message: /Insufficient credits/ }, anthropic: { class: Anthropic.PaymentRequiredError, type: "billing_error", message: /Insufficient credits/ } },
  { status: 403, key: "restricted", model: ANTHROPIC_MODEL, openai: { class: OpenAI.PermissionDeniedError, code: null, type: "permission_error", message: /may not use/ }, anthropic: { class: Anthropic.PermissionDeniedError, type: "permission_error", message: /may not use/ } },
  { status: 404, model: "no/such-model", openai: { class: OpenAI.NotFoundError, code: "model_not_found", type: "not_found_error", message: /does not exist/ }, anthropic: { class: Anthropic.NotFoundError, type: "not_found_error", message: /does not exist/ } },
  { status: 413, body: { user_text: BIG }, openai: { class: OpenAI.APIError, code: null, type: "invalid_request_error", message: /too large|bytes/i }, anthropic: { class: Anthropic.ContentTooLargeError, type: "request_too_large", message: /too large|bytes/i } },
  { status: 422, body: { empty: true }, openai: { class: OpenAI.UnprocessableEntityError, code: null, type: "invalid_request_error", message: /at least one/ }, anthropic: { class: Anthropic.UnprocessableEntityError, type: "invalid_request_error", message: /at least one/ } },
  { status: 429, key: "limited", before: spendLimitedKey, openai: { class: OpenAI.RateLimitError, code: "rate_limit_exceeded", type: "rate_limit_error", message: /Rate limit exceeded/ }, anthropic: { class: Anthropic.RateLimitError, type: "rate_limit_error", message: /Rate limit exceeded/ } },
  {
    status: 502,
    before: () => upstream.rule((rec) => (rec.path === "/v1/chat/completions" || rec.path === "/v1/messages" ? { kind: "json", status: 500, body: { error: { message: "boom", type: "server_error" } } } : undefined)),
    openai: { class: OpenAI.InternalServerError, code: null, type: "upstream_error", message: /upstream provider failed/ },
    anthropic: { class: Anthropic.InternalServerError, type: "api_error", message: /upstream provider failed/ },
  },
];

function keyOf(c: Case): string {
  if (c.key === "bad") return "svc-sk-not-a-real-key-0000000000000000000000000";
  return c.key ? keys[c.key] : gw.key;
}

/** The request each endpoint is sent, made wrong as the case says. */
function chatBody(c: Case) {
  const content = c.body?.user_text ? String(c.body.user_text) : "hello";
  return { model: c.model ?? OPENAI_MODEL, messages: c.body?.empty ? [] : [{ role: "user" as const, content }], ...(c.body?.temperature ? { temperature: c.body.temperature as number } : {}) };
}
function responsesBody(c: Case) {
  const content = c.body?.user_text ? String(c.body.user_text) : "hello";
  return { model: c.model ?? OPENAI_MODEL, input: c.body?.empty ? [] : content, ...(c.body?.temperature ? { temperature: c.body.temperature as number } : {}) };
}
function messagesBody(c: Case) {
  const content = c.body?.user_text ? String(c.body.user_text) : "hello";
  // Anthropic's own range for temperature is 0 to 1.
  return { model: c.model ?? (c.key === "restricted" ? ANTHROPIC_MODEL : OPENAI_MODEL), max_tokens: 64, messages: c.body?.empty ? [] : [{ role: "user" as const, content }], ...(c.body?.temperature ? { temperature: c.body.temperature as number } : {}) };
}

describe.each(CASES.map((c) => [c.status, c] as const))("a %d", (_status, c) => {
  test.each([["chat.completions.create"], ["responses.create"]])("openai SDK, %s: its typed error, with the gateway's message, code, type and request id", async (method) => {
    await c.before?.();
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: keyOf(c), maxRetries: 0 });
    const call = method === "chat.completions.create" ? client.chat.completions.create(chatBody(c)) : client.responses.create(responsesBody(c) as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    const err = await call.then(() => undefined, (e) => e);
    expect(err).toBeInstanceOf(c.openai.class);
    expect(err.status).toBe(c.status);
    expect(err.message).toStartWith(`${c.status} `);
    expect(err.message).toMatch(c.openai.message);
    expect(err.code ?? null).toBe(c.openai.code);
    expect(err.type).toBe(c.openai.type);
    expect(err.requestID).toMatch(/^[\w-]{8,}$/);
    expect(err.requestID).toBe(err.headers.get("x-request-id"));
  });

  test("Anthropic SDK, messages.create: its typed error, with the gateway's message, type and request id", async () => {
    await c.before?.();
    const client = new Anthropic({ baseURL: gw.url, apiKey: keyOf(c), maxRetries: 0 });
    const err = await client.messages.create(messagesBody(c)).then(() => undefined, (e) => e);
    expect(err).toBeInstanceOf(c.anthropic.class);
    expect(err.status).toBe(c.status);
    expect(err.error).toMatchObject({ type: "error", error: { type: c.anthropic.type, message: expect.stringMatching(c.anthropic.message) } });
    expect(err.type).toBe(c.anthropic.type);
    expect(err.requestID).toMatch(/^[\w-]{8,}$/);
    expect(err.requestID).toBe(err.headers.get("request-id"));
  });
});

describe("the SDKs' own retries, left on as users leave them", () => {
  test.each([["openai"], ["anthropic"]])("%s SDK: a 429 is tried again after the gateway's retry-after, and answered", async (sdk) => {
    // The key's one slot is taken; it is let go as soon as the SDK is refused.
    const held = await holdTheKeysSlot();
    const statuses: number[] = [];
    const letGo = (status: number) => status === 429 && upstream.finishHeld();
    const started = Date.now();
    const answer = sdk === "openai"
      ? (await new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: keys.oneAtATime, maxRetries: 2, fetch: recordingFetch(statuses, letGo) }).chat.completions.create(chatBody({} as Case))).choices[0]!.message.content
      : ((await new Anthropic({ baseURL: gw.url, apiKey: keys.oneAtATime, maxRetries: 2, fetch: recordingFetch(statuses, letGo) }).messages.create(messagesBody({} as Case))).content[0] as { text: string }).text;
    expect(answer).toBe("Echo: hello");
    expect(statuses).toEqual([429, 200]);
    expect(await (await held).text()).toEndWith("data: [DONE]\n\n");
    // `retry-after: 1` was waited for: the SDKs' own first backoff is 0.375 to 0.5 s, and the slot was free at once.
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
  });

  test.each([["openai"], ["anthropic"]])("%s SDK: a 429 of a fast key's rate is tried again after the exact retry-after-ms, not the rounded-up second", async (sdk) => {
    // A clock of the test's own: 120 requests a minute, all spent at one instant, so the next token
    // is exactly 500 ms away (`retry-after: 1`, `retry-after-ms: 500`). The clock moves on by that
    // when the SDK is refused, so the SDK's retry finds the token whatever it waited.
    let now = 1_800_000_000_000;
    const fast = await startGateway({ upstreamUrl: upstream.url, retry: { max_retries: 0 }, now: () => now });
    try {
      const key = (await fast.app.services.accounts.createKey(fast.accountId, { name: "fast", rateLimitPerMinute: 120 }))!.key;
      for (let i = 0; i < 120; i++) expect((await post(fast, "/v1/chat/completions", "{not json", { authorization: `Bearer ${key}` })).status).toBe(400);
      const statuses: number[] = [];
      let refusedAt = 0;
      let waited = 0;
      const watch = (async (input: any, init?: any) => {
        if (refusedAt) waited = performance.now() - refusedAt;
        const res = await fetch(input, init);
        statuses.push(res.status);
        if (res.status === 429) {
          expect([res.headers.get("retry-after"), res.headers.get("retry-after-ms")]).toEqual(["1", "500"]);
          now += 500;
          refusedAt = performance.now();
        }
        return res;
      }) as typeof fetch;
      const answer = sdk === "openai"
        ? (await new OpenAI({ baseURL: `${fast.url}/v1`, apiKey: key, maxRetries: 2, fetch: watch }).chat.completions.create(chatBody({} as Case))).choices[0]!.message.content
        : ((await new Anthropic({ baseURL: fast.url, apiKey: key, maxRetries: 2, fetch: watch }).messages.create(messagesBody({} as Case))).content[0] as { text: string }).text;
      expect(answer).toBe("Echo: hello");
      expect(statuses).toEqual([429, 200]);
      // Half a second, as told (the whole second `retry-after` alone makes the SDKs wait).
      expect(waited).toBeGreaterThanOrEqual(450);
      expect(waited).toBeLessThan(900);
    } finally {
      await fast.stop();
    }
  });

  test.each([["openai"], ["anthropic"]])("%s SDK: a 402 is not tried again (x-should-retry: false), whatever maxRetries says", async (sdk) => {
    const statuses: number[] = [];
    const err = sdk === "openai"
      ? await new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: keys.poor, maxRetries: 2, fetch: recordingFetch(statuses) }).chat.completions.create(chatBody({} as Case)).then(() => undefined, (e) => e)
      : await new Anthropic({ baseURL: gw.url, apiKey: keys.poor, maxRetries: 2, fetch: recordingFetch(statuses) }).messages.create(messagesBody({} as Case)).then(() => undefined, (e) => e);
    expect(err.status).toBe(402);
    expect(statuses).toEqual([402]);
  });

  test.each([["openai"], ["anthropic"]])("%s SDK: a 502 is tried again (the upstream's failure is temporary), and the answer that follows is taken", async (sdk) => {
    upstream.reply({ kind: "json", status: 500, body: { error: { message: "boom", type: "server_error" } } });
    const statuses: number[] = [];
    const answer = sdk === "openai"
      ? (await new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 1, fetch: recordingFetch(statuses) }).chat.completions.create(chatBody({} as Case))).choices[0]!.message.content
      : ((await new Anthropic({ baseURL: gw.url, apiKey: gw.key, maxRetries: 1, fetch: recordingFetch(statuses) }).messages.create({ ...messagesBody({} as Case), model: ANTHROPIC_MODEL })).content[0] as { text: string }).text;
    expect(answer).toBe("Echo: hello");
    expect(statuses).toEqual([502, 200]);
  });
});
