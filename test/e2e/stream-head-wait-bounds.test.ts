import { afterAll, beforeAll, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { OPENAI_PRICING, post, startGateway, type Gateway } from "../helpers/gateway.ts";
import { pump, rawUpstream, type RawSocket, type RawUpstream } from "../helpers/raw-upstream.ts";

/**
 * The head waits for the answer's first text for at most keepalive_ms (stream-answer.ts), reading
 * the upstream as fast as it writes, with no client to slow it. An upstream that repeats the
 * events that open an answer (OpenAI's empty role chunk, Anthropic's ping) as fast as it can,
 * without a first text, must not be held whole for that time: past OPENING_HOLD_CHARS the head
 * goes out with what came, and the client's pace bounds the rest, as for any stream.
 */
const healthy = useFakeUpstream();
/** Long, so a wait that runs to it fails the test's own time limit. */
const KEEPALIVE_MS = 30_000;
const HEAD = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
const json = JSON.stringify;
const chunk = (delta: unknown, finish: string | null = null, usage?: unknown) =>
  `data: ${json({ id: "chatcmpl-flood", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, delta, finish_reason: finish }], ...(usage ? { usage } : {}) })}\n\n`;
const anthropic = (event: string, data: Record<string, unknown>) => `event: ${event}\ndata: ${json({ type: event, ...data })}\n\n`;

/** Per upstream kind: what opens its stream, what it repeats, and the rest of a short answer. */
const WIRE = {
  openai: {
    open: chunk({ role: "assistant", content: "" }),
    repeat: chunk({ role: "assistant", content: "" }),
    rest: chunk({ content: "Hello" }) + chunk({}, "stop", { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 }) + "data: [DONE]\n\n",
  },
  anthropic: {
    open: anthropic("message_start", { message: { id: "msg_flood", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 9, output_tokens: 1 } } }),
    repeat: anthropic("ping", {}),
    rest:
      anthropic("content_block_start", { index: 0, content_block: { type: "text", text: "" } }) +
      anthropic("content_block_delta", { index: 0, delta: { type: "text_delta", text: "Hello" } }) +
      anthropic("content_block_stop", { index: 0 }) +
      anthropic("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 2 } }) +
      anthropic("message_stop", {}),
  },
};
type Kind = keyof typeof WIRE;

let kind: Kind = "openai";
/** Set by the test once the client has its head: the flood stops and the answer follows. */
let stopFlood = false;
let raw: RawUpstream;
let gw: Gateway;

function flood(socket: RawSocket) {
  const wire = WIRE[kind];
  socket.write(HEAD + wire.open);
  const piece = new TextEncoder().encode(wire.repeat.repeat(Math.ceil(64 * 1024 / wire.repeat.length)));
  void pump(socket, () => (stopFlood ? null : piece)).then(() => socket.data.closed || socket.end(wire.rest));
}

beforeAll(async () => {
  raw = rawUpstream((_request, socket) => flood(socket));
  const timeouts = { first_byte_ms: 5_000, whole_answer_ms: 5_000, idle_ms: 5_000, total_ms: 60_000 };
  gw = await startGateway({
    upstreamUrl: healthy.url,
    credits: 100,
    retry: { max_retries: 0 },
    server: { keepalive_ms: KEEPALIVE_MS },
    extraProviders: [
      { id: "flood", kind: "openai", base_url: `${raw.url}/v1`, api_key_env: "TEST_OPENAI_KEY", timeouts },
      { id: "flood-claude", kind: "anthropic", base_url: raw.url, api_key_env: "TEST_ANTHROPIC_KEY", timeouts },
    ],
    extraModels: [
      { id: "test/flood", provider: "flood", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: OPENAI_PRICING },
      { id: "test/flood-claude", provider: "flood-claude", upstream_model: "claude-sonnet-4-5", category: "text", context_length: 200_000, pricing: OPENAI_PRICING },
    ],
  });
});
afterAll(async () => {
  await gw?.stop();
  raw?.stop();
});

const records = () => gw.db.query<{ status: string; cost_micro: number }, []>("SELECT status, cost_micro FROM usage_records ORDER BY id").all();

for (const [name, model, path, body] of [
  ["OpenAI's role chunk, to a chat client", "test/flood", "/v1/chat/completions", { messages: [{ role: "user", content: "Hi" }], stream: true }],
  ["Anthropic's ping, to a messages client", "test/flood-claude", "/v1/messages", { max_tokens: 50, messages: [{ role: "user", content: "Hi" }], stream: true }],
] as const) {
  test(`${name}, repeated as fast as the upstream can, before any text: the head goes out once a bounded amount came, not at keepalive_ms, and the answer after it is whole and charged once`, async () => {
    kind = model === "test/flood" ? "openai" : "anthropic";
    stopFlood = false;
    const before = records().length;
    const started = performance.now();
    const res = await post(gw, path, { model, ...body });
    expect(res.status).toBe(200);
    // Without the bound the head waited all of keepalive_ms while the gateway took in everything.
    expect(performance.now() - started).toBeLessThan(KEEPALIVE_MS / 3);
    stopFlood = true;
    const text = await res.text();
    expect(text).toContain('"Hello"');
    expect(text).not.toContain("error");
    await gw.app.services.settled();
    const settled = records().slice(before);
    expect(settled.map((r) => r.status)).toEqual(["ok"]);
    expect(settled[0]!.cost_micro).toBeGreaterThan(0);
    expect(gw.app.services.ledger.openHolds()).toBe(0);
  }, 20_000);
}
