import { describe, expect, test } from "bun:test";
import { jsonLogger, type Logger } from "../../src/log/log.ts";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, startGateway, useGateway, type Gateway, type GatewayOptions } from "../helpers/gateway.ts";

type Line = { level: string; message: string; fields: Record<string, any> };
const lines: Line[] = [];
const capture: Logger = (level, message, fields) => lines.push({ level, message, fields: JSON.parse(JSON.stringify(fields ?? {})) });

const PROMPT = "the secret prompt words";
const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, log: capture, firstByteMs: 300, idleMs: 300, retry: { max_retries: 0 } }));

/** The access-log line of a request, once it has finished (streams finish after their last byte). */
async function accessLine(id: string, g: Gateway = gw): Promise<Line> {
  await g.app.services.settled();
  const deadline = Date.now() + 2_000;
  for (;;) {
    const line = lines.find((l) => l.message === "request" && l.fields.clientRequestId === id);
    if (line) return line;
    if (Date.now() > deadline) throw new Error(`no access-log line for ${id}`);
    await Bun.sleep(5);
  }
}

const ask = (id: string, body: Record<string, unknown>, path = "/v1/chat/completions", signal?: AbortSignal) =>
  post(gw, path, { messages: [{ role: "user", content: PROMPT }], ...body }, { "x-request-id": id }, signal);

describe("one access-log line per finished request", () => {
  test("complete: every field, no prompt text, no key", async () => {
    const res = await ask("done-1", { model: OPENAI_MODEL });
    const answer = (await res.json()) as { id: string; usage: { prompt_tokens: number; completion_tokens: number } };
    const line = await accessLine("done-1");
    expect(line.level).toBe("info");
    const f = line.fields;
    expect(f).toMatchObject({
      clientRequestId: "done-1",
      requestId: `req_${answer.id.slice("chatcmpl-".length)}`,
      method: "POST",
      path: "/v1/chat/completions",
      status: 200,
      outcome: "complete",
      stream: false,
      modelRequested: OPENAI_MODEL,
      model: OPENAI_MODEL,
      provider: "fake-openai",
      attempts: 1,
      promptTokens: answer.usage.prompt_tokens,
      completionTokens: answer.usage.completion_tokens,
      accountId: gw.accountId,
      keyId: gw.keyId,
    });
    expect(f.credits).toBeGreaterThan(0);
    for (const field of ["addedMs", "ttfbMs", "upstreamMs", "totalMs"]) expect(f[field]).toBeGreaterThanOrEqual(0);
    expect(f.addedMs).toBeLessThanOrEqual(f.ttfbMs);
    expect(f.upstreamMs).toBeLessThanOrEqual(f.totalMs);
    const text = JSON.stringify(line);
    expect(text).not.toContain(PROMPT);
    expect(text).not.toContain("Echo:");
    expect(text).not.toContain(gw.key);
  });

  test("a streamed answer, completed: time to first byte and the model that answered after a fallback", async () => {
    upstream.reply({ kind: "json", status: 503, body: { error: { message: "busy", type: "server_error" } } });
    const res = await ask("stream-1", { model: "claude-alias-none", models: [OPENAI_MODEL, ANTHROPIC_MODEL], stream: true }, "/v1/chat/completions");
    // An unknown `model` is a 404 before anything runs; ask again with real ids.
    expect(res.status).toBe(404);
    await res.arrayBuffer();
    const ok = await ask("stream-2", { models: [OPENAI_MODEL, ANTHROPIC_MODEL], stream: true });
    await ok.text();
    const f = (await accessLine("stream-2")).fields;
    expect(f).toMatchObject({ status: 200, outcome: "complete", stream: true, model: ANTHROPIC_MODEL, provider: "fake-anthropic", attempts: 2, upstreamError: "status_5xx" });
    expect(f.completionTokens).toBeGreaterThan(0);
    expect(f.ttfbMs).toBeLessThanOrEqual(f.totalMs);
    expect((await accessLine("stream-1")).fields).toMatchObject({ status: 404, outcome: "rejected", errorType: "not_found", modelRequested: "claude-alias-none", attempts: 0 });
  });

  test("client abort: the client leaves mid-stream", async () => {
    upstream.reply({ kind: "fixture", name: "openai-text.sse", split: "frames", delayMs: 40 });
    const controller = new AbortController();
    const res = await ask("abort-1", { model: OPENAI_MODEL, stream: true }, "/v1/chat/completions", controller.signal);
    const reader = res.body!.getReader();
    await reader.read();
    controller.abort();
    const f = (await accessLine("abort-1")).fields;
    expect(f).toMatchObject({ status: 200, outcome: "client_abort", stream: true, model: OPENAI_MODEL, attempts: 1 });
    expect(f.ttfbMs).toBeGreaterThan(0);
  });

  test("upstream error: refused before the answer (502), and broken after it started (an error frame)", async () => {
    upstream.reply({ kind: "json", status: 500, body: { error: { message: "down", type: "server_error" } } });
    expect((await ask("up-1", { model: OPENAI_MODEL })).status).toBe(502);
    const refused = await accessLine("up-1");
    expect(refused.level).toBe("warn");
    expect(refused.fields).toMatchObject({ status: 502, outcome: "upstream_error", upstreamError: "status_5xx", errorType: "upstream", attempts: 1, credits: 0 });

    upstream.reply({ kind: "fixture", name: "openai-midstream-error.sse", split: "frames", delayMs: 30 });
    await (await ask("up-2", { model: OPENAI_MODEL, stream: true })).text();
    expect((await accessLine("up-2")).fields).toMatchObject({ status: 200, outcome: "upstream_error", upstreamError: "stream_broken", stream: true });
  });

  test("timeout: no head within first_byte_ms (502), and a stream that goes quiet past idle_ms", async () => {
    upstream.reply({ kind: "hang" });
    expect((await ask("slow-1", { model: OPENAI_MODEL })).status).toBe(502);
    expect((await accessLine("slow-1")).fields).toMatchObject({ status: 502, outcome: "timeout", upstreamError: "timeout", errorType: "timeout" });

    const frame = `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { content: "Partial" }, finish_reason: null }] })}\n\n`;
    upstream.reply({ kind: "sse", chunks: [frame], holdOpen: true });
    await (await ask("slow-2", { model: OPENAI_MODEL, stream: true })).text();
    expect((await accessLine("slow-2")).fields).toMatchObject({ status: 200, outcome: "timeout", upstreamError: "timeout", stream: true });
  });

  test("refusals before the pipeline: a bad key, and probes only when they fail", async () => {
    const res = await fetch(`${gw.url}/v1/messages`, { method: "POST", headers: { "x-request-id": "nokey-1", "x-api-key": "svc-sk-wrong" }, body: "{}" });
    expect(res.status).toBe(401);
    expect((await accessLine("nokey-1")).fields).toMatchObject({ status: 401, outcome: "rejected", path: "/v1/messages", attempts: 0 });
    expect(JSON.stringify(lines)).not.toContain("svc-sk-wrong");
    await (await fetch(`${gw.url}/health`, { headers: { "x-request-id": "probe-1" } })).text();
    await gw.app.services.settled();
    expect(lines.some((l) => l.fields.clientRequestId === "probe-1")).toBe(false);
  });
});

describe("sampling and switches", () => {
  async function withGateway(ops: GatewayOptions["ops"], log: Logger, run: (g: Gateway) => Promise<void>) {
    const g = await startGateway({ upstreamUrl: upstream.url, log, ops, retry: { max_retries: 0 } });
    try {
      await run(g);
    } finally {
      await g.stop();
    }
  }

  test("as written by the gateway's own logger: what the client wrote (request id, model, path) is scrubbed when it looks like a secret, and written as it is when plain", async () => {
    const written: string[] = [];
    const g = await startGateway({ upstreamUrl: upstream.url, log: jsonLogger("info", (text) => written.push(text)) });
    try {
      const secretId = "sk-proj-Abcdefghijklmnop1234567890";
      for (const [id, model] of [[secretId, OPENAI_MODEL], ["plain-id-7", "key=hunter2hunter2"], ["plain-id-8", OPENAI_MODEL]] as const) {
        const res = await post(g, "/v1/chat/completions", { model, messages: [{ role: "user", content: PROMPT }] }, { "x-request-id": id });
        await res.arrayBuffer();
      }
      await g.app.services.settled();
      await Bun.sleep(20);
      const access = written.join("").split("\n").filter((l) => l.includes('"message":"request"')).map((l) => JSON.parse(l));
      expect(access.length).toBe(3);
      expect(JSON.stringify(access)).not.toContain(secretId);
      expect(JSON.stringify(access)).not.toContain("hunter2hunter2");
      expect(access.some((l) => l.clientRequestId === "[redacted]")).toBe(true);
      expect(access.find((l) => l.clientRequestId === "plain-id-7").modelRequested).toBe("key=[redacted]");
      expect(access.find((l) => l.clientRequestId === "plain-id-8")).toMatchObject({ method: "POST", path: "/v1/chat/completions", modelRequested: OPENAI_MODEL, status: 200 });
    } finally {
      await g.stop();
    }
  });

  test("SWITCHYARD_ACCESS_LOG_SAMPLE=0 logs no successes, every error; SWITCHYARD_ACCESS_LOG=off logs none", async () => {
    const seen: Line[] = [];
    const log: Logger = (level, message, fields) => seen.push({ level, message, fields: fields ?? {} });
    await withGateway({ metrics: true, accessLog: { enabled: true, sample: 0, level: "info" } }, log, async (g) => {
      for (let i = 0; i < 5; i++) await (await post(g, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] })).arrayBuffer();
      await (await post(g, "/v1/chat/completions", { model: "no/such", messages: [{ role: "user", content: "hi" }] })).arrayBuffer();
      upstream.reply({ kind: "json", status: 500, body: { error: { message: "down", type: "server_error" } } });
      await (await post(g, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] })).arrayBuffer();
      await g.app.services.settled();
      expect(seen.filter((l) => l.message === "request").map((l) => l.fields.status)).toEqual([404, 502]);
    });
    seen.length = 0;
    await withGateway({ metrics: true, accessLog: { enabled: false, sample: 1, level: "info" } }, log, async (g) => {
      await (await post(g, "/v1/chat/completions", { model: "no/such", messages: [{ role: "user", content: "hi" }] })).arrayBuffer();
      await g.app.services.settled();
      expect(seen.filter((l) => l.message === "request")).toEqual([]);
    });
  });

  test("SWITCHYARD_ACCESS_LOG_LEVEL=debug: below LOG_LEVEL=info, successes are not written; 5xx lines are warn and are", async () => {
    const written: string[] = [];
    const original = process.stderr.write;
    process.stderr.write = ((chunk: string) => (written.push(String(chunk)), true)) as typeof process.stderr.write;
    try {
      await withGateway({ metrics: true, accessLog: { enabled: true, sample: 1, level: "debug" } }, jsonLogger("info"), async (g) => {
        await (await post(g, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] }, { "x-request-id": "dbg-ok" })).arrayBuffer();
        upstream.reply({ kind: "json", status: 500, body: { error: { message: "down", type: "server_error" } } });
        await (await post(g, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] }, { "x-request-id": "dbg-502" })).arrayBuffer();
        await g.app.services.settled();
      });
    } finally {
      process.stderr.write = original;
    }
    const access = written.map((w) => JSON.parse(w)).filter((l) => l.message === "request");
    expect(access.map((l) => [l.clientRequestId, l.level, l.status])).toEqual([["dbg-502", "warn", 502]]);
  });
});
