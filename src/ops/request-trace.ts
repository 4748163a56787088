import { CHECKED_FIELDS, type LogLevel, type Logger } from "../log/log.ts";
import { mayHoldSecret } from "../log/scrub.ts";
import { GatewayError } from "../streaming/gateway-error.ts";
import type { AccessLogSettings } from "../config/ops-settings.ts";
import type { GatewayMetrics, RejectionReason, UpstreamErrorClass } from "./gateway-metrics.ts";
import type { TokenClasses } from "../billing/pricing.ts";

/** How a request ended, as the access log says. */
export type Outcome =
  /** An answer was sent whole. */
  | "complete"
  /** The client went away (or stopped reading) before the end. */
  | "client_abort"
  /** No upstream could answer, or the answer broke after it started. */
  | "upstream_error"
  /** An upstream deadline passed (first byte, silence or total). */
  | "timeout"
  /** Refused before any upstream call (401, 402, 404, 413, 422, 429, …). */
  | "rejected"
  /** The gateway itself failed (ledger unavailable, an internal error), or cut a stream itself (its stop past the grace, its ledger out of reach). */
  | "error";

/** `x-request-id` values accepted from clients; anything else is replaced by one of ours. */
const VALID_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;
export const REQUEST_ID_HEADER = "x-request-id";

const RANK: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };

/** Probes scraped every few seconds: counted in metrics, logged only when they fail. */
const QUIET_PATHS = new Set(["/health", "/ready", "/metrics"]);

/**
 * Health and readiness answers report on the gateway, they refuse no one: /ready's 503 while
 * draining or while a store is down is the answer asked for, not a request turned away, so it is
 * no rejection (a probe every few seconds made `unavailable` climb with no client refused).
 */
const PROBE_PATHS = new Set(["/health", "/ready"]);

/**
 * What one request did, filled in by the stages as it goes (plain fields, one object per
 * request) and turned into metrics and one access-log line when it finishes. Times are
 * `performance.now()` milliseconds.
 */
export class RequestTrace {
  modelAsked = "";
  /** The model of the last attempt (the one that answered, when one did), else the first candidate. */
  model = "";
  provider = "";
  accountId = "";
  keyId = "";
  /** The usage record's id (`req_…`) once the request reached the pipeline. */
  usageId = "";
  stream = false;
  attempts = 0;
  inputTokens = 0;
  outputTokens = 0;
  /** The prompt by price class (inputTokens is their sum), as the usage record has them. */
  freshInputTokens = 0;
  cacheReadTokens = 0;
  cacheWrite5mTokens = 0;
  cacheWrite1hTokens = 0;
  costMicro = 0;
  settled = false;
  /** Time spent waiting for upstream answers (heads; whole bodies) and on retry back-off. */
  upstreamWaitMs = 0;
  /** When the answer's head was handed to the server. */
  headAt = 0;
  /** When the first answer bytes were handed to the client. */
  firstByteAt = 0;
  /** A stream is running: it finishes the trace itself when it ends. */
  streaming = false;
  finished = false;
  attemptAt = 0;
  upstreamError: UpstreamErrorClass | undefined;
  status = 0;
  outcome: Outcome = "complete";
  errorType: string | undefined;

  constructor(
    readonly tracker: Tracker,
    readonly id: string,
    readonly method: string,
    readonly path: string,
    readonly startedAt: number,
  ) {}

  /** The pipeline took the request: its usage record's id, the first candidate, who pays. */
  planned(usageId: string, firstModel: string, principal: { accountId: string; keyId: string }): void {
    this.usageId = usageId;
    this.model = firstModel;
    this.accountId = principal.accountId;
    this.keyId = principal.keyId;
  }

  /** An upstream attempt starts (model and provider as configured ids). */
  attemptStarted(model: string, provider: string): void {
    this.attempts++;
    this.model = model;
    this.provider = provider;
    this.attemptAt = performance.now();
  }

  /**
   * The attempt came back: refused with `failure`, or with a whole answer, or with a stream's
   * head (the stream's upstream time is taken when it ends).
   */
  attemptEnded(failure: UpstreamErrorClass | undefined, streaming: boolean): void {
    const ms = performance.now() - this.attemptAt;
    this.upstreamWaitMs += ms;
    if (failure) {
      this.upstreamError = failure;
      this.tracker.upstreamFailed(this, failure, ms);
    } else if (!streaming) {
      const m = this.tracker.metrics;
      m?.families.upstream.observe(ms / 1000, m.providerOf(this.provider));
    }
  }

  retried(delayMs: number): void {
    this.upstreamWaitMs += delayMs;
    this.tracker.metrics?.families.retries.inc(1, this.tracker.metrics.modelOf(this.model));
  }

  fellBack(): void {
    this.tracker.metrics?.families.fallbacks.inc(1, this.tracker.metrics.modelOf(this.model));
  }

  /** What the settlement charged. */
  charged(inputTokens: number, outputTokens: number, costMicro: number, classes: TokenClasses): void {
    this.settled = true;
    this.inputTokens = inputTokens;
    this.outputTokens = outputTokens;
    this.freshInputTokens = classes.freshInput;
    this.cacheReadTokens = classes.cacheRead;
    this.cacheWrite5mTokens = classes.cacheWrite5m;
    this.cacheWrite1hTokens = classes.cacheWrite1h;
    this.costMicro = costMicro;
  }

  /** A whole answer is handed over: the request is done. */
  answered(): void {
    this.headAt = this.firstByteAt = performance.now();
    this.tracker.finish(this, 200, "complete");
  }

  /** A stream's head is handed over; `streamEnded` finishes the trace. */
  streamStarted(): void {
    this.headAt = performance.now();
    this.stream = true;
    this.streaming = true;
    this.tracker.metrics?.streamStarted();
  }

  /**
   * A stream given up before its head went out (the upstream failed in what it had sent): the
   * attempt counts as failed, and the request goes on to its next attempt or its error.
   */
  streamAbandoned(failure: UpstreamErrorClass): void {
    if (!this.streaming) return;
    this.streaming = false;
    this.stream = false;
    this.headAt = 0; // no head went out: the added latency is the next attempt's, or none
    this.tracker.metrics?.streamEnded();
    this.upstreamError = failure;
    this.tracker.upstreamFailed(this, failure, performance.now() - this.attemptAt);
  }

  firstBytes(): void {
    if (this.firstByteAt === 0) this.firstByteAt = performance.now();
  }

  /**
   * The stream is over; `upstreamFailure` says why when the upstream broke it. `cut`: the gateway
   * cut it (its stop past the grace, its ledger out of reach), with an `overloaded` error frame.
   */
  streamEnded(outcome: "completed" | "failed" | "cancelled" | "cut", upstreamFailure?: UpstreamErrorClass): void {
    if (!this.streaming) return;
    this.streaming = false;
    const metrics = this.tracker.metrics;
    metrics?.streamEnded();
    const upstreamMs = performance.now() - this.attemptAt;
    if (upstreamFailure) this.tracker.upstreamFailed(this, upstreamFailure, upstreamMs);
    else metrics?.families.upstream.observe(upstreamMs / 1000, metrics.providerOf(this.provider));
    if (upstreamFailure) this.upstreamError = upstreamFailure;
    if (outcome === "cut") this.errorType = "overloaded";
    this.tracker.finish(this, 200, outcome === "completed" ? "complete" : outcome === "cancelled" ? "client_abort" : outcome === "cut" ? "error" : upstreamFailure === "timeout" ? "timeout" : "upstream_error");
  }
}

export interface TrackerOptions {
  log: Logger;
  accessLog: AccessLogSettings;
  /** [0, 1) for sampling. */
  random?: () => number;
}

/**
 * Request ids, traces and their end: every request gets a trace when it arrives (request-id
 * plugin) and is finished exactly once — by the pipeline when it answered, by the stream when
 * it ends, by the errors plugin or admission when refused, by the after-response hook otherwise.
 */
export class Tracker {
  readonly #traces = new WeakMap<Request, RequestTrace>();
  readonly #log: Logger;
  readonly #access: AccessLogSettings;
  readonly #random: () => number;
  /** Set once the app's routes are known (see app.ts); absent when metrics are off. */
  metrics: GatewayMetrics | undefined;

  constructor(o: TrackerOptions) {
    this.#log = o.log;
    this.#access = o.accessLog;
    this.#random = o.random ?? Math.random;
  }

  /**
   * A new request: its id is the client's `x-request-id` when that is sane, else a new one; the
   * request's header is set to it, so everything downstream (the upstream call too) reads one id.
   */
  begin(request: Request, path: string): RequestTrace {
    const given = request.headers.get(REQUEST_ID_HEADER);
    let id = given;
    if (id === null || !VALID_REQUEST_ID.test(id)) {
      id = crypto.randomUUID();
      request.headers.set(REQUEST_ID_HEADER, id);
    }
    const trace = new RequestTrace(this, id, request.method, path, performance.now());
    this.#traces.set(request, trace);
    return trace;
  }

  of(request: Request): RequestTrace | undefined {
    return this.#traces.get(request);
  }

  /** A response was produced outside the pipeline (refusals, errors, other routes). */
  responded(request: Request, status: number, error?: unknown): void {
    const trace = this.#traces.get(request);
    if (!trace || trace.finished || trace.streaming) return;
    trace.errorType = error instanceof GatewayError ? error.kind : status >= 500 ? "internal" : undefined;
    this.finish(trace, status, outcomeOf(status, error));
  }

  upstreamFailed(trace: RequestTrace, failure: UpstreamErrorClass, ms: number): void {
    const m = this.metrics;
    if (!m) return;
    const provider = m.providerOf(trace.provider);
    m.families.upstream.observe(ms / 1000, provider);
    m.families.upstreamErrors.inc(1, provider, m.dims.errorClass.indexOf(failure));
  }

  finish(trace: RequestTrace, status: number, outcome: Outcome): void {
    if (trace.finished) return;
    trace.finished = true;
    trace.status = status;
    trace.outcome = outcome;
    const m = this.metrics;
    if (m) {
      const route = m.routeOf(trace.path);
      const model = m.modelOf(trace.model || trace.modelAsked);
      m.families.requests.inc(1, route, model, m.providerOf(trace.provider), status);
      if (trace.attempts === 0 && status >= 400 && !PROBE_PATHS.has(trace.path)) {
        const reason = rejectionReason(status);
        if (reason) m.families.rejections.inc(1, m.dims.reason.indexOf(reason));
      }
      if (trace.headAt > 0) m.families.added.observe(Math.max(0, trace.headAt - trace.startedAt - trace.upstreamWaitMs) / 1000, route);
      if (trace.firstByteAt > 0) m.families.ttft.observe((trace.firstByteAt - trace.startedAt) / 1000, route, model);
      if (trace.settled) {
        m.families.tokens.inc(trace.inputTokens, model, 0);
        m.families.tokens.inc(trace.outputTokens, model, 1);
        // The prompt as a vendor's invoice splits it: fresh input, cache reads, writes by lifetime.
        if (trace.inputTokens > 0) {
          const prompt = m.families.promptTokens;
          if (trace.freshInputTokens > 0) prompt.inc(trace.freshInputTokens, model, 0);
          if (trace.cacheReadTokens > 0) prompt.inc(trace.cacheReadTokens, model, 1);
          if (trace.cacheWrite5mTokens > 0) prompt.inc(trace.cacheWrite5mTokens, model, 2);
          if (trace.cacheWrite1hTokens > 0) prompt.inc(trace.cacheWrite1hTokens, model, 3);
        }
        if (trace.costMicro > 0) m.families.credits.inc(trace.costMicro, model);
      }
    }
    const access = this.#access;
    if (!access.enabled) return;
    const failed = status >= 400 || outcome !== "complete";
    if (!failed && (QUIET_PATHS.has(trace.path) || (access.sample < 1 && this.#random() >= access.sample))) return;
    // The gateway's own failures at warn, a stream it cut after its 200 head included.
    const level: LogLevel = status >= 500 || outcome === "error" ? "warn" : access.level;
    // A line the logger would drop costs nothing to skip (building and scrubbing one is ~4 µs).
    if (access.logLevel && RANK[level] < RANK[access.logLevel]) return;
    this.#log(level, "request", accessLogFields(trace));
  }
}

/** A logger whose every line about one request carries its id. */
export function withRequestId(log: Logger, clientRequestId: string): Logger {
  return (level, message, fields) => log(level, message, fields ? { ...fields, clientRequestId } : { clientRequestId });
}

/** One access-log line's fields: no prompt text, no keys (ids only), times in milliseconds. */
export function accessLogFields(t: RequestTrace): Record<string, unknown> {
  const now = performance.now();
  const ms = (v: number) => Math.round(v * 1000) / 1000;
  const modelAsked = t.modelAsked ? t.modelAsked.slice(0, 200) : undefined;
  // What the client wrote (its request id, method, path, the model it named) is tested here; the
  // rest is the gateway's own. Plain, the line needs no test of each string by the logger (log.ts).
  const plain = !mayHoldSecret(t.id) && !mayHoldSecret(t.method) && !mayHoldSecret(t.path) && (modelAsked === undefined || !mayHoldSecret(modelAsked));
  const fields: Record<string, unknown> = {
    clientRequestId: t.id,
    requestId: t.usageId || undefined,
    method: t.method,
    path: t.path,
    status: t.status,
    outcome: t.outcome,
    // Absent fields are undefined, which JSON leaves out: one object literal, no spread copies.
    errorType: t.errorType || undefined,
    upstreamError: t.upstreamError || undefined,
    stream: t.stream,
    modelRequested: modelAsked,
    model: t.attempts > 0 ? t.model : undefined,
    provider: t.provider || undefined,
    attempts: t.attempts,
    promptTokens: t.inputTokens,
    // The prompt's cached parts, when there are any: a line that checks a bill needs its classes.
    cacheReadTokens: t.cacheReadTokens || undefined,
    cacheWrite5mTokens: t.cacheWrite5mTokens || undefined,
    cacheWrite1hTokens: t.cacheWrite1hTokens || undefined,
    completionTokens: t.outputTokens,
    credits: t.costMicro / 1_000_000,
    addedMs: t.headAt > 0 ? ms(Math.max(0, t.headAt - t.startedAt - t.upstreamWaitMs)) : undefined,
    ttfbMs: t.firstByteAt > 0 ? ms(t.firstByteAt - t.startedAt) : undefined,
    upstreamMs: t.attempts > 0 ? ms(t.upstreamWaitMs) : undefined,
    totalMs: ms(now - t.startedAt),
    accountId: t.accountId || undefined,
    keyId: t.keyId || undefined,
  };
  // Not enumerable: a copy with fields of its own (`{...fields, more}`) is not marked as checked.
  if (plain) Object.defineProperty(fields, CHECKED_FIELDS, { value: true });
  return fields;
}

function outcomeOf(status: number, error: unknown): Outcome {
  if (status === 499) return "client_abort";
  if (error instanceof GatewayError && error.kind === "timeout") return "timeout";
  if (status === 502 || status === 504) return "upstream_error";
  if (status >= 500) return "error";
  if (status >= 400) return "rejected";
  return "complete";
}

function rejectionReason(status: number): RejectionReason | undefined {
  switch (status) {
    case 401:
      return "auth";
    case 403:
      return "permission";
    case 402:
      return "credits";
    case 413:
      return "too_large";
    case 408:
      return "body_timeout";
    case 429:
      return "rate_limit";
    case 503:
      return "unavailable";
  }
  return undefined;
}
