import { endTurnOf } from "../limits/parse-turns.ts";
import type { Settings, ResolvedProvider } from "../config/load-config.ts";
import type { Logger } from "../log/log.ts";
import { UpstreamProtocolError, type ProviderAdapter, type DecodedFrame, type StreamDecoder } from "../providers/provider.ts";
import { MAX_ANSWER_DEPTH, nestsTooDeep } from "../formats/common/json-shape.ts";
import { reasonsOutOfSight } from "./unseen-reasoning.ts";
import type { UpstreamKind } from "../formats/common/wire-types.ts";
import type { StreamEvent } from "../streaming/events.ts";
import { createSseParser, type SseEvent } from "../streaming/sse-parser.ts";
import type { Fitted } from "./context-fit.ts";
import { adapterFor } from "../providers/adapters.ts";
import { MISSING_PERMISSION, withKey } from "../providers/key-pools.ts";
import { prepareUpstream, promptText } from "../formats/prepare-upstream.ts";
import { betasForWindow } from "../providers/anthropic/anthropic-adapter.ts";
import { createAnswerToolMapper } from "../formats/common/answer-tool.ts";
import { clientClosed, GatewayError, NO_RETRY, type AnthropicErrorDetails, type OpenAIErrorDetail } from "../streaming/gateway-error.ts";
import { anthropicErrorDetails, openaiErrorDetail, upstreamStatusError } from "../providers/upstream-errors.ts";
import { ImageFetchError, inlineImages, keepImages } from "./inline-images.ts";
import { answersAsked, imagesBounded, imagesHeld } from "./plan.ts";
import type { Scrubber } from "../log/scrub.ts";
import type { WholeAnswerReader, WholeAnswerSink } from "../formats/common/whole-answer.ts";
import { fastReader, wholeBody, wholeReader } from "../transport/http1/client.ts";
import { slicedReader } from "../transport/sliced-reader.ts";
import { ResponseFramingError } from "../transport/http1/response-parser.ts";
import { UpstreamConnectionError } from "../transport/http1/exchange.ts";
import { attemptInit, ResponseTooLargeError, responseHeader, type ChunkReader, type Transport } from "../transport/transport.ts";
import { Deadline, DeadlineExpired } from "./deadline.ts";
import { LedgerLostCut, ShutdownCut } from "./inflight.ts";
import { requestedDelayMs, verdictFor, type Verdict } from "./retry-policy.ts";
import type { UpstreamErrorClass } from "../ops/gateway-metrics.ts";

export interface AttemptDeps {
  settings: Settings;
  fetch: Transport;
  log: Logger;
  now: () => number;
  scrubber: Scrubber;
}

export interface AttemptRequest {
  requestId: string;
  /** The wire the request's body is in (its client format's). */
  wire: UpstreamKind;
  body: Record<string, unknown>;
  headers: Headers;
  /** The client's request: its abort ends the attempt. */
  clientSignal: AbortSignal;
  wantsStream: boolean;
  /** The request's x-request-id (the request-id plugin set it), sent upstream so vendor-side logs can be matched. */
  clientRequestId?: string;
  /** Reads a whole answer past its threshold away from the request thread (the client format's; embeddings). */
  wholeAnswer?: WholeAnswerReader;
}

/** What one attempt came back with. */
export type AttemptOutcome =
  /** A whole answer (a JSON body, or an API that cannot stream), decoded and with images inlined. */
  | { kind: "body"; json: unknown; events: StreamEvent[]; adapter: ProviderAdapter; provider: ResolvedProvider }
  /** An event stream, head read; its body is read by the stream stage, under the same deadline. */
  | {
      kind: "stream"; reader: ChunkReader; decode: StreamDecoder; deadline: Deadline; adapter: ProviderAdapter; provider: ResolvedProvider; inline: (events: StreamEvent[]) => Promise<void>;
      /** The answer reasons out of sight: a client that leaves before its usage came leaves it read to its end (unseen-reasoning.ts). */
      readToEnd: boolean;
    }
  /** No answer: what went wrong, and what the retry policy should make of it. */
  | {
      kind: "refused"; verdict: Verdict; error: GatewayError; delayMs?: number; cause?: UpstreamErrorClass; status?: number;
      /**
       * The refusal is about this request, not the key's state: the key is not cooled. "over": no
       * key can take it. "large": another key may (its minute's room, its account's credit, its
       * permissions), so it moves to another key (see requestSizedLimit).
       */
      requestSized?: "over" | "large";
      /** The vendor made (and billed) an answer that could not be used: asked of another key, it would be bought twice. */
      answered?: true;
      /** The request's prompt is charged for it (madeTooLarge): the vendor processed it for an answer the request itself made too large. */
      promptCharged?: true;
    };

/** The client went away: nothing more is tried. */
/** Over the transport's size cap (limits.max_response_bytes). */
const ANSWER_TOO_LARGE = "The upstream provider sent an answer larger than the gateway accepts.";

/**
 * A whole answer the vendor made (its head came with a 2xx) that is larger than the gateway relays
 * (limits.max_response_bytes). The request asked for it: a float embeddings batch of 2,048 inputs
 * at 3,072 dimensions is ~125 MB, `n` with `top_logprobs` as large; the next model's, another key's
 * or a retry's is as large. Free and a 502, a tenant had the vendor embed 10 MB batches for nothing,
 * each asked of every model of its `models` list and again by its SDK's retries (a hostile-tenant
 * probe, fourteenth). Now it is the client's to change (a 400, nothing retried or fallen back to),
 * and its prompt is charged, as when a client leaves once the upstream has its request: the vendor
 * processed it, which for embeddings is the whole bill. The output of such a chat answer is not
 * charged: nothing of it was read that could count it.
 */
function madeTooLarge(deps: AttemptDeps, req: AttemptRequest, candidate: Fitted, sentChars: number, err: ResponseTooLargeError): AttemptOutcome | undefined {
  const { model } = candidate;
  const limit = err.limit;
  // More than any answer to this request holds (2 MiB for `max_tokens: 50`, a gzip bomb): the
  // upstream's fault, a 502 that costs nothing, as before.
  if (answerBound(deps.settings, req, candidate, sentChars) <= limit) return undefined;
  if (req.clientSignal.aborted) throw clientClosed();
  const advice = model.category === "embedding" ? "ask for base64 vectors (the SDKs' default), fewer inputs or fewer dimensions" : "ask for fewer choices (n) or no logprobs, or a lower answer limit";
  return {
    kind: "refused", verdict: "fail", cause: "too_large", answered: true, promptCharged: true,
    error: new GatewayError(400, "invalid_request", `The answer to this request is larger than the gateway relays (${limit} bytes), so it was not sent; its prompt was charged, as the upstream processed it. To get an answer, ${advice}.`),
  };
}

/** Whether a request asks for token logprobs (chat's `logprobs`/`top_logprobs`, legacy completions' `logprobs`, the Responses API's `top_logprobs` or its `include`). */
function asksLogprobs(body: Record<string, unknown>): boolean {
  if (body.logprobs || body.top_logprobs) return true;
  return Array.isArray(body.include) && body.include.some((i) => typeof i === "string" && i.includes("logprobs"));
}

/** Bytes a float a vendor writes in an embeddings answer may take (pretty-printed: its indent too). */
const FLOAT_BYTES = 32;
/** Dimensions assumed for an embeddings request that names none (the largest OpenAI's models make is 3,072). */
const DEFAULT_DIMENSIONS = 4_096;
/**
 * More dimensions than any embedding model makes (OpenAI's largest 3,072; Qwen3-Embedding-8B and
 * NV-Embed-v2 4,096; LLM2Vec on a 70B model 8,192): what an answer's vectors are read up to,
 * whatever the request asked for (some servers ignore `dimensions`).
 */
const MAX_DIMENSIONS = 16_384;

/** Vectors an embeddings request asks for: one per input (a list of token ids is one input). */
function embeddingsInputs(body: Record<string, unknown>): number {
  const input = body.input;
  return Array.isArray(input) && input.length > 0 && typeof input[0] !== "number" ? input.length : 1;
}

/** The `dimensions` an embeddings request names, if any. */
function askedDimensions(body: Record<string, unknown>): number | undefined {
  return typeof body.dimensions === "number" && body.dimensions > 0 ? body.dimensions : undefined;
}

/** Bytes a token of an answer may take in a whole answer: its text, and with `top_logprobs` (20 at most) their entries. */
const ANSWER_BYTES_PER_TOKEN = 2_048;
/** Room for what is not the answer (ids, usage, the vendor's fields). */
const ANSWER_SLACK_BYTES = 64 * 1024;

/**
 * The largest answer this request could be given: its vectors (inputs × dimensions), or its
 * answers' tokens (n × the answer limit) each with its logprobs, plus the request once more (the
 * Responses API repeats its instructions and tools) and some room. Only a larger one is the
 * upstream's fault.
 */
function answerBound(settings: Settings, req: AttemptRequest, candidate: Fitted, sentChars: number): number {
  const { model, maxTokens } = candidate;
  if (model.category === "embedding") return embeddingsInputs(req.body) * (askedDimensions(req.body) ?? DEFAULT_DIMENSIONS) * FLOAT_BYTES + ANSWER_SLACK_BYTES;
  // No answer limit (an image model): nothing bounds it but the cap.
  if (!(maxTokens > 0)) return Number.POSITIVE_INFINITY;
  return maxTokens * answersAsked(settings, req.wire, req.body, model) * ANSWER_BYTES_PER_TOKEN + sentChars + ANSWER_SLACK_BYTES;
}

/**
 * The gateway's stop ended the call before anything went to the client (also forward.ts: a stream
 * whose head still waits for its first text): nothing was produced, nothing is charged, and another
 * gateway process can answer it.
 */
export const SHUTTING_DOWN = (why?: ShutdownCut): AttemptOutcome & { kind: "refused" } => ({
  kind: "refused",
  verdict: "fail",
  cause: "other",
  error: new GatewayError(503, "overloaded", why instanceof LedgerLostCut ? "The gateway lost its connection to its ledger database before the upstream answered. Retry: another gateway process can answer." : "The gateway is shutting down and the upstream had not answered yet. Retry: another gateway process will answer.", { "retry-after": "1" }),
});

/** OpenAI's 429 for one request past the organisation's per-minute quota (see its use). */
const TOO_LARGE_FOR_QUOTA = /^Request too large for /i;
/**
 * A 429 about tokens a minute can be about this request's size or about the key's minute being
 * used up. Only the first is the request's doing: smaller requests still pass on that key, and
 * cooling it for one tenant's large request, then moving the request to the next key, benched
 * every key of a pool for everyone (a hostile-tenant probe, 2026-11-30). The second is the most
 * common 429 under real load and cools the key as any other. The vendor's numbers tell them apart
 * (OpenAI's "Limit L, Used U, Requested R"; Anthropic's "… of N input (output) tokens per minute",
 * against the request's own size):
 * - "over": the request alone asks for the key's whole minute or more: no key of this size takes
 *   it, nothing cools, nothing moves;
 * - "large": it asks for half of it or more: it may pass on a key whose minute is less used, so it
 *   moves to another key, but this one is not cooled for it (its smaller requests still pass).
 *   Sent to the same key again it was refused three times over five seconds while the pool's other
 *   keys were idle (a key-pool probe, 2026-11-30: most agent turns are half a tier-1 minute).
 */
const OPENAI_TPM = /tokens per min(?:ute)? \(TPM\): Limit (\d+), Used (\d+), Requested (\d+)/i;
const ANTHROPIC_TPM = /of ([\d,]+) (input|output) tokens per minute/i;

/**
 * Whether a 429's detail shows the request's own size, not the key's used minute, as the cause (see
 * above). `headers`: the 429's, whose `anthropic-ratelimit-{input,output}-tokens-remaining` says
 * how much of the key's minute was left when the request was refused.
 */
export function requestSizedLimit(detail: string, sentBytes: number, maxTokens: number | undefined, headers?: Headers): "over" | "large" | false {
  let limit: number, asked: number;
  const openai = OPENAI_TPM.exec(detail);
  if (openai) {
    limit = Number(openai[1]);
    asked = Number(openai[3]);
  } else {
    const anthropic = ANTHROPIC_TPM.exec(detail);
    if (!anthropic) return false;
    limit = Number(anthropic[1]!.replaceAll(",", ""));
    const kind = anthropic[2]!.toLowerCase();
    // The request's tokens, from above: its bytes a quarter token each (input), its answer limit (output).
    asked = kind === "input" ? sentBytes / 4 : (maxTokens ?? 0);
    // Refused with `left` tokens of the minute still there, the request asks for more than that,
    // whatever its bytes say: a dense prompt (digits, symbols: about a token a byte) passed for a
    // quarter of its size, and one such request cooled every key of a pool in turn (a
    // hostile-tenant probe, twelfth). A used-up minute leaves nothing, and the bytes decide.
    const left = headers?.get(`anthropic-ratelimit-${kind}-tokens-remaining`);
    if (left && /^\d+$/.test(left.trim())) asked = Math.max(asked, Number(left) + 1);
  }
  if (!(limit > 0)) return false;
  return asked >= limit ? "over" : 2 * asked >= limit ? "large" : false;
}

/**
 * A 403, 400 or 402 that says the key's organisation or account is gone (Anthropic answers "This
 * organization has been disabled." as a 400): the key is refused as a 401 would refuse it. Read
 * only at the start of the vendor's message, where the vendor's own sentence is, and by the
 * error's code. Any of these may quote the request (a 400's invalid value, a content filter's 403
 * "Request blocked: \"…\""), and a tenant's text read as a dead key would take the key out of
 * service for everyone: one request saying "my account is disabled" had disabled every key of a
 * pool, and looped, kept them so (a key-pool probe, twenty-ninth session). Any other 403 is about
 * what was asked (a model, a moderation flag, a region).
 */
const DEAD_ACCOUNT_SAID = /^\s*(?:(?:this|your|the) )?(?:[\w-]+ )?(?:organi[sz]ation|account|api key)(?: [\w-]+)? (?:has been |is |was )?(?:disabled|deactivated|suspended|not active|inactive)/i;
const DEAD_ACCOUNT_CODE = /^(?:organization_deactivated|account_deactivated)$/;
/**
 * A vendor account with no credit left: any 402 (DeepSeek's "Insufficient Balance", OpenRouter's
 * "requires more credits"), and Anthropic's 400 "Your credit balance is too low to access the
 * Anthropic API…", read at the start of the message only (as above). It is the key's state, not
 * the request's: read by the pool as a 402, which cools the key (credit may come back at any time)
 * and moves the request to another; clients never see the vendor's billing words, which they
 * would read as their own balance (a key-pool probe, 2026-11-30).
 */
const OUT_OF_CREDIT_SAID = /^\s*(?:your credit balance is too low|insufficient (?:balance|credits?|funds))/i;
/**
 * A 402 about this request's size against what the account can still afford (OpenRouter's "This
 * request requires more credits, or fewer max_tokens. You requested up to N tokens, but can only
 * afford M."): a smaller request passes on the key, so it is not cooled (a tenant's large
 * max_tokens had cooled every key of a pool; a review), and the request moves as a request large
 * for a key's minute does.
 */
const AFFORD_SAID = /fewer max_tokens|can only afford/i;

/** Whether a vendor's refusal is about the key's account: disabled ("dead"), or out of credit. */
export function accountRefusal(status: number, said: string, code: string | undefined): "dead" | "no_credit" | "cannot_afford" | undefined {
  if (status === 403) return (code !== undefined && DEAD_ACCOUNT_CODE.test(code)) || DEAD_ACCOUNT_SAID.test(said) ? "dead" : undefined;
  // OpenAI says its account is out of credit with a 429 (`insufficient_quota`): no rate limit that
  // passes. Read as one, the key cooled for seconds at a time and clients were told to retry (Claude
  // Code retried for minutes; a probe of the agent CLIs).
  if (status === 429) return code === "insufficient_quota" ? "no_credit" : undefined;
  if (status !== 400 && status !== 402) return undefined;
  if ((code !== undefined && DEAD_ACCOUNT_CODE.test(code)) || DEAD_ACCOUNT_SAID.test(said)) return "dead";
  if (status === 402 && AFFORD_SAID.test(said.slice(0, 1024))) return "cannot_afford";
  return status === 402 || OUT_OF_CREDIT_SAID.test(said) ? "no_credit" : undefined;
}

/** What a client is told when the gateway's vendor key may not use the model or endpoint: the operator's to fix. */
const NOT_PERMITTED = () => new GatewayError(502, "upstream", "The gateway's vendor key may not use this model or endpoint (the upstream provider said it lacks a permission). Retrying will not help until the gateway's operator fixes it.", NO_RETRY);

/** What a client is told when the vendor account behind the gateway's key has no credit: the gateway's words, never the vendor's. */
const OUT_OF_CREDIT = () => new GatewayError(502, "upstream", "The upstream provider refused the gateway's vendor key: the operator's vendor account is out of credit. Retrying will not help until the gateway's operator adds credit.", NO_RETRY);

/** When the upstream account can afford only a smaller answer than the one asked for. */
const CANNOT_AFFORD = () => new GatewayError(502, "upstream", "The upstream provider's account cannot afford an answer this long right now. Lower max_tokens, or retry later.");

/** Its numbers: the organisation's tokens a minute, and what the request needs. */
const QUOTA_NUMBERS = /Limit (\d+), Requested (\d+)/;

/**
 * OpenAI's refusal of one request past the organisation's tokens a minute ("Request too large for
 * gpt-4o … on tokens per min (TPM): Limit 30000, Requested 50000"), said with a 429 status or in a
 * Responses stream, as the vendor's 413: about the request, not the key, so it cools no key (a
 * tenant's oversized requests cooled every key of a pool, moving other tenants' sessions off their
 * caches), is not asked of this provider again, and tells the client to send less. Undefined for
 * any other words.
 */
export function tooLargeForQuota(said: string, cause: UpstreamErrorClass): (AttemptOutcome & { kind: "refused" }) | undefined {
  if (!TOO_LARGE_FOR_QUOTA.test(said)) return undefined;
  // The gateway's own words with the vendor's two numbers: its message names the operator's
  // organisation and the upstream model, which are not the client's to see.
  const quota = QUOTA_NUMBERS.exec(said);
  const numbers = quota ? ` (${quota[1]} tokens a minute; this request needs ${quota[2]})` : "";
  const error = new GatewayError(413, "request_too_large", `The request is larger than the upstream provider takes in a minute${numbers}. Send fewer tokens, or lower max_tokens.`);
  // Another model of the request's `models` (another vendor, another quota) may take it.
  return { kind: "refused", verdict: "fallback", error, cause, status: 413 };
}

/** The longest wait a 502 passes on from a vendor's retry-after (seconds). */
const MAX_RETRY_AFTER_S = 60;

/**
 * The error with a `retry-after` of `delayMs` (whole seconds, 1 to MAX_RETRY_AFTER_S) and the
 * exact wait as `retry-after-ms`, which the openai and Anthropic SDKs read first (a vendor's 1.5 s
 * was a 2 s wait; an SDK probe), merged with what it already says (`x-should-retry: false` for a
 * refused key stays).
 */
export function withRetryAfter(error: GatewayError, delayMs: number): GatewayError {
  const ms = Math.min(MAX_RETRY_AFTER_S * 1000, Math.max(1, Math.ceil(delayMs)));
  return error.withHeaders({ ...error.headers, "retry-after": String(retryAfterSeconds(delayMs)), "retry-after-ms": String(ms) });
}

/** A wait in ms as the `retry-after` a client is told: whole seconds, 1 to MAX_RETRY_AFTER_S. */
export function retryAfterSeconds(delayMs: number): number {
  return Math.min(MAX_RETRY_AFTER_S, Math.max(1, Math.ceil(delayMs / 1000)));
}

/** Error bodies are read this far, for the vendor's message. */
const ERROR_BODY_BYTES = 64 * 1024;

/**
 * Stage 3: one upstream call under one Deadline — connect, first byte, the silence between
 * bytes and the total, for JSON bodies, error bodies and streams alike. The adapter builds the
 * request (translating it when the upstream speaks the other format) and decodes the answer;
 * the transport is whatever `fetch` the app was given. Whatever happens, the result is a value:
 * an answer, or a refusal the retry policy can judge; only the client leaving throws (499).
 */
export async function attemptUpstream(deps: AttemptDeps, req: AttemptRequest, candidate: Fitted, key?: { secret: string | undefined }, sent?: { promptSent: boolean; askedTier?: string; echoes?(chars: number): void }): Promise<AttemptOutcome> {
  // A client gone before this attempt (the first, another key, a fallback) is asked nothing more
  // for: an answer read to its end for it was sent, and charged, after it had left (a reviewer).
  if (req.clientSignal.aborted) throw clientClosed();
  const { model, maxTokens } = candidate;
  const configured = deps.settings.providers.get(model.provider)!;
  // The pool's choice: the provider as it is, carrying that key (an object over it, not a copy).
  const provider = key ? withKey(configured, key.secret) : configured;
  const adapter = adapterFor(provider, model);
  const prepared = prepareUpstream(req.wire, req.body, model, provider, maxTokens, deps.log);
  const call = adapter.buildRequest(provider, prepared.body, req.headers);
  // A large body's turn (limits/parse-turns.ts) covers the work up to here, not the sending.
  endTurnOf(req.clientSignal);
  // The tier asked for prices an answer that ends before it says its own (billing/usage-meter.ts).
  const tier = (prepared.body as { service_tier?: unknown }).service_tier;
  if (sent && typeof tier === "string") sent.askedTier = tier;
  // What the answer may repeat of the request (usage-meter.ts, REQUEST_ECHO_FRAMES).
  sent?.echoes?.(call.body.length);
  const beta = call.headers["anthropic-beta"];
  if (beta !== undefined) {
    const kept = betasForWindow(beta, model.context_length);
    if (kept === undefined) delete call.headers["anthropic-beta"];
    else call.headers["anthropic-beta"] = kept;
  }
  // A structured answer asked for through a forced tool comes back as text (formats/common/answer-tool.ts).
  const answerTool = prepared.answerTool;
  // The request's id (set by the request-id plugin) goes upstream too, so vendor-side logs can be matched.
  if (req.clientRequestId) call.headers["x-request-id"] = req.clientRequestId;

  const t = provider.timeouts;
  // A whole answer's head comes when the vendor has written it: its own, longer wait (schema.ts, whole_answer_ms).
  const whole = !req.wantsStream || adapter.streams === false;
  const deadline = new Deadline({ firstByteMs: whole ? t.whole_answer_ms : t.first_byte_ms, idleMs: t.idle_ms, totalMs: t.total_ms });
  // A stream is bounded as it is relayed (usage-meter.ts, overrun); a whole answer by what its
  // request could be given. Not where the size is the vendor's to vary more than a bound can
  // say: logprobs (indented, 20 alternatives with their bytes: 6 KB a token), embeddings (a
  // compatible server may ignore `dimensions`), images. The request's echo (the Responses API
  // repeats instructions and tools, indented) is allowed four times its UTF-8 bytes (a review).
  if (whole && (candidate.model.category === "text" || candidate.model.category === "free") && !asksLogprobs(req.body)) {
    const bound = answerBound(deps.settings, req, candidate, 4 * Buffer.byteLength(call.body));
    if (bound < deps.settings.limits.max_response_bytes) deadline.maxAnswerBytes = bound;
  } else if (whole && candidate.model.category === "embedding") {
    // Vectors of the most dimensions any model makes, whatever was asked: a server that ignores
    // `dimensions` still fits, and a gzip bomb is cut after 0.5 MiB an input, not decoded to the
    // 64 MiB cap (forty at once stalled the gateway 2.8 s: a raw-TCP probe, thirty-sixth session).
    const bound = embeddingsInputs(req.body) * Math.max(askedDimensions(req.body) ?? 0, MAX_DIMENSIONS) * FLOAT_BYTES + ANSWER_SLACK_BYTES;
    if (bound < deps.settings.limits.max_response_bytes) deadline.maxAnswerBytes = bound;
  }
  // `sent` (the attempt's meter) learns when the upstream has the whole request: from then a client
  // that leaves pays for its prompt, until an error status says the vendor did not take it.
  deadline.sentTo = sent;
  // An answer that reasons out of sight is read to its end whatever its client does, bounded by
  // the deadline alone: the vendor's usage at the end is the only count of its reasoning
  // (unseen-reasoning.ts; a stream's own stage reads the rest: stream-answer.ts, readToEndOnCancel).
  const readToEnd = reasonsOutOfSight(provider.kind, model, prepared.body as Record<string, unknown>);
  if (!readToEnd) {
    // The deadline is the client's abort listener itself (its handleEvent ends the attempt): no
    // closure a request keeps while it waits. No `once`: the listener is removed below whatever
    // happens, and the option doubles the call's cost.
    req.clientSignal.addEventListener("abort", deadline);
    // A whole answer's head comes when the vendor has made (and billed) it: from then its body is
    // read whether or not the client stays, even when a transport reads it all before handing it
    // over (an answer with a Content-Length): a client that left while its body arrived paid the
    // prompt alone, 0 for an image (a raw-TCP probe, 2026-11-30).
    if (whole) deadline.detachOnHead = req.clientSignal;
  }
  let handedOver = false;

  try {
    let res: Response;
    try {
      res = await deps.fetch(call.url, attemptInit(deadline, { method: "POST", headers: call.headers, body: call.body }));
    } catch (err) {
      const tooLarge = err instanceof ResponseTooLargeError && err.status !== undefined && err.status >= 200 && err.status < 300 ? madeTooLarge(deps, req, candidate, call.body.length, err) : undefined;
      if (tooLarge) return tooLarge;
      if (!req.clientSignal.aborted) deps.log("warn", "upstream request failed", { requestId: req.requestId, provider: provider.id, error: String(err) });
      // It was reached, and answered with something that is not HTTP, or with part of an answer
      // before the connection ended: an unreadable answer, not a connection failure.
      if (err instanceof ResponseFramingError || (err instanceof UpstreamConnectionError && err.answered)) return refusedOutcome(req, deadline, "The upstream provider sent an unreadable answer. Retrying is appropriate.", err, "bad_answer");
      return refusedOutcome(req, deadline, "The upstream provider could not be reached. Retrying is appropriate.", err, "connect");
    }
    deadline.headArrived();
    // A transport that could not say when the request left (fetch) says so with the head.
    if (sent) sent.promptSent = res.ok;

    if (!res.ok) {
      const text = await readText(res, deadline, ERROR_BODY_BYTES).catch(() => "");
      if (req.clientSignal.aborted) throw clientClosed();
      let detail: string | undefined;
      /** A body's own sentence outside the vendor's error shape (a gateway's `{"statusCode", "message"}`, `{"error": "…"}`). */
      let plain: string | undefined;
      let openai: OpenAIErrorDetail | undefined;
      let details: AnthropicErrorDetails | undefined;
      try {
        const parsed = JSON.parse(text);
        detail = adapter.errorMessage(parsed);
        const own = (parsed as { message?: unknown; error?: unknown } | null)?.message ?? (parsed as { error?: unknown } | null)?.error;
        if (typeof own === "string") plain = own;
        openai = openaiErrorDetail(parsed);
        details = anthropicErrorDetails(parsed);
        // An identifier, but a short self-hosted key echoed there is still a key.
        if (details && deps.scrubber.withoutKnown(details.error_code) !== details.error_code) details = undefined;
      } catch {}
      // The body may echo the prompt or our vendor key: the log gets a scrubbed, short detail
      // with any run of the request's own text left out.
      deps.log("warn", "upstream error status", {
        requestId: req.requestId, provider: provider.id, status: res.status, detail: deps.scrubber.logDetail(detail ?? text, undefined, promptText(req.wire, req.body)),
      });
      const cause = res.status === 429 ? "status_429" : res.status >= 500 ? "status_5xx" : "status_4xx";
      // OpenAI's 429 for a request larger than the organisation's minute: read as its 413.
      const tooLarge = res.status === 429 && detail !== undefined ? tooLargeForQuota(detail, cause) : undefined;
      if (tooLarge) return tooLarge;
      const delayMs = requestedDelayMs(res.headers, deps.now());
      let error = upstreamStatusError(res.status, detail, deps.scrubber, openai, details);
      // The vendor's own wait goes on to the client with the 502 (bounded), so its SDK's retry comes
      // when the upstream said, not at once: the gateway's retries are over by then.
      if (delayMs !== undefined && error.status === 502) error = withRetryAfter(error, delayMs);
      // The vendor's sentence, read from its start (accountRefusal): not a body's JSON around it.
      const said = detail ?? plain ?? text;
      // A key that lacks a permission for what was asked (OpenAI's restricted keys: "Missing scopes:
      // api.model.images.request") still serves what it may: read as a 401, one tenant's request
      // to an endpoint the keys may not use set aside every key of the pool in turn, moving every
      // session for everyone (a hostile-tenant probe, twelfth). A 403 about what was asked: no key
      // is set aside (key-pool.ts, keyVerdict). Another key of the pool is asked, as for a request
      // too large for one key's minute: keys of one pool may differ in scopes, and the one that may
      // serves it (a review: a pool of mixed scopes answered 502 for what one of its keys could do).
      if ((res.status === 401 || res.status === 403) && MISSING_PERMISSION.test(said.slice(0, 4096))) return { kind: "refused", verdict: "fallback", error: NOT_PERMITTED(), cause, status: 403, requestSized: "large" };
      const account = accountRefusal(res.status, said, openai?.code);
      if (account === "dead") {
        // The key's organisation is gone: reported as the 401 it means (providers/key-pool.ts).
        const refusedKey = new GatewayError(502, "upstream", `The upstream provider refused the gateway's credentials (status ${res.status}: the vendor account is disabled). Retrying will not help until the gateway's operator fixes them.`, NO_RETRY);
        return { kind: "refused", verdict: "fallback", error: refusedKey, delayMs, cause, status: 401 };
      }
      if (account === "no_credit") return { kind: "refused", verdict: "fallback", error: OUT_OF_CREDIT(), delayMs, cause, status: 402 };
      if (account === "cannot_afford") return { kind: "refused", verdict: "fallback", error: CANNOT_AFFORD(), delayMs, cause, status: 402, requestSized: "large" };
      const requestSized = res.status === 429 ? requestSizedLimit(said, call.body.length, maxTokens, res.headers) : false;
      return { kind: "refused", verdict: verdictFor(res.status), error, delayMs, cause, status: res.status, ...(requestSized ? { requestSized } : {}) };
    }

    const contentType = responseHeader(res, "content-type")?.toLowerCase() ?? "";
    // An answer in the other mode than asked: self-hosted servers send an event stream to
    // `stream: false` (unsloth#6570, mini-sglang#51) and proxies a whole JSON answer to a stream
    // request. The vendor made (and may bill) the answer: it is read in the mode it came in and
    // given to the client in the mode it asked for (a free 502 had been the client's, a raw-TCP probe).
    const streamedWhole = !req.wantsStream && adapter.streams !== false && contentType.includes("text/event-stream");
    const wholeStreamed = req.wantsStream && adapter.streams !== false && contentType.includes("application/json");
    if (!req.wantsStream || adapter.streams === false || wholeStreamed) {
      // A whole answer's head comes when the vendor has made it (and billed it): its body is read
      // whether or not the client stays, so a client that leaves now pays for the answer, not its
      // prompt alone (an image whose body was arriving cost nothing; a probe, 2026-11-30). The
      // deadline still bounds the read.
      if (!readToEnd) detachFromClient(req.clientSignal, deadline, whole);
      let json: unknown;
      let events: StreamEvent[];
      try {
        const elsewhere = streamedWhole ? undefined : req.wholeAnswer;
        const answer = await readAnswer(res, deadline, elsewhere && { thresholdBytes: elsewhere.thresholdBytes, open: () => elsewhere.open(prepared.body, model.id, deps.scrubber) });
        if (streamedWhole) {
          // Its frames through the stream's own decoder, gathered as one answer (no vendor body to keep).
          json = undefined;
          events = eventsOfStream(deps.scrubber.withoutKnown(answer as string), adapter.createStreamDecoder(deps.scrubber, prepared.body));
        } else if (typeof answer === "string") {
          // Same-format answers go out with the vendor's own fields: a key it echoes there goes nowhere.
          if (nestsTooDeep(answer)) throw new UpstreamProtocolError(`upstream sent an answer nested deeper than ${MAX_ANSWER_DEPTH} levels`);
          json = JSON.parse(deps.scrubber.withoutKnown(answer));
          events = adapter.decodeBody(json, prepared.body, deps.scrubber);
        } else ({ json, events } = await answer.finish());
        if (answerTool) events = createAnswerToolMapper(answerTool)(events);
        if (imagesBounded(model)) events = keepImages(events, imagesHeld(model));
      } catch (err) {
        const tooLarge = err instanceof ResponseTooLargeError ? madeTooLarge(deps, req, candidate, call.body.length, err) : undefined;
        if (tooLarge) return tooLarge;
        if (!req.clientSignal.aborted) deps.log("warn", "upstream sent an unreadable body", { requestId: req.requestId, provider: provider.id, error: String(err) });
        return { ...refusedOutcome(req, deadline, "The upstream provider sent an unreadable answer. Retrying is appropriate.", err, "bad_answer"), answered: true } as AttemptOutcome;
      }
      // Images are fetched for a client that is still there; the answer's images are counted either way.
      if (!req.clientSignal.aborted && events.some((e) => e.type === "image")) {
        try {
          await inlineImages(events, inlineOptions(deps, provider, deadline));
        } catch (err) {
          if (req.clientSignal.aborted) throw clientClosed();
          if (!(err instanceof ImageFetchError)) throw err;
          deps.log("warn", "upstream image refused", { requestId: req.requestId, provider: provider.id, reason: err.reason, error: err.message });
          return { kind: "refused", verdict: "fallback", error: new GatewayError(502, err.reason === "timeout" ? "timeout" : "upstream", err.clientMessage), cause: err.reason === "timeout" ? "timeout" : "image", answered: true };
        }
      }
      return { kind: "body", json, events, adapter, provider };
    }

    if (!res.body || !contentType.includes("text/event-stream")) {
      res.body?.cancel().catch(() => {});
      deps.log("warn", "upstream answered a stream request without an event stream", { requestId: req.requestId, provider: provider.id, contentType });
      return { ...refusedOutcome(req, deadline, "The upstream provider sent an unexpected answer. Retrying is appropriate.", undefined, "bad_answer"), answered: true } as AttemptOutcome;
    }
    handedOver = true;
    let decode = adapter.createStreamDecoder(deps.scrubber, prepared.body);
    if (answerTool) {
      const decodeFrame = decode;
      const map = createAnswerToolMapper(answerTool);
      decode = (frame) => {
        const decoded = decodeFrame(frame);
        return { ...decoded, events: map(decoded.events) };
      };
    }
    const inline = (events: StreamEvent[]) => inlineImages(events, inlineOptions(deps, provider, deadline));
    // A body read as it arrives is handed on in slices (a burst's large reads, each after a turn of
    // the event loop: sliced-reader.ts); one read whole is taken whole, so an error anywhere in it is
    // seen before anything goes to the client (retried, or the next key or model).
    const fast = fastReader(res);
    const reader = fast ? slicedReader(fast) : (wholeReader(res) ?? slicedReader(res.body.getReader() as ChunkReader));
    return { kind: "stream", reader, decode, deadline, adapter, provider, inline, readToEnd };
  } finally {
    // A stream keeps its deadline until it ends; anything else is done. Either way the stream
    // stage watches the client itself from here.
    if (!handedOver) deadline.clear();
    if (!readToEnd) detachFromClient(req.clientSignal, deadline, whole);
  }
}

/**
 * The deadline stops listening to the client, once: a whole answer's head took it off already
 * (Deadline.headArrived), and a second and third removal per request showed in a profile. A
 * module function, not a closure per attempt (test/e2e/inflight-retention.test.ts counts them).
 */
function detachFromClient(signal: AbortSignal, deadline: Deadline, whole: boolean): void {
  if (whole && deadline.detachOnHead === undefined) return;
  deadline.detachOnHead = undefined;
  signal.removeEventListener("abort", deadline);
}

/** No answer from this attempt: a timeout when the deadline passed, else `message`; the client's leaving throws (499). */
function refusedOutcome(req: AttemptRequest, deadline: Deadline, message: string, err: unknown, cause: UpstreamErrorClass): AttemptOutcome {
  if (req.clientSignal.aborted) throw clientClosed();
  // The gateway's stop ended the call before its head came, or refused a new one (inflight.ts).
  if (err instanceof ShutdownCut) return SHUTTING_DOWN(err);
  const timedOut = err instanceof DeadlineExpired || deadline.reason instanceof DeadlineExpired;
  if (err instanceof ResponseTooLargeError) return { kind: "refused", verdict: "fallback", error: new GatewayError(502, "upstream", ANSWER_TOO_LARGE), cause: "too_large" };
  return {
    kind: "refused",
    verdict: "fallback",
    cause: timedOut ? "timeout" : cause,
    error: timedOut
      ? new GatewayError(502, "timeout", "The upstream provider did not answer in time. Retrying is appropriate.")
      : new GatewayError(502, "upstream", message),
  };
}

/** How an answer's images are fetched and inlined: from the provider's host, under the attempt's deadline. */
function inlineOptions(deps: AttemptDeps, provider: ResolvedProvider, deadline: Deadline) {
  return {
    providerBaseUrl: provider.base_url,
    maxBytes: deps.settings.limits.max_image_bytes,
    timeoutMs: deps.settings.limits.image_fetch_timeout_ms,
    fetch: deps.fetch,
    signal: deadline.signal,
  };
}

/**
 * A body's bytes in order, read under the attempt's deadline (each chunk counts as the upstream
 * being alive): one buffer when the transport read it whole (asking a Response for its `body`
 * makes it build a stream over its bytes), else chunk by chunk. `take` returns false to stop
 * reading; the rest is cancelled.
 */
async function eachChunk(res: Response, deadline: Deadline, take: (chunk: Uint8Array) => boolean): Promise<void> {
  const whole = wholeBody(res);
  if (whole) {
    take(whole);
    return;
  }
  if (!res.body) return;
  const reader: ChunkReader = fastReader(res) ?? (res.body.getReader() as ChunkReader);
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    deadline.touch();
    if (!take(value)) {
      reader.cancel().catch(() => {});
      return;
    }
  }
}

/** Bytes gathered from chunks, as UTF-8 text (one chunk is not copied); `withoutBom`: see utf8Text. */
const textOf = (chunks: Uint8Array[], withoutBom = false): string => {
  const bytes = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
  return utf8Text(bytes, bytes.byteLength, withoutBom);
};

/** An error body's first `cap` bytes as text: it is only read for its message. */
async function readText(res: Response, deadline: Deadline, cap: number): Promise<string> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  await eachChunk(res, deadline, (chunk) => {
    chunks.push(chunk);
    size += chunk.byteLength;
    return size < cap;
  });
  if (chunks.length === 0) return "";
  // Only the first `cap` bytes are decoded (an error page sent whole may be megabytes).
  const bytes = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
  return utf8Text(bytes, Math.min(bytes.byteLength, cap)).slice(0, cap);
}

/**
 * The events of a whole event stream (an answer to a request that asked for a whole one), read by
 * `decode` as a stream's frames are. An error frame is an unreadable answer (nothing went out: the
 * attempt is free, and retrying is appropriate); nothing after the vendor's own end is read.
 */
export function eventsOfStream(text: string, decode: StreamDecoder): StreamEvent[] {
  const events: StreamEvent[] = [];
  let ended = false;
  const parser = createSseParser({
    onEvent: (frame) => {
      if (ended) return;
      const decoded = decode(frame);
      for (const e of decoded.events) {
        if (e.type === "error") throw new UpstreamProtocolError(`upstream's event stream carried an error: ${e.message}`);
        events.push(e);
      }
      if (decoded.last) ended = true;
    },
  });
  parser.feed(text);
  parser.end();
  return events;
}

/**
 * A whole answer's body as text; or, once it passes `elsewhere`'s threshold, handed to the
 * format's reader as it arrives (bytes already read first), which then parses, checks and writes
 * it away from the request thread. The transport caps whole answers itself.
 */
async function readAnswer(res: Response, deadline: Deadline, elsewhere?: { thresholdBytes: number; open: () => WholeAnswerSink | undefined }): Promise<string | WholeAnswerSink> {
  // The usual answer, read whole by the transport and small: decoded at once, no chunk loop.
  const whole = wholeBody(res);
  if (whole && !(elsewhere && whole.byteLength > elsewhere.thresholdBytes)) return utf8Text(whole, whole.byteLength, true);
  const chunks: Uint8Array[] = [];
  let size = 0;
  let sink: WholeAnswerSink | undefined;
  try {
    await eachChunk(res, deadline, (chunk) => {
      // A byte-order mark before the JSON (RFC 8259 lets a reader ignore it; one upstream's answers
      // all had one, each a 502 "unreadable answer": a raw-TCP probe).
      if (size === 0 && chunks.length === 0 && !sink && startsWithBom(chunk)) chunk = chunk.subarray(3);
      if (sink) {
        sink.push(chunk);
        return true;
      }
      chunks.push(chunk);
      size += chunk.byteLength;
      if (elsewhere && size > elsewhere.thresholdBytes) {
        sink = elsewhere.open();
        // Nothing can take it: read here, as a small answer is.
        if (!sink) elsewhere = undefined;
        else {
          for (const piece of chunks) sink.push(piece);
          chunks.length = 0;
        }
      }
      return true;
    });
  } catch (err) {
    sink?.drop();
    throw err;
  }
  if (sink) return sink;
  // A mark split over the first reads (one or two bytes in the first) is taken out of the whole.
  return chunks.length === 0 ? "" : textOf(chunks, true);
}

/**
 * The first `length` bytes as UTF-8 text, decoded as they are: wrapping them in a Buffer would
 * ask the array for its ArrayBuffer, which JavaScriptCore makes on demand (~0.3 µs). A BOM is
 * kept, as Buffer's decoding keeps it, unless `withoutBom` (a JSON answer's).
 */
function utf8Text(bytes: Uint8Array, length: number, withoutBom = false): string {
  if (withoutBom && startsWithBom(bytes)) return utf8Text(bytes.subarray(3), length - 3);
  return UTF8.decode(length === bytes.byteLength ? bytes : bytes.subarray(0, length));
}

/** UTF-8's byte-order mark (EF BB BF) at the start. */
const startsWithBom = (b: Uint8Array): boolean => b.byteLength >= 3 && b[0] === 0xef && b[1] === 0xbb && b[2] === 0xbf;

const UTF8 = new TextDecoder("utf-8", { ignoreBOM: true });
