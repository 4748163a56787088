import { Elysia } from "elysia";
import type { RateLimiter } from "../limits/rate-limiter.ts";
import { formatResetDuration, retryAfterSeconds } from "../limits/token-bucket.ts";
import { maybePrincipalOf } from "./auth.ts";
import { errorResponse, isAnthropicPath } from "./errors.ts";

/**
 * Per-key token bucket, checked right after authentication and before the body is read, so
 * floods of bad requests are limited too. The x-ratelimit-* headers go on every answer of an
 * authenticated request (set here, before the first byte, so streams carry them as well).
 */
export function rateLimitPlugin(limiter: RateLimiter, defaultPerMinute: number, onRejected: (request: Request, status: number) => void) {
  return new Elysia({ name: "switchyard/rate-limit" }).onRequest(({ request, set }) => {
    const key = maybePrincipalOf(request);
    if (!key) return;
    const perMinute = key.rateLimitPerMinute ?? defaultPerMinute;
    const decision = limiter.take(key.keyId, perMinute);
    const headers = {
      "x-ratelimit-limit-requests": String(perMinute),
      "x-ratelimit-remaining-requests": String(decision.remaining),
      "x-ratelimit-reset-requests": formatResetDuration(decision.resetMs),
    };
    Object.assign(set.headers, headers);
    if (!decision.allowed) {
      const wait = retryAfterSeconds(decision);
      onRejected(request, 429);
      return errorResponse(isAnthropicPath(request.url), 429, "rate_limit",
        `Rate limit exceeded: ${perMinute} requests per minute for this key. Retry after ${wait} s.`,
        { ...headers, "retry-after": String(wait) });
    }
  });
}
