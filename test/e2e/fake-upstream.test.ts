import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import { readFixture, startFakeUpstream, type FakeUpstream } from "../helpers/fake-upstream.ts";

let up: FakeUpstream;

beforeAll(async () => {
  up = await startFakeUpstream();
});
afterAll(async () => {
  await up.stop();
});
beforeEach(() => up.reset());

function post(path: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${up.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
}

/** Split an SSE body into frames of { event, data } (LF line endings). */
function frames(body: string) {
  return body
    .split("\n\n")
    .filter(Boolean)
    .map((f) => {
      const lines = f.split("\n");
      return {
        event: lines.find((l) => l.startsWith("event: "))?.slice(7),
        data: lines.find((l) => l.startsWith("data: "))!.slice(6),
      };
    });
}

async function readAll(res: Response): Promise<Uint8Array> {
  return new Uint8Array(await res.arrayBuffer());
}

describe("default OpenAI behaviour", () => {
  const messages = [
    { role: "system", content: "Be brief." }, // 9 chars
    { role: "user", content: [{ type: "text", text: "Hello" }, { type: "text", text: "there" }] }, // 10 chars
  ];

  test("non-stream chat.completion", async () => {
    const res = await post("/v1/chat/completions", { model: "gpt-4o-mini", messages }, { authorization: "Bearer sk-x" });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/json");
    const raw = await res.text();
    expect(raw.endsWith("}\n")).toBe(true);
    const body = JSON.parse(raw);
    expect(body).toMatchObject({
      object: "chat.completion",
      model: "gpt-4o-mini",
      service_tier: "default",
      system_fingerprint: expect.stringMatching(/^fp_/),
      choices: [{ index: 0, message: { role: "assistant", content: "Echo: Hello there", refusal: null, annotations: [] }, logprobs: null, finish_reason: "stop" }],
      usage: { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8, prompt_tokens_details: { cached_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0 } },
    });
    expect(body.id).toMatch(/^chatcmpl-/);
    expect(typeof body.created).toBe("number");
  });

  test("stream without include_usage has no usage at all", async () => {
    const res = await post("/v1/chat/completions", { model: "gpt-4o-mini", messages, stream: true });
    expect(res.headers.get("content-type")).toStartWith("text/event-stream");
    const fs = frames(await res.text());
    expect(fs.at(-1)!.data).toBe("[DONE]");
    const chunks = fs.slice(0, -1).map((f) => JSON.parse(f.data));
    expect(chunks[0].choices[0].delta).toEqual({ role: "assistant", content: "", refusal: null });
    expect(chunks.map((c) => c.choices[0].delta.content ?? "").join("")).toBe("Echo: Hello there");
    expect(chunks.slice(1, 4).map((c) => c.choices[0].delta.content)).toEqual(["Echo:", " Hello", " there"]);
    expect(chunks.at(-1).choices[0]).toEqual({ index: 0, delta: {}, logprobs: null, finish_reason: "stop" });
    for (const c of chunks) {
      expect(c.object).toBe("chat.completion.chunk");
      expect("usage" in c).toBe(false);
    }
  });

  test("stream with include_usage: usage:null on every chunk, then a usage-only chunk", async () => {
    const res = await post("/v1/chat/completions", { model: "m", messages, stream: true, stream_options: { include_usage: true } });
    const fs = frames(await res.text());
    expect(fs.at(-1)!.data).toBe("[DONE]");
    const chunks = fs.slice(0, -1).map((f) => JSON.parse(f.data));
    const last = chunks.pop();
    for (const c of chunks) expect(c.usage).toBeNull();
    expect(last.choices).toEqual([]);
    expect(last.usage).toMatchObject({ prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 });
  });
});

describe("default Anthropic behaviour", () => {
  const body = { model: "claude-sonnet-4-5", max_tokens: 100, system: "Be brief.", messages: [{ role: "user", content: "Hello there" }] };

  test("non-stream message", async () => {
    const res = await post("/v1/messages", body, { "x-api-key": "sk-ant", "anthropic-version": "2023-06-01" });
    expect(res.status).toBe(200);
    const msg = (await res.json()) as any;
    expect(msg).toMatchObject({
      type: "message",
      role: "assistant",
      model: "claude-sonnet-4-5",
      content: [{ type: "text", text: "Echo: Hello there" }],
      stop_reason: "end_turn",
      stop_sequence: null,
      usage: { input_tokens: 5, output_tokens: 3, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
    });
    expect(msg.id).toMatch(/^msg_/);
  });

  test("stream events", async () => {
    const res = await post("/v1/messages", { ...body, stream: true });
    expect(res.headers.get("content-type")).toStartWith("text/event-stream");
    const raw = await res.text();
    expect(raw).toContain('event: ping\ndata: {"type": "ping"}\n\n');
    const evs = frames(raw).map((f) => ({ name: f.event, data: JSON.parse(f.data) }));
    expect(evs.map((e) => e.name)).toEqual([
      "message_start",
      "content_block_start",
      "ping",
      "content_block_delta",
      "content_block_delta",
      "content_block_delta",
      "content_block_stop",
      "message_delta",
      "message_stop",
    ]);
    for (const e of evs) expect(e.data.type).toBe(e.name);
    expect(evs[0]!.data.message.usage).toMatchObject({ input_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 });
    expect(evs.filter((e) => e.name === "content_block_delta").map((e) => e.data.delta.text).join("")).toBe("Echo: Hello there");
    const delta = evs.find((e) => e.name === "message_delta")!.data;
    expect(delta.delta).toEqual({ stop_reason: "end_turn", stop_sequence: null });
    expect(delta.usage.output_tokens).toBe(3);
  });

  test("unknown paths get each vendor's 404 shape", async () => {
    const a = await post("/v1/nope", {}, { "anthropic-version": "2023-06-01" });
    expect(a.status).toBe(404);
    expect(await a.json()).toMatchObject({ type: "error", error: { type: "not_found_error" } });
    const o = await fetch(`${up.url}/v1/models/xyz`);
    expect(o.status).toBe(404);
    expect(await o.json()).toMatchObject({ error: { type: "invalid_request_error", param: null, code: null } });
  });
});

describe("queued replies", () => {
  const names = [
    "openai-text.sse",
    "openai-tools.sse",
    "openai-crlf.sse",
    "openai-no-usage.sse",
    "openai-midstream-error.sse",
    "anthropic-text.sse",
    "anthropic-tools.sse",
    "anthropic-midstream-error.sse",
    "openai-text.json",
    "openai-tools.json",
    "anthropic-text.json",
    "anthropic-tools.json",
  ];
  for (const name of names) {
    for (const split of [undefined, "frames", "bytes", 13] as const) {
      test(`fixture ${name} split=${split ?? "whole"} replays byte-identical`, async () => {
        up.reply({ kind: "fixture", name, split });
        const res = await post("/v1/chat/completions", { messages: [] });
        expect(res.headers.get("content-type")).toStartWith(name.endsWith(".sse") ? "text/event-stream" : "application/json");
        expect(await readAll(res)).toEqual(readFixture(name));
      });
    }
  }

  test("fixtures are internally consistent", () => {
    const text = (n: string) => new TextDecoder().decode(readFixture(n));
    const oa = frames(text("openai-text.sse"));
    const chunks = oa.filter((f) => f.data !== "[DONE]").map((f) => JSON.parse(f.data));
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")).toBe("Hello! How can I help you today?");
    expect(chunks.at(-1).usage).toMatchObject({ prompt_tokens: 12, completion_tokens: 9, total_tokens: 21 });
    expect(text("openai-crlf.sse").replace(/: keep-alive\r\n\r\n/g, "").replace(/\r\n/g, "\n")).toBe(text("openai-text.sse"));
    expect(text("openai-no-usage.sse")).not.toContain("usage");
    expect(text("openai-midstream-error.sse")).not.toContain("[DONE]");
    const tools = frames(text("openai-tools.sse")).filter((f) => f.data !== "[DONE]").map((f) => JSON.parse(f.data));
    expect(tools.map((c) => c.choices[0]?.delta.tool_calls?.[0].function.arguments ?? "").join("")).toBe('{"city":"Paris"}');
    const at = frames(text("anthropic-tools.sse")).map((f) => JSON.parse(f.data));
    expect(at.filter((e) => e.delta?.type === "input_json_delta").map((e) => e.delta.partial_json).join("")).toBe('{"city":"Paris"}');
    expect(JSON.parse(text("anthropic-text.json")).usage).toMatchObject({ input_tokens: 12, output_tokens: 9 });
    expect(JSON.parse(text("openai-text.json")).usage).toMatchObject({ prompt_tokens: 12, completion_tokens: 9, total_tokens: 21 });
  });

  test("split frames arrive as separate reads when delayed", async () => {
    up.reply({ kind: "fixture", name: "anthropic-text.sse", split: "frames", delayMs: 15 });
    const res = await post("/v1/messages", {});
    const reader = res.body!.getReader();
    const reads: string[] = [];
    for (let r = await reader.read(); !r.done; r = await reader.read()) reads.push(new TextDecoder().decode(r.value));
    expect(reads.length).toBe(9);
    expect(reads[0]!.startsWith("event: message_start\n")).toBe(true);
    expect(reads.join("")).toBe(new TextDecoder().decode(readFixture("anthropic-text.sse")));
  });

  test("json, text and function replies are FIFO, then the default resumes", async () => {
    up.reply({ kind: "json", status: 429, headers: { "retry-after": "1" }, body: { error: { message: "slow down" } } });
    up.reply({ kind: "text", status: 200, headers: { "content-type": "text/html" }, body: "<html>oops</html>" });
    up.reply((req) => ({ kind: "json", body: { saw: req.body.n } }));
    const r1 = await post("/v1/chat/completions", { n: 1 });
    expect(r1.status).toBe(429);
    expect(r1.headers.get("retry-after")).toBe("1");
    expect(await r1.json()).toEqual({ error: { message: "slow down" } });
    const r2 = await post("/v1/chat/completions", { n: 2 });
    expect(r2.headers.get("content-type")).toBe("text/html");
    expect(await r2.text()).toBe("<html>oops</html>");
    expect(await (await post("/v1/chat/completions", { n: 3 })).json()).toEqual({ saw: 3 });
    const r4 = (await (await post("/v1/chat/completions", { messages: [{ role: "user", content: "x" }] })).json()) as any;
    expect(r4.choices[0].message.content).toBe("Echo: x");
  });
});

describe("recording and stream accounting", () => {
  test("requests are recorded with lowercased headers and parsed bodies", async () => {
    await fetch(`${up.url}/v1/chat/completions?x=1`, {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: "Bearer sk-test", "X-Custom": "v" },
      body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] }),
    });
    await fetch(`${up.url}/raw`, { method: "POST", body: "not json" });
    expect(up.requests.length).toBe(2);
    const [a, b] = up.requests;
    expect(a).toMatchObject({ method: "POST", path: "/v1/chat/completions", body: { model: "m" } });
    expect(a!.url).toEndWith("/v1/chat/completions?x=1");
    expect(a!.headers.authorization).toBe("Bearer sk-test");
    expect(a!.headers["x-custom"]).toBe("v");
    expect(a!.rawBody).toBe(JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] }));
    expect(b!.body).toBeUndefined();
    expect(b!.rawBody).toBe("not json");
    up.reset();
    expect(up.requests.length).toBe(0);
  });

  test("a client abort of a holdOpen stream is observed", async () => {
    up.reply({ kind: "sse", holdOpen: true, chunks: ["data: one\n\n", "data: two\n\n"] });
    const ac = new AbortController();
    const res = await fetch(`${up.url}/v1/chat/completions`, { method: "POST", body: "{}", signal: ac.signal });
    const reader = res.body!.getReader();
    let got = "";
    while (!got.includes("two")) got += new TextDecoder().decode((await reader.read()).value);
    expect(got).toBe("data: one\n\ndata: two\n\n");
    expect(up.openStreams()).toBe(1);
    expect(up.abortedStreams()).toBe(0);
    ac.abort();
    const deadline = Date.now() + 3000;
    while (up.abortedStreams() < 1 && Date.now() < deadline) await Bun.sleep(10);
    expect(up.abortedStreams()).toBe(1);
    expect(up.openStreams()).toBe(0);
  });

  test("a completed stream is neither open nor aborted", async () => {
    await (await post("/v1/messages", { messages: [{ role: "user", content: "hi" }], stream: true })).text();
    expect(up.openStreams()).toBe(0);
    expect(up.abortedStreams()).toBe(0);
  });

  test("stop() releases holdOpen streams and hanging requests", async () => {
    const other = await startFakeUpstream();
    other.reply({ kind: "sse", holdOpen: true, chunks: ["data: x\n\n"] });
    other.reply({ kind: "hang" });
    const streaming = await fetch(`${other.url}/a`, { method: "POST" });
    const reader = streaming.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe("data: x\n\n");
    const hanging = fetch(`${other.url}/b`, { method: "POST" }).then(
      (r) => r.status,
      () => "error",
    );
    while (other.requests.length < 2) await Bun.sleep(5);
    expect(other.openStreams()).toBe(1);
    const t0 = Date.now();
    await other.stop();
    expect(Date.now() - t0).toBeLessThan(2000);
    const rest = await reader.read().then(
      (r) => r.done,
      () => "error",
    );
    expect([true, "error"]).toContain(rest);
    expect([503, "error"]).toContain(await hanging);
    expect(other.openStreams()).toBe(0);
  });
});
