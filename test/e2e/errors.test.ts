import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { useGateway, ANTHROPIC_MODEL, OPENAI_MODEL, post, sseFrames, startGateway, VENDOR_ANTHROPIC_KEY, VENDOR_OPENAI_KEY } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url }));

const question = [{ role: "user", content: "Hi" }];
const secrets = [VENDOR_OPENAI_KEY, VENDOR_ANTHROPIC_KEY, "127.0.0.1", "http://", "at /", ".ts:"];

async function expectError(res: Response, status: number, shape: "openai" | "anthropic", pattern?: RegExp) {
  expect(res.status).toBe(status);
  expect(res.headers.get("content-type")).toContain("application/json");
  const text = await res.text();
  for (const s of secrets) expect(text).not.toContain(s);
  const body = JSON.parse(text);
  if (shape === "anthropic") {
    expect(body.type).toBe("error");
    expect(typeof body.error.type).toBe("string");
  }
  expect(typeof body.error.message).toBe("string");
  expect(typeof body.error.type).toBe("string");
  if (pattern) expect(body.error.message).toMatch(pattern);
  return body;
}

describe("client errors on /v1/chat/completions", () => {
  test("malformed JSON → 400", async () => {
    await expectError(await post(gw, "/v1/chat/completions", '{"model": "x", "messages": ['), 400, "openai", /JSON/);
  });
  test("wrong types → 400", async () => {
    await expectError(await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: "hello" }), 400, "openai", /messages/);
    await expectError(await post(gw, "/v1/chat/completions", { model: 42, messages: question }), 400, "openai", /model/);
    await expectError(await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "wizard", content: "x" }] }), 400, "openai");
    await expectError(await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, max_tokens: -5 }), 400, "openai", /max_tokens/);
    await expectError(await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, max_tokens: 1.5 }), 400, "openai", /max_tokens/);
  });
  test("temperature outside 0–2 → 400", async () => {
    await expectError(await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, temperature: 2.5 }), 400, "openai", /temperature/);
    await expectError(await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, temperature: -0.1 }), 400, "openai", /temperature/);
    expect((await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, temperature: 2 })).status).toBe(200);
  });
  test("empty messages → 422", async () => {
    await expectError(await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [] }), 422, "openai", /messages/);
  });
  test("unknown model → 404", async () => {
    await expectError(await post(gw, "/v1/chat/completions", { model: "nobody/nothing", messages: question }), 404, "openai", /nobody\/nothing/);
  });
  test("missing model → 400", async () => {
    await expectError(await post(gw, "/v1/chat/completions", { messages: question }), 400, "openai", /model/);
  });
  test("image parts → 400 with a clear message, and no upstream call", async () => {
    const body = { model: OPENAI_MODEL, messages: [{ role: "user", content: [{ type: "text", text: "what is this" }, { type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } }] }] };
    await expectError(await post(gw, "/v1/chat/completions", body), 400, "openai", /image/);
    expect(upstream.requests.length).toBe(0);
  });
  test("no body leaks upstream URLs or keys, no request reaches the upstream", async () => {
    expect(upstream.requests.length).toBe(0);
  });
});

describe("client errors on /v1/messages are Anthropic-shaped", () => {
  test("malformed JSON → 400", async () => {
    const body = await expectError(await post(gw, "/v1/messages", "{nope"), 400, "anthropic");
    expect(body.error.type).toBe("invalid_request_error");
  });
  test("empty messages → 422", async () => {
    await expectError(await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: [] }), 422, "anthropic");
  });
  test("empty messages on count_tokens → the same 422 as /v1/messages, not a count of nothing", async () => {
    const body = await expectError(await post(gw, "/v1/messages/count_tokens", { model: ANTHROPIC_MODEL, messages: [] }), 422, "anthropic");
    expect(body.error.message).toBe("messages must contain at least one message.");
  });
  test("unknown model → 404 not_found_error", async () => {
    const body = await expectError(await post(gw, "/v1/messages", { model: "x/y", max_tokens: 10, messages: question }), 404, "anthropic");
    expect(body.error.type).toBe("not_found_error");
  });
  test("image blocks → 400", async () => {
    const messages = [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "AAAA" } }] }];
    await expectError(await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages }), 400, "anthropic", /image/);
  });
  test("missing key → 401 authentication_error", async () => {
    const res = await fetch(`${gw.url}/v1/messages`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    const body = await expectError(res, 401, "anthropic");
    expect(body.error.type).toBe("authentication_error");
  });
});

describe("the Anthropic SDK's calls to paths the gateway does not serve", () => {
  test("GET /v1/files with anthropic-version (the SDK's beta.files.list) → 404 in Anthropic's shape; without it, OpenAI's; OpenAI's own paths keep OpenAI's shape whatever the headers", async () => {
    const headers = { authorization: `Bearer ${gw.key}` };
    const anthropic = await expectError(await fetch(`${gw.url}/v1/files`, { headers: { ...headers, "anthropic-version": "2023-06-01" } }), 404, "anthropic");
    expect(anthropic.error.type).toBe("not_found_error");
    const openai = await expectError(await fetch(`${gw.url}/v1/files`, { headers }), 404, "openai");
    expect(openai.type).toBeUndefined();
    const chat = await expectError(await post(gw, "/v1/chat/completions", { model: "nobody/nothing", messages: question }, { "anthropic-version": "2023-06-01" }), 404, "openai");
    expect(chat.type).toBeUndefined();
  });
});

describe("401 comes before everything else", () => {
  test("bad key with malformed body → 401, not 400", async () => {
    const res = await fetch(`${gw.url}/v1/chat/completions`, { method: "POST", headers: { authorization: "Bearer svc-sk-nope", "content-type": "application/json" }, body: "{bad" });
    await expectError(res, 401, "openai");
  });
  test("GET /v1/models without key → 401", async () => {
    await expectError(await fetch(`${gw.url}/v1/models`), 401, "openai");
  });
});

describe("refusals of the key itself say not to retry (x-should-retry: false)", () => {
  // The same key meets the same refusal until an operator acts. Claude Code retries a 401 (up to
  // CLAUDE_CODE_MAX_RETRIES, 10 by default, backing off to 32 s: over two minutes before the user
  // reads "Invalid API key") unless the answer says `x-should-retry: false`; the SDKs do not retry
  // a 401 or 403 either way. Its apiKeyHelper rotation still retries: that rule comes first.
  const sayNoRetry = (res: Response) => expect([res.status, res.headers.get("x-should-retry")]);
  test("an unknown or revoked key: 401, on both formats", async () => {
    const { id, key } = (await gw.app.services.accounts.createKey(gw.accountId, "to revoke"))!;
    await gw.app.services.accounts.revokeKey(id);
    const send = (path: string, body: unknown, auth: Record<string, string>) => fetch(gw.url + path, { method: "POST", headers: { "content-type": "application/json", ...auth }, body: JSON.stringify(body) });
    const auths: Record<string, string>[] = [{ authorization: `Bearer ${key}` }, { "x-api-key": key }, { authorization: "Bearer svc-sk-nope" }, {}];
    for (const auth of auths) {
      sayNoRetry(await send("/v1/chat/completions", { model: OPENAI_MODEL, messages: question }, auth)).toEqual([401, "false"]);
      sayNoRetry(await send("/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: question }, auth)).toEqual([401, "false"]);
    }
  });
  test("a model the key may not use: 403, for answers and for token counts", async () => {
    const key = (await gw.app.services.accounts.createKey(gw.accountId, { name: "narrow", models: ["nothing/else"] }))!.key;
    const auth = { authorization: `Bearer ${key}` };
    sayNoRetry(await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question }, auth)).toEqual([403, "false"]);
    sayNoRetry(await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: question }, auth)).toEqual([403, "false"]);
    sayNoRetry(await post(gw, "/v1/messages/count_tokens", { model: ANTHROPIC_MODEL, messages: question }, auth)).toEqual([403, "false"]);
  });
  test("a suspended account: 403", async () => {
    const account = await gw.app.services.accounts.createAccount("to suspend", 1_000_000);
    const key = (await gw.app.services.accounts.createKey(account.id, "k"))!.key;
    await gw.app.services.accounts.updateAccount(account.id, { suspended: true });
    sayNoRetry(await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: question }, { authorization: `Bearer ${key}` })).toEqual([403, "false"]);
  });
});

describe("upstream failures", () => {
  test("upstream 500 → 502, nothing charged", async () => {
    const before = await gw.balanceMicro();
    upstream.reply({ kind: "json", status: 500, body: { error: { message: `internal failure at https://internal.example.com key ${VENDOR_OPENAI_KEY}`, type: "server_error" } } });
    await expectError(await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question }), 502, "openai");
    expect(await gw.balanceMicro()).toBe(before);
  });

  test("upstream 529 overloaded on /v1/messages → 502 Anthropic-shaped, nothing charged", async () => {
    const before = await gw.balanceMicro();
    // Retried (twice by default, honouring retry-after-ms), then given up.
    for (let i = 0; i < 3; i++) upstream.reply({ kind: "json", status: 529, headers: { "retry-after-ms": "10" }, body: { type: "error", error: { type: "overloaded_error", message: "Overloaded" } } });
    await expectError(await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: question }), 502, "anthropic");
    expect(upstream.requests.length).toBe(3);
    expect(await gw.balanceMicro()).toBe(before);
  });

  test("a 502's type says which failure it was, as docs/api.md lists them, in both shapes", async () => {
    const cases: [status: number, openai: string, anthropic: string][] = [[500, "upstream_error", "api_error"], [429, "server_error", "overloaded_error"], [503, "server_error", "overloaded_error"]];
    for (const [status, openaiType, anthropicType] of cases) {
      // Every attempt (retries included) meets the same status.
      upstream.rule(() => ({ kind: "json", status, headers: { "retry-after-ms": "1" }, body: { error: { message: "no", type: "server_error" } } }));
      const openai = await expectError(await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question }), 502, "openai");
      const anthropic = await expectError(await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: question }), 502, "anthropic");
      expect([status, openai.error.type, anthropic.error.type]).toEqual([status, openaiType, anthropicType]);
    }
    upstream.rule(undefined);
  });

  test("a 502 after the upstream said when to come back carries that wait (bounded) as retry-after, for the client's SDK", async () => {
    // Longer than the gateway's own retries may wait (retry.max_wait_ms, 10 s): given up at once, the wait passed on.
    upstream.rule(() => ({ kind: "json", status: 429, headers: { "retry-after": "20" }, body: { error: { message: "slow down", type: "rate_limit_error" } } }));
    const limited = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
    expect(limited.status).toBe(502);
    expect([limited.headers.get("retry-after"), limited.headers.get("retry-after-ms")]).toEqual(["20", "20000"]);
    await limited.arrayBuffer();
    // The vendor's exact wait goes on as retry-after-ms, which the SDKs read first.
    upstream.rule(() => ({ kind: "json", status: 429, headers: { "retry-after-ms": "12500" }, body: { error: { message: "slow down", type: "rate_limit_error" } } }));
    const exact = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
    expect([exact.status, exact.headers.get("retry-after"), exact.headers.get("retry-after-ms")]).toEqual([502, "13", "12500"]);
    await exact.arrayBuffer();
    upstream.rule(() => ({ kind: "json", status: 529, headers: { "retry-after": "3600" }, body: { type: "error", error: { type: "overloaded_error", message: "Overloaded" } } }));
    const overloaded = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: question });
    expect([overloaded.status, overloaded.headers.get("retry-after"), overloaded.headers.get("retry-after-ms")]).toEqual([502, "60", "60000"]);
    await overloaded.arrayBuffer();
    // Without a wait from the upstream, none is made up.
    upstream.rule(() => ({ kind: "json", status: 500, body: { error: { message: "boom", type: "server_error" } } }));
    const failed = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
    expect([failed.status, failed.headers.get("retry-after"), failed.headers.get("retry-after-ms")]).toEqual([502, null, null]);
    await failed.arrayBuffer();
    upstream.rule(undefined);
  });

  test("upstream 400 → 400 with the vendor's reason, scrubbed of URLs and keys", async () => {
    upstream.reply({ kind: "json", status: 400, body: { error: { message: `max_tokens is too large, see https://platform.openai.com/docs (key ${VENDOR_OPENAI_KEY})`, type: "invalid_request_error" } } });
    await expectError(await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question }), 400, "openai", /max_tokens is too large/);
  });

  test("upstream unreachable → 502, nothing charged", async () => {
    const dead = await startGateway({ upstreamUrl: "http://127.0.0.1:9" });
    try {
      const before = await dead.balanceMicro();
      await expectError(await post(dead, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question }), 502, "openai");
      expect(await dead.balanceMicro()).toBe(before);
    } finally {
      await dead.stop();
    }
  });

  test("upstream answers HTML with 200 to a stream request → 502", async () => {
    upstream.reply({ kind: "text", status: 200, headers: { "content-type": "text/html" }, body: "<html>proxy error</html>" });
    await expectError(await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true }), 502, "openai");
  });

  test("OpenAI mid-stream error → error frame, no [DONE]", async () => {
    upstream.reply({ kind: "fixture", name: "openai-midstream-error.sse", split: "frames", delayMs: 30 });
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true });
    expect(res.status).toBe(200);
    const text = await res.text();
    const frames = sseFrames(text);
    const last = JSON.parse(frames.at(-1)!.data);
    expect(last.error).toEqual({ message: expect.any(String), type: expect.any(String), param: null, code: null });
    expect(frames.some((f) => f.data === "[DONE]")).toBe(false);
  });

  test("Anthropic mid-stream error → event: error, translated for OpenAI clients too", async () => {
    upstream.reply({ kind: "fixture", name: "anthropic-midstream-error.sse", split: "frames", delayMs: 30 });
    const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: question, stream: true });
    const frames = sseFrames(await res.text());
    expect(frames.at(-1)!.event).toBe("error");
    expect(JSON.parse(frames.at(-1)!.data)).toMatchObject({ type: "error", error: { type: "overloaded_error" } });

    upstream.reply({ kind: "fixture", name: "anthropic-midstream-error.sse", split: "frames", delayMs: 30 });
    const res2 = await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: question, stream: true });
    const frames2 = sseFrames(await res2.text());
    expect(JSON.parse(frames2.at(-1)!.data).error.type).toBe("server_error");
  });

  test("stream cut without a finish → error frame, never a silent end", async () => {
    upstream.reply({ kind: "sse", delayMs: 30, chunks: [
      'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}\n\n',
      'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}\n\n',
    ] });
    const res = await post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 10, messages: question, stream: true });
    const frames = sseFrames(await res.text());
    expect(frames.at(-1)!.event).toBe("error");
    expect(frames.some((f) => f.event === "message_stop")).toBe(false);
  });

  test("malformed JSON in a frame → error frame", async () => {
    upstream.reply({ kind: "sse", delayMs: 30, chunks: ['data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}\n\n', 'data: {"choices": [tru\n\n'] });
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true });
    const frames = sseFrames(await res.text());
    expect(JSON.parse(frames.at(-1)!.data).error.message).toMatch(/malformed/);
  });
});

describe("an Anthropic refusal's details", () => {
  test("its error_code reaches an Anthropic client (the SDK reads it as the error's code); nothing else of the details, and none for OpenAI clients", async () => {
    const refusal = { kind: "json" as const, status: 400, body: { type: "error", error: { type: "invalid_request_error", message: "messages.0.content.0.image: image dimensions exceed max allowed size", details: { error_code: "image_dimensions_too_large", echoed: "the client's own words", max_width: 8000 } } } };
    upstream.reply(refusal);
    const body = await expectError(await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: question }), 400, "anthropic");
    expect(body.error.details).toEqual({ error_code: "image_dimensions_too_large" });
    upstream.reply(refusal);
    const openai = await expectError(await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: question }), 400, "openai");
    expect(openai.error.details).toBeUndefined();
    // A code that is not an identifier is not passed on.
    upstream.reply({ ...refusal, body: { ...refusal.body, error: { ...refusal.body.error, details: { error_code: "<script>alert(1)</script>" } } } });
    const odd = await expectError(await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: question }), 400, "anthropic");
    expect(odd.error.details).toBeUndefined();
  });
});

describe("a field the schema refuses", () => {
  test("is named in OpenAI's `param`, and the message says what the field must be", async () => {
    const cases: [Record<string, unknown>, string, RegExp][] = [
      [{ temperature: 5 }, "temperature", /temperature: must be a number from 0 to 2/],
      [{ max_tokens: 0 }, "max_tokens", /max_tokens: must be a whole number of at least 1/],
      [{ stream: "yes" }, "stream", /stream: must be true, false or null/],
      [{ messages: [{ role: "wizard", content: "hi" }] }, "messages[0].role", /messages\.0\.role: must be one of system, developer, user, assistant, tool/],
    ];
    for (const [extra, param, message] of cases) {
      const body = await expectError(await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, ...extra }), 400, "openai", message);
      expect([param, body.error.param]).toEqual([param, param]);
    }
  });
});
