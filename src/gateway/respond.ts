import { connectionIdleSeconds, type ModelConfig } from "../config/schema.ts";
import type { Settings } from "../config/load-config.ts";
import type { Logger } from "../log/log.ts";
import type { PromptSource, UsageMeter } from "../billing/usage-meter.ts";
import type { EncodeContext } from "../streaming/client-sink.ts";
import { usesLegacyFunctions } from "../formats/openai-chat/legacy-functions.ts";
import { customToolNames } from "../formats/openai-chat/chat-custom-tools.ts";
import type { ClientFormat } from "../formats/format.ts";
import { streamAnswer, type StreamOutcome } from "./stream-answer.ts";
import type { AttemptOutcome } from "./attempt.ts";
import type { ShutdownCut } from "./inflight.ts";
import { ImageFetchError } from "./inline-images.ts";
import type { BillingSession, SettleStatus } from "./billing-session.ts";
import type { RequestTrace } from "../ops/request-trace.ts";
import type { Ticker } from "../streaming/ticker.ts";
import { createSplitSecretGuard } from "../streaming/split-secret-guard.ts";
import { hasRefusedCount } from "../streaming/events.ts";
import { reasoningCountedApart } from "../providers/openai/openai-adapter.ts";
import { JsonText } from "../formats/common/json-text.ts";
import type { Scrubber } from "../log/scrub.ts";
import { NO_HOLD, type UnreadHold } from "../limits/unread-answers.ts";
import { PACED_CHUNK_BYTES, pacedBody } from "../streaming/paced-body.ts";

/**
 * One Headers object for every stream's answer: a Response copies it (so each answer's own headers
 * stay its own), and copying a Headers costs half of reading a plain object's entries (~0.2 µs).
 */
export const SSE_HEADERS = new Headers({
  "content-type": "text/event-stream; charset=utf-8",
  "cache-control": "no-cache",
  "x-accel-buffering": "no",
});

/** Elysia's response settings of a route: what admission and the request-id plugin put in `headers`. */
export interface RouteSettings {
  headers: Record<string, unknown>;
}

/**
 * The route's headers (request id, rate limits), taken for a JSON answer being built: handed to
 * `Response.json` they cost ~0.2 µs less than set afterwards by `withRouteHeaders`, which builds
 * the answer's Headers and asks it for each name. Emptied, so Elysia and `withRouteHeaders` add
 * them no second time; they never name an answer's own header. (A stream's answer gets them from
 * `withRouteHeaders`: merged into its headers at construction they cost as much.)
 */
function takeRouteHeaders(route: RouteSettings | undefined): Record<string, string> | undefined {
  if (!route) return undefined;
  const taken = route.headers as Record<string, string>;
  for (const _ in taken) {
    // A new empty object rather than a delete per name: deletes turn an object into a slow dictionary.
    route.headers = {};
    return taken;
  }
  return undefined;
}

/**
 * The server's per-request idle timeout, which a stream lifts so that a quiet upstream does not
 * cut it: Bun's server and the request. Values, not a closure: the route's own call is one
 * (handle-chat.ts), so a request keeps no function for it while it waits.
 */
export interface IdleTimeout {
  server: { timeout(request: Request, seconds: number): void } | null;
  request: Request;
}

export interface RespondRequest {
  /** The request's client format: how the answer is written (formats/format.ts). */
  format: ClientFormat;
  body: Record<string, unknown>;
  uuid: string;
  requestId: string;
  /** UTF-8 size of the request body: message_start's input-token estimate when translating. */
  bodyBytes: number;
  promptText: PromptSource;
  /** Whose idle timeout a streamed answer lifts before it starts. */
  idle?: IdleTimeout;
  trace?: RequestTrace;
  /** The route's response settings: their headers go on the answer (see takeRouteHeaders). */
  route?: RouteSettings;
  /** Fires when the client goes away (a whole answer read after it left is recorded as cancelled). */
  signal?: AbortSignal;
  /**
   * The request's room among its account's answers not yet read (limits/unread-answers.ts): a
   * whole answer large enough to be paced holds its bytes there until its client has it; anything
   * else gives it back at once.
   */
  hold?: UnreadHold;
}

export interface RespondDeps {
  settings: Settings;
  log: Logger;
  now: () => number;
  ticker: Ticker;
  /** Known secrets out of relayed frames (a vendor's own fields pass through). */
  scrubber?: Pick<Scrubber, "withoutKnown" | "secrets">;
  /** Whether the gateway is cutting what still runs (shutdown): no answer is read on then. */
  inflight?: {
    readonly cutting: boolean;
    watch(end: () => void): void;
    unwatch(end: () => void): void;
    readonly reason?: ShutdownCut;
    delivering?(): () => void;
    readonly connectionsClosed?: boolean;
    /** What a free stream watches (the ledger's fence leaves it alone). */
    readonly free?: { watch(end: () => void): void; unwatch(end: () => void): void; readonly reason?: ShutdownCut };
  };
}

/**
 * Stage 4: an answer → what the client receives, in its format. The answer's id names the usage
 * record (`req_<uuid>` ↔ `chatcmpl-<uuid>` / `msg_<uuid>`). A whole answer is settled (durably,
 * when paid) before it is handed over; a stream settles before its closing frames.
 */
export async function respond(
  deps: RespondDeps,
  req: RespondRequest,
  model: ModelConfig,
  outcome: AttemptOutcome & { kind: "body" | "stream" },
  meter: UsageMeter,
  billing: BillingSession,
): Promise<Response> {
  const format = req.format;
  const ctx: EncodeContext = {
    id: `${format.idPrefix}${req.uuid}`,
    created: Math.floor(deps.now() / 1000),
    model: model.id,
    inputTokensEstimate: Math.ceil(req.bodyBytes / 4),
    includeUsage: format.wire === "openai" && (req.body.stream_options as { include_usage?: boolean } | undefined)?.include_usage === true,
    legacyFunctions: format.wire === "openai" && usesLegacyFunctions(req.body),
    customTools: format.id === "openai-chat" ? customToolNames(req.body) : undefined,
  };
  // Relaying vendor frames as they are only works for an API that speaks the client's format.
  const relay = format.relay && format.wire === outcome.provider.kind && outcome.adapter.streams !== false && outcome.adapter.relayable !== false ? format.relay : undefined;
  const sameFormat = relay !== undefined;

  // OpenAI-shaped answers the gateway writes itself show reasoning's share of the output; when
  // the upstream thought without counting it (Anthropic), our tokenizer counts its text.
  const countsReasoning = format.wire === "openai" && !sameFormat;
  const reasoningEstimate = async (outputTokens: number): Promise<number | undefined> => {
    if (!countsReasoning || meter.reasoningReported) return undefined;
    const tokens = await meter.reasoningTokens();
    return tokens === undefined ? undefined : Math.min(tokens, outputTokens);
  };

  const hold = req.hold ?? NO_HOLD;
  if (outcome.kind === "body") {
    // Settled, then returned: a stop waits for this before it closes the connections (inflight.ts).
    const delivered = deps.inflight?.delivering?.();
    const idleMs = deps.settings.server.client_idle_ms;
    try {
      const { events, json } = outcome;
      for (const e of events) meter.observe(e);
      const usage = await meter.total(req.promptText);
      if (usage.estimated) events.push({ type: "usage", inputTokens: usage.inputTokens, outputTokens: usage.outputTokens });
      // An embeddings answer's usage is what was charged (docs/api.md), its whole cost: a count past
      // the input's bound goes out as the bound billed, not as the vendor's 99,999,999 beside a
      // charge of 15 (a raw-TCP probe, twenty-first session). Chat answers show the vendor's count.
      else if (format.id === "openai-embeddings") events.push({ type: "usage", inputTokens: usage.inputTokens });
      const reasoning = countsReasoning ? await reasoningEstimate(usage.outputTokens) : undefined;
      if (reasoning !== undefined) events.push({ type: "usage", reasoningTokens: reasoning });
      // The whole answer was made (and read, attempt.ts): charged in full, recorded as cancelled when the client has left
      // (nothing charged when the gateway's stop closed its connection: billing-session.ts).
      await billing.settle(req.signal?.aborted || deps.inflight?.connectionsClosed ? "cancelled" : "ok");
      if (req.body.stream === true) {
        // An upstream that cannot stream (the images API): the whole answer, as the client's frames.
        const encoder = format.encoder(ctx);
        let text = "";
        for (const e of events) text += encoder.event(e);
        const end = encoder.end();
        return wholeAnswer(text + (typeof end === "string" ? end : await end), SSE_HEADERS, hold, idleMs);
      }
      const hasImages = events.some((e) => e.type === "image");
      // A usage the meter refused a count of is not shown as it came: the answer is written anew, with the counts billed.
      if (sameFormat && !hasImages && !usage.estimated && json && typeof json === "object" && !hasRefusedCount((json as { usage?: unknown }).usage) && !reasoningCountedApart((json as { usage?: unknown }).usage)) {
        // The vendor's body as it is (fields we do not model survive), with the gateway's model and id.
        const answer = json as Record<string, unknown>;
        answer.model = ctx.model;
        answer.id = ctx.id;
        return jsonAnswer(answer, takeRouteHeaders(req.route), hold, idleMs);
      }
      const body = format.body(events, ctx, json);
      return jsonAnswer(body instanceof Promise ? await body : body, takeRouteHeaders(req.route), hold, idleMs);
    } finally {
      delivered?.();
    }
  }

  const idle = req.idle;
  // Lifted while the stream runs (a quiet upstream is the deadline's to judge, and keep-alives
  // hold the client), and put back when it ends: Bun keeps a connection's timeout for its life, so
  // left at 0 a keep-alive connection that once carried a stream was never idled out, nor one
  // whose client never read the stream's tail (a review: open for good, outside every bound).
  const idleSeconds = connectionIdleSeconds(deps.settings);
  const restoreIdle = () => idle?.server?.timeout(idle.request, idleSeconds);
  idle?.server?.timeout(idle.request, 0);
  const { deadline, provider } = outcome;
  const trace = req.trace;
  trace?.streamStarted();
  const stream = await streamAnswer({
    upstream: outcome.reader,
    decode: outcome.decode,
    redact: deps.scrubber?.withoutKnown,
    guard: deps.scrubber && createSplitSecretGuard(deps.scrubber.secrets()),
    sink: relay ? relay(ctx) : format.encoder(ctx),
    meter,
    ticker: deps.ticker,
    deadline,
    estimateUsage: async () => {
      const reported = meter.reported;
      if (reported && (!countsReasoning || meter.reasoningReported)) return undefined;
      const usage = await meter.total(req.promptText);
      const reasoning = await reasoningEstimate(usage.outputTokens);
      if (reported && reasoning === undefined) return undefined;
      return {
        type: "usage",
        ...(reported ? {} : { inputTokens: usage.inputTokens, outputTokens: usage.outputTokens }),
        ...(reasoning !== undefined ? { reasoningTokens: reasoning } : {}),
      };
    },
    // A failed answer is charged its meter's total (billing-session.ts): counted, or estimated.
    failureUsage: async () => {
      const usage = await meter.total(req.promptText);
      const reasoning = await reasoningEstimate(usage.outputTokens);
      return { type: "usage", inputTokens: usage.inputTokens, outputTokens: usage.outputTokens, ...(reasoning !== undefined ? { reasoningTokens: reasoning } : {}) };
    },
    keepAliveMs: deps.settings.server.keepalive_ms,
    clientIdleMs: deps.settings.server.client_idle_ms,
    maxFrameBytes: deps.settings.limits.max_frame_bytes,
    resolveImages: outcome.inline,
    // An image that could not be inlined fails the answer uncharged, like any failed attempt.
    describeFailure: (err) =>
      err instanceof ImageFetchError
        ? { event: { type: "error", errorType: err.reason === "timeout" ? "timeout" : "upstream", message: err.clientMessage }, chargeable: false }
        : undefined,
    beforeEnd: () => billing.settle("ok"),
    // Not once the gateway is cutting what runs (shutdown): it would read on past the process.
    readToEndOnCancel: outcome.readToEnd ? () => !deps.inflight?.cutting : undefined,
    cuts: billing.holds || !deps.inflight?.free ? deps.inflight : deps.inflight.free,
    clientSignal: req.signal,
    onFirstWrite: trace && (() => trace.firstBytes()),
    // A stream waiting for a client slower than its upstream holds what it wrote in this process:
    // counted in the account's share while it waits, so a tenant's streams nobody reads cannot
    // fill the gateway (1,000 such streams held ~310 MB, 3,000 1.44 GB: a hostile-tenant probe).
    stalled: (bytes) => hold.resize(bytes),
    beforeClose: restoreIdle,
    onDone(outcome: StreamOutcome, reason, chargeable = true, cut = false) {
      hold.release();
      if (outcome === "failed") deps.log("warn", "stream failed after start", { requestId: req.requestId, provider: provider.id, reason });
      const status: SettleStatus = !chargeable ? "upstream_error" : outcome === "completed" ? "ok" : outcome === "cancelled" ? "cancelled" : "stream_failed";
      const settled = billing.settle(status);
      if (trace) {
        // The trace ends once the charge is known (a cancelled stream's usage is counted while settling).
        const failure = outcome !== "failed" ? undefined : deadline.expired ? "timeout" : reason?.includes("larger than") ? "too_large" : "stream_broken";
        // A stream the gateway cut is its own doing, not its client's (it was logged `client_abort`).
        void settled.then(() => trace.streamEnded(cut ? "cut" : outcome, failure));
      }
    },
  });
  // A stream is read from its upstream only as fast as its client reads: it holds no whole answer,
  // only what waits for a slow client (`stalled`, above), and the hold is that from here on.
  // Resized once it has started, not before: a stream that fails before its first byte is asked
  // again or of the next model, whose answer may be whole (the images API), and a hold given back
  // already would not count it (a review).
  hold.resize(0);
  // All of it came before the head: one body, no stream, and the connection's timeout as before.
  if (typeof stream === "string") restoreIdle();
  return new Response(stream, { headers: SSE_HEADERS });
}

/** What `Response.json` says an answer is; a JSON text written elsewhere says the same. */
const JSON_TYPE = "application/json;charset=utf-8";

function jsonAnswer(body: unknown, headers: Record<string, string> | undefined, hold: UnreadHold, idleMs: number): Response {
  // Written on another thread (a large embeddings list): handed on as it is, never parsed here.
  const text = body instanceof JsonText ? body.text : JSON.stringify(body);
  return wholeAnswer(text, headers ? { "content-type": JSON_TYPE, ...headers } : JSON_HEADERS, hold, idleMs);
}

const JSON_HEADERS = new Headers({ "content-type": JSON_TYPE });

/**
 * A whole answer's text as the client's Response. A small one is handed over at once, and the
 * request's hold given back. A large one (more than a chunk) is sent as fast as its client reads
 * (streaming/paced-body.ts), its bytes held in the account's share until then: handed over whole,
 * 40 embeddings answers of 33 MB on connections never read took the gateway to 4 GB in 35 s.
 */
function wholeAnswer(text: string, headers: Headers | Record<string, string>, hold: UnreadHold, idleMs: number): Response {
  if (text.length <= PACED_CHUNK_BYTES / 3) {
    hold.release();
    return new Response(text, { headers });
  }
  const bytes = Buffer.from(text);
  if (bytes.byteLength <= PACED_CHUNK_BYTES) {
    hold.release();
    return new Response(bytes, { headers });
  }
  hold.resize(bytes.byteLength);
  return new Response(pacedBody(bytes, { idleMs, done: () => hold.release() }), { headers });
}
