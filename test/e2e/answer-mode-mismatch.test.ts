/**
 * An answer in the other mode than the request asked for (attempt.ts, `streamedWhole` and
 * `wholeStreamed`): self-hosted servers send an event stream to `stream: false` (unsloth#6570,
 * mini-sglang#51), and proxies a whole JSON answer to a stream request. The vendor made the answer
 * and may bill it: the client gets it in the mode it asked for, charged as counted, not a free 502.
 */
import { Database } from "bun:sqlite";
import { expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, sseFrames, useGateway } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, retry: { max_retries: 0 } }));

const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
const OPENAI_STREAM = [
  chunk({ role: "assistant", content: "" }),
  chunk({ content: "Hello" }),
  chunk({ content: " world" }),
  chunk({}, "stop"),
  `data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 1, model: "m", choices: [], usage: { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 } })}\n\n`,
  "data: [DONE]\n\n",
];
const ANTHROPIC_STREAM = [
  `event: message_start\ndata: ${JSON.stringify({ type: "message_start", message: { id: "msg_1", type: "message", role: "assistant", model: "claude", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 21, output_tokens: 1 } } })}\n\n`,
  `event: ping\ndata: {"type": "ping"}\n\n`,
  `event: content_block_start\ndata: ${JSON.stringify({ type: "content_block_start", index: 0, content_block: { type: "text", text: "" } })}\n\n`,
  `event: content_block_delta\ndata: ${JSON.stringify({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Bonjour" } })}\n\n`,
  `event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n`,
  `event: message_delta\ndata: ${JSON.stringify({ type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 9 } })}\n\n`,
  `event: message_stop\ndata: {"type":"message_stop"}\n\n`,
];

function lastRecord(): { prompt_tokens: number; completion_tokens: number; status: string; cost_micro: number; estimated: number } {
  const db = new Database(gw.dbPath, { readonly: true });
  try {
    return db.query<any, []>("SELECT prompt_tokens, completion_tokens, status, cost_micro, estimated FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
  } finally {
    db.close();
  }
}

test("a whole chat request answered with an event stream: one chat.completion, with the stream's text, finish and usage, charged as counted", async () => {
  upstream.reply({ kind: "sse", chunks: OPENAI_STREAM });
  const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toContain("application/json");
  const body = (await res.json()) as any;
  expect(body).toMatchObject({ object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: "Hello world" }, finish_reason: "stop" }], usage: { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 } });
  await gw.app.services.settled();
  expect(lastRecord()).toMatchObject({ prompt_tokens: 12, completion_tokens: 7, status: "ok", estimated: 0 });
  expect(lastRecord().cost_micro).toBeGreaterThan(0);
});

test("a whole Anthropic request answered with an event stream: one message, pings skipped, usage from message_start and message_delta", async () => {
  upstream.reply({ kind: "sse", chunks: ANTHROPIC_STREAM });
  const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 100, messages: [{ role: "user", content: "hi" }] });
  expect(res.status).toBe(200);
  const body = (await res.json()) as any;
  expect(body).toMatchObject({ type: "message", role: "assistant", content: [{ type: "text", text: "Bonjour" }], stop_reason: "end_turn", usage: { input_tokens: 21, output_tokens: 9 } });
  await gw.app.services.settled();
  expect(lastRecord()).toMatchObject({ prompt_tokens: 21, completion_tokens: 9, status: "ok" });
});

test("an OpenAI client of an Anthropic model whose whole answer came as an event stream: translated as any answer is", async () => {
  upstream.reply({ kind: "sse", chunks: ANTHROPIC_STREAM });
  const res = await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, max_tokens: 100, messages: [{ role: "user", content: "hi" }] });
  expect(res.status).toBe(200);
  expect(((await res.json()) as any)).toMatchObject({ object: "chat.completion", choices: [{ message: { content: "Bonjour" }, finish_reason: "stop" }], usage: { prompt_tokens: 21, completion_tokens: 9 } });
});

test("a stream request answered with a whole JSON answer: the client's frames, [DONE] last, charged as counted", async () => {
  upstream.reply({
    kind: "json",
    body: { id: "c2", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "Whole answer" }, finish_reason: "stop" }], usage: { prompt_tokens: 8, completion_tokens: 3, total_tokens: 11 } },
  });
  const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, stream: true, stream_options: { include_usage: true }, messages: [{ role: "user", content: "hi" }] });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toContain("text/event-stream");
  const frames = sseFrames(await res.text());
  expect(frames.at(-1)!.data).toBe("[DONE]");
  const chunks = frames.slice(0, -1).map((f) => JSON.parse(f.data));
  expect(chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("")).toBe("Whole answer");
  expect(chunks.at(-1).usage).toMatchObject({ prompt_tokens: 8, completion_tokens: 3 });
  await gw.app.services.settled();
  expect(lastRecord()).toMatchObject({ prompt_tokens: 8, completion_tokens: 3, status: "ok" });
});

test("a whole request answered with an event stream that carries an error: a 502 that costs nothing", async () => {
  const before = await gw.balanceMicro();
  upstream.reply({ kind: "sse", chunks: [chunk({ role: "assistant", content: "Hel" }), `data: ${JSON.stringify({ error: { message: "model crashed", type: "server_error" } })}\n\n`] });
  const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] });
  expect(res.status).toBe(502);
  expect(((await res.json()) as any).error.message).not.toContain("127.0.0.1");
  await gw.app.services.settled();
  expect(await gw.balanceMicro()).toBe(before);
});
