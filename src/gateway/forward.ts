import type { ModelConfig } from "../config/schema.ts";
import type { Settings } from "../config/load-config.ts";
import type { Ledger } from "../billing/ledger.ts";
import type { Logger } from "../log/log.ts";
import type { WireFormat } from "../translate/wire-types.ts";
import { GatewayError } from "../streaming/gateway-error.ts";
import { endOfTurn } from "./end-of-turn.ts";
import type { Inflight } from "./inflight.ts";
import { planRequest } from "./plan.ts";
import { openBillingSession, type Principal } from "./billing-session.ts";
import { attemptUpstream, clientClosed } from "./attempt.ts";
import { nextStep } from "./retry-policy.ts";
import { respond, type AnswerFormat } from "./respond.ts";
import { withRequestId, type RequestTrace, type Tracker } from "../ops/request-trace.ts";
import type { EmbeddingsInputMeasure } from "../billing/embeddings-input.ts";

export type { Principal, AnswerFormat };
import type { Transport } from "../transport/transport.ts";

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
  /** Metrics and the access log follow the request here (ops/request-trace.ts). */
  trace?: RequestTrace;
  /** POST /v1/embeddings: the input, measured; the candidates are embedding models and `answer` writes the list. */
  embeddings?: EmbeddingsInputMeasure;
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
  const plan = await planRequest(deps.settings, req);
  const trace = req.trace;
  if (trace) trace.planned(plan.requestId, plan.candidates[0]!.model.id, req.principal);
  const billing = await openBillingSession(deps, {
    requestId: plan.requestId, principal: req.principal, worstCaseMicro: plan.worstCaseMicro, startedAt, promptText: plan.promptText, clientRequestId,
    onCharged: trace && ((inputTokens, outputTokens, costMicro) => trace.charged(inputTokens, outputTokens, costMicro)),
  });
  const random = deps.random ?? Math.random;
  const limits = deps.settings.retry;
  const wantsStream = req.body.stream === true;
  const attemptRequest = { requestId: plan.requestId, clientFormat: req.clientFormat, body: req.body, headers: req.headers, clientSignal: req.signal, wantsStream, clientRequestId };
  const answerRequest = { clientFormat: req.clientFormat, body: req.body, uuid: plan.uuid, requestId: plan.requestId, bodyBytes: req.bodyBytes, promptText: plan.promptText, onStream: req.onStream, answer: req.answer, trace };

  try {
    let waited = 0;
    let last: GatewayError | undefined;
    for (const candidate of plan.candidates) {
      for (let retry = 0; ; retry++) {
        const meter = billing.attempt(candidate.model, candidate.model.provider);
        trace?.attemptStarted(candidate.model.id, candidate.model.provider);
        const outcome = await attemptUpstream(deps, attemptRequest, candidate);
        trace?.attemptEnded(outcome.kind === "refused" ? outcome.cause ?? "other" : undefined, outcome.kind === "stream");
        if (outcome.kind !== "refused") {
          const response = await respond(deps, answerRequest, candidate.model, outcome, meter, billing);
          // Under load, answers leave together at the end of the loop's turn (see end-of-turn.ts);
          // `inflight` still counts this request while its stream runs.
          if (deps.inflight.count > (billing.settling ? 0 : 1)) await endOfTurn();
          if (trace && !trace.stream) trace.answered();
          return response;
        }
        last = outcome.error;
        const step = nextStep(outcome, retry, waited, limits, random());
        if (step.action === "fail") throw outcome.error;
        if (step.action === "next") break;
        deps.log("info", "retrying upstream", { requestId: plan.requestId, model: candidate.model.id, delayMs: step.delayMs, retry: retry + 1 });
        trace?.retried(step.delayMs);
        await sleep(step.delayMs, req.signal);
        waited += step.delayMs;
      }
      if (plan.candidates.length > 1) deps.log("info", "falling back", { requestId: plan.requestId, from: candidate.model.id, reason: last?.message });
      if (trace && candidate !== plan.candidates[plan.candidates.length - 1]) trace.fellBack();
    }
    throw last!;
  } catch (err) {
    // Whatever escaped, the reservation is released; settle() is a no-op when already done.
    await billing.settle(req.signal.aborted ? "cancelled" : "upstream_error");
    if (err instanceof GatewayError) err.recorded = true;
    throw err;
  }
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

