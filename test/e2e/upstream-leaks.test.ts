/**
 * Issue 15: nothing internal an upstream says reaches a client, and no secret reaches a log line.
 * Every leak shape of helpers/leaky-errors.ts goes through the real gateway, from the fake
 * upstream's error status and from a mid-stream error frame, on both endpoints, with the
 * gateway's log captured.
 */
import { beforeEach, describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { startGateway, useGateway, ANTHROPIC_MODEL, OPENAI_MODEL, post, sseFrames, VENDOR_ANTHROPIC_KEY, VENDOR_OPENAI_KEY } from "../helpers/gateway.ts";
import type { Logger } from "../../src/log/log.ts";
import { LEAKY_ERRORS, type LeakyError } from "../helpers/leaky-errors.ts";

const logLines: string[] = [];
const capture: Logger = (level, message, fields) => logLines.push(JSON.stringify({ level, message, ...fields }));

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, log: capture, retry: { max_retries: 0 } }));
beforeEach(() => {
  logLines.length = 0;
});

const question = [{ role: "user", content: "Hi" }];
/** What no client body may ever carry, whatever the vendor said. */
const ALWAYS_SECRET = [VENDOR_OPENAI_KEY, VENDOR_ANTHROPIC_KEY];

const openaiError = (status: number, message: string) => ({ kind: "json" as const, status, body: { error: { message, type: "invalid_request_error", param: null, code: null } } });
const anthropicError = (status: number, message: string) => ({
  kind: "json" as const,
  status,
  headers: { "request-id": "req_011CLeak" },
  body: { type: "error", error: { type: "invalid_request_error", message }, request_id: "req_011CLeak" },
});

function expectClean(clientText: string, e: LeakyError) {
  for (const leak of [...e.secrets, ...e.internals, ...ALWAYS_SECRET, upstream.url, "127.0.0.1"]) expect(clientText).not.toContain(leak);
}

async function expectLogsClean(e: LeakyError) {
  await gw.app.services.settled();
  expect(logLines.length).toBeGreaterThan(0);
  const logs = logLines.join("\n");
  for (const secret of [...e.secrets, ...ALWAYS_SECRET]) expect(logs).not.toContain(secret);
}

const cases = LEAKY_ERRORS.map((e) => [e.name, e] as const);

describe("an upstream's 400: the client gets the vendor's useful words and nothing else", () => {
  test.each(cases)("/v1/chat/completions ← OpenAI upstream: %s", async (_name, e) => {
    upstream.reply(openaiError(400, e.message));
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
    expect(res.status).toBe(400);
    const text = await res.text();
    expectClean(text, e);
    const body = JSON.parse(text);
    expect(body.error.type).toBe("invalid_request_error");
    for (const useful of e.kept) expect(body.error.message).toContain(useful);
    await expectLogsClean(e);
  });

  test.each(cases)("/v1/messages ← Anthropic upstream: %s", async (_name, e) => {
    upstream.reply(anthropicError(400, e.message));
    const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: question });
    expect(res.status).toBe(400);
    const text = await res.text();
    expectClean(text, e);
    const body = JSON.parse(text);
    expect(body).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
    // A context-window refusal is reworded the way Anthropic's clients recognise it (they compact
    // on it); its numbers are the vendor's.
    const contextRefusal = /maximum context length is (\d+) tokens.*?resulted in (\d+) tokens/s.exec(e.message);
    if (contextRefusal) expect(body.error.message).toBe(`prompt is too long: ${contextRefusal[2]} tokens > ${contextRefusal[1]} maximum`);
    else for (const useful of e.kept) expect(body.error.message).toContain(useful);
    await expectLogsClean(e);
  });
});

describe("an upstream's 5xx or 401: a generic 502, the vendor's text only in the log, without secrets", () => {
  test.each(cases)("%s", async (_name, e) => {
    upstream.reply(openaiError(500, e.message));
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
    expect(res.status).toBe(502);
    expectClean(await res.text(), e);

    upstream.reply(anthropicError(401, e.message));
    const res2 = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: question });
    expect(res2.status).toBe(502);
    expectClean(await res2.text(), e);
    await expectLogsClean(e);
  });

  test("an HTML error page (not JSON) is logged scrubbed and short", async () => {
    const page = `<html><body><h1>401</h1><pre>Authorization: Bearer ${VENDOR_OPENAI_KEY}\nupstream=10.0.3.7:8443</pre>${"<p>padding</p>".repeat(200)}</body></html>`;
    upstream.reply({ kind: "text", status: 401, headers: { "content-type": "text/html" }, body: page });
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
    expect(res.status).toBe(502);
    await gw.app.services.settled();
    const line = logLines.find((l) => l.includes("upstream error status"))!;
    // Scrubbed as a client's message is: the page's heading, no key, no internal address, ≤ 200 characters.
    const detail = JSON.parse(line).detail as string;
    expect(detail).toContain("401");
    expect(line).not.toContain(VENDOR_OPENAI_KEY);
    expect(line).not.toContain("10.0.3.7");
    expect(detail.length).toBeLessThanOrEqual(200);
  });
});

describe("a 200 whose body is the vendor's error (OpenAI-compatible proxies answer so)", () => {
  const e = LEAKY_ERRORS.find((x) => x.name.startsWith("Envoy"))!;

  test("OpenAI upstream → /v1/chat/completions: a clean 502, not the vendor's body", async () => {
    upstream.reply({ kind: "json", status: 200, body: { error: { message: e.message, code: 502 }, user_id: "user_2abc" } });
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
    expect(res.status).toBe(502);
    expectClean(await res.text(), e);
  });

  test("Anthropic upstream → /v1/messages: a clean 502, not the vendor's body", async () => {
    upstream.reply({ kind: "json", status: 200, body: { type: "error", error: { type: "api_error", message: e.message } } });
    const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: question });
    expect(res.status).toBe(502);
    expectClean(await res.text(), e);
  });
});

describe("a 200 whose body is not an answer is a 502 and costs nothing", () => {
  const usageOnly = { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 };
  const bodies: [string, unknown][] = [
    ["an empty object", {}],
    ["an array", []],
    ["a string", "hello"],
    ["null", null],
    ["usage and a debug field, no answer", { usage: usageOnly, debug: "vllm-0.inference.svc.cluster.local:8000 AKIAIOSFODNN7EXAMPLE" }],
    ["choices that are not objects", { choices: [1], usage: usageOnly }],
  ];
  for (const [name, body] of bodies) {
    test(`OpenAI upstream, ${name}`, async () => {
      const before = await gw.balanceMicro();
      upstream.reply({ kind: "json", status: 200, body });
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
      expect(res.status).toBe(502);
      const text = await res.text();
      expect(JSON.parse(text).error.type).toBe("upstream_error");
      expect(text).not.toContain("AKIA");
      await gw.app.services.settled();
      expect(await gw.balanceMicro()).toBe(before);
    });
    test(`Anthropic upstream, ${name}`, async () => {
      const before = await gw.balanceMicro();
      const anthropicBody = name.startsWith("usage") ? { type: "message", usage: { input_tokens: 5, output_tokens: 3 }, debug: (body as { debug: string }).debug } : name.startsWith("choices") ? { type: "message", content: "text" } : body;
      upstream.reply({ kind: "json", status: 200, body: anthropicBody });
      const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: question });
      expect(res.status).toBe(502);
      const text = await res.text();
      expect(JSON.parse(text).type).toBe("error");
      expect(text).not.toContain("AKIA");
      await gw.app.services.settled();
      expect(await gw.balanceMicro()).toBe(before);
    });
  }
});

describe("a vendor key of no known shape is scrubbed by its value", () => {
  // Self-hosted proxies take keys of any form; ours must never come back, in answers or logs.
  const keys = { openai: "proxy.key~42/gw", anthropic: "zq9-local-token" };
  test("echoed in a 400 on both endpoints, and in a 401 body's log detail", async () => {
    const own = await startGateway({ upstreamUrl: upstream.url, log: capture, retry: { max_retries: 0 }, vendorKeys: keys });
    try {
      upstream.reply(openaiError(400, `Incorrect API key provided: ${keys.openai}. Header was Bearer ${keys.openai}`));
      const openai = await post(own, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
      expect(openai.status).toBe(400);
      const openaiText = await openai.text();
      expect(openaiText).toContain("Incorrect API key provided");
      expect(openaiText).not.toContain(keys.openai);
      upstream.reply(anthropicError(400, `invalid x-api-key ${keys.anthropic}`));
      const anthropic = await post(own, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: question });
      expect(anthropic.status).toBe(400);
      expect(await anthropic.text()).not.toContain(keys.anthropic);
      upstream.reply(openaiError(401, `key ${keys.openai} revoked`));
      expect((await post(own, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question })).status).toBe(502);
      await own.app.services.settled();
      const logs = logLines.join("\n");
      expect(logs).toContain("revoked");
      expect(logs).not.toContain(keys.openai);
      expect(logs).not.toContain(keys.anthropic);
    } finally {
      await own.stop();
    }
  });
});

describe("a vendor's own fields in an answer relayed as it came (same format)", () => {
  // A vendor (or a proxy before it) that echoes the key it was sent, in fields the gateway does not model (a raw-TCP probe, 2026-11-30).
  const openaiAnswer = { id: "chatcmpl-x", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "Hi" }, finish_reason: "stop" }], usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 }, debug_info: { auth: `Bearer ${VENDOR_OPENAI_KEY}` } };
  const anthropicAnswer = { id: "msg_x", type: "message", role: "assistant", model: "claude-x", content: [{ type: "text", text: "Hi" }], stop_reason: "end_turn", stop_sequence: null, usage: { input_tokens: 3, output_tokens: 1 }, provider_meta: { key: VENDOR_ANTHROPIC_KEY } };

  test("never carry a configured vendor key, whole or streamed; the rest of them still goes", async () => {
    upstream.reply({ kind: "json", body: openaiAnswer });
    let text = await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question })).text();
    expect(text).not.toContain(VENDOR_OPENAI_KEY);
    expect(JSON.parse(text).debug_info).toEqual({ auth: "Bearer [redacted]" });

    const chunk = (body: object) => `data: ${JSON.stringify({ id: "chatcmpl-x", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", ...body })}\n\n`;
    upstream.reply({ kind: "sse", chunks: [
      chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "Hi" }, finish_reason: null }], provider_meta: { key: VENDOR_OPENAI_KEY } }),
      chunk({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }),
      "data: [DONE]\n\n",
    ] });
    text = await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, stream: true, messages: question })).text();
    expect(text).not.toContain(VENDOR_OPENAI_KEY);
    expect(text).toContain("[redacted]");
    expect(sseFrames(text).some((f) => f.data.includes('"content":"Hi"'))).toBe(true);

    upstream.reply({ kind: "json", body: anthropicAnswer });
    text = await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 20, messages: question }, { "anthropic-version": "2023-06-01" })).text();
    expect(text).not.toContain(VENDOR_ANTHROPIC_KEY);
    expect(JSON.parse(text).provider_meta).toEqual({ key: "[redacted]" });

    const event = (type: string, body: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...body })}\n\n`;
    upstream.reply({ kind: "sse", chunks: [
      event("message_start", { message: { ...anthropicAnswer, content: [], stop_reason: null, usage: { input_tokens: 3, output_tokens: 0 } } }),
      event("content_block_start", { index: 0, content_block: { type: "text", text: "" } }),
      event("content_block_delta", { index: 0, delta: { type: "text_delta", text: "Hi" } }),
      event("content_block_stop", { index: 0 }),
      event("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 1 } }),
      event("message_stop", {}),
    ] });
    text = await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 20, stream: true, messages: question }, { "anthropic-version": "2023-06-01" })).text();
    expect(text).not.toContain(VENDOR_ANTHROPIC_KEY);
    expect(text).toContain('"text":"Hi"');
  });
});

describe("a configured vendor key written with JSON's \\u escapes (a raw-TCP probe, thirty-second session)", () => {
  // .NET's System.Text.Json writes `+` as \u002B; Python's ensure_ascii escapes more. The client's
  // JSON parser reads the escapes as the key.
  const escape = (text: string, every = false) => [...text].map((c) => (every || c === "-" ? `\\u${c.charCodeAt(0).toString(16).padStart(4, "0").toUpperCase()}` : c)).join("");
  const question = [{ role: "user", content: "Hi" }];

  test("in a whole answer's own fields and text, and in a relayed stream's, on both endpoints", async () => {
    for (const every of [false, true]) {
      const openai = `{"id":"chatcmpl-x","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"k=${escape(VENDOR_OPENAI_KEY, every)}"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4},"debug_info":{"api_key":"${escape(VENDOR_OPENAI_KEY, every)}"}}`;
      upstream.reply({ kind: "text", headers: { "content-type": "application/json" }, body: openai });
      let text = await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question })).text();
      expect(JSON.parse(text).debug_info.api_key).toBe("[redacted]");
      expect(JSON.parse(text).choices[0].message.content).toBe("k=[redacted]");

      upstream.reply({ kind: "sse", chunks: [
        `data: {"id":"chatcmpl-x","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":"k=${escape(VENDOR_OPENAI_KEY, every)}"},"finish_reason":null}],"meta":"${escape(VENDOR_OPENAI_KEY, every)}"}\n\n`,
        `data: {"id":"chatcmpl-x","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n`,
        "data: [DONE]\n\n",
      ] });
      text = await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, stream: true, messages: question })).text();
      const first = JSON.parse(sseFrames(text)[0]!.data);
      expect(first.meta).toBe("[redacted]");
      expect(first.choices[0].delta.content).toBe("k=[redacted]");

      const anthropic = `{"id":"msg_x","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"${escape(VENDOR_ANTHROPIC_KEY, every)}"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1},"meta":{"key":"${escape(VENDOR_ANTHROPIC_KEY, every)}"}}`;
      upstream.reply({ kind: "text", headers: { "content-type": "application/json" }, body: anthropic });
      const body: any = await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 20, messages: question }, { "anthropic-version": "2023-06-01" })).json();
      expect(body.meta.key).toBe("[redacted]");
      expect(body.content[0].text).toBe("[redacted]");
    }
  });
});

describe("a configured vendor key written across several text frames (a raw-TCP probe, thirty-first session)", () => {
  const chunk = (delta: object, finish: string | null = null) =>
    `data: ${JSON.stringify({ id: "chatcmpl-x", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;
  /** A piece that is a frame saying nothing: OpenAI's empty delta, Anthropic's ping. */
  const NOTHING = "\u0000nothing";
  const openaiPieces = (pieces: string[], lastWithFinish = false) => ({
    kind: "sse" as const,
    chunks: [
      chunk({ role: "assistant", content: "" }),
      ...pieces.map((p, i) => (p === NOTHING ? chunk({}) : lastWithFinish && i === pieces.length - 1 ? chunk({ content: p }, "stop") : chunk({ content: p }))),
      ...(lastWithFinish ? [] : [chunk({}, "stop")]),
      `data: ${JSON.stringify({ id: "chatcmpl-x", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", choices: [], usage: { prompt_tokens: 3, completion_tokens: 9, total_tokens: 12 } })}\n\n`,
      "data: [DONE]\n\n",
    ],
  });
  const event = (type: string, body: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...body })}\n\n`;
  const anthropicPieces = (pieces: string[], startText = "") => ({
    kind: "sse" as const,
    chunks: [
      event("message_start", { message: { id: "msg_x", type: "message", role: "assistant", model: "claude-x", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 3, output_tokens: 1 } } }),
      event("content_block_start", { index: 0, content_block: { type: "text", text: startText } }),
      ...pieces.map((text) => (text === NOTHING ? `event: ping\ndata: {"type": "ping"}\n\n` : event("content_block_delta", { index: 0, delta: { type: "text_delta", text } }))),
      event("content_block_stop", { index: 0 }),
      event("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 9 } }),
      event("message_stop", {}),
    ],
  });
  /** The answer's text as an SDK puts it together, and the frames' names (Anthropic) in order. */
  const openaiText = (body: string) =>
    sseFrames(body).filter((f) => f.data !== "[DONE]").map((f) => JSON.parse(f.data).choices?.[0]?.delta?.content ?? "").join("");
  const anthropicText = (body: string) => {
    let text = "";
    const open = new Set<number>();
    for (const f of sseFrames(body)) {
      const data = JSON.parse(f.data);
      if (f.event === "content_block_start") {
        open.add(data.index);
        text += data.content_block.text ?? "";
      } else if (f.event === "content_block_delta") {
        // Every delta continues a block that started and has not stopped.
        expect(open.has(data.index)).toBe(true);
        text += data.delta.text;
      } else if (f.event === "content_block_stop") open.delete(data.index);
    }
    expect(sseFrames(body).at(-1)!.event).toBe("message_stop");
    return text;
  };
  const everyFive = (s: string) => s.match(/.{1,5}/g)!;

  const routes = [
    ["OpenAI upstream → /v1/chat/completions (relayed)", OPENAI_MODEL, "/v1/chat/completions", VENDOR_OPENAI_KEY, openaiPieces, openaiText],
    ["Anthropic upstream → /v1/messages (relayed)", ANTHROPIC_MODEL, "/v1/messages", VENDOR_ANTHROPIC_KEY, anthropicPieces, anthropicText],
    ["OpenAI upstream → /v1/messages (translated)", OPENAI_MODEL, "/v1/messages", VENDOR_OPENAI_KEY, openaiPieces, anthropicText],
    ["Anthropic upstream → /v1/chat/completions (translated)", ANTHROPIC_MODEL, "/v1/chat/completions", VENDOR_ANTHROPIC_KEY, anthropicPieces, openaiText],
  ] as const;

  describe.each(routes)("%s", (_route, model, path, key, pieces, textOf) => {
    const ask = async (reply: { kind: "sse"; chunks: string[] }) => {
      upstream.reply(reply);
      const res = await post(gw, path, { model, max_tokens: 50, messages: question, stream: true });
      expect(res.status).toBe(200);
      const body = await res.text();
      expect(body).not.toContain(key);
      return textOf(body);
    };

    test("split in two, in five-character pieces, or after its first characters: the client reads [redacted], the rest in order", async () => {
      expect(await ask(pieces(["Your key is ", key.slice(0, 10), `${key.slice(10)}, keep it.`]))).toBe("Your key is [redacted], keep it.");
      expect(await ask(pieces(["Key: ", ...everyFive(key), " end"]))).toBe("Key: [redacted] end");
      // Three characters or fewer of its start go out before anything says a key follows.
      expect(await ask(pieces(["Key: s", `${key.slice(1)} end`]))).toBe("Key: s[redacted] end");
      expect(await ask(pieces(["Key: sk-", key.slice(3, 4), `${key.slice(4)} end`]))).toBe("Key: sk-[redacted] end");
    });

    test("a frame that says nothing between its pieces (an empty delta, a ping) lets nothing go (a review)", async () => {
      expect(await ask(pieces(["Key: ", key.slice(0, 12), NOTHING, `${key.slice(12)} end`]))).toBe("Key: [redacted] end");
      expect(await ask(pieces(["Key: ", key.slice(0, 6), NOTHING, NOTHING, key.slice(6, 20), NOTHING, `${key.slice(20)}.`]))).toBe("Key: [redacted].");
    });

    test("an answer that fails or is cut after a held start does not let it out", async () => {
      const failing = pieces(["Key: ", key.slice(0, 20)]);
      // Cut after the held piece: no end, no finish.
      const cut = { kind: "sse" as const, chunks: failing.chunks.slice(0, model === ANTHROPIC_MODEL ? 4 : 3) };
      upstream.reply(cut);
      const res = await post(gw, path, { model, max_tokens: 50, messages: question, stream: true });
      const body = await res.text();
      expect(body).not.toContain(key.slice(0, 20));
      expect(body).not.toContain(JSON.stringify(key.slice(0, 20)).slice(1, -1));
    });

    test("a key's start that no rest follows goes out whole and in order, before the answer's end", async () => {
      expect(await ask(pieces(["The prefix ", key.slice(0, 12), " is not a key."]))).toBe(`The prefix ${key.slice(0, 12)} is not a key.`);
      expect(await ask(pieces(["Ends with ", key.slice(0, 12)]))).toBe(`Ends with ${key.slice(0, 12)}`);
    });
  });

  test("a chunk that carries the key's last piece and the finish together", async () => {
    upstream.reply(openaiPieces(["Key: ", key(VENDOR_OPENAI_KEY, 0, 15), key(VENDOR_OPENAI_KEY, 15)], true));
    const body = await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 50, messages: question, stream: true })).text();
    expect(body).not.toContain(VENDOR_OPENAI_KEY);
    expect(openaiText(body)).toBe("Key: [redacted]");
    expect(sseFrames(body).some((f) => f.data.includes('"finish_reason":"stop"'))).toBe(true);
  });

  test("an Anthropic text block that starts with the key's first piece", async () => {
    upstream.reply(anthropicPieces([`${VENDOR_ANTHROPIC_KEY.slice(9)} was sent`], VENDOR_ANTHROPIC_KEY.slice(0, 9)));
    const body = await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: question, stream: true })).text();
    expect(body).not.toContain(VENDOR_ANTHROPIC_KEY);
    expect(anthropicText(body)).toBe("[redacted] was sent");
  });
});

const key = (k: string, from: number, to?: number) => k.slice(from, to);

describe("the prompt never reaches the log", () => {
  const prompt = "Summarise the confidential merger memo between ACME and Initech for the board";

  test("a vendor 422 that echoes the request body", async () => {
    const echo = `[{'type': 'string_type', 'loc': ('body', 'messages', 0, 'content'), 'msg': 'Input should be a valid string', 'input': '${prompt}'}]`;
    upstream.reply({ kind: "json", status: 422, body: { detail: echo, error: { message: echo } } });
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: prompt }] });
    expect(res.status).toBe(400);
    await gw.app.services.settled();
    const logs = logLines.join("\n");
    expect(logs).toContain("Input should be a valid string");
    expect(logs).not.toContain("confidential merger memo");
  });

  test("a non-JSON body quoting the prompt", async () => {
    upstream.reply({ kind: "text", status: 400, body: `bad request: could not tokenize "${prompt}"` });
    await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: prompt }] });
    await gw.app.services.settled();
    const logs = logLines.join("\n");
    expect(logs).toContain("could not tokenize");
    expect(logs).not.toContain("confidential merger memo");
  });
});

const openaiChunk = (delta: unknown) =>
  `data: ${JSON.stringify({ id: "chatcmpl-x", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, delta, logprobs: null, finish_reason: null }] })}\n\n`;
const openaiStream = (message: string) => ({
  kind: "sse" as const,
  chunks: [openaiChunk({ role: "assistant", content: "" }), openaiChunk({ content: "Partial" }), `data: ${JSON.stringify({ error: { message, type: "server_error", param: null, code: null } })}\n\n`],
});
const anthropicEvent = (name: string, data: unknown) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
const anthropicStream = (message: string) => ({
  kind: "sse" as const,
  chunks: [
    anthropicEvent("message_start", { type: "message_start", message: { id: "msg_x", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 3, output_tokens: 1 } } }),
    anthropicEvent("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }),
    anthropicEvent("content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Partial" } }),
    anthropicEvent("error", { type: "error", error: { type: "api_error", message } }),
  ],
});

/** The last frame's error message, for either client format. */
function errorFrameMessage(text: string, format: "openai" | "anthropic"): string {
  const last = sseFrames(text).at(-1)!;
  if (format === "anthropic") {
    expect(last.event).toBe("error");
    expect(JSON.parse(last.data)).toMatchObject({ type: "error", error: { type: "api_error" } });
  }
  return JSON.parse(last.data).error.message;
}

describe("an error frame mid-stream: scrubbed, the useful words kept, relayed or translated", () => {
  const routes = [
    ["OpenAI upstream → /v1/chat/completions (relayed)", OPENAI_MODEL, "/v1/chat/completions", "openai", openaiStream],
    ["OpenAI upstream → /v1/messages (translated)", OPENAI_MODEL, "/v1/messages", "anthropic", openaiStream],
    ["Anthropic upstream → /v1/messages (relayed)", ANTHROPIC_MODEL, "/v1/messages", "anthropic", anthropicStream],
    ["Anthropic upstream → /v1/chat/completions (translated)", ANTHROPIC_MODEL, "/v1/chat/completions", "openai", anthropicStream],
  ] as const;

  describe.each(routes)("%s", (_route, model, path, format, stream) => {
    test.each(cases)("%s", async (_name, e) => {
      upstream.reply(stream(e.message));
      const res = await post(gw, path, { model, max_tokens: 10, messages: question, stream: true });
      expect(res.status).toBe(200);
      const text = await res.text();
      expectClean(text, e);
      const message = errorFrameMessage(text, format);
      expect(message.startsWith("The upstream provider reported an error during the answer")).toBe(true);
      for (const useful of e.kept) expect(message).toContain(useful);
      expect(text).toContain("Partial");
    });
  });

  test("an OpenAI error given as a bare string, and an Anthropic `event: error` of another data type, are replaced too", async () => {
    upstream.reply({ kind: "sse", chunks: [openaiChunk({ content: "Partial" }), `data: {"error":"backend 10.0.3.7:8443 failed"}\n\n`] });
    const a = await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true })).text();
    expect(a).not.toContain("10.0.3.7");
    expect(errorFrameMessage(a, "openai")).toBe("The upstream provider reported an error during the answer: backend [host] failed");

    upstream.reply({ kind: "sse", chunks: [...anthropicStream("x").chunks.slice(0, 3), anthropicEvent("error", { type: "server_error", message: "worker at 10.0.3.7:8443 died" })] });
    const b = await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: question, stream: true })).text();
    expect(b).not.toContain("10.0.3.7");
    expect(errorFrameMessage(b, "anthropic")).toBe("The upstream provider reported an error during the answer: worker at [host] died");
  });
});

describe("a vendor that echoes the prompt in its error (issue 32 item 9)", () => {
  test("no run of the prompt reaches the log, however the vendor writes it; the detail is at most 200 characters", async () => {
    const secretPrompt = "My diagnosis is hypertension stage two and my account number is nine four two";
    const echoes = [
      // Unquoted, in the message itself.
      { error: { message: `Invalid content ${secretPrompt} exceeds the policy`, type: "invalid_request_error", param: null, code: null } },
      // Cut into a longer vendor sentence, with single quotes too short for the quoted-span rule.
      { error: { message: `Rejected: '${secretPrompt.slice(0, 30)}' and then ${secretPrompt.slice(30)} was flagged`, type: "invalid_request_error" } },
    ];
    for (const body of echoes) {
      logLines.length = 0;
      upstream.reply({ kind: "json", status: 400, body });
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: secretPrompt }] });
      await res.text();
      await gw.app.services.settled();
      const line = logLines.find((l) => l.includes("upstream error status"))!;
      expect(line).toBeDefined();
      const detail = JSON.parse(line).detail as string;
      expect(detail.length).toBeLessThanOrEqual(200);
      for (let at = 0; at + 16 <= secretPrompt.length; at += 1) expect(logLines.join("\n")).not.toContain(secretPrompt.slice(at, at + 16));
      expect(detail).toContain("[request text omitted]");
    }
  });
});

describe("an upstream that redirects elsewhere, on the paths that go through fetch (a proxy configured, key probes)", () => {
  /** Another origin, recording what reaches it, answering as a vendor would. */
  function elsewhere() {
    const seen: { method: string; apiKey: string | null; authorization: string | null; body: string }[] = [];
    const server = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      async fetch(req) {
        seen.push({ method: req.method, apiKey: req.headers.get("x-api-key"), authorization: req.headers.get("authorization"), body: await req.text() });
        return Response.json({ id: "msg_elsewhere", type: "message", role: "assistant", model: "m", content: [{ type: "text", text: "from elsewhere" }], stop_reason: "end_turn", stop_sequence: null, usage: { input_tokens: 10, output_tokens: 5 } });
      },
    });
    return { seen, url: `http://localhost:${server.port}`, stop: () => server.stop(true) };
  }

  test("is not followed: the vendor key and the prompt stay where they were sent, the client gets a 502 and pays nothing", async () => {
    const other = elsewhere();
    const proxied = await startGateway({ upstreamUrl: upstream.url, upstreamViaProxy: true, retry: { max_retries: 0 } });
    try {
      for (const status of [302, 307, 308]) {
        upstream.reply({ kind: "text", status, headers: { location: `${other.url}/v1/messages` }, body: "" });
        const before = await proxied.balanceMicro();
        const res = await post(proxied, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 20, messages: [{ role: "user", content: "a private prompt" }] });
        expect(res.status).toBe(502);
        expect(await res.text()).not.toContain("elsewhere");
        expect(await proxied.balanceMicro()).toBe(before);
      }
      expect(other.seen).toEqual([]);
    } finally {
      await proxied.stop();
      other.stop();
    }
  });

  test("a key probe (GET, always through fetch) is not followed either", async () => {
    const other = elsewhere();
    try {
      // The transport the key pools probe through: the gateway's own, which hands GETs to fetch.
      upstream.reply({ kind: "text", status: 301, headers: { location: `${other.url}/v1/models` }, body: "" });
      const redirected = await gw.app.services.upstream.fetch(`${upstream.url}/v1/models`, { method: "GET", headers: { "x-api-key": VENDOR_ANTHROPIC_KEY } });
      expect(redirected.status).toBe(301);
      await redirected.arrayBuffer();
      expect(other.seen).toEqual([]);
    } finally {
      other.stop();
    }
  });
});
