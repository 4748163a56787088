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
import { buildAnthropic, buildOpenAI, type Precomputed } from "./fake-answers.ts";

const args = parseArgs();
const PORT = Number(args.get("port") ?? 0);
const HOST = "127.0.0.1";

const SSE_HEADERS = { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" };
const JSON_HEADERS = { "content-type": "application/json" };

const cache = new Map<string, Precomputed>();

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
