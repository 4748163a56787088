/**
 * What the in-process benches (bench/in-process.ts, bench/in-process-compare.ts) feed the app and
 * how they drive it: an upstream answered from memory in each vendor's real format, the config
 * they run with, their request bodies, and the loop that measures CPU per request.
 */

const enc = new TextEncoder();
const usage = { prompt_tokens: 20, completion_tokens: 20, total_tokens: 40, prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 } };
const words = Array.from({ length: 20 }, (_, i) => (i ? " " : "") + ["Switchyard", "forwards", "each", "token", "as", "soon", "as", "it", "arrives"][i % 9]);
const openaiBody = enc.encode(JSON.stringify({
  id: "chatcmpl-Bench", object: "chat.completion", created: 1761565012, model: "gpt-4o-mini-2024-07-18",
  choices: [{ index: 0, message: { role: "assistant", content: words.join(""), refusal: null, annotations: [] }, logprobs: null, finish_reason: "stop" }],
  usage, service_tier: "default", system_fingerprint: "fp_560af6e559",
}));
const chunk = (choices: unknown[], u: unknown = null) =>
  `data: ${JSON.stringify({ id: "chatcmpl-Bench", object: "chat.completion.chunk", created: 1761565012, model: "gpt-4o-mini-2024-07-18", service_tier: "default", system_fingerprint: "fp_560af6e559", choices, usage: u, obfuscation: "abc" })}\n\n`;
const openaiFrames = [
  chunk([{ index: 0, delta: { role: "assistant", content: "", refusal: null }, logprobs: null, finish_reason: null }]),
  ...words.map((w) => chunk([{ index: 0, delta: { content: w }, logprobs: null, finish_reason: null }])),
  chunk([{ index: 0, delta: {}, logprobs: null, finish_reason: "stop" }]),
  chunk([], usage),
  "data: [DONE]\n\n",
].map((s) => enc.encode(s));
const ev = (type: string, data: unknown) => `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;
const anthropicFrames = [
  ev("message_start", { type: "message_start", message: { id: "msg_Bench", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 20, output_tokens: 1 } } }),
  ev("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }),
  ...words.map((w) => ev("content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: w } })),
  ev("content_block_stop", { type: "content_block_stop", index: 0 }),
  ev("message_delta", { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 20 } }),
  ev("message_stop", { type: "message_stop" }),
].map((s) => enc.encode(s));

const frameStream = (frames: Uint8Array[], oneRead: boolean) => {
  if (oneRead) frames = [Buffer.concat(frames)];
  let i = 0;
  return new ReadableStream<Uint8Array>({
    pull(c) {
      if (i < frames.length) c.enqueue(frames[i++]!);
      else c.close();
    },
  });
};

/**
 * The upstream `fetch`, answered from memory. `offerWholeBody` is the checkout's own hand-over of
 * a whole answer's buffer (as our HTTP/1.1 client makes it), where it has one; `oneRead`: a stream
 * in one chunk, as the loopback bench's fake upstream delivers it under load.
 */
export function memoryUpstream(offerWholeBody: (response: Response, bytes: Uint8Array) => void, oneRead = false) {
  return async (url: string, init: RequestInit): Promise<Response> => {
    const body = JSON.parse(init.body as string) as { stream?: boolean };
    if (url.endsWith("/messages")) return new Response(frameStream(anthropicFrames, oneRead), { headers: { "content-type": "text/event-stream" } });
    if (body.stream) return new Response(frameStream(openaiFrames, oneRead), { headers: { "content-type": "text/event-stream" } });
    const response = new Response(openaiBody, { headers: { "content-type": "application/json" } });
    offerWholeBody(response, openaiBody);
    return response;
  };
}

/** The config both benches run (for `resolveSettings`): an OpenAI-kind and an Anthropic-kind model, no rate limit reached. */
export function benchConfig(upstream = "http://upstream.invalid") {
  const timeouts = { first_byte_ms: 10_000, whole_answer_ms: 10_000, idle_ms: 30_000, total_ms: 600_000 };
  return {
    providers: [
      { id: "o", kind: "openai", base_url: `${upstream}/v1`, api_key_env: "K", timeouts },
      { id: "a", kind: "anthropic", base_url: upstream, api_key_env: "K", timeouts },
    ],
    models: [
      { id: "bench/gpt", provider: "o", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: { input_per_mtok: 150, output_per_mtok: 600 } },
      { id: "bench/claude", provider: "a", upstream_model: "claude-sonnet-4-5", category: "text", context_length: 200_000, pricing: { input_per_mtok: 3000, output_per_mtok: 15000 } },
      // The Claude Code path: Anthropic-format clients on a model an OpenAI-kind upstream serves.
      { id: "bench/claude-code", provider: "o", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: { input_per_mtok: 150, output_per_mtok: 600 } },
    ],
    limits: { requests_per_minute: 1e9 },
  };
}
export const BENCH_ENV = { K: "sk-bench" };

const messages = [{ role: "user", content: "Tell me how a railway switchyard sorts its wagons." }];
/** Chat-completions bodies by scenario. */
export const BENCH_BODIES: Record<string, string> = {
  nonstream: JSON.stringify({ model: "bench/gpt", messages, max_tokens: 20 }),
  stream: JSON.stringify({ model: "bench/gpt", messages, max_tokens: 20, stream: true, stream_options: { include_usage: true } }),
  translated: JSON.stringify({ model: "bench/claude", messages, max_tokens: 20, stream: true }),
  // The Claude Code path (POST /v1/messages, see BENCH_PATHS), translated both ways.
  cc: JSON.stringify({ model: "bench/claude-code", messages, max_tokens: 20 }),
  "cc-stream": JSON.stringify({ model: "bench/claude-code", messages, max_tokens: 20, stream: true }),
};
/** Where a scenario's body goes, when not to chat completions. */
export const BENCH_PATHS: Record<string, string> = { cc: "/v1/messages", "cc-stream": "/v1/messages" };

interface BenchApp {
  handle(request: Request): Promise<Response>;
  services: { settled(): Promise<void> };
}

/** `n` requests of `body` through `app.handle`, `concurrency` at a time: the process's CPU per request in µs, once every one is settled. */
export async function cpuPerRequest(app: BenchApp, key: string, body: string, n: number, concurrency: number, path = "/v1/chat/completions"): Promise<number> {
  const one = async () => {
    const res = await app.handle(new Request(`http://localhost${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "anthropic-version": "2023-06-01", "content-type": "application/json", "content-length": String(body.length) },
      body,
    }));
    if (res.status !== 200) throw new Error(`status ${res.status}: ${await res.text()}`);
    await res.arrayBuffer();
  };
  let next = 0;
  const start = process.cpuUsage();
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next++ < n) await one();
  }));
  await app.services.settled();
  const used = process.cpuUsage(start);
  return (used.user + used.system) / n;
}
