import { Elysia } from "elysia";
import type { KeyResolver } from "../../accounts/key-resolver.ts";
import { extractKey, isWellFormedKey } from "../../accounts/key-resolver.ts";
import { ACCOUNT_SUSPENDED, INVALID_KEY, type ActiveKey } from "../../accounts/account-store.ts";
import { NO_RETRY } from "../../streaming/gateway-error.ts";
import type { RateLimitStore } from "../../limits/rate-limiter.ts";
import { formatResetDuration, retryAfterSeconds, type BucketDecision } from "../../limits/token-bucket.ts";
import { errorResponse, isAnthropicClient } from "./errors.ts";
import { unreadBodyHeaders, type BodyServer } from "./json-body.ts";
import { addCorsHeaders, preflightResponse } from "../cors.ts";
import type { CorsPolicy } from "../../config/cors-origins.ts";
import type { ConnectionGuard } from "../../limits/connection-guard.ts";
import type { AuthFailures } from "../../limits/auth-failures.ts";
import { addressBlock } from "../../limits/address-block.ts";

/**
 * Which key each request came with: admission attaches it, the routes read it. One per app
 * (app.ts creates it), so two gateways in one process never share what they resolved.
 */
export interface Principals {
  /** The key that admission attached to this request (present on every authenticated route). */
  of(request: Request): ActiveKey;
  /** The key of an authenticated request, or undefined for routes that need none. */
  maybeOf(request: Request): ActiveKey | undefined;
  attach(request: Request, key: ActiveKey): void;
}

export function createPrincipals(): Principals {
  // Keyed by the request object itself, so an answered request takes its entry with it.
  const principals = new WeakMap<Request, ActiveKey>();
  return {
    of(request) {
      const principal = principals.get(request);
      if (!principal) throw new Error("route reached without authentication");
      return principal;
    },
    maybeOf: (request) => principals.get(request),
    attach: (request, key) => void principals.set(request, key),
  };
}

export function pathOf(url: string): string {
  const start = url.indexOf("/", url.indexOf("//") + 2);
  const query = url.indexOf("?", start);
  return query === -1 ? url.slice(start) : url.slice(start, query);
}

/** How many of a throttled address's key checks wait for its one read of the key store; more are refused (429). */
const THROTTLED_LINE = 32;

/** Token counts: free, with a bucket of their own (below). */
export const COUNT_PATHS = new Set(["/v1/messages/count_tokens", "/v1/responses/input_tokens"]);
/** GET /v1/key (routes/key.ts): authenticated, answered whatever the chat bucket holds; its own bucket (KEY_INFO_RATE_FACTOR) bounds a flood. */
export const KEY_INFO_PATH = "/v1/key";
/** How many GET /v1/key a key may make per chat request of its rate limit. */
export const KEY_INFO_RATE_FACTOR = 10;
/** How many token counts a key may make per chat request of its rate limit. */
export const COUNT_TOKENS_RATE_FACTOR = 10;

export interface AdmissionOptions {
  keys: KeyResolver;
  /** Where the resolved key is attached for the routes. */
  principals: Principals;
  limiter: RateLimitStore;
  /** limits.requests_per_minute, for keys without their own limit. */
  defaultPerMinute: number;
  /** limits.account_requests_per_minute, for accounts without their own (unset: none beyond each key's). */
  defaultAccountPerMinute?: number;
  maxBodyBytes: number;
  onRejected: (request: Request, status: number) => void;
  /** Told of every answer admission gives itself (401, 403, 413, 429, 503), for request traces. */
  onAnswered?: (request: Request, status: number) => void;
  /** Runs first on every request (the request id): one hook instead of two dispatches. */
  onArrival?: (request: Request, set: { headers: Record<string, unknown> }, path: string) => void;
  /**
   * Authenticates `/v1/admin/` requests (routes/admin.ts), here so that it happens before their
   * bodies are read like every other route's; absent, admin paths are left to the router (404).
   */
  admin?: (request: Request, server: AdminServer) => Response | undefined;
  /**
   * Refuses what another site could make a browser send to `/console/api/` (http/console/console-api.ts,
   * `consoleGate`), before the body is read; absent (SWITCHYARD_CONSOLE=off), nothing is checked.
   */
  console?: (request: Request, server: AdminServer) => Response | undefined;
  /**
   * Why a key's token counts are full (limits/count-queue.ts), or undefined: its next count is
   * refused here, before a body that could only be refused is read.
   */
  countsBusy?: (keyId: string, bodyBytes: number, accountId: string) => string | undefined;
  /**
   * Takes a count's body bytes from its account's bytes a minute (limits/count-bytes.ts): why it
   * is refused, with the wait, or undefined. Asked once the rate buckets let the count in, so a
   * count they refuse spends none of them.
   */
  countBytes?: (accountId: string, bodyBytes: number) => { message: string; retryAfterS: number } | undefined;
  /** Browsers' cross-origin requests to the model API (http/cors.ts); absent, no CORS headers. */
  cors?: CorsPolicy;
  /**
   * Connections per client address while descriptors run short (limits/connection-guard.ts): an
   * answer it says to close carries `Connection: close`, refusals and errors included.
   */
  connections?: { guard: ConnectionGuard; now: () => number };
  /**
   * Failed API key checks per client address (limits/auth-failures.ts). Past the limit a failure is
   * answered 429 with Retry-After, and the keys this process has not found before, from such an
   * address, are read from the shared key store one at a time (THROTTLED_LINE wait their turn): a
   * flood of made-up keys from one address took the PostgreSQL pool from other tenants (a
   * hostile-tenant probe: their p99 136 → 692 ms). Keys found before are never held back.
   */
  keyFailures?: { failures: AuthFailures; windowMs: number };
}

/** What the admin gate needs of the server: the client's socket address (as the body plugin does). */
export type AdminServer = BodyServer;

/**
 * Everything decided before a byte of the body is read, in one hook (each Elysia hook costs a
 * dispatch on every request):
 * - a body over the limit is refused from its Content-Length (one sent without is measured while
 *   it is read, plugins/json-body.ts);
 * - authentication, admin routes included, so a client without a valid key learns nothing else,
 *   not even that its JSON is broken, and its body is never read; one message for every failure,
 *   so a revoked key looks like one that never existed. A refusal closes the connection when a
 *   large body is still on its way (unreadBodyHeaders);
 * - the per-key token bucket, so floods of bad requests are limited too. Its x-ratelimit-*
 *   headers go on every answer of an authenticated request, set before the first byte so that
 *   streams carry them as well.
 */
export function admissionPlugin(o: AdmissionOptions) {
  const answered = o.onAnswered;
  const arrival = o.onArrival;
  const connections = o.connections;
  const keyFailures = o.keyFailures;
  /** Until when some address has been past its failed key checks' limit (performance.now()): 0 when none has. */
  let throttledUntil = 0;
  /** Throttled address blocks with a read of the key store under way, each with the turns of those waiting for it. */
  const linesOfThrottled = new Map<string, (() => void)[]>();
  /** The socket's address, by block (an IPv6 host holds a /64), never X-Forwarded-For, which a flood would write anew each time. */
  const blockOf = (request: Request, server: AdminServer) => addressBlock(server?.requestIP(request)?.address ?? "unknown");
  return new Elysia({ name: "switchyard/admission" }).onRequest(({ request, set, server }) => {
    // Read once: every read of `request.url` builds a new string.
    const path = pathOf(request.url);
    arrival?.(request, set, path);
    // Armed only while the process holds a quarter of its descriptors: asking Bun for the address costs ~2 µs.
    if (connections?.guard.armed) {
      const from = server?.requestIP(request);
      if (from && connections.guard.arrive(from.address, from.port, connections.now())) set.headers["connection"] = "close";
    }
    const result = decide(request, set, path, server);
    if (!answered || result === undefined) return result;
    if (result instanceof Promise) {
      return result.then((response) => {
        if (response) answered(request, response.status);
        return response;
      });
    }
    answered(request, result.status);
    return result;
  });

  function decide(request: Request, set: { headers: Record<string, unknown> }, path: string, server: AdminServer): Response | undefined | Promise<Response | undefined> {
    const anthropic = isAnthropicClient(path, request.headers);
    const length = Number(request.headers.get("content-length") ?? 0);
    // Refused from its Content-Length, but only once the credentials pass: without them the answer
    // is 401 whatever the body, so an anonymous client does not even learn the size limit.
    const tooLarge = length > o.maxBodyBytes
      ? () => errorResponse(anthropic, 413, "request_too_large", `The request body is ${length} bytes; the limit is ${o.maxBodyBytes}.`, { connection: "close" })
      : undefined;
    if (!path.startsWith("/v1/")) return (o.console && path.startsWith("/console/api/") ? o.console(request, server) : undefined) ?? tooLarge?.();
    if (path.startsWith("/v1/admin/")) return o.admin?.(request, server) ?? tooLarge?.();
    // A browser's request from another origin: its preflight is answered here, without a key (a
    // browser sends none with it); the request itself gets its headers before it is judged.
    const cors = o.cors;
    if (cors) {
      const origin = request.headers.get("origin");
      if (origin !== null) {
        if (request.method === "OPTIONS" && request.headers.has("access-control-request-method")) return preflightResponse(cors, origin, request);
        addCorsHeaders(cors, origin, set.headers);
        // With a list of origins the answer depends on Origin, with or without one: a shared cache must not reuse it across origins.
      } else if (!cors.any) set.headers["vary"] = "Origin";
    }

    const key = extractKey(request.headers);
    if (!key || !isWellFormedKey(key)) return limit(request, set, null, anthropic, path, tooLarge, server);
    // Only while some address is throttled, and only for a key this process has not found before:
    // the usual request asks neither for its address (~2 µs) nor for a second hash of its key.
    if (keyFailures && throttledUntil !== 0 && throttledUntil > performance.now() && o.keys.known && !o.keys.known(key)) {
      const block = blockOf(request, server);
      if (keyFailures.failures.throttled(block)) {
        // One read of the store at a time for the address; the others wait their turn in a short line
        // (a valid key among a flood's gets its read: refused at once, a new key behind a flooding
        // address met 429 after 429; a review), and past the line they are refused.
        let line = linesOfThrottled.get(block);
        if (!line) linesOfThrottled.set(block, (line = []));
        else {
          if (line.length >= THROTTLED_LINE) return busyKeys(request, anthropic);
          return new Promise<void>((turn) => line!.push(turn)).then(() => lookUp(key, request, set, anthropic, path, tooLarge, server, block));
        }
        return lookUp(key, request, set, anthropic, path, tooLarge, server, block);
      }
    }
    return lookUp(key, request, set, anthropic, path, tooLarge, server);
  }

  /** Resolves the key and goes on; `block`: the throttled address whose turn this read is, handed to the next in its line after. */
  function lookUp(
    key: string, request: Request, set: { headers: Record<string, unknown> }, anthropic: boolean, path: string, tooLarge: (() => Response) | undefined, server: AdminServer, block?: string,
  ): Response | undefined | Promise<Response | undefined> {
    let found: ActiveKey | null | Promise<ActiveKey | null>;
    try {
      found = o.keys.resolve(key);
    } catch {
      if (block !== undefined) nextInLine(block);
      return keyStoreDown(request, anthropic);
    }
    // A shared key store (PostgreSQL) answers a cache miss later; SQLite answers at once.
    if (found instanceof Promise) {
      return found.then(
        (k) => {
          if (block !== undefined) nextInLine(block);
          return limit(request, set, k, anthropic, path, tooLarge, server);
        },
        () => {
          if (block !== undefined) nextInLine(block);
          return keyStoreDown(request, anthropic);
        },
      );
    }
    if (block !== undefined) nextInLine(block);
    return limit(request, set, found, anthropic, path, tooLarge, server);
  }

  /** The address's read is done: the next waiting takes its turn, or the line goes. */
  function nextInLine(block: string): void {
    const line = linesOfThrottled.get(block);
    const next = line?.shift();
    if (next) next();
    else linesOfThrottled.delete(block);
  }

  function busyKeys(request: Request, anthropic: boolean): Response {
    o.onRejected(request, 429);
    return errorResponse(anthropic, 429, "rate_limit", "Too many key checks from this address at once, after many with invalid API keys. Retry after 1 s.",
      { "retry-after": "1", ...unreadBodyHeaders(request) });
  }

  function badKeys(request: Request, anthropic: boolean, retryAfterS: number): Response {
    o.onRejected(request, 429);
    return errorResponse(anthropic, 429, "rate_limit", `Too many requests with invalid API keys from this address. Retry after ${retryAfterS} s.`,
      { "retry-after": String(retryAfterS), ...unreadBodyHeaders(request) });
  }

  /** The key store cannot be read (a broken disk, an unreachable database): nobody can be admitted, but nothing crashes. */
  function keyStoreDown(request: Request, anthropic: boolean): Response {
    return errorResponse(anthropic, 503, "overloaded", "The gateway cannot check API keys right now. Retry in a few seconds.", { "retry-after": "5", ...unreadBodyHeaders(request) });
  }

  function limit(
    request: Request, set: { headers: Record<string, unknown> }, found: ActiveKey | null, anthropic: boolean, path: string, tooLarge: (() => Response) | undefined, server: AdminServer,
  ): Response | undefined | Promise<Response | undefined> {
    if (!found) {
      if (keyFailures) {
        const verdict = keyFailures.failures.failed(blockOf(request, server));
        if (verdict.throttled) {
          throttledUntil = performance.now() + keyFailures.windowMs;
          return badKeys(request, anthropic, verdict.retryAfterSeconds);
        }
      }
      o.onRejected(request, 401);
      return errorResponse(anthropic, 401, "authentication", INVALID_KEY, { ...NO_RETRY, ...unreadBodyHeaders(request) });
    }
    if (tooLarge) return tooLarge();
    o.principals.attach(request, found);
    // A client asking what its key may still spend (and when its limits reset) is answered even
    // with an empty bucket: the question costs nothing and is how it learns when to come back.
    // A suspended account's too: its answer says so.
    // It has a bucket of its own, ten times the key's chat rate: unlimited, one key's flood of it
    // (two store reads each) slowed every tenant's paid requests on a shared PostgreSQL more than
    // a flood the chat bucket refuses (a hostile-tenant probe, thirty-fourth session). A bucket
    // that cannot be read lets the question through.
    if (path === KEY_INFO_PATH) return keyInfoLimit(request, found, anthropic);
    if (found.accountSuspended) {
      o.onRejected(request, 403);
      return errorResponse(anthropic, 403, "permission", ACCOUNT_SUSPENDED, { ...NO_RETRY, ...unreadBodyHeaders(request) });
    }

    // Token counts (Claude Code sends dozens for one `/context`) have a bucket of their own,
    // ten times the key's chat rate, so counting never spends the budget for answers.
    const counting = COUNT_PATHS.has(path);
    const bodyBytes = counting ? Number(request.headers.get("content-length")) || 0 : 0;
    /** A count's account, whose bytes a minute it takes once its rate buckets let it in (admitWithBytes). */
    const countingFor = counting ? found.accountId : undefined;
    const busy = counting ? o.countsBusy?.(found.keyId, bodyBytes, found.accountId) : undefined;
    if (busy) {
      o.onRejected(request, 429);
      return errorResponse(anthropic, 429, "rate_limit", busy, { "retry-after": "1", ...unreadBodyHeaders(request) });
    }
    const factor = counting ? COUNT_TOKENS_RATE_FACTOR : 1;
    const perMinute = (found.rateLimitPerMinute ?? o.defaultPerMinute) * factor;
    const suffix = counting ? ":count_tokens" : "";
    const accountChat = found.accountRateLimitPerMinute ?? o.defaultAccountPerMinute;
    if (accountChat === undefined) {
      const taken = o.limiter.take(found.keyId + suffix, perMinute);
      // The in-process store answers at once; a shared one (Redis) answers later.
      return taken instanceof Promise ? taken.then((decision) => admitWithBytes(request, set, perMinute, decision, undefined, anthropic, countingFor, bodyBytes)) : admitWithBytes(request, set, perMinute, taken, undefined, anthropic, countingFor, bodyBytes);
    }
    // The key's bucket and its account's: a token from both or from neither, so a request one of
    // them refuses spends nothing of the other (a quiet key's own bucket is not drained by the
    // refusals its noisy siblings caused, nor the account's by a key past its own limit).
    const accountPerMinute = accountChat * factor;
    const both = o.limiter.takeBoth({ id: found.keyId + suffix, perMinute }, { id: `account:${found.accountId}${suffix}`, perMinute: accountPerMinute });
    const verdict = ([key, account]: [BucketDecision, BucketDecision]) => admitWithBytes(request, set, perMinute, key, { perMinute: accountPerMinute, decision: account }, anthropic, countingFor, bodyBytes);
    return both instanceof Promise ? both.then(verdict) : verdict(both);
  }

  function keyInfoLimit(request: Request, found: ActiveKey, anthropic: boolean): Response | undefined | Promise<Response | undefined> {
    const perMinute = (found.rateLimitPerMinute ?? o.defaultPerMinute) * KEY_INFO_RATE_FACTOR;
    const verdict = (decision: BucketDecision): Response | undefined => {
      if (decision.allowed) return undefined;
      o.onRejected(request, 429);
      const seconds = Math.max(1, Math.ceil(decision.retryAfterMs / 1000));
      return errorResponse(anthropic, 429, "rate_limit", `Too many GET /v1/key requests for this key (${perMinute} a minute). Retry in ${seconds} s.`, { "retry-after": String(seconds) });
    };
    try {
      const taken = o.limiter.take(`${found.keyId}:key_info`, perMinute);
      return taken instanceof Promise ? taken.then(verdict, () => undefined) : verdict(taken);
    } catch {
      return undefined;
    }
  }

  /**
   * The rate buckets' verdict (`admit`) and, for a count (`countingFor`: its account) they let in,
   * its account's bytes a minute. Taken before the rate was asked, the bytes of counts the key's
   * rate refused were spent all the same, and the account's other keys were refused their counts
   * for them.
   */
  function admitWithBytes(
    request: Request, set: { headers: Record<string, unknown> }, perMinute: number, decision: BucketDecision, account: AccountBucket | undefined, anthropic: boolean,
    countingFor: string | undefined, bodyBytes: number,
  ): Response | undefined {
    const refused = admit(request, set, perMinute, decision, account, anthropic);
    if (refused || countingFor === undefined) return refused;
    const over = o.countBytes?.(countingFor, bodyBytes);
    if (!over) return undefined;
    o.onRejected(request, 429);
    return errorResponse(anthropic, 429, "rate_limit", over.message, { "retry-after": String(over.retryAfterS), ...unreadBodyHeaders(request) });
  }

  /**
   * The request's verdict from its key's bucket and, when the account has a limit, its account's.
   * The x-ratelimit-* headers describe the bucket that binds: the one that refused (the key's
   * first), else the one with fewer requests left.
   */
  function admit(
    request: Request, set: { headers: Record<string, unknown> }, perMinute: number, decision: BucketDecision, account: AccountBucket | undefined, anthropic: boolean,
  ): Response | undefined {
    if (decision.unavailable || account?.decision.unavailable) {
      // Limits that cannot be enforced are not skipped: refused, like a ledger that cannot write.
      return errorResponse(anthropic, 503, "overloaded", "The gateway cannot check rate limits right now. Retry in a few seconds.",
        { "retry-after": String(retryAfterSeconds(account?.decision.unavailable ? account.decision : decision)), ...unreadBodyHeaders(request) });
    }
    let whose = "this key";
    if (account && decision.allowed && (!account.decision.allowed || account.decision.remaining < decision.remaining)) {
      ({ decision, perMinute } = account);
      whose = "this account (all its keys together)";
    }
    const rate = {
      "x-ratelimit-limit-requests": String(perMinute),
      "x-ratelimit-remaining-requests": String(decision.remaining),
      "x-ratelimit-reset-requests": formatResetDuration(decision.resetMs),
    };
    Object.assign(set.headers, rate);
    if (!decision.allowed) {
      const wait = retryAfterSeconds(decision);
      o.onRejected(request, 429);
      // The exact wait beside the whole seconds: the openai and Anthropic SDKs read `retry-after-ms`
      // first, so a key of 600 a minute is asked again after 100 ms, not after a rounded-up second.
      return errorResponse(anthropic, 429, "rate_limit", `Rate limit exceeded: ${perMinute} requests per minute for ${whose}. Retry after ${wait} s.`,
        { ...rate, "retry-after": String(wait), "retry-after-ms": String(decision.retryAfterMs), ...unreadBodyHeaders(request) });
    }
    return undefined;
  }
}

/** The account's bucket's answer for a request, beside its key's. */
interface AccountBucket {
  perMinute: number;
  decision: BucketDecision;
}
