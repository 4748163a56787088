import type { ModelConfig } from "../config/schema.ts";
import type { Settings } from "../config/load-config.ts";
import type { Ledger } from "../billing/ledger.ts";
import type { Logger } from "../log/log.ts";
import type { ClientFormat } from "../formats/format.ts";
import { clientClosed, GatewayError, NO_RETRY } from "../streaming/gateway-error.ts";
import type { EndOfTurn } from "./end-of-turn.ts";
import type { Ticker } from "../streaming/ticker.ts";
import type { Tokenizer } from "../billing/token-estimate.ts";
import type { Scrubber } from "../log/scrub.ts";
import { LedgerLostCut, ShutdownCut, type Inflight } from "./inflight.ts";
import { answersAsked, expectedAnswerBytes, planRequest, type Plan } from "./plan.ts";
import { PACED_CHUNK_BYTES } from "../streaming/paced-body.ts";
import { openBillingSession } from "./billing-session.ts";
import { takesAnswerLimit } from "./context-fit.ts";
import { ACCOUNT_SUSPENDED, INVALID_KEY, type ActiveKey } from "../accounts/account-store.ts";
import { attemptUpstream, SHUTTING_DOWN, requestSizedLimit, retryAfterSeconds, tooLargeForQuota, withRetryAfter, type AttemptOutcome } from "./attempt.ts";
import { nextStep } from "./retry-policy.ts";
import { respond, type IdleTimeout, type RouteSettings } from "./respond.ts";
import { StreamFailedBeforeStart } from "./stream-answer.ts";
import { withRequestId, type RequestTrace, type Tracker } from "../ops/request-trace.ts";
import type { EmbeddingsInputMeasure } from "../formats/openai-embeddings/embeddings-input.ts";
import type { ChosenKey, KeyPools } from "../providers/key-pools.ts";
import { keyVerdict, sessionHash } from "../providers/key-pool.ts";
import { sessionIdOf } from "./session-id.ts";
import { expectedTokens, holdTokens, NO_TOKEN_HOLD, type TokenHold } from "./token-hold.ts";
import type { RateLimitStore } from "../limits/rate-limiter.ts";
import { concurrencyRefusal, NO_SLOT, type ConcurrencySlot, type ConcurrencyStore, type PlacePair } from "../limits/concurrency-limiter.ts";
import type { Transport } from "../transport/transport.ts";
import type { PromptMemory } from "../billing/prompt-memory.ts";
import type { CountQueue } from "../limits/count-queue.ts";
import { countInTurn } from "./count-in-turn.ts";
import type { KeyResolver } from "../accounts/key-resolver.ts";
import { modelAllowed, modelRefusal } from "../accounts/model-access.ts";
import { NO_HOLD, type UnreadAnswers, type UnreadHold } from "../limits/unread-answers.ts";
import { expectedEmbeddingsBytes } from "../formats/openai-embeddings/embeddings-input.ts";
import { clientApi, paramForClient } from "../formats/common/error-param.ts";

export interface ForwardDeps {
  settings: Settings;
  ledger: Ledger;
  inflight: Inflight;
  /** How the gateway reaches upstreams: the Transport port. */
  fetch: Transport;
  log: Logger;
  now: () => number;
  /** [0, 1); jitter for retry backoff. */
  random?: () => number;
  /** Request traces (metrics, access log); routes pass theirs in ForwardRequest.trace. */
  tracker?: Tracker;
  /** Where answers wait for the end of the loop's turn under load (end-of-turn.ts). */
  turn: EndOfTurn;
  /** Timers shared by every open stream (keep-alive checks). */
  ticker: Ticker;
  /** Counts tokens the upstream did not report (a worker thread; see billing/token-estimate.ts). */
  tokenizer: Tokenizer;
  /** Takes secrets out of what clients and logs see of a vendor's words, the configured keys included. */
  scrubber: Scrubber;
  /** The providers' vendor key pools; without them each provider's one key is sent as configured. */
  keyPools?: KeyPools;
  /** Accounts' tokens a minute (gateway/token-hold.ts); without it, none is limited. */
  limiter?: RateLimitStore;
  /** Requests under way per key (limits/concurrency-limiter.ts); without it, no key is capped. */
  concurrency?: ConcurrencyStore;
  /**
   * Where a prompt near a context window is counted: in turns per key, bounded and abortable
   * (limits/count-queue.ts); without it, on the tokenizer's own lane.
   */
  fitCounts?: CountQueue;
  /** Conversations' last reported prompts, for cancelled answers' estimates (billing/prompt-memory.ts). */
  prompts?: PromptMemory;
  /** The key lookup admission used: each upstream attempt asks it again whether the key still works (revoked, expired, its account suspended meanwhile). */
  keys?: KeyResolver;
  /** Whole answers each account's requests hold until their clients read them (limits/unread-answers.ts); without it, none is counted. */
  unread?: UnreadAnswers;
}

export interface ForwardRequest {
  /** The client format the request came in: the wire its body is in, how its answer is written. */
  format: ClientFormat;
  body: Record<string, unknown>;
  /** UTF-8 size of the request body, for the prompt-token bound used by reservations. */
  bodyBytes: number;
  headers: Headers;
  /** Fires when the client goes away. */
  signal: AbortSignal;
  /** The model asked for, then its fallbacks, in the order they are tried. */
  candidates: ModelConfig[];
  /** The key the request came with (the admission plugin resolved it), and its account. */
  principal: ActiveKey;
  /** Whose idle timeout a streamed answer lifts before it starts (see IdleTimeout in respond.ts). */
  idle?: IdleTimeout;
  /** Metrics and the access log follow the request here (ops/request-trace.ts). */
  trace?: RequestTrace;
  /** POST /v1/embeddings: the input, measured; the candidates are embedding models and the format writes the list. */
  embeddings?: EmbeddingsInputMeasure;
  /**
   * The Responses API's conversation: the id of the first answer of the `previous_response_id`
   * chain (or of this one, when it starts a stored chain), for vendor key affinity.
   */
  chain?: string | ((uuid: string) => string | undefined);
  /**
   * Elysia's response settings of the route: the headers every answer carries (request id, rate
   * limits), put on the answer as it is built (see respond.ts, `takeRouteHeaders`).
   */
  route?: RouteSettings;
}

/**
 * One request's journey, in named stages (src/gateway/):
 *   plan (candidates, limits, worst case) → billing session (reserve once)
 *   → for each candidate: attempt (one upstream call under one deadline) → retry policy (pure)
 *   → respond (encode or relay; settle before the last byte) → billing session (settle once).
 * The reservation covers the dearest candidate; the settlement happens exactly once, charges only
 * the attempt that answered and only what it produced. Nothing is retried once the first byte
 * has gone to the client.
 */
export async function forward(deps: ForwardDeps, req: ForwardRequest): Promise<Response> {
  const startedAt = performance.now();
  // The request-id plugin set the header: every log line about the request carries it, the upstream gets it.
  const clientRequestId = req.headers.get("x-request-id") ?? undefined;
  if (clientRequestId) deps = withLog(deps, withRequestId(deps.log, clientRequestId));
  // A prompt near a window is counted in turn with other keys' counts, and only as far as the
  // largest window: a tenant's 10 MB prompt of punctuation, counted whole on the tokenizer's
  // priority lane, held every other tenant's count (and settlement) for a minute (a probe, 2026-11-30).
  const counts = deps.fitCounts;
  const count = counts ? (text: string, limit: number) => countInTurn(counts, req.principal.keyId, text, req.signal, limit, req.principal.accountId) : deps.tokenizer.count;
  const plan = await planRequest(deps.settings, count, { wire: req.format.wire, body: req.body, bodyBytes: req.bodyBytes, candidates: req.candidates, embeddings: req.embeddings });
  // A request whose key was revoked or expired, or whose account was suspended, while its body came
  // or it waited for its parse turn or its count, is refused before it holds anything (cached: no
  // read while nothing changed).
  const stillGood = refuseUnlessStillGood(deps.keys, req.principal, plan.candidates[0]!.model.id);
  if (stillGood) await stillGood;
  const trace = req.trace;
  if (trace) trace.planned(plan.requestId, plan.candidates[0]!.model.id, req.principal);
  // Room among the account's answers not yet read, then a place among the key's requests under
  // way, before credits are held: a refused request holds nothing.
  const hold = holdAnswer(deps, req, plan);
  // The account's tokens a minute (refused while spent), then the place. Most accounts have no
  // budget: nothing is made or awaited for them.
  let tokens: TokenHold = NO_TOKEN_HOLD;
  const tokensPerMinute = req.principal.accountTokensPerMinute ?? deps.settings.limits.account_tokens_per_minute;
  if (tokensPerMinute != null && deps.limiter) {
    try {
      const held = holdTokens(deps.limiter, req.principal.accountId, tokensPerMinute, expectedTokens(req.bodyBytes), (model) => deps.settings.providers.get(model.provider)?.kind !== "anthropic");
      tokens = held instanceof Promise ? await held : held;
    } catch (err) {
      hold.release();
      throw err;
    }
  }
  let slot: ConcurrencySlot;
  try {
    const taken = takeSlot(deps, req.principal);
    slot = taken instanceof Promise ? await taken : taken;
  } catch (err) {
    tokens.settle(0);
    hold.release();
    throw err;
  }
  let billing;
  try {
    billing = await openBillingSession(deps, {
      requestId: plan.requestId, principal: req.principal, worstCaseMicro: plan.worstCaseMicro, startedAt, promptText: plan.promptText, clientRequestId,
      charges: trace,
      // From here the settlement gives the place back, once, whatever happens to the request,
      // and settles the tokens the vendor counted.
      slot,
      tokens,
      answers: typeof req.body.n === "number" && req.body.n > 1 ? (model) => answersAsked(deps.settings, req.format.wire, req.body, model) : undefined,
      conversation: () => conversationOf(req, plan.uuid),
      billedPromptMax: plan.billedPromptMax,
      // Lowering the answer limit lowers no hold of a model that takes none (the images API).
      lengthField: plan.candidates.some((c) => takesAnswerLimit(c.model)) ? req.format.lengthField : undefined,
    });
  } catch (err) {
    slot.release();
    tokens.settle(0);
    hold.release();
    throw err;
  }
  const random = deps.random ?? Math.random;
  const limits = deps.settings.retry;
  const wantsStream = req.body.stream === true;
  const attemptRequest = { requestId: plan.requestId, wire: req.format.wire, body: req.body, headers: req.headers, clientSignal: req.signal, wantsStream, clientRequestId, wholeAnswer: req.format.wholeAnswer };
  const answerRequest = { format: req.format, body: req.body, uuid: plan.uuid, requestId: plan.requestId, bodyBytes: req.bodyBytes, promptText: plan.promptText, idle: req.idle, trace, route: req.route, signal: req.signal, hold };

  // The session (hashed at once; the raw id goes nowhere) keeps a conversation on one vendor key;
  // read only when a pool has a choice to make (null: not read yet).
  let session: string | undefined | null = null;

  try {
    let waited = 0;
    /** Upstream attempts made so far (every key, retry and model). */
    let attempts = 0;
    let last: GatewayError | undefined;
    for (const candidate of plan.candidates) {
      const pool = deps.keyPools?.get(candidate.model.provider);
      // Keys of this provider that refused this request: it moves to another before waiting or falling back.
      let tried: Set<string> | undefined;
      /** The pool's keys that said their vendor account is out of credit, in this request. */
      let noCredit: Set<string> | undefined;
      let movedOnFailure = false;
      for (let retry = 0; ; ) {
        if (attempts++ > 0) await refuseUnlessStillGood(deps.keys, req.principal, candidate.model.id);
        // Its credit may be released by another process any moment now (inflight.ts, `fence`):
        // a paid request asks no upstream more (its retry, fallback or first attempt after a wait).
        if (billing.holds && deps.inflight.fenced) throw SHUTTING_DOWN(new LedgerLostCut()).error;
        const meter = billing.attempt(candidate.model, candidate.model.provider, candidate.maxTokens + plan.predictedTokens);
        trace?.attemptStarted(candidate.model.id, candidate.model.provider);
        if (session === null && pool && pool.size > 1) session = sessionOf(req, plan.uuid);
        // Awaited only when the store answers later (Redis): an await costs a turn of microtasks.
        const chosen = pool?.choose(session ?? undefined, tried, candidate.model.upstream_model);
        const key: ChosenKey | undefined = chosen instanceof Promise ? await chosen : chosen;
        // Once the upstream has the whole request a client that leaves pays for the prompt
        // (billing-session.ts); the meter is told by the attempt, and a refusal takes it back.
        const attempted = await attemptUpstream(deps, attemptRequest, candidate, key, meter);
        if (attempted.kind === "refused" && !attempted.promptCharged) meter.promptSent = false;
        // A refusal about this request's size benches no key: smaller requests still pass on it
        // (attempt.ts, requestSizedLimit).
        if (key) pool!.report(key, attempted.kind === "refused" ? (attempted.requestSized ? 0 : attempted.status ?? 0) : 200, attempted.kind === "refused" ? attempted.delayMs : undefined, candidate.model.upstream_model);
        trace?.attemptEnded(attempted.kind === "refused" ? attempted.cause ?? "other" : undefined, attempted.kind === "stream");
        let outcome: AttemptOutcome & { kind: "refused" };
        if (attempted.kind === "refused") outcome = inClientTerms(attempted, req, candidate.model);
        else {
          try {
            const response = await respond(deps, answerRequest, candidate.model, attempted, meter, billing);
            // Under load, answers leave together at the end of the loop's turn (see end-of-turn.ts);
            // `inflight` still counts this request while its stream runs.
            if (deps.inflight.count > (billing.settling ? 0 : 1)) await deps.turn.endOfTurn();
            if (trace && !trace.stream) trace.answered();
            return response;
          } catch (err) {
            // A stream that failed before anything reached the client is a refused attempt: the
            // request is retried or falls back, and a last failure is a 502 that costs nothing.
            if (err instanceof ShutdownCut) {
              // The gateway's stop came while the stream's head waited for its first text (stream-answer.ts):
              // answered as a call still waiting for its head, a 503 that costs nothing.
              billing.attempt(candidate.model, candidate.model.provider, candidate.maxTokens + plan.predictedTokens);
              trace?.streamAbandoned("other");
              throw SHUTTING_DOWN(err).error;
            }
            if (!(err instanceof StreamFailedBeforeStart)) throw err;
            outcome = refusedBeforeStart(err, req.bodyBytes, candidate.maxTokens);
            // The vendor made (and bills) part of an answer none of which reached the client (its
            // usage counted output, or something of it came): asked of another key it would be
            // bought twice (a review: Responses' response.failed with usage, after response.created).
            if (meter.answered || meter.outputReported) outcome = { ...outcome, answered: true };
            deps.log("warn", "stream failed before it started", { requestId: plan.requestId, provider: candidate.model.provider, error: err.message });
            trace?.streamAbandoned(outcome.cause!);
            // What the failed attempt counted is dropped with it: a client that leaves while the
            // request waits to retry is not charged for an answer it never got.
            billing.attempt(candidate.model, candidate.model.provider, candidate.maxTokens + plan.predictedTokens);
            // An overloaded vendor key cools as an error status would have made it.
            if (key && outcome.status === 529) pool!.report(key, 529, undefined, candidate.model.upstream_model);
          }
        }
        // An answer the request made too large (attempt.ts, madeTooLarge): its prompt is charged as a
        // client's leaving is, and the request ends here (the outcome's verdict).
        if (outcome.promptCharged) await billing.settle("cancelled");
        last = outcome.error;
        // Rate-limited, overloaded or refused credentials are the key's, not the model's: another
        // key of the provider is asked at once, before the retry policy waits or moves on. Not for
        // a refusal about the request itself (its size against a key's tokens a minute, a 403):
        // moved from key to key, one tenant's request had benched every key of a pool (a probe).
        const verdict = keyVerdict(outcome.requestSized ? 0 : outcome.status ?? 0);
        // A request large for a key's minute moves too, the key left as it is (attempt.ts, requestSizedLimit).
        // So does one the key's upstream failed (a 5xx, a timeout, a broken answer), once a request:
        // a vendor's fault is often one account's or one region's, and sessions bound to the key
        // failed every turn (a key-pool probe, 2026-11-30); the key is not cooled for it, and once
        // bounds what a vendor's whole outage costs (one more attempt).
        // Not an answer the vendor made and billed (a body that broke after its head, an image that
        // would not download): asked of another key, it would be bought twice.
        const failedHere = !movedOnFailure && verdict === "neutral" && !outcome.requestSized && !outcome.answered && MOVABLE_FAILURES.has(outcome.cause ?? "other") && (outcome.status === undefined || outcome.status >= 500);
        if (failedHere) movedOnFailure = true;
        if (key && pool && (verdict === "cool" || verdict === "disable" || outcome.requestSized === "large" || failedHere)) {
          (tried ??= new Set()).add(key.key.env);
          if (outcome.status === 402 && !outcome.requestSized) (noCredit ??= new Set()).add(key.key.env);
          if (pool.hasUsable(tried, candidate.model.upstream_model)) {
            deps.log("info", "moving to another vendor key", { requestId: plan.requestId, provider: candidate.model.provider, from: key.key.env, status: outcome.status });
            continue;
          }
          // Every key has refused: the pool, not the key asked last, says what comes next. (A pool
          // of one is a single key, as it always was: its answer and the retry rules decide.)
          // Not for refusals that cooled no key (a failure here, a request large for every key's
          // minute): no key comes back sooner than the vendor said, and a wait of "0 ms" had
          // retried a used-up minute every millisecond (a review).
          // Every key out of credit: the refusal stands (retrying will not help), as for one key.
          if (pool.size > 1 && !failedHere && outcome.requestSized !== "large" && noCredit?.size !== pool.size) {
            outcome = poolRefusal(outcome, pool.soonestBackMs(candidate.model.upstream_model));
            last = outcome.error;
          }
        }
        const step = nextStep(outcome, retry, waited, limits, random());
        if (step.action === "fail") throw outcome.error;
        if (step.action === "next") break;
        deps.log("info", "retrying upstream", { requestId: plan.requestId, model: candidate.model.id, delayMs: step.delayMs, retry: retry + 1 });
        trace?.retried(step.delayMs);
        await sleep(step.delayMs, req.signal);
        waited += step.delayMs;
        retry++;
      }
      if (plan.candidates.length > 1) deps.log("info", "falling back", { requestId: plan.requestId, from: candidate.model.id, reason: last?.message });
      if (trace && candidate !== plan.candidates[plan.candidates.length - 1]) trace.fellBack();
    }
    throw last!;
  } catch (err) {
    // Whatever escaped, the reservation is released; settle() is a no-op when already done.
    hold.release();
    await billing.settle(req.signal.aborted ? "cancelled" : "upstream_error");
    if (err instanceof GatewayError) err.recorded = true;
    throw err;
  }
}

/**
 * The request's room among its account's whole answers not yet read (limits/unread-answers.ts):
 * what an embeddings list of its inputs, or a whole chat answer at its limits (`n`, `logprobs`),
 * is expected to take (its real size is counted once written, respond.ts); a 429 when the
 * account's share is full.
 */
function holdAnswer(deps: ForwardDeps, req: ForwardRequest, plan: Plan): UnreadHold {
  const unread = deps.unread;
  if (!unread) return NO_HOLD;
  const limits = deps.settings.limits;
  const expected = req.embeddings
    ? expectedEmbeddingsBytes(req.embeddings.count, req.body, limits.max_response_bytes)
    : expectedAnswerBytes(deps.settings, req.format.wire, req.body, plan.candidates, PACED_CHUNK_BYTES);
  const hold = unread.admit(req.principal.accountId, expected);
  if (hold) return hold;
  const mib = Math.round(limits.answer_per_account_bytes / (1024 * 1024));
  throw new GatewayError(429, "rate_limit",
    `This account's answers not yet read by their clients fill its share of the gateway's memory (${mib} MiB, limits.answer_per_account_bytes). Read them, or retry in a second.`,
    { "retry-after": "1" });
}

/** The error without `x-should-retry: false`: a pool that waits for a key to come back says when to retry instead. */
function withoutNoRetry(error: GatewayError): GatewayError {
  if (error.headers?.["x-should-retry"] === undefined) return error;
  const { "x-should-retry": _, ...headers } = error.headers;
  return error.withHeaders(headers);
}

/** Failures of an upstream that another key of the pool may not meet (see their use). */
const MOVABLE_FAILURES: ReadonlySet<string> = new Set(["status_5xx", "timeout", "connect", "bad_answer", "stream_broken"]);

/**
 * When every key of a pool has refused a request, what the retry policy reads: the wait until the
 * first key that is only cooling comes back (`backMs`), rather than the Retry-After of whichever
 * key happened to be asked last (30 s from one, while another was back in 1 s); and a refused
 * key asked last does not end the request as hopeless (`x-should-retry: false`) while another
 * key is only rate limited. Every key disabled (`backMs` undefined): the refusal stands.
 */
function poolRefusal(outcome: AttemptOutcome & { kind: "refused" }, backMs: number | undefined): AttemptOutcome & { kind: "refused" } {
  if (backMs === undefined) return outcome;
  const delayMs = Math.max(1, backMs);
  // A key out of credit (402) cools too, but its words ("retrying will not help") are that key's:
  // another key only rate limited comes back, so the pool's words stand (a raw-TCP probe).
  const cooling = outcome.status !== 402 && keyVerdict(outcome.status ?? 0) === "cool";
  const error = withRetryAfter(cooling ? withoutNoRetry(outcome.error)
    : new GatewayError(502, "overloaded", `Every vendor key of the provider is rate limited, overloaded or refused; one comes back in ${retryAfterSeconds(delayMs)} s. Retrying then is appropriate.`), delayMs);
  return { ...outcome, verdict: "retry", delayMs, error, status: cooling ? outcome.status : 429 };
}

/**
 * A stream that failed before it started, as the retry policy reads a refusal: an overloaded
 * upstream (Anthropic's `overloaded_error`, OpenAI's `rate_limit_exceeded`) is asked again,
 * anything else falls back. A rate limit whose words show the request's own size as its cause is
 * read as the same words with a 429 status are (attempt.ts): no key cools for it. Said in a
 * Responses stream, it cooled every key of a pool for one tenant's large request (a hostile-tenant
 * probe, twelfth).
 */
function refusedBeforeStart(err: StreamFailedBeforeStart, sentBytes: number, maxTokens: number): AttemptOutcome & { kind: "refused" } {
  const overloaded = err.event.errorType === "overloaded";
  const timedOut = err.event.errorType === "timeout";
  const said = err.event.said;
  if (overloaded && said) {
    const tooLarge = tooLargeForQuota(said, "stream_broken");
    if (tooLarge) return tooLarge;
    const requestSized = requestSizedLimit(said, sentBytes, maxTokens);
    if (requestSized) return { kind: "refused", verdict: "retry", error: new GatewayError(502, "overloaded", err.event.message), cause: "stream_broken", status: 429, requestSized };
  }
  return {
    kind: "refused",
    verdict: overloaded ? "retry" : "fallback",
    error: new GatewayError(502, overloaded ? "overloaded" : timedOut ? "timeout" : "upstream", err.event.message),
    cause: timedOut ? "timeout" : "stream_broken",
    // Read as Anthropic's 529 by the key pool: another key may answer while this one cools.
    ...(overloaded ? { status: 529 } : {}),
  };
}

/**
 * A request asks an upstream (its first attempt, a retry after its wait, another vendor key, the
 * next model) only while its key still works: not revoked, not expired, its account not suspended.
 * Before, a request admitted just before a suspension went on asking for as long as its retries and
 * fallbacks lasted (the model after a failure before the first text answered it, and was charged: a
 * hostile-tenant probe, fourteenth), and a revoked or expired key's did the same (the fifteenth);
 * a request that waited for its parse turn or a near-window count made its first attempt whatever
 * happened meanwhile. The refusal is admission's (401 as for any key that does not work, 403 for a
 * suspension); what the request used so far is settled as for any failure. Answers under way still
 * finish (docs/decisions.md, "An account's on/off switch"); this is only about new upstream work.
 * A key whose `models` list was narrowed meanwhile asks no model the list now leaves out (admission's
 * 403 for it): the fallback the operator had just taken away answered (the fifteenth probe).
 * The key is read as admission reads it, through the cache (`KeyResolver.recheck`: no hash and no
 * read while its cached lookup stands; dropped at once by this process's revoke or PATCH, within the
 * change watch or 2 s for other processes'). A key store that cannot be read lets the attempt go, as
 * the request was admitted. Synchronous unless the store answers later (PostgreSQL after the cache's
 * 2 s): an await costs a turn of microtasks.
 */
function refuseUnlessStillGood(keys: KeyResolver | undefined, principal: ActiveKey, modelId: string): Promise<void> | undefined {
  if (!keys) return undefined;
  let found: ActiveKey | null | Promise<ActiveKey | null>;
  try {
    found = keys.recheck(principal);
  } catch {
    return undefined;
  }
  if (found instanceof Promise) return found.then((now) => refuseUnlessWorks(principal, now, modelId), () => {});
  refuseUnlessWorks(principal, found, modelId);
  return undefined;
}

/** Admission's refusal of a key that no longer works (or no longer for `modelId`), thrown. */
function refuseUnlessWorks(admitted: ActiveKey, found: ActiveKey | null, modelId: string): void {
  if (found === null) throw new GatewayError(401, "authentication", INVALID_KEY, NO_RETRY);
  if (found.accountSuspended) throw new GatewayError(403, "permission", ACCOUNT_SUSPENDED, NO_RETRY);
  // The same object: its lookup stands, so its list is the one admission checked.
  if (found !== admitted && !modelAllowed(found.models, modelId)) throw new GatewayError(403, "permission", modelRefusal(found.models!, modelId), NO_RETRY);
}

/** The conversation a request belongs to, hashed (the raw id goes nowhere), for vendor key affinity. */
function sessionOf(req: ForwardRequest, uuid: string): string | undefined {
  const chain = typeof req.chain === "function" ? req.chain(uuid) : req.chain;
  const id = sessionIdOf(req.format.wire, req.body, req.headers, chain);
  return id === undefined ? undefined : sessionHash(id);
}

/** The client's conversation id as it sent it (gateway/session-id.ts, not `user`); kept in memory only, never stored or logged as is. */
function conversationOf(req: ForwardRequest, uuid: string): string | undefined {
  const chain = typeof req.chain === "function" ? req.chain(uuid) : req.chain;
  return sessionIdOf(req.format.wire, req.body, req.headers, chain, true);
}

/**
 * The request's place among its key's requests under way and, when its account has a cap, among
 * the account's (all its keys together): each its own `max_concurrent_requests`, else the config's
 * default (limits.max_concurrent_requests, limits.account_max_concurrent_requests); none of
 * either, no cap. 429 (with Retry-After) when either is full; both are taken or neither
 * (ConcurrencyStore.acquireBoth). Synchronous unless a shared store (Redis) is asked: uncapped
 * keys and the in-process count cost the request no await.
 */
function takeSlot(deps: ForwardDeps, principal: ActiveKey): ConcurrencySlot | Promise<ConcurrencySlot> {
  const limits = deps.settings.limits;
  const keyCap = principal.maxConcurrentRequests ?? limits.max_concurrent_requests;
  const accountCap = principal.accountMaxConcurrentRequests ?? limits.account_max_concurrent_requests;
  const store = deps.concurrency;
  if (!store || (keyCap == null && accountCap == null)) return NO_SLOT;
  if (accountCap == null) return placeIn(store, principal.keyId, keyCap!, "key");
  const account = `account:${principal.accountId}`;
  if (keyCap == null) return placeIn(store, account, accountCap, "account");
  const granted = (pair: PlacePair): ConcurrencySlot => {
    if ("slot" in pair) return pair.slot;
    const whose = pair.full === "first" ? "key" : "account";
    throw new GatewayError(429, "rate_limit", concurrencyRefusal(whose === "key" ? keyCap : accountCap, whose), { "retry-after": "1" });
  };
  return asked(() => store.acquireBoth({ id: principal.keyId, limit: keyCap }, { id: account, limit: accountCap }), granted, "key");
}

/** A place among `id`'s requests under way (a key's or an account's), or the 429 (full) or 503 (store unreachable) that refuses it. */
function placeIn(store: ConcurrencyStore, id: string, limit: number, whose: "key" | "account"): ConcurrencySlot | Promise<ConcurrencySlot> {
  const granted = (slot: ConcurrencySlot | null): ConcurrencySlot => {
    if (!slot) throw new GatewayError(429, "rate_limit", concurrencyRefusal(limit, whose), { "retry-after": "1" });
    return slot;
  };
  return asked(() => store.acquire(id, limit), granted, whose);
}

/**
 * A store's answer made a slot, or its 429; a store that cannot be asked (it throws, or its promise
 * fails) is a 503: a cap that cannot be checked is not skipped (as rate limits), and said so.
 */
function asked<T>(ask: () => T | Promise<T>, granted: (answer: T) => ConcurrencySlot, whose: "key" | "account"): ConcurrencySlot | Promise<ConcurrencySlot> {
  const unchecked = () => new GatewayError(503, "overloaded", `The gateway cannot check this ${whose}'s requests under way right now. Retry in a few seconds.`, { "retry-after": "5" });
  let taken: T | Promise<T>;
  try {
    taken = ask();
  } catch {
    throw unchecked();
  }
  if (!(taken instanceof Promise)) return granted(taken);
  return taken.then(granted, () => {
    throw unchecked();
  });
}


/**
 * The same dependencies with another logger. An object over the shared one, not a spread copy:
 * copying every field cost ~0.4 µs a request (measured), reading through the prototype nothing.
 */
function withLog(deps: ForwardDeps, log: ForwardDeps["log"]): ForwardDeps {
  const own = Object.create(deps) as ForwardDeps;
  own.log = log;
  return own;
}

/** A wait that ends early, with an error, when the client goes away. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(clientClosed());
    const onAbort = () => {
      clearTimeout(timer);
      reject(clientClosed());
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * A refusal whose upstream named the field at fault (`param`), in the terms of the client's own
 * request (error-param.ts): a Responses client's request that reached chat completions was told
 * `messages[0].content`, a field it never sent. Only the gateway's plain errors carry an
 * upstream's param; the context-window error names its own.
 */
function inClientTerms(outcome: AttemptOutcome & { kind: "refused" }, req: ForwardRequest, model: ModelConfig): AttemptOutcome & { kind: "refused" } {
  const e = outcome.error;
  const param = e.openai?.param;
  const client = clientApi(req.format.id);
  if (param === undefined || client === undefined || e.constructor !== GatewayError) return outcome;
  const mapped = paramForClient(param, client, model.category === "embedding" ? "embeddings" : model.upstream_api ?? "chat", req.body);
  if (mapped === param) return outcome;
  return { ...outcome, error: new GatewayError(e.status, e.kind, e.message, e.headers, { ...e.openai, param: mapped }, e.details) };
}
