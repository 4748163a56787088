import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { useGateway, ANTHROPIC_MODEL, FREE_MODEL, OPENAI_MODEL, post, sseFrames, startGateway } from "../helpers/gateway.ts";
import { backoffMs, requestedDelayMs, verdictFor } from "../../src/gateway/retry-policy.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, retry: { max_retries: 2, max_wait_ms: 2_000 } }));

const question = [{ role: "user", content: "Hello fallback" }];
const openaiError = (status: number, headers: Record<string, string> = {}) =>
  ({ kind: "json", status, headers, body: { error: { message: "nope", type: "server_error" } } }) as const;

async function records() {
  await gw.app.services.settled();
  const db = new Database(gw.dbPath, { readonly: true });
  try {
    return db.query<{ model: string; status: string; cost_micro: number }, []>("SELECT model, status, cost_micro FROM usage_records ORDER BY id").all();
  } finally {
    db.close();
  }
}

describe("retry policy (pure)", () => {
  test("verdicts", () => {
    expect([429, 503, 529].map(verdictFor)).toEqual(["retry", "retry", "retry"]);
    expect([400, 413, 422].map(verdictFor)).toEqual(["fail", "fail", "fail"]);
    expect([500, 502, 504, 401, 403, 404].map(verdictFor)).toEqual(Array(6).fill("fallback"));
  });

  test("Retry-After in seconds, as an HTTP date, and retry-after-ms", () => {
    const now = Date.parse("2026-11-21T12:00:00Z");
    expect(requestedDelayMs(new Headers({ "retry-after": "3" }), now)).toBe(3000);
    expect(requestedDelayMs(new Headers({ "retry-after": "0.5" }), now)).toBe(500);
    expect(requestedDelayMs(new Headers({ "retry-after": "Sat, 21 Nov 2026 12:00:07 GMT" }), now)).toBe(7000);
    expect(requestedDelayMs(new Headers({ "retry-after-ms": "120", "retry-after": "9" }), now)).toBe(120);
    expect(requestedDelayMs(new Headers({ "retry-after": "soon" }), now)).toBeUndefined();
    expect(requestedDelayMs(new Headers(), now)).toBeUndefined();
  });

  test("a wait of nothing (0, or a date already past: a clock behind ours) is no wait told, as both SDKs read it: the backoff applies", () => {
    const now = Date.parse("2026-11-21T12:00:00Z");
    expect(requestedDelayMs(new Headers({ "retry-after": "0" }), now)).toBeUndefined();
    expect(requestedDelayMs(new Headers({ "retry-after": "0.0" }), now)).toBeUndefined();
    expect(requestedDelayMs(new Headers({ "retry-after": "Sat, 21 Nov 2026 11:59:00 GMT" }), now)).toBeUndefined();
    expect(requestedDelayMs(new Headers({ "retry-after": "Sat, 21 Nov 2026 12:00:00 GMT" }), now)).toBeUndefined();
    expect(requestedDelayMs(new Headers({ "retry-after-ms": "0" }), now)).toBeUndefined();
    // `retry-after-ms: 0` leaves the word to Retry-After, as the openai SDK reads the two.
    expect(requestedDelayMs(new Headers({ "retry-after-ms": "0", "retry-after": "2" }), now)).toBe(2000);
    expect(requestedDelayMs(new Headers({ "retry-after": "0.001" }), now)).toBe(1);
  });

  test("a Retry-After sent twice (read as \"3, 3\"): the first value, never a date that means no wait", () => {
    const now = Date.parse("2026-11-21T12:00:00Z");
    const twice = (name: string, a: string, b: string) => {
      const h = new Headers();
      h.append(name, a);
      h.append(name, b);
      return h;
    };
    expect(requestedDelayMs(twice("retry-after", "3", "3"), now)).toBe(3000);
    expect(requestedDelayMs(twice("retry-after-ms", "250", "250"), now)).toBe(250);
    expect(requestedDelayMs(twice("retry-after", "Sat, 21 Nov 2026 12:00:07 GMT", "Sat, 21 Nov 2026 12:00:07 GMT"), now)).toBe(7000);
    // What Date.parse alone would have read as a day long past (a wait of nothing): no wait told.
    expect(requestedDelayMs(new Headers({ "retry-after": "3 3" }), now)).toBeUndefined();
    expect(requestedDelayMs(new Headers({ "retry-after": "2001-03-03" }), now)).toBeUndefined();
    expect(requestedDelayMs(new Headers({ "retry-after": "-5" }), now)).toBeUndefined();
    // The obsolete forms a recipient must still read (RFC 9110 §5.6.7); asctime's has no zone and is GMT.
    expect(requestedDelayMs(new Headers({ "retry-after": "Saturday, 21-Nov-26 12:00:07 GMT" }), now)).toBe(7000);
    expect(requestedDelayMs(new Headers({ "retry-after": "Sat Nov 21 12:00:07 2026" }), now)).toBe(7000);
  });

  test("jittered exponential backoff stays within [half, full] of the capped step", () => {
    for (const [attempt, step] of [[0, 250], [1, 500], [2, 1000], [6, 4000]] as const) {
      expect(backoffMs(attempt, 0)).toBe(step / 2);
      expect(backoffMs(attempt, 0.999)).toBeLessThanOrEqual(step);
    }
  });
});

describe("fallback models", () => {
  test("models list without model: the first that answers wins, and the answer names it", async () => {
    upstream.reply(openaiError(500));
    const res = await post(gw, "/v1/chat/completions", { models: [OPENAI_MODEL, ANTHROPIC_MODEL], messages: question });
    expect(res.status).toBe(200);
    const body = (await res.json()) as any;
    expect(body.model).toBe(ANTHROPIC_MODEL);
    expect(body.choices[0].message.content).toBe("Echo: Hello fallback");
    expect(upstream.requests.map((r) => r.path)).toEqual(["/v1/chat/completions", "/v1/messages"]);
  });

  test("model is tried first, then models, each once", async () => {
    upstream.reply(openaiError(502));
    upstream.reply({ kind: "json", status: 500, body: { type: "error", error: { type: "api_error", message: "x" } } });
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, models: [ANTHROPIC_MODEL, OPENAI_MODEL, FREE_MODEL], messages: question });
    expect(res.status).toBe(200);
    expect(((await res.json()) as any).model).toBe(FREE_MODEL);
    expect(upstream.requests.map((r) => r.body.model)).toEqual(["gpt-4o-mini", "claude-sonnet-4-5", "free-model"]);
  });

  test("an unknown id anywhere in the list → 404 before any upstream call", async () => {
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, models: ["nobody/x"], messages: question });
    expect(res.status).toBe(404);
    expect(upstream.requests.length).toBe(0);
  });

  test("connect errors and timeouts move on too", async () => {
    const flaky = await startGateway({
      upstreamUrl: upstream.url,
      fetch: (url, init) => (url.includes("/chat/completions") ? Promise.reject(new TypeError("connect ECONNREFUSED")) : fetch(url, init)),
    });
    try {
      const res = await post(flaky, "/v1/chat/completions", { models: [OPENAI_MODEL, ANTHROPIC_MODEL], messages: question });
      expect(res.status).toBe(200);
      expect(((await res.json()) as any).model).toBe(ANTHROPIC_MODEL);
    } finally {
      await flaky.stop();
    }
  });

  test("a 4xx from the upstream is the client's to fix: no fallback", async () => {
    upstream.reply({ kind: "json", status: 400, body: { error: { message: "bad tool schema", type: "invalid_request_error" } } });
    const res = await post(gw, "/v1/chat/completions", { models: [OPENAI_MODEL, ANTHROPIC_MODEL], messages: question });
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).error.message).toMatch(/bad tool schema/);
    expect(upstream.requests.length).toBe(1);
  });

  test("the same on /v1/messages", async () => {
    upstream.reply({ kind: "json", status: 500, body: { type: "error", error: { type: "api_error", message: "x" } } });
    const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, models: [OPENAI_MODEL], max_tokens: 50, messages: question, stream: true });
    const frames = sseFrames(await res.text());
    expect(JSON.parse(frames[0]!.data).message.model).toBe(OPENAI_MODEL);
    expect(frames.at(-1)!.event).toBe("message_stop");
  });

  test("billed once: only the attempt that answered, at its own price", async () => {
    const before = await gw.balanceMicro();
    await records();
    const already = (await records()).length;
    upstream.reply(openaiError(500));
    upstream.reply({ kind: "fixture", name: "anthropic-text.json" });
    const res = await post(gw, "/v1/chat/completions", { models: [OPENAI_MODEL, ANTHROPIC_MODEL], messages: question });
    expect(res.status).toBe(200);
    const added = (await records()).slice(already);
    expect(added).toEqual([{ model: ANTHROPIC_MODEL, status: "ok", cost_micro: 12 * 3000 + 9 * 15000 }]);
    expect(before - (await gw.balanceMicro())).toBe(12 * 3000 + 9 * 15000);
  });
});

describe("retries of one model", () => {
  test("429 with retry-after-ms is retried on the same model", async () => {
    upstream.reply(openaiError(429, { "retry-after-ms": "30" }));
    upstream.reply(openaiError(503, { "retry-after": "0" }));
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
    expect(res.status).toBe(200);
    expect(upstream.requests.length).toBe(3);
    expect(new Set(upstream.requests.map((r) => r.path))).toEqual(new Set(["/v1/chat/completions"]));
  });

  test("at most max_retries retries, then the next model", async () => {
    for (let i = 0; i < 3; i++) upstream.reply(openaiError(503, { "retry-after-ms": "5" }));
    const res = await post(gw, "/v1/chat/completions", { models: [OPENAI_MODEL, ANTHROPIC_MODEL], messages: question });
    expect(res.status).toBe(200);
    expect(upstream.requests.map((r) => r.path)).toEqual(["/v1/chat/completions", "/v1/chat/completions", "/v1/chat/completions", "/v1/messages"]);
  });

  test("a requested wait longer than the cap moves to the next model instead of sleeping", async () => {
    upstream.reply(openaiError(429, { "retry-after": "120" }));
    const started = performance.now();
    const res = await post(gw, "/v1/chat/completions", { models: [OPENAI_MODEL, ANTHROPIC_MODEL], messages: question });
    expect(res.status).toBe(200);
    expect(performance.now() - started).toBeLessThan(1500);
    expect(((await res.json()) as any).model).toBe(ANTHROPIC_MODEL);
  });

  test("without Retry-After the backoff is used, and a single model that stays overloaded ends in 502", async () => {
    for (let i = 0; i < 3; i++) upstream.reply(openaiError(503));
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
    expect(res.status).toBe(502);
    expect(upstream.requests.length).toBe(3);
  });

  test("an error in what arrived before the first byte went out: nothing reached the client, so the next model answers, and only its answer is charged", async () => {
    // The whole fixture in one write: its text and its error frame arrive before the head goes out.
    upstream.reply({ kind: "fixture", name: "openai-midstream-error.sse" });
    const res = await post(gw, "/v1/chat/completions", { models: [OPENAI_MODEL, ANTHROPIC_MODEL], messages: question, stream: true });
    expect(res.status).toBe(200);
    const frames = sseFrames(await res.text());
    expect(frames.some((f) => f.data.includes('"error"'))).toBe(false);
    expect(frames.at(-1)!.data).toBe("[DONE]");
    expect(JSON.parse(frames[0]!.data).model).toBe(ANTHROPIC_MODEL);
    expect(upstream.requests.map((r) => r.path)).toEqual(["/v1/chat/completions", "/v1/messages"]);
    await gw.app.services.settled();
    const records = gw.db.query<{ model: string; status: string; cost_micro: number }, []>("SELECT model, status, cost_micro FROM usage_records ORDER BY id DESC LIMIT 1").all();
    expect(records).toEqual([{ model: ANTHROPIC_MODEL, status: "ok", cost_micro: expect.any(Number) }]);
    expect(records[0]!.cost_micro).toBeGreaterThan(0);
  });

  test("Anthropic's overloaded_error right after message_start, before anything went out: the same model is asked again, and the client sees one clean answer", async () => {
    const ev = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
    upstream.reply({ kind: "sse", chunks: [
      ev("message_start", { message: { id: "msg_1", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 9, output_tokens: 1 } } }) +
        ev("error", { error: { type: "overloaded_error", message: "Overloaded" } }),
    ] });
    const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: question, stream: true });
    expect(res.status).toBe(200);
    const frames = sseFrames(await res.text());
    expect(frames.filter((f) => f.event === "message_start")).toHaveLength(1);
    expect(frames.some((f) => f.event === "error")).toBe(false);
    expect(frames.at(-1)!.event).toBe("message_stop");
    expect(upstream.requests.map((r) => r.path)).toEqual(["/v1/messages", "/v1/messages"]);
  });

  test.each(["anthropic", "openai"] as const)("%s: a stream sent whole with a Content-Length (a buffering proxy) whose first event is an error is asked again too, not answered 200 with an error frame", async (kind) => {
    const ev = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
    const body = kind === "anthropic"
      ? ev("error", { error: { type: "overloaded_error", message: "Overloaded" } })
      : `data: ${JSON.stringify({ error: { message: "The server is overloaded", type: "server_error", code: "overloaded" } })}\n\n`;
    upstream.reply({ kind: "text", body, headers: { "content-type": "text/event-stream" } });
    const res = kind === "anthropic"
      ? await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: question, stream: true })
      : await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true });
    const text = await res.text();
    if (kind === "anthropic") {
      // Overloaded: the same model again, and one clean answer.
      expect(res.status).toBe(200);
      expect(text).not.toContain("overloaded");
      expect(upstream.requests.length).toBe(2);
    } else {
      // Another failure moves on; with no model left, a 502 that costs nothing.
      expect(res.status).toBe(502);
      expect(upstream.requests.length).toBe(1);
    }
  });

  test("a client that leaves while the request waits to retry a stream that failed before it started pays nothing for the failed attempt", async () => {
    const ev = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
    upstream.reply({ kind: "sse", chunks: [
      ev("message_start", { message: { id: "msg_1", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 50000, output_tokens: 1 } } }) +
        ev("error", { error: { type: "overloaded_error", message: "Overloaded" } }),
    ] });
    const before = await gw.balanceMicro();
    const leave = new AbortController();
    const asked = fetch(`${gw.url}/v1/messages`, {
      method: "POST", signal: leave.signal,
      headers: { "x-api-key": gw.key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
      body: JSON.stringify({ model: ANTHROPIC_MODEL, max_tokens: 50, messages: question, stream: true }),
    }).catch((e) => e);
    // The retry's backoff is 125–250 ms: the client leaves inside it.
    await Bun.sleep(40);
    leave.abort();
    await asked;
    await gw.app.services.settled();
    await Bun.sleep(300);
    await gw.app.services.settled();
    expect(upstream.requests.length).toBe(1);
    expect(await gw.balanceMicro()).toBe(before);
    const record = gw.db.query<{ status: string; cost_micro: number }, []>("SELECT status, cost_micro FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
    expect(record).toEqual({ status: "cancelled", cost_micro: 0 });
  });

  test("a stream that keeps failing before it starts ends as a 502 that costs nothing, not as a 200 with an error frame", async () => {
    for (let i = 0; i < 3; i++) upstream.reply({ kind: "sse", chunks: ['data: {"choices": [tru\n\n'] });
    const before = await gw.balanceMicro();
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true });
    expect(res.status).toBe(502);
    expect(((await res.json()) as any).error).toMatchObject({ type: "upstream_error", message: expect.stringMatching(/malformed/) });
    expect(upstream.requests.length).toBe(1);
    expect(await gw.balanceMicro()).toBe(before);
  });

  test("once the first byte is out, no retry: errors become frames", async () => {
    // Frames 30 ms apart: the error comes after the first text went out.
    upstream.reply({ kind: "fixture", name: "openai-midstream-error.sse", split: "frames", delayMs: 30 });
    const res = await post(gw, "/v1/chat/completions", { models: [OPENAI_MODEL, ANTHROPIC_MODEL], messages: question, stream: true });
    const frames = sseFrames(await res.text());
    expect(JSON.parse(frames.at(-1)!.data).error).toBeDefined();
    expect(upstream.requests.length).toBe(1);
  });
});
