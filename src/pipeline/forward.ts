import type { ModelConfig } from "../config/schema.ts";
import type { Settings } from "../config/load-config.ts";
import type { Ledger } from "../billing/ledger.ts";
import type { Logger } from "../log.ts";
import type { WireFormat } from "../providers/provider.ts";
import { adapterFor } from "../providers/adapters.ts";
import { createUsageMeter, type UsageMeter } from "../billing/usage-meter.ts";
import { answerCostMicro } from "../billing/pricing.ts";
import { countTokens, promptTokenBound } from "../billing/token-estimate.ts";
import { fitCandidates } from "./context-fit.ts";
import { microToCredits } from "../billing/money.ts";
import { streamAnswer, type StreamOutcome } from "../streaming/stream-answer.ts";
import { createOpenAIEncoder, createOpenAIRelay, encodeOpenAIBody } from "../streaming/encode-openai.ts";
import { createAnthropicEncoder, createAnthropicRelay, encodeAnthropicBody } from "../streaming/encode-anthropic.ts";
import type { ClientSink, EncodeContext } from "../streaming/client-sink.ts";
import type { StreamEvent } from "../streaming/events.ts";
import { GatewayError } from "./gateway-error.ts";
import { prepareUpstreamBody, promptText, requestedMaxTokens } from "./prepare-upstream.ts";
import { upstreamStatusError } from "./upstream-errors.ts";
import { scrubLogDetail } from "../ops/scrub.ts";
import { backoffMs, requestedDelayMs, verdictFor, type Verdict } from "./retry-policy.ts";
import { endOfTurn } from "./end-of-turn.ts";
import type { Inflight } from "./inflight.ts";
import { fastReader, type ChunkReader } from "../upstream/http1-client.ts";
import { ImageFetchError, inlineImages } from "./inline-images.ts";

export type UpstreamFetch = (url: string, init: RequestInit) => Promise<Response>;

export interface ForwardDeps {
  settings: Settings;
  ledger: Ledger;
  inflight: Inflight;
  fetch: UpstreamFetch;
  log: Logger;
  now: () => number;
  /** [0, 1); jitter for retry backoff. */
  random?: () => number;
}

export interface Principal {
  keyId: string;
  accountId: string;
}

export interface ForwardRequest {
  clientFormat: WireFormat;
  body: Record<string, unknown>;
  /** UTF-8 size of the request body, for the prompt-token bound used by reservations. */
  bodyBytes: number;
  headers: Headers;
  /** Fires when the client goes away. */
  signal: AbortSignal;
  /** The model asked for, then its fallbacks, in the order they are tried. */
  candidates: ModelConfig[];
  principal: Principal;
  /** Called before a streamed answer starts, to lift the server's idle timeout for this request. */
  onStream?: () => void;
  /** The answer in another format than the request's (the Responses API, sent on as a chat request). */
  answer?: AnswerFormat;
}

/** How to write an answer whose format is not the request's: its id prefix, its stream, its body. */
export interface AnswerFormat {
  /** Prefix of the answer's id; the rest is the usage record's (`req_<id>`). */
  idPrefix: string;
  encoder: (ctx: EncodeContext) => ClientSink;
  body: (events: StreamEvent[], ctx: EncodeContext) => unknown;
}

const SSE_HEADERS = {
  "content-type": "text/event-stream; charset=utf-8",
  "cache-control": "no-cache",
  "x-accel-buffering": "no",
};

const SINKS: Record<WireFormat, { encoder: (c: EncodeContext) => ClientSink; relay: (c: EncodeContext) => ClientSink }> = {
  openai: { encoder: createOpenAIEncoder, relay: createOpenAIRelay },
  anthropic: { encoder: createAnthropicEncoder, relay: createAnthropicRelay },
};

/** One try of one model: an answer to hand the client, or why not and what to do next. */
type Attempt = { response: Response } | { verdict: Verdict; error: GatewayError; delayMs?: number };

/**
 * One request's journey: reserve → (model → upstream, retried and falling back until one
 * answers) → decode → encode → settle. The reservation covers the dearest candidate; the
 * settlement happens exactly once, charges only the attempt that answered and only what it
 * produced. Nothing is retried once the first byte has gone to the client.
 */
export async function forward(deps: ForwardDeps, req: ForwardRequest): Promise<Response> {
  const startedAt = performance.now();
  const { body, clientFormat } = req;
  const messageCount = Array.isArray(body.messages) ? body.messages.length : 0;
  const promptBound = promptTokenBound(req.bodyBytes, messageCount);
  const providerOf = (model: ModelConfig) => deps.settings.providers.get(model.provider)!;
  const candidates = await fitCandidates(
    req.candidates,
    promptBound,
    requestedMaxTokens(clientFormat, body),
    deps.settings.limits.max_tokens_cap,
    async () => (await countTokens(promptText(clientFormat, body))) + 4 * messageCount + 3,
  );

  // Time-ordered (and hex, so the text sorts like the time), so usage records append at the end
  // of their unique index instead of dirtying pages all over it. The answer's id carries the
  // same value: a client's response id leads straight to its usage record, and the hold and the
  // settlement are keyed by it, so writing a settlement twice charges once.
  const uuid = Bun.randomUUIDv7("hex");
  const requestId = `req_${uuid}`;

  // Image models make one image per request; its price is part of the worst case.
  const worstCase = Math.max(...candidates.map((c) => answerCostMicro(c.model.pricing, promptBound, c.maxTokens, c.model.category === "image" ? 1 : 0)));
  let reserved = false;
  if (worstCase > 0) {
    const held = await deps.ledger.reserve({ requestId, accountId: req.principal.accountId, keyId: req.principal.keyId, amountMicro: worstCase }).catch((err: unknown) => {
      deps.log("error", "ledger reserve failed", { requestId, error: String(err) });
      return { ok: false as const, reason: "unavailable" as const, message: String(err) };
    });
    if (!held.ok) {
      if (held.reason === "unavailable") throw ledgerUnavailable();
      const limit = held.reason === "balance" ? "the account has" : "this key's spend limit leaves";
      throw new GatewayError(402, "insufficient_credits",
        `Insufficient credits: this request may cost up to ${microToCredits(worstCase)} credits and ${limit} ${microToCredits(held.availableMicro)} available. Lower max_tokens or top up the account.`);
    }
    reserved = true;
  } else if (!deps.ledger.admits(false)) {
    // Free answers need no credit, but their usage records need room in the ledger's queue.
    throw ledgerUnavailable();
  }

  let model = candidates[0]!.model;
  let meter: UsageMeter = createUsageMeter();
  let settling: Promise<void> | undefined;
  deps.inflight.begin();

  /**
   * Once per request, whatever happened. A paid answer waits here until its settlement is
   * durable, before its last byte leaves (docs/decisions.md, "Money across kill -9"); a free
   * one's record may trail it. Never throws: the ledger keeps what it cannot write yet.
   */
  const settle = (status: string): Promise<void> => (settling ??= settleOnce(status));
  const settleOnce = async (status: string) => {
    try {
      // Nothing produced, nothing charged: an upstream that failed before answering costs nothing.
      const produced = status !== "upstream_error" && !meter.empty;
      const usage = produced ? await meter.total(() => promptText(clientFormat, body)) : { inputTokens: 0, outputTokens: 0, estimated: false, images: 0 };
      const costMicro = produced ? answerCostMicro(model.pricing, usage.inputTokens, usage.outputTokens, usage.images) : 0;
      const durable = deps.ledger.settle({
        requestId,
        accountId: req.principal.accountId,
        keyId: req.principal.keyId,
        model: model.id,
        provider: providerOf(model).id,
        promptTokens: usage.inputTokens,
        completionTokens: usage.outputTokens,
        estimated: usage.estimated,
        costMicro,
        status,
        latencyMs: Math.round(performance.now() - startedAt),
      });
      if (reserved && costMicro > 0) await durable;
    } catch (err) {
      deps.log("error", "settlement failed", { requestId, error: String(err) });
    } finally {
      deps.inflight.end();
    }
  };

  try {
    const response = await tryCandidates();
    // Under load, answers leave together at the end of the loop's turn (see end-of-turn.ts);
    // `inflight` still counts this request while its stream runs.
    if (deps.inflight.count > (settling ? 0 : 1)) await endOfTurn();
    return response;
  } catch (err) {
    // Whatever escaped, the reservation is released; settle() is a no-op when already done.
    await settle(req.signal.aborted ? "cancelled" : "upstream_error");
    if (err instanceof GatewayError) err.recorded = true;
    throw err;
  }

  async function tryCandidates(): Promise<Response> {
    const { max_retries, max_wait_ms } = deps.settings.retry;
    const random = deps.random ?? Math.random;
    let waited = 0;
    let last: GatewayError | undefined;
    for (const { model: candidate, maxTokens } of candidates) {
      model = candidate;
      for (let retry = 0; ; retry++) {
        meter = createUsageMeter();
        const attempt = await tryOnce(candidate, maxTokens);
        if ("response" in attempt) return attempt.response;
        last = attempt.error;
        if (attempt.verdict === "fail") throw attempt.error;
        if (attempt.verdict !== "retry" || retry >= max_retries) break;
        const delay = attempt.delayMs ?? backoffMs(retry, random());
        // A wait longer than what is left of the cap is better spent on the next model.
        if (waited + delay > max_wait_ms) break;
        deps.log("info", "retrying upstream", { requestId, model: candidate.id, delayMs: delay, retry: retry + 1 });
        await sleep(delay, req.signal);
        waited += delay;
      }
      if (candidates.length > 1) deps.log("info", "falling back", { requestId, from: candidate.id, reason: last?.message });
    }
    throw last!;
  }

  async function tryOnce(candidate: ModelConfig, maxTokens: number): Promise<Attempt> {
    const provider = providerOf(candidate);
    const adapter = adapterFor(provider, candidate);
    const inline = (events: StreamEvent[]) =>
      inlineImages(events, { providerBaseUrl: provider.base_url, maxBytes: deps.settings.limits.max_image_bytes, timeoutMs: deps.settings.limits.image_fetch_timeout_ms, fetch: deps.fetch, signal: controller.signal });
    const upstreamBody = prepareUpstreamBody(clientFormat, body, candidate, provider, maxTokens);
    const call = adapter.buildRequest(provider, upstreamBody, req.headers);
    const controller = new AbortController();
    const onClientAbort = () => controller.abort(new DOMException("client disconnected", "AbortError"));
    req.signal.addEventListener("abort", onClientAbort, { once: true });
    const detach = () => req.signal.removeEventListener("abort", onClientAbort);
    const firstByte = setTimeout(() => controller.abort(new DOMException("first byte timeout", "TimeoutError")), provider.timeouts.first_byte_ms);
    const fallback = (message: string, kind: "upstream" | "timeout" = "upstream"): Attempt => ({ verdict: "fallback", error: new GatewayError(502, kind, message) });

    let res: Response;
    try {
      res = await deps.fetch(call.url, { method: "POST", headers: call.headers, body: call.body, signal: controller.signal });
    } catch (err) {
      clearTimeout(firstByte);
      detach();
      if (req.signal.aborted) throw new GatewayError(499, "invalid_request", "The client closed the request.");
      deps.log("warn", "upstream request failed", { requestId, provider: provider.id, error: String(err) });
      const timedOut = controller.signal.reason instanceof DOMException && controller.signal.reason.name === "TimeoutError";
      return timedOut
        ? fallback("The upstream provider did not answer in time. Retrying is appropriate.", "timeout")
        : fallback("The upstream provider could not be reached. Retrying is appropriate.");
    }
    clearTimeout(firstByte);

    if (!res.ok) {
      detach();
      const text = await readCapped(res, 64 * 1024).catch(() => "");
      let detail: string | undefined;
      try {
        detail = adapter.errorMessage(JSON.parse(text));
      } catch {}
      // The body may echo the prompt or our vendor key: the log gets a scrubbed, short detail.
      deps.log("warn", "upstream error status", { requestId, provider: provider.id, status: res.status, detail: scrubLogDetail(detail ?? text) });
      return { verdict: verdictFor(res.status), error: upstreamStatusError(res.status, detail), delayMs: requestedDelayMs(res.headers, deps.now()) };
    }

    const ctx: EncodeContext = {
      id: req.answer ? `${req.answer.idPrefix}${uuid}` : clientFormat === "openai" ? `chatcmpl-${uuid}` : `msg_${uuid}`,
      created: Math.floor(deps.now() / 1000),
      model: candidate.id,
      includeUsage: clientFormat === "openai" && (body.stream_options as { include_usage?: boolean } | undefined)?.include_usage === true,
    };
    // Relaying vendor frames as they are only works for an API that speaks the client's format.
    const sameFormat = !req.answer && clientFormat === provider.kind && adapter.streams !== false;
    const encoderFor = req.answer?.encoder ?? SINKS[clientFormat].encoder;
    const wantsStream = body.stream === true;

    if (!wantsStream || adapter.streams === false) {
      let events: StreamEvent[];
      let json: unknown;
      try {
        json = await res.json();
        events = adapter.decodeBody(json);
      } catch (err) {
        detach();
        if (req.signal.aborted) throw new GatewayError(499, "invalid_request", "The client closed the request.");
        deps.log("warn", "upstream sent an unreadable body", { requestId, provider: provider.id, error: String(err) });
        return fallback("The upstream provider sent an unreadable answer. Retrying is appropriate.");
      }
      const hasImages = events.some((e) => e.type === "image");
      if (hasImages) {
        try {
          await inline(events);
        } catch (err) {
          detach();
          if (req.signal.aborted) throw new GatewayError(499, "invalid_request", "The client closed the request.");
          if (!(err instanceof ImageFetchError)) throw err;
          deps.log("warn", "upstream image refused", { requestId, provider: provider.id, reason: err.reason, error: err.message });
          return fallback(err.clientMessage, err.reason === "timeout" ? "timeout" : "upstream");
        }
      }
      detach();
      for (const e of events) meter.observe(e);
      const usage = await meter.total(() => promptText(clientFormat, body));
      if (usage.estimated) events.push({ type: "usage", inputTokens: usage.inputTokens, outputTokens: usage.outputTokens });
      await settle("ok");
      if (wantsStream) {
        // An upstream that cannot stream (the images API): the whole answer, as the client's frames.
        const encoder = encoderFor(ctx);
        let text = "";
        for (const e of events) text += encoder.event(e);
        return { response: new Response(text + encoder.end(), { headers: SSE_HEADERS }) };
      }
      let answer: unknown;
      if (sameFormat && !hasImages && !usage.estimated && json && typeof json === "object") {
        (json as Record<string, unknown>).model = candidate.id;
        (json as Record<string, unknown>).id = ctx.id;
        answer = json;
      } else if (req.answer) answer = req.answer.body(events, ctx);
      else answer = clientFormat === "openai" ? encodeOpenAIBody(events, ctx) : encodeAnthropicBody(events, ctx);
      return { response: Response.json(answer) };
    }

    if (!res.body || !(res.headers.get("content-type") ?? "").includes("text/event-stream")) {
      res.body?.cancel().catch(() => {});
      detach();
      deps.log("warn", "upstream answered a stream request without an event stream", { requestId, provider: provider.id, contentType: res.headers.get("content-type") });
      return fallback("The upstream provider sent an unexpected answer. Retrying is appropriate.");
    }

    req.onStream?.();
    const streamMeter = meter;
    const stream = streamAnswer({
      upstream: fastReader(res) ?? (res.body.getReader() as ChunkReader),
      decode: adapter.createStreamDecoder(),
      sink: sameFormat ? SINKS[clientFormat].relay(ctx) : encoderFor(ctx),
      meter: streamMeter,
      abortUpstream: () => controller.abort(new DOMException("stream ended", "AbortError")),
      estimateUsage: async () => {
        if (streamMeter.reported) return undefined;
        const usage = await streamMeter.total(() => promptText(clientFormat, body));
        return { type: "usage", inputTokens: usage.inputTokens, outputTokens: usage.outputTokens };
      },
      keepAliveMs: deps.settings.server.keepalive_ms,
      idleMs: provider.timeouts.idle_ms,
      totalMs: provider.timeouts.total_ms,
      maxFrameBytes: deps.settings.limits.max_frame_bytes,
      resolveImages: inline,
      beforeEnd: () => settle("ok"),
      onDone(outcome: StreamOutcome, reason, chargeable = true) {
        detach();
        if (outcome === "failed") deps.log("warn", "stream failed after start", { requestId, provider: provider.id, reason });
        void settle(!chargeable ? "upstream_error" : outcome === "completed" ? "ok" : outcome === "cancelled" ? "cancelled" : "stream_failed");
      },
    });
    return { response: new Response(stream, { headers: SSE_HEADERS }) };
  }
}

function ledgerUnavailable(): GatewayError {
  return new GatewayError(503, "overloaded", "The gateway cannot record charges right now, so paid requests are paused. Retry in a few seconds.", { "retry-after": "5" });
}

/** A wait that ends early, with an error, when the client goes away. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(new GatewayError(499, "invalid_request", "The client closed the request."));
    const onAbort = () => {
      clearTimeout(timer);
      reject(new GatewayError(499, "invalid_request", "The client closed the request."));
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

async function readCapped(res: Response, cap: number): Promise<string> {
  if (!res.body) return "";
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  while (size < cap) {
    const { value, done } = await reader.read();
    if (done) break;
    chunks.push(value);
    size += value.byteLength;
  }
  reader.cancel().catch(() => {});
  return new TextDecoder().decode(Buffer.concat(chunks)).slice(0, cap);
}
