/**
 * A FAST fake of the OpenAI and Anthropic HTTP APIs for the benchmark (not the test helper:
 * that one records every request and builds every answer; this one is made to cost as little
 * as possible, so that what is measured is the gateway).
 *
 *   POST /v1/chat/completions   OpenAI; `stream` true or false; honours stream_options.include_usage
 *   POST /v1/messages           Anthropic; `stream` true or false
 *   GET  /__stats               {inflight, openStreams, pendingRequests, requests, streams, completed, aborted}
 *
 * Answer length, in content chunks (OpenAI `delta.content` chunks / Anthropic `text_delta` events;
 * the same number of words in a non-stream answer), first found of:
 *   query `?chunks=N`, header `x-bench-chunks: N`, body `max_tokens` / `max_completion_tokens`; else 16.
 * Think time before each content chunk of a stream (ms), first found of: query `?interval_ms=X`,
 * header `x-bench-interval-ms: X`, body `bench_delay_ms`; else 0 (no think time). With 0, every frame is still its own write
 * (flushed), as a real vendor's frames are; `?burst=1` / `x-bench-burst: 1` sends the whole
 * stream in one write instead.
 *
 * Bodies are precomputed per (vendor, stream, chunks, include_usage, prompt tokens), so an answer
 * costs one JSON.parse of the request and one write. Usage is reported in each vendor's real
 * format (OpenAI `usage` with *_details; Anthropic `message_start.message.usage` and
 * `message_delta.usage`).
 *
 * Prints one line `READY <port>` on stdout once listening. Exits on SIGINT/SIGTERM, and with
 * `--exit-on-stdin-eof 1` when its parent closes our stdin (so it never outlives the benchmark).
 */
import { parseArgs, serveAsChild } from "./child-process.ts";

const args = parseArgs();
const PORT = Number(args.get("port") ?? 0);
const HOST = "127.0.0.1";

const enc = new TextEncoder();
const SSE_HEADERS = { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" };
const JSON_HEADERS = { "content-type": "application/json" };

const WORDS = ["Switchyard", "forwards", "each", "token", "as", "soon", "as", "it", "arrives,", "counting", "what", "was", "used", "and", "charging", "for", "it."];
const word = (i: number) => (i === 0 ? "" : " ") + WORDS[i % WORDS.length];

interface Precomputed {
  /** The whole body (non-stream, or a stream sent in one write). */
  whole: Uint8Array;
  /** Stream frames, one write each. */
  frames: Uint8Array[];
  /** frames[contentFrom] is the first content chunk; the think time comes before each content chunk. */
  contentFrom: number;
}

const cache = new Map<string, Precomputed>();

function obfuscation(i: number): string {
  const A = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  let s = "";
  for (let k = 0, n = 1 + ((i * 7) % 12); k < n; k++) s += A[(i * 31 + k * 17) % A.length];
  return s;
}

function openaiUsage(prompt: number, completion: number) {
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
  };
}

function buildOpenAI(stream: boolean, chunks: number, includeUsage: boolean, prompt: number): Precomputed {
  const id = "chatcmpl-BenchFakeUpstream0000000000";
  const created = 1761565012;
  const model = "gpt-4o-mini-2024-07-18";
  const fingerprint = "fp_560af6e559";
  if (!stream) {
    let text = "";
    for (let i = 0; i < chunks; i++) text += word(i);
    const body = {
      id, object: "chat.completion", created, model,
      choices: [{ index: 0, message: { role: "assistant", content: text, refusal: null, annotations: [] }, logprobs: null, finish_reason: "stop" }],
      usage: openaiUsage(prompt, chunks),
      service_tier: "default",
      system_fingerprint: fingerprint,
    };
    return { whole: enc.encode(JSON.stringify(body)), frames: [], contentFrom: 0 };
  }
  let k = 0;
  const frame = (choices: unknown[], usage?: unknown) => {
    const c: Record<string, unknown> = { id, object: "chat.completion.chunk", created, model, service_tier: "default", system_fingerprint: fingerprint, choices };
    // OpenAI sends "usage": null on every chunk only when the client asked for usage.
    if (includeUsage) c.usage = usage ?? null;
    c.obfuscation = obfuscation(k++);
    return `data: ${JSON.stringify(c)}\n\n`;
  };
  const choice = (delta: unknown, finish: string | null = null) => ({ index: 0, delta, logprobs: null, finish_reason: finish });
  const out = [frame([choice({ role: "assistant", content: "", refusal: null })])];
  for (let i = 0; i < chunks; i++) out.push(frame([choice({ content: word(i) })]));
  out.push(frame([choice({}, "stop")]));
  if (includeUsage) out.push(frame([], openaiUsage(prompt, chunks)));
  out.push("data: [DONE]\n\n");
  return { whole: enc.encode(out.join("")), frames: out.map((s) => enc.encode(s)), contentFrom: 1 };
}

function buildAnthropic(stream: boolean, chunks: number, prompt: number): Precomputed {
  const id = "msg_01BenchFakeUpstream000000";
  const model = "claude-sonnet-4-5-20250929";
  const usage = (output: number) => ({
    input_tokens: prompt,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
    cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
    output_tokens: output,
    service_tier: "standard",
  });
  if (!stream) {
    let text = "";
    for (let i = 0; i < chunks; i++) text += word(i);
    const body = { id, type: "message", role: "assistant", model, content: [{ type: "text", text }], stop_reason: "end_turn", stop_sequence: null, usage: usage(chunks) };
    return { whole: enc.encode(JSON.stringify(body)), frames: [], contentFrom: 0 };
  }
  const ev = (type: string, data: unknown) => `event: ${type}\ndata: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`;
  const out = [
    ev("message_start", { type: "message_start", message: { id, type: "message", role: "assistant", model, content: [], stop_reason: null, stop_sequence: null, usage: usage(1) } }),
    ev("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }),
    ev("ping", '{"type": "ping"}'),
  ];
  for (let i = 0; i < chunks; i++) out.push(ev("content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: word(i) } }));
  out.push(
    ev("content_block_stop", { type: "content_block_stop", index: 0 }),
    ev("message_delta", {
      type: "message_delta",
      delta: { stop_reason: "end_turn", stop_sequence: null },
      usage: { input_tokens: prompt, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: chunks },
    }),
    ev("message_stop", { type: "message_stop" }),
  );
  return { whole: enc.encode(out.join("")), frames: out.map((s) => enc.encode(s)), contentFrom: 3 };
}

function precomputed(vendor: "openai" | "anthropic", stream: boolean, chunks: number, includeUsage: boolean, prompt: number): Precomputed {
  const key = `${vendor}|${stream ? 1 : 0}|${chunks}|${includeUsage ? 1 : 0}|${prompt}`;
  let hit = cache.get(key);
  if (!hit) {
    if (cache.size > 2000) cache.clear();
    hit = vendor === "openai" ? buildOpenAI(stream, chunks, includeUsage, prompt) : buildAnthropic(stream, chunks, prompt);
    cache.set(key, hit);
  }
  return hit;
}

// ---- counters --------------------------------------------------------------------------------

const stats = { requests: 0, streams: 0, completed: 0, aborted: 0, inflight: 0, openStreams: 0, errors: 0 };

function intParam(url: URL, req: Request, query: string, header: string): number | undefined {
  const raw = url.searchParams.get(query) ?? req.headers.get(header);
  if (raw === null || raw === "") return undefined;
  const n = Number(raw);
  return Number.isFinite(n) && n >= 0 ? Math.floor(n) : undefined;
}

function errorResponse(vendor: "openai" | "anthropic", status: number, message: string): Response {
  stats.errors++;
  const body = vendor === "openai"
    ? { error: { message, type: "invalid_request_error", param: null, code: null } }
    : { type: "error", error: { type: "invalid_request_error", message } };
  return new Response(JSON.stringify(body), { status, headers: JSON_HEADERS });
}

function streamResponse(p: Precomputed, chunks: number, intervalMs: number, burst: boolean, signal: AbortSignal): Response {
  stats.streams++;
  stats.openStreams++;
  let closed = false;
  const done = (aborted: boolean) => {
    if (closed) return;
    closed = true;
    stats.openStreams--;
    stats.inflight--;
    if (aborted) stats.aborted++;
    else stats.completed++;
  };
  const onAbort = () => done(true);
  signal.addEventListener("abort", onAbort, { once: true });
  const body = new ReadableStream({
    type: "direct",
    async pull(controller) {
      try {
        if (burst) {
          controller.write(p.whole);
          await controller.flush();
        } else {
          const { frames, contentFrom } = p;
          const contentTo = contentFrom + chunks;
          for (let i = 0; i < frames.length; i++) {
            if (closed) break;
            // Think time before each content chunk: the opening frames and the closing ones go at once.
            if (intervalMs > 0 && i >= contentFrom && i < contentTo) await Bun.sleep(intervalMs);
            if (closed) break;
            controller.write(frames[i]!);
            await controller.flush();
          }
        }
        if (!closed) {
          controller.close();
          signal.removeEventListener("abort", onAbort);
          done(false);
        }
      } catch {
        done(true);
      }
    },
    cancel() {
      done(true);
    },
  });
  return new Response(body, { headers: SSE_HEADERS });
}

async function answer(req: Request, url: URL, vendor: "openai" | "anthropic"): Promise<Response> {
  stats.requests++;
  stats.inflight++;
  let body: any;
  try {
    body = await req.json();
  } catch {
    stats.inflight--;
    return errorResponse(vendor, 400, "We could not parse the JSON body of your request.");
  }
  if (!body || typeof body !== "object" || !Array.isArray(body.messages)) {
    stats.inflight--;
    return errorResponse(vendor, 400, "messages: Field required");
  }
  const fromBody = vendor === "openai" ? body.max_completion_tokens ?? body.max_tokens : body.max_tokens;
  const chunks = Math.min(100_000, intParam(url, req, "chunks", "x-bench-chunks") ?? (typeof fromBody === "number" && fromBody > 0 ? fromBody : 16));
  const stream = body.stream === true;
  const includeUsage = vendor === "openai" && stream && body.stream_options?.include_usage === true;
  // Prompt tokens: about four characters a token of the request, as the vendors roughly count.
  const prompt = Math.max(1, Math.ceil(Number(req.headers.get("content-length") ?? 64) / 4));
  const p = precomputed(vendor, stream, chunks, includeUsage, prompt);
  if (!stream) {
    stats.inflight--;
    stats.completed++;
    return new Response(p.whole, { headers: JSON_HEADERS });
  }
  const intervalMs = intParam(url, req, "interval_ms", "x-bench-interval-ms") ?? (typeof body.bench_delay_ms === "number" ? Math.max(0, body.bench_delay_ms) : 0);
  const burst = (url.searchParams.get("burst") ?? req.headers.get("x-bench-burst")) === "1";
  return streamResponse(p, chunks, intervalMs, burst && intervalMs === 0, req.signal);
}

const server = Bun.serve({
  port: PORT,
  hostname: HOST,
  idleTimeout: 0,
  fetch(req): Response | Promise<Response> {
    const url = new URL(req.url);
    if (req.method === "POST" && url.pathname === "/v1/chat/completions") return answer(req, url, "openai");
    if (req.method === "POST" && url.pathname === "/v1/messages") return answer(req, url, "anthropic");
    if (req.method === "GET" && url.pathname === "/__stats") {
      // pendingRequests is Bun's own count of requests whose response has not finished.
      return Response.json({ ...stats, open: stats.openStreams, pendingRequests: server.pendingRequests });
    }
    return new Response(JSON.stringify({ error: { message: `Invalid URL (${req.method} ${url.pathname})`, type: "invalid_request_error" } }), { status: 404, headers: JSON_HEADERS });
  },
});

serveAsChild(server, args.get("exit-on-stdin-eof") === "1");
