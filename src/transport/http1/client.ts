import { createFetchTransport } from "../fetch-transport.ts";
import { attemptHooksOfInit, type Transport } from "../transport.ts";
import { exchange, UpstreamConnectionError } from "./exchange.ts";
import { createPool, type Connection } from "./pool.ts";
import { parseTarget, serializePost, type Target } from "./request-writer.ts";

export { fastReader, wholeBody, wholeReader } from "./body-queue.ts";
export { UpstreamConnectionError } from "./exchange.ts";

/**
 * HTTP/1.1 client for upstream API calls, on `Bun.connect` sockets served by the same event
 * loop as the gateway's own connections. It implements the Transport port.
 *
 * Why not `fetch`: Bun runs `fetch` on a separate HTTP thread, so every call and every body
 * chunk crosses threads. Measured on the bench's loopback (docs/benchmarks.md): the call alone
 * cost 15–20 µs of the request thread, a JSON proxy spent 31 µs of CPU per request on `fetch`
 * against 22 µs on this client, and its p50 latency was 18 µs lower. Upstream calls are narrow
 * (a POST with a JSON body to a fixed origin), so the client is small; anything outside that
 * (other methods, non-string bodies, an HTTP(S) proxy in the environment) goes to `fetch`.
 *
 * The rules it keeps against a broken or hostile upstream (docs/decisions.md, "Transport"):
 * - a request goes out again only when a pooled connection failed before any byte of an answer
 *   arrived (the keep-alive race), once, on a new connection; a new connection's failure is the
 *   caller's to judge;
 * - answers are bounded (`maxResponseBytes`, counted after decoding), on every path;
 * - a connection whose framing left anything in doubt is destroyed, never pooled (pool.ts,
 *   response-parser.ts).
 *
 * The answer is a standard `Response`, so callers cannot tell the two apart.
 */
export interface Http1ClientOptions {
  /** Extra TLS trust (tests use a private CA); the system store is always used. */
  ca?: string;
  /** Seconds an idle pooled connection is kept; under common server keep-alive timeouts. */
  idleSeconds?: number;
  /** Idle connections kept per origin. */
  maxIdlePerOrigin?: number;
  /**
   * How long a freed connection rests before it carries another request, once its origin has
   * sent an answer nobody asked for (pool.ts): a late copy of an answer lands on an idle
   * connection, which is destroyed, instead of being read as another request's answer. Default
   * 10 ms; 0 never rests.
   */
  reuseAfterMs?: number;
  /** How long an origin keeps that rest after its last unasked-for answer. Default 10 minutes. */
  probationMs?: number;
  /**
   * While an origin is on probation: `close` (default) gives each of its connections one request,
   * so no late copy can ever be read as another request's answer; `rest` reuses them after
   * `reuseAfterMs` (fewer connections, but a copy later than the rest still crosses).
   */
  reuseOnProbation?: "close" | "rest";
  /** Requests the client cannot carry (see above). Defaults to the global `fetch`; capped like ours. */
  fallback?: Transport;
  /** An HTTP(S) proxy is configured (config/env.ts, upstreamViaProxy): every call goes to `fallback`, which honours it. */
  viaProxy?: boolean;
  /** Largest answer body accepted, after decoding; beyond it the call or its body fails with ResponseTooLargeError. */
  maxResponseBytes?: number;
  /**
   * Runs a function once the event loop's current turn has run all its I/O callbacks. The
   * gateway passes the one it holds its own writes with (gateway/end-of-turn.ts), so all of
   * a turn's writes share one wake-up. Default: `setImmediate`.
   */
  atEndOfTurn?: (fn: () => void) => void;
  /**
   * Asked as each request on a new connection is about to be written: true holds the write
   * until the turn ends, so a busy turn's requests leave together. The gateway says yes while
   * other requests are in flight. Default: write at once.
   */
  coalesce?: () => boolean;
}

export interface Http1Client {
  fetch: Transport;
  /** Open sockets, pooled or busy (bench and tests check nothing leaks). */
  openConnections(): number;
  /**
   * The gateway is stopping: calls still waiting for their answer's first byte reject with
   * `reason`, and so does every call after this one (gateway/inflight.ts). Calls through `fetch`
   * (a proxy) are left to the stop.
   */
  cut(reason: Error): void;
  close(): void;
}

/** A late copy within this of its answer never reaches another request (pool.ts). */
const DEFAULT_REUSE_AFTER_MS = 10;
const DEFAULT_PROBATION_MS = 10 * 60_000;
/** Enough for the rest above at some 20,000 requests a second to one origin. */
const DEFAULT_MAX_IDLE_PER_ORIGIN = 1024;

const DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024;

export function createHttp1Client(options: Http1ClientOptions = {}): Http1Client {
  const maxBytes = options.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
  const fallback = createFetchTransport(maxBytes, options.fallback);
  const viaProxy = options.viaProxy ?? false;
  const coalesce = options.coalesce;
  const atEndOfTurn = options.atEndOfTurn ?? ((fn: () => void) => void setImmediate(fn));
  /**
   * A request on a pooled connection is written once the turn's callbacks have run: an
   * unsolicited answer that arrived before this turn's poll reaches the connection's idle check
   * first, even when its callback comes after ours. A connection freed during this very turn
   * waits for one more poll, since what came after its answer is not even polled yet.
   */
  const afterNextPoll = (write: () => void) => atEndOfTurn(() => atEndOfTurn(write));
  const pool = createPool({
    ca: options.ca,
    idleSeconds: options.idleSeconds ?? 30,
    maxIdlePerOrigin: options.maxIdlePerOrigin ?? DEFAULT_MAX_IDLE_PER_ORIGIN,
    reuseAfterMs: options.reuseAfterMs ?? DEFAULT_REUSE_AFTER_MS,
    probationMs: options.probationMs ?? DEFAULT_PROBATION_MS,
    reuseOnProbation: options.reuseOnProbation ?? "close",
  });

  /** Set by `cut`: the stop's reason, which every later call is refused with. */
  let cutWith: Error | undefined;

  /** Parsed once per URL: the same few upstream URLs serve every request. */
  const targets = new Map<string, Target | null>();
  function targetOf(url: string): Target | null {
    let target = targets.get(url);
    if (target === undefined) {
      target = parseTarget(url);
      if (targets.size > 1000) targets.clear();
      targets.set(url, target);
    }
    return target;
  }

  async function connect(target: Target): Promise<Connection> {
    try {
      return await pool.connect(target);
    } catch (err) {
      throw new UpstreamConnectionError(`could not connect to the upstream: ${(err as Error).message ?? err}`, false);
    }
  }

  /**
   * A call `fetch` makes (through a proxy, or one this client does not carry). It cannot say when
   * the request's last byte went, so the request counts as sent once handed over: a client that
   * leaves from then on pays for its prompt (gateway/billing-session.ts), as it does on our own
   * connections once the request is written; a connection that fails is a refusal, which takes it
   * back. Counted at the answer's head instead, leaving during a proxied non-stream request was
   * free prompt processing (a probe, 2026-11-30).
   */
  function viaFallback(url: string, init: RequestInit): Promise<Response> {
    const answer = fallback(url, init);
    attemptHooksOfInit(init)?.requestSent?.();
    return answer;
  }

  async function request(url: string, init: RequestInit): Promise<Response> {
    const method = (init.method ?? "GET").toUpperCase();
    const headers = init.headers;
    if (viaProxy || method !== "POST" || typeof init.body !== "string" || !isPlainRecord(headers)) return viaFallback(url, init);
    const target = targetOf(url);
    if (!target) return viaFallback(url, init);
    // An attempt's deadline comes as hooks (transport.ts, `attemptInit`): reading `init.signal` would make its AbortSignal.
    const hooks = attemptHooksOfInit(init);
    const signal = hooks ? undefined : (init.signal ?? undefined);
    const aborts = hooks ?? signal;
    if (aborts?.aborted) throw aborts.reason;
    if (cutWith) throw cutWith;
    const message = serializePost(target, headers, init.body);

    const pooled = pool.take(target.origin);
    if (pooled) {
      try {
        return await exchange(pool, pooled, message, { method, hooks, signal, maxBytes, hold: pooled.cooling ? afterNextPoll : atEndOfTurn });
      } catch (err) {
        // The keep-alive race: the server dropped the connection before answering. Once, on a new one.
        if (!(err instanceof UpstreamConnectionError && err.replayable) || aborts?.aborted) throw err;
      }
    }
    const conn = await connect(target);
    // Cut while its connection was opening (the pool knew no owner for it yet): never sent.
    if (cutWith) {
      pool.destroy(conn, cutWith);
      throw cutWith;
    }
    return exchange(pool, conn, message, { method, hooks, signal, maxBytes, hold: coalesce?.() ? atEndOfTurn : null });
  }

  return {
    fetch: request,
    openConnections: () => pool.size(),
    cut(reason) {
      cutWith = reason;
      pool.cut(reason);
    },
    close: () => pool.close(),
  };
}

function isPlainRecord(value: unknown): value is Record<string, string> {
  if (value === undefined || value === null || typeof value !== "object" || Array.isArray(value)) return false;
  if (value instanceof Headers) return false;
  for (const key in value) if (typeof (value as Record<string, unknown>)[key] !== "string") return false;
  return true;
}
