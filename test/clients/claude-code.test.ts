/**
 * Claude Code through the gateway, replayed from requests the real CLI (2.1.330) sent: its first
 * and second turn of a `Write` task for a budgeted-thinking model (Sonnet 4.5), an adaptive one
 * with a system turn inside `messages` (Opus 5.5) and an id it does not know (`openai/gpt-4.1`),
 * each against an Anthropic and an OpenAI upstream. The fake upstreams refuse what the real vendors
 * refuse (OpenAI strictly: unknown top-level fields too), so a request the gateway rewrote or
 * translated wrongly fails here as it would in production.
 */
import { describe, expect, test } from "bun:test";
import { useFakeUpstream, type RecordedRequest } from "../helpers/fake-upstream.ts";
import { post, sseFrames, startGateway, useGateway, type Gateway } from "../helpers/gateway.ts";
import { CLAUDE_CODE_RECORDINGS, claudeCodeFixture, claudeCodeScript, countTokensFixture, FINAL_TEXT, type RecordedCall } from "../helpers/claude-code.ts";
import type { LogLevel } from "../../src/log/log.ts";

const upstream = useFakeUpstream({ strict: true });
const logged: { level: LogLevel; message: string; fields?: Record<string, unknown> }[] = [];
const pricing = { input_per_mtok: 3000, output_per_mtok: 15000 };
const CLAUDE = "cc/claude";
const GPT = "openai/gpt-4.1";
const extraModels = [
  { id: CLAUDE, provider: "fake-anthropic", upstream_model: "claude-sonnet-4-5", category: "text", context_length: 200_000, pricing, aliases: ["claude-*", "claude-sonnet-4-5-20250929"] },
  { id: GPT, provider: "fake-openai", upstream_model: "gpt-4.1", category: "text", context_length: 1_047_576, pricing },
  { id: "cc/capped", provider: "fake-anthropic", upstream_model: "claude-capped", category: "text", context_length: 200_000, pricing, max_tokens_cap: 2000 },
  { id: "cc/tiny-cap", provider: "fake-anthropic", upstream_model: "claude-tiny", category: "text", context_length: 200_000, pricing, max_tokens_cap: 1000 },
  { id: "cc/small", provider: "fake-anthropic", upstream_model: "claude-small", category: "text", context_length: 30_000, pricing },
];
const gw = useGateway(() => ({ upstreamUrl: upstream.url, credits: 100_000, extraModels, retry: { max_retries: 0 }, log: (level, message, fields) => logged.push({ level, message, fields }) }));

/** Claude Code's headers as recorded, with this gateway's key where Claude Code puts it. */
function send(g: Gateway, call: RecordedCall, body: unknown = call.body, path = call.path): Promise<Response> {
  return fetch(g.url + path, { method: "POST", headers: { ...call.headers, "x-api-key": g.key }, body: JSON.stringify(body) });
}

/** The recorded body aimed at one upstream kind: Claude Code's own names reach the Anthropic model through `claude-*`. */
function aimed(call: RecordedCall, kind: "anthropic" | "openai") {
  const model = kind === "openai" ? GPT : String(call.body.model).startsWith("claude-") ? call.body.model : CLAUDE;
  return { ...call.body, model };
}

/** A response body as JSON, untyped: the tests assert its shape. */
const json = (res: Response): Promise<any> => res.json();

const parse = (frames: { event?: string; data: string }[]) => frames.filter((f) => f.data.startsWith("{")).map((f) => JSON.parse(f.data));

const OPENAI_ROLES_FOR = (m: any): string[] => {
  if (m.role !== "user" || !Array.isArray(m.content)) return [m.role];
  const results = m.content.filter((b: any) => b.type === "tool_result").map(() => "tool");
  return m.content.some((b: any) => b.type !== "tool_result") ? [...results, "user"] : results;
};

describe.each(CLAUDE_CODE_RECORDINGS)("Claude Code %s, replayed", (recording) => {
  for (const kind of ["anthropic", "openai"] as const) {
    test(`the Write task completes against an ${kind} upstream, streaming`, async () => {
      for (const turn of [1, 2]) {
        upstream.reset();
        const call = claudeCodeFixture(`${recording}.turn-${turn}`);
        upstream.reply(claudeCodeScript("/home/user/project/hello.txt", { strict: true }));
        const res = await send(gw, call, aimed(call, kind));
        const text = await res.text();
        expect(res.status, text).toBe(200);
        const events = parse(sseFrames(text));

        // What the client reads: a tool call first, the answer after the tool result.
        const start = events.find((e) => e.type === "message_start");
        expect(start.message.usage.input_tokens).toBeGreaterThan(1000); // the OpenAI route estimates it from the body's size
        const stop = events.find((e) => e.type === "message_delta").delta.stop_reason;
        if (turn === 1) {
          expect(stop).toBe("tool_use");
          const tool = events.find((e) => e.type === "content_block_start" && e.content_block.type === "tool_use");
          expect(tool.content_block.name).toBe("Write");
          const json = events.filter((e) => e.delta?.type === "input_json_delta" && e.index === tool.index).map((e) => e.delta.partial_json).join("");
          expect(JSON.parse(json).file_path).toBe("/home/user/project/hello.txt");
        } else {
          expect(stop).toBe("end_turn");
          expect(events.filter((e) => e.delta?.type === "text_delta").map((e) => e.delta.text).join("")).toBe(FINAL_TEXT);
        }

        // What the upstream got.
        expect(upstream.requests).toHaveLength(1);
        const sent = upstream.requests[0]!;
        if (kind === "anthropic") expectAnthropicPassthrough(call, sent);
        else expectOpenAITranslation(call, sent);
      }
    });
  }
});

function expectAnthropicPassthrough(call: RecordedCall, sent: RecordedRequest) {
  const body = call.body;
  expect(sent.path).toBe("/v1/messages");
  expect(sent.headers["anthropic-beta"]).toBe(call.headers["anthropic-beta"]!);
  expect(sent.headers["anthropic-version"]).toBe(call.headers["anthropic-version"]!);
  expect(sent.body.model).toBe("claude-sonnet-4-5");
  expect(sent.body.max_tokens).toBe(8192);
  // A recorded turn that continues a tool call made without thinking (this recording's answers came
  // from a fake vendor that does not think) goes without thinking: Anthropic would refuse it.
  const last = (body.messages as { role: string; content: unknown }[]).findLast((m) => m.role === "assistant");
  const blocks = last && Array.isArray(last.content) ? (last.content as { type: string }[]) : [];
  if (blocks.some((b) => b.type === "tool_use") && blocks[0]?.type !== "thinking" && blocks[0]?.type !== "redacted_thinking") {
    expect(sent.body.thinking).toBeUndefined();
    const edits = (body.context_management?.edits ?? []).filter((e: { type: string }) => !e.type.startsWith("clear_thinking"));
    expect(sent.body.context_management).toEqual(edits.length > 0 ? { ...body.context_management, edits } : undefined);
    for (const field of ["messages", "system", "tools", "metadata", "stream"]) expect(sent.body[field]).toEqual(body[field]);
    return;
  }
  if (body.thinking.type === "enabled") {
    // 32000 and 31999 asked; the cap lowers both, the budget to ¾ of max_tokens (room for the answer).
    expect(body.thinking.budget_tokens).toBeGreaterThanOrEqual(8192);
    expect(sent.body.thinking).toEqual({ ...body.thinking, budget_tokens: 6144 });
    expect(sent.body.output_config).toEqual(body.output_config);
  } else {
    // Adaptive thinking, asked of Opus 5.5 (or a model Claude Code does not know), reaches Sonnet 4.5
    // through `claude-*`: that model takes a budget, by the effort table, within ¾ of max_tokens.
    expect(body.thinking.type).toBe("adaptive");
    const budget = Math.min({ medium: 4096, high: 16_384 }[body.output_config.effort as "medium" | "high"], 6144);
    const { type: _, ...rest } = body.thinking;
    expect(sent.body.thinking).toEqual({ ...rest, type: "enabled", budget_tokens: budget });
    expect(sent.body.output_config).toBeUndefined();
  }
  // Everything else exactly as Claude Code sent it: system turns, cache_control, betas' fields.
  for (const field of ["messages", "system", "tools", "metadata", "context_management", "stream"]) {
    expect(sent.body[field]).toEqual(body[field]);
  }
}

function expectOpenAITranslation(call: RecordedCall, sent: RecordedRequest) {
  const body = call.body;
  expect(sent.path).toBe("/v1/chat/completions");
  expect(sent.body.model).toBe("gpt-4.1");
  expect(sent.body.max_tokens).toBe(8192);
  for (const gone of ["cache_control", "thinking", "context_management", "output_config", "defer_loading", "device_id", "tool_result", "input_schema"]) {
    expect(sent.rawBody).not.toContain(`"${gone}"`);
  }
  // The pseudonym, never Claude Code's device and session ids.
  // The bare digest: OpenAI refuses a `user` longer than 64 characters.
  expect(sent.body.user).toMatch(/^[0-9a-f]{64}$/);
  // The top-level system prompt first, then each turn where it was, system turns included.
  expect(sent.body.messages.map((m: any) => m.role)).toEqual(["system", ...body.messages.flatMap(OPENAI_ROLES_FOR)]);
  const systemTurns = body.messages.filter((m: any) => m.role === "system");
  expect(sent.body.messages.slice(1).filter((m: any) => m.role === "system").map((m: any) => m.content))
    .toEqual(systemTurns.map((m: any) => (typeof m.content === "string" ? m.content : m.content.map((b: any) => b.text).join("\n"))));
  // The system blocks are separate paragraphs.
  expect(sent.body.messages[0].content).toBe(body.system.map((b: any) => b.text).join("\n"));
  expect(sent.body.tools.map((t: any) => t.function.name)).toEqual(body.tools.map((t: any) => t.name));
}

describe("thinking budgets after the cap", () => {
  const sonnet = () => claudeCodeFixture("sonnet-4-5.turn-1");

  test("a model's own max_tokens_cap lowers the budget to ¾ of it", async () => {
    upstream.reply(claudeCodeScript("/x", { strict: true }));
    const res = await send(gw, sonnet(), { ...sonnet().body, model: "cc/capped" });
    expect(res.status, await res.text()).toBe(200);
    expect(upstream.requests[0]!.body.max_tokens).toBe(2000);
    expect(upstream.requests[0]!.body.thinking.budget_tokens).toBe(1500);
  });

  test("Qwen Code's request (budget 32,000 of max_tokens 64,000) keeps a quarter of the capped 8,192 for the answer, and says so in the log", async () => {
    logged.length = 0;
    const body = { model: CLAUDE, max_tokens: 64_000, thinking: { type: "enabled", budget_tokens: 32_000 }, messages: [{ role: "user", content: "write hello.txt" }] };
    const res = await post(gw, "/v1/messages", body);
    expect(res.status, await res.text()).toBe(200);
    const sent = upstream.requests[0]!.body;
    expect(sent.max_tokens).toBe(8192);
    expect(sent.thinking).toEqual({ type: "enabled", budget_tokens: 6144 });
    expect(sent.max_tokens - sent.thinking.budget_tokens).toBeGreaterThanOrEqual(sent.max_tokens / 4);
    expect(logged.find((l) => l.message.startsWith("thinking budget lowered"))?.fields).toMatchObject({
      model: CLAUDE, max_tokens: 8192, asked_max_tokens: 64_000, budget_tokens: 32_000, lowered_to: 6144,
    });
  });

  test("a budget the client chose inside its own max_tokens, which the cap did not touch, is sent as it is", async () => {
    const res = await post(gw, "/v1/messages", { model: CLAUDE, max_tokens: 8000, thinking: { type: "enabled", budget_tokens: 7000 }, messages: [{ role: "user", content: "hi" }] });
    expect(res.status, await res.text()).toBe(200);
    expect(upstream.requests[0]!.body.thinking).toEqual({ type: "enabled", budget_tokens: 7000 });
  });

  test("a budget under ¾ of max_tokens but squeezed by the cap is lowered to ¾ too", async () => {
    const res = await post(gw, "/v1/messages", { model: CLAUDE, max_tokens: 20_000, thinking: { type: "enabled", budget_tokens: 8000 }, messages: [{ role: "user", content: "hi" }] });
    expect(res.status, await res.text()).toBe(200);
    expect(upstream.requests[0]!.body.thinking).toEqual({ type: "enabled", budget_tokens: 6144 });
  });

  test("a cap that leaves no room for 1024 tokens of thinking turns thinking off, with a note in the log", async () => {
    logged.length = 0;
    upstream.reply(claudeCodeScript("/x", { strict: true }));
    const res = await send(gw, sonnet(), { ...sonnet().body, model: "cc/tiny-cap" });
    expect(res.status, await res.text()).toBe(200);
    const sent = upstream.requests[0]!.body;
    expect(sent.max_tokens).toBe(1000);
    expect(sent.thinking).toBeUndefined();
    // Its only edit clears thinking, which is not there any more.
    expect(sent.context_management).toBeUndefined();
    expect(logged.find((l) => l.message.startsWith("thinking turned off"))?.fields).toMatchObject({ model: "cc/tiny-cap", max_tokens: 1000, budget_tokens: 31999 });
  });

  test("a budget under the vendor's minimum is raised to 1024", async () => {
    const res = await post(gw, "/v1/messages", { model: CLAUDE, max_tokens: 4000, thinking: { type: "enabled", budget_tokens: 500 }, messages: [{ role: "user", content: "hi" }] });
    expect(res.status, await res.text()).toBe(200);
    expect(upstream.requests[0]!.body.thinking).toEqual({ type: "enabled", budget_tokens: 1024 });
  });
});

describe("POST /v1/messages/count_tokens", () => {
  const { headers, bodies } = countTokensFixture();
  const call = (body: unknown): RecordedCall => ({ method: "POST", path: "/v1/messages/count_tokens", headers, body });

  test("an Anthropic upstream counts: its number, its model name, Claude Code's betas", async () => {
    const body = bodies.find((b) => b.tools?.length > 1)!;
    const res = await send(gw, call(body));
    expect(res.status).toBe(200);
    const count = await json(res);
    const sent = upstream.requests[0]!;
    expect(sent.path).toBe("/v1/messages/count_tokens");
    expect(sent.headers["anthropic-beta"]).toBe(headers["anthropic-beta"]!);
    expect(sent.body).toEqual({ ...body, model: "claude-sonnet-4-5" });
    const expected = Math.ceil(body.messages.map((m: any) => (typeof m.content === "string" ? m.content : m.content.map((b: any) => b.text ?? "").join(""))).join("").length / 4)
      + Math.ceil(JSON.stringify(body.tools).length / 4);
    expect(count).toEqual({ input_tokens: expected });
  });

  test("other upstreams: the gateway's own estimate, nothing sent upstream", async () => {
    const body = bodies.find((b) => b.tools?.length > 1)!;
    const res = await send(gw, call({ ...body, model: GPT }));
    expect(res.status).toBe(200);
    const { input_tokens } = await json(res);
    // 12 tool definitions are some 10k tokens; the estimate is in that range, not a byte count.
    expect(input_tokens).toBeGreaterThan(5_000);
    expect(input_tokens).toBeLessThan(JSON.stringify(body).length / 2);
    expect(upstream.requests).toHaveLength(0);
  });

  test("an Anthropic upstream that cannot count gets the estimate; one that finds the request malformed is the client's 400", async () => {
    upstream.reply({ kind: "json", status: 500, body: { type: "error", error: { type: "api_error", message: "Internal server error" } } });
    const estimated = await send(gw, call(bodies[0]));
    expect(estimated.status).toBe(200);
    expect((await json(estimated)).input_tokens).toBeGreaterThan(0);
    upstream.reply({ kind: "json", status: 400, body: { type: "error", error: { type: "invalid_request_error", message: "messages.0.content: Field required" } } });
    const refused = await send(gw, call(bodies[0]));
    expect(refused.status).toBe(400);
    expect(await json(refused)).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
  });

  test("an Anthropic upstream that never answers a count is given up at the provider's first-byte limit, and the client gets the estimate", async () => {
    const g = await startGateway({ upstreamUrl: upstream.url, firstByteMs: 150, extraModels });
    try {
      upstream.reply({ kind: "hang" });
      const res = await send(g, call(bodies[0]));
      expect(res.status).toBe(200);
      expect((await json(res)).input_tokens).toBeGreaterThan(0);
      expect(upstream.requests.map((r) => r.path)).toEqual(["/v1/messages/count_tokens"]);
    } finally {
      await g.stop();
    }
  });

  test("unknown models and malformed bodies are refused in Anthropic's shape", async () => {
    const unknown = await send(gw, call({ ...bodies[0], model: "nobody/nothing" }));
    expect(unknown.status).toBe(404);
    expect(await json(unknown)).toMatchObject({ type: "error", error: { type: "not_found_error" } });
    const broken = await send(gw, call({ model: CLAUDE }));
    expect(broken.status).toBe(400);
    expect(await json(broken)).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
    const part = await send(gw, call({ model: CLAUDE, messages: [{ role: "user", content: [{ type: "text" }] }] }));
    expect((await json(part)).error.message).toBe("messages.0.content.0.text: Field required");
  });

  test("a whole /context (36 counts) fits a key of 4 requests a minute, is never charged, and leaves the chat budget alone", async () => {
    const g = await startGateway({ upstreamUrl: upstream.url, requestsPerMinute: 4, extraModels });
    try {
      const before = await g.balanceMicro();
      for (const body of bodies) {
        const res = await send(g, call(body));
        expect(res.status).toBe(200);
        expect(res.headers.get("x-ratelimit-limit-requests")).toBe("40");
      }
      expect(await g.balanceMicro()).toBe(before);
      for (let i = 0; i < 4; i++) {
        const res = await post(g, "/v1/messages", { model: CLAUDE, max_tokens: 10, messages: [{ role: "user", content: "hi" }] });
        expect(res.status).toBe(200);
        expect(res.headers.get("x-ratelimit-limit-requests")).toBe("4");
        await res.text();
      }
      const limited = await post(g, "/v1/messages", { model: CLAUDE, max_tokens: 10, messages: [{ role: "user", content: "hi" }] });
      expect(limited.status).toBe(429);
      expect(await json(limited)).toMatchObject({ type: "error", error: { type: "rate_limit_error" } });
      // The counting bucket has its own limit too.
      for (let i = bodies.length; i < 40; i++) expect((await send(g, call(bodies[0]))).status).toBe(200);
      expect((await send(g, call(bodies[0]))).status).toBe(429);
    } finally {
      await g.stop();
    }
  });
});

describe("errors Claude Code acts on", () => {
  const words = (tokens: number) => "lorem ipsum ".repeat(tokens / 2);

  test("a prompt over the context window: `prompt is too long: N tokens > M maximum`", async () => {
    const res = await post(gw, "/v1/messages", { model: "cc/small", max_tokens: 100, messages: [{ role: "user", content: words(40_000) }] });
    expect(res.status).toBe(400);
    const body = await json(res);
    expect(body).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
    expect(body.error.message).toMatch(/^prompt is too long: \d+ tokens > 30000 maximum$/);
    expect(upstream.requests).toHaveLength(0);
  });

  test("a prompt that fits but not with max_tokens: the wording Claude Code retries with a smaller max_tokens", async () => {
    const res = await post(gw, "/v1/messages", { model: "cc/small", max_tokens: 8000, messages: [{ role: "user", content: words(25_000) }] });
    expect(res.status).toBe(400);
    expect((await json(res)).error.message).toMatch(/^input length and `max_tokens` exceed context limit: \d+ \+ 8000 > 30000, decrease input length or `max_tokens` and try again$/);
  });

  test("an upstream's context refusal reaches Anthropic clients in Anthropic's words, from either vendor", async () => {
    upstream.reply({ kind: "json", status: 400, body: { type: "error", error: { type: "invalid_request_error", message: "prompt is too long: 208310 tokens > 200000 maximum" } } });
    const anthropic = await post(gw, "/v1/messages", { model: CLAUDE, max_tokens: 10, messages: [{ role: "user", content: "hi" }] });
    expect((await json(anthropic)).error).toEqual({ type: "invalid_request_error", message: "prompt is too long: 208310 tokens > 200000 maximum" });

    const openaiRefusal = {
      kind: "json" as const,
      status: 400,
      body: { error: { message: "This model's maximum context length is 1047576 tokens. However, your messages resulted in 1100000 tokens. Please reduce the length of the messages.", type: "invalid_request_error", param: "messages", code: "context_length_exceeded" } },
    };
    upstream.reply(openaiRefusal);
    const translated = await post(gw, "/v1/messages", { model: GPT, max_tokens: 10, messages: [{ role: "user", content: "hi" }] });
    expect(translated.status).toBe(400);
    expect((await json(translated)).error).toEqual({ type: "invalid_request_error", message: "prompt is too long: 1100000 tokens > 1047576 maximum" });
    // OpenAI clients keep the vendor's own words.
    upstream.reply(openaiRefusal);
    const openai = await post(gw, "/v1/chat/completions", { model: GPT, messages: [{ role: "user", content: "hi" }] });
    expect((await json(openai)).error.message).toContain("maximum context length is 1047576 tokens");
  });

  test("every failure on /v1/messages has Anthropic's shape and one of its error types", async () => {
    const ask = (model = CLAUDE, key = gw.key) =>
      fetch(gw.url + "/v1/messages", { method: "POST", headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" }, body: JSON.stringify({ model, max_tokens: 10, messages: [{ role: "user", content: "hi" }] }) });
    const cases: [() => Promise<Response>, number, string][] = [
      [() => ask(CLAUDE, "svc-sk-wrong"), 401, "authentication_error"],
      [() => ask("nobody/nothing"), 404, "not_found_error"],
      [() => (upstream.reply({ kind: "json", status: 529, body: { type: "error", error: { type: "overloaded_error", message: "Overloaded" } } }), ask()), 502, "overloaded_error"],
      [() => (upstream.reply({ kind: "json", status: 500, body: { type: "error", error: { type: "api_error", message: "Internal" } } }), ask()), 502, "api_error"],
      [() => post(gw, "/v1/messages", { model: CLAUDE, max_tokens: 10, messages: [{ role: "wizard", content: "hi" }] }), 400, "invalid_request_error"],
    ];
    for (const [run, status, type] of cases) {
      const res = await run();
      expect(res.status).toBe(status);
      const body: any = await json(res);
      expect(Object.keys(body).sort()).toEqual(["error", "type"]);
      expect(body.type).toBe("error");
      expect(body.error.type).toBe(type);
      expect(typeof body.error.message).toBe("string");
    }
  });
});

describe("model aliases", () => {
  test("Claude Code's own names reach the configured model; answers name the model that answered", async () => {
    for (const name of ["claude-sonnet-4-5", "claude-haiku-4-5-20251001", "claude-opus-5-5", "claude-sonnet-4-5-20250929"]) {
      upstream.reset();
      const res = await post(gw, "/v1/messages", { model: name, max_tokens: 10, messages: [{ role: "user", content: "hi" }] });
      expect(res.status).toBe(200);
      expect(((await json(res)) as { model: string }).model).toBe(CLAUDE);
      expect(upstream.requests[0]!.body.model).toBe("claude-sonnet-4-5");
    }
  });

  test("GET /v1/models lists exact aliases the way Anthropic's endpoint does, only for Anthropic clients", async () => {
    const anthropic: any = await (await fetch(gw.url + "/v1/models?limit=1000", { headers: { "x-api-key": gw.key, "anthropic-version": "2023-06-01" } })).json();
    expect(anthropic.data).toContainEqual({ type: "model", id: "claude-sonnet-4-5-20250929", display_name: CLAUDE, created_at: "2025-01-01T00:00:00Z" });
    expect(anthropic.data.map((m: any) => m.id)).not.toContain("claude-*");
    const openai: any = await (await fetch(gw.url + "/v1/models", { headers: { authorization: `Bearer ${gw.key}` } })).json();
    expect(openai.data.map((m: any) => m.id)).not.toContain("claude-sonnet-4-5-20250929");
  });
});
