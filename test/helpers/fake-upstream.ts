import { readFileSync } from "node:fs";
import { join } from "node:path";

/**
 * A fake vendor on loopback speaking OpenAI's and Anthropic's wire formats byte for byte.
 * Every gateway test uses this one helper: it records what the gateway sent and answers
 * either by default (an echo, in the vendor's real shapes) or with a queued reply — a
 * recorded fixture split any way, a hand-written stream, an error, or silence.
 */

export interface RecordedRequest { method: string; path: string; headers: Record<string, string>; body: any; rawBody: string }

export type Reply =
  | { kind: "json"; status?: number; headers?: Record<string, string>; body: unknown }
  | { kind: "text"; status?: number; headers?: Record<string, string>; body: string }
  | { kind: "sse"; status?: number; headers?: Record<string, string>; chunks: (string | Uint8Array)[]; delayMs?: number; holdOpen?: boolean }
  | { kind: "fixture"; name: string; split?: "frames" | "bytes" | number; delayMs?: number }
  | { kind: "hang" };

export interface FakeUpstream {
  url: string;
  requests: RecordedRequest[];
  reply(r: Reply | ((req: RecordedRequest) => Reply)): void;
  openStreams(): number;
  abortedStreams(): number;
  reset(): void;
  stop(): Promise<void>;
}

const FIXTURES = join(import.meta.dir, "..", "fixtures");

export function readFixture(name: string): Uint8Array {
  return new Uint8Array(readFileSync(join(FIXTURES, name)));
}

/** Cuts bytes the way a network might: after each SSE frame, after every byte, or every N bytes. */
function splitBytes(bytes: Uint8Array, split: "frames" | "bytes" | number | undefined): Uint8Array[] {
  if (split === undefined) return [bytes];
  if (split === "bytes") return Array.from(bytes, (_, i) => bytes.subarray(i, i + 1));
  if (typeof split === "number") {
    const out: Uint8Array[] = [];
    for (let i = 0; i < bytes.length; i += split) out.push(bytes.subarray(i, i + split));
    return out;
  }
  const out: Uint8Array[] = [];
  let start = 0;
  for (let i = 0; i + 1 < bytes.length; i++) {
    const lf = bytes[i] === 10 && bytes[i + 1] === 10;
    const crlf = bytes[i] === 13 && bytes[i + 1] === 10 && bytes[i + 2] === 13 && bytes[i + 3] === 10;
    if (lf || crlf) {
      const end = i + (lf ? 2 : 4);
      out.push(bytes.subarray(start, end));
      start = end;
      i = end - 1;
    }
  }
  if (start < bytes.length) out.push(bytes.subarray(start));
  return out;
}

const encoder = new TextEncoder();

export async function startFakeUpstream(): Promise<FakeUpstream> {
  const requests: RecordedRequest[] = [];
  const queue: (Reply | ((req: RecordedRequest) => Reply))[] = [];
  let open = 0;
  let aborted = 0;
  const releases = new Set<() => void>();

  /** A stream that writes each chunk separately (optionally spaced out) and notices a client that leaves. */
  function stream(chunks: Uint8Array[], delayMs: number, holdOpen: boolean, status: number, headers: Record<string, string>): Response {
    open += 1;
    let finished = false;
    let release: () => void = () => {};
    const end = (wasAborted: boolean) => {
      if (finished) return;
      finished = true;
      open -= 1;
      if (wasAborted) aborted += 1;
      releases.delete(release);
    };
    let i = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        if (i < chunks.length) {
          if (i > 0 && delayMs > 0) await Bun.sleep(delayMs);
          if (finished) return;
          controller.enqueue(chunks[i++]!);
          return;
        }
        if (holdOpen) {
          await new Promise<void>((resolve) => {
            release = resolve;
            releases.add(release);
          });
        }
        if (!finished) {
          end(false);
          try {
            controller.close();
          } catch {}
        }
      },
      cancel() {
        end(true);
        release();
      },
    }, { highWaterMark: 0 });
    return new Response(body, { status, headers: { "content-type": "text/event-stream", "cache-control": "no-cache", ...headers } });
  }

  function answer(r: Reply): Response | Promise<Response> {
    switch (r.kind) {
      case "json":
        return Response.json(r.body, { status: r.status ?? 200, headers: r.headers });
      case "text":
        return new Response(r.body, { status: r.status ?? 200, headers: r.headers });
      case "sse":
        return stream(r.chunks.map((c) => (typeof c === "string" ? encoder.encode(c) : c)), r.delayMs ?? 0, r.holdOpen ?? false, r.status ?? 200, r.headers ?? {});
      case "fixture": {
        const bytes = readFixture(r.name);
        if (r.name.endsWith(".json")) return new Response(bytes, { headers: { "content-type": "application/json" } });
        return stream(splitBytes(bytes, r.split), r.delayMs ?? 0, false, 200, {});
      }
      case "hang":
        return new Promise<Response>((resolve) => {
          const release = () => resolve(new Response(null, { status: 504 }));
          releases.add(release);
        });
    }
  }

  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    idleTimeout: 0,
    async fetch(req) {
      const url = new URL(req.url);
      const rawBody = await req.text();
      let body: any;
      try {
        body = rawBody ? JSON.parse(rawBody) : undefined;
      } catch {
        body = undefined;
      }
      const headers: Record<string, string> = {};
      req.headers.forEach((value, name) => (headers[name.toLowerCase()] = value));
      const recorded: RecordedRequest = { method: req.method, path: url.pathname, headers, body, rawBody };
      requests.push(recorded);
      const queued = queue.shift();
      if (queued) return answer(typeof queued === "function" ? queued(recorded) : queued);
      return defaultAnswer(recorded);
    },
  });

  /** Echo of the last user message, in the vendor's own shapes, streamed one word a frame. */
  function defaultAnswer(req: RecordedRequest): Response {
    const isOpenAI = req.method === "POST" && req.path === "/v1/chat/completions";
    const isAnthropic = req.method === "POST" && req.path === "/v1/messages";
    if (!isOpenAI && !isAnthropic) {
      return req.path.startsWith("/v1/messages")
        ? Response.json({ type: "error", error: { type: "not_found_error", message: "Not found" } }, { status: 404 })
        : Response.json({ error: { message: "Unknown route", type: "invalid_request_error", param: null, code: "unknown_url" } }, { status: 404 });
    }
    const messages: { role: string; content: unknown }[] = req.body?.messages ?? [];
    const texts = (content: unknown): string =>
      typeof content === "string" ? content
      : Array.isArray(content) ? content.map((p: any) => (p.type === "text" ? p.text : typeof p.content === "string" ? p.content : texts(p.content))).join("")
      : "";
    const lastUser = [...messages].reverse().find((m) => m.role === "user");
    const reply = `Echo: ${lastUser ? texts(lastUser.content) : ""}`;
    const words = reply.split(" ").map((w, i) => (i === 0 ? w : ` ${w}`));
    const allText = messages.map((m) => texts(m.content)).join("") + texts(req.body?.system ?? "");
    const promptTokens = Math.max(1, Math.ceil(allText.length / 4));
    const completionTokens = words.length;
    const model = String(req.body?.model);
    const stream = req.body?.stream === true;

    if (isOpenAI) {
      const id = "chatcmpl-FAKE0123456789abcdefghijklmn";
      const usage = { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens, prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 } };
      if (!stream) {
        return Response.json({ id, object: "chat.completion", created: 1737000000, model, choices: [{ index: 0, message: { role: "assistant", content: reply, refusal: null, annotations: [] }, logprobs: null, finish_reason: "stop" }], usage, service_tier: "default", system_fingerprint: "fp_fake" });
      }
      const withUsage = req.body?.stream_options?.include_usage === true;
      const chunk = (delta: unknown, finish: string | null) =>
        `data: ${JSON.stringify({ id, object: "chat.completion.chunk", created: 1737000000, model, service_tier: "default", system_fingerprint: "fp_fake", choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...(withUsage ? { usage: null } : {}) })}\n\n`;
      const frames = [chunk({ role: "assistant", content: "", refusal: null }, null), ...words.map((w) => chunk({ content: w }, null)), chunk({}, "stop")];
      if (withUsage) frames.push(`data: ${JSON.stringify({ id, object: "chat.completion.chunk", created: 1737000000, model, service_tier: "default", system_fingerprint: "fp_fake", choices: [], usage })}\n\n`);
      frames.push("data: [DONE]\n\n");
      return stream_(frames);
    }

    const id = "msg_01FAKEabcdefghijklmnopqr";
    if (!stream) {
      return Response.json({ id, type: "message", role: "assistant", model, content: [{ type: "text", text: reply }], stop_reason: "end_turn", stop_sequence: null, usage: { input_tokens: promptTokens, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: completionTokens, service_tier: "standard" } });
    }
    const ev = (name: string, data: unknown) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
    const frames = [
      ev("message_start", { type: "message_start", message: { id, type: "message", role: "assistant", model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: promptTokens, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 1, service_tier: "standard" } } }),
      ev("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }),
      'event: ping\ndata: {"type": "ping"}\n\n',
      ...words.map((w) => ev("content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: w } })),
      ev("content_block_stop", { type: "content_block_stop", index: 0 }),
      ev("message_delta", { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: completionTokens } }),
      ev("message_stop", { type: "message_stop" }),
    ];
    return stream_(frames);
  }

  const stream_ = (frames: string[]) => stream(frames.map((f) => encoder.encode(f)), 0, false, 200, {});

  return {
    url: `http://127.0.0.1:${server.port}`,
    requests,
    reply: (r) => void queue.push(r),
    openStreams: () => open,
    abortedStreams: () => aborted,
    reset() {
      requests.length = 0;
      queue.length = 0;
    },
    async stop() {
      for (const release of [...releases]) release();
      await server.stop(true);
    },
  };
}
