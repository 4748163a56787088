/**
 * Cross-origin requests from browsers to the model API (`/v1/…`, never `/v1/admin/`, the console
 * or the operations routes), as OpenAI's and Anthropic's own APIs answer them: a web app that uses
 * the official SDKs in the browser (`dangerouslyAllowBrowser: true`) and changes only their base
 * URL works here too. The API is authenticated by a key the page sends, never by a cookie, so
 * letting a page read its answers gives another site nothing it could not do from a server;
 * `server.cors_origins` narrows it to listed origins, or `[]` turns it off (docs/decisions.md,
 * "Browsers").
 */
import type { CorsPolicy } from "../config/cors-origins.ts";

/**
 * Headers a page's script may read besides the CORS-safelisted ones: the request id the SDKs
 * report (`_request_id`), and what their retry logic reads (Retry-After, x-should-retry, rate-limit state).
 */
const EXPOSED = "x-request-id, request-id, retry-after, retry-after-ms, x-should-retry, x-ratelimit-limit-requests, x-ratelimit-remaining-requests, x-ratelimit-reset-requests";
const METHODS = "GET, POST, DELETE, OPTIONS";
/** How long a browser may keep a preflight's answer (Chromium keeps at most 2 hours). */
const MAX_AGE_SECONDS = "7200";
/** Request headers a preflight may ask for: names separated by commas, bounded (it is echoed). */
const HEADER_LIST = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+(?:\s*,\s*[!#$%&'*+.^_`|~0-9A-Za-z-]+)*$/;
const MAX_HEADER_LIST = 2048;

/** The value of Access-Control-Allow-Origin for `origin`, or undefined when it is not allowed. */
function allowedOrigin(policy: CorsPolicy, origin: string): string | undefined {
  if (policy.any) return "*";
  return policy.origins.has(origin.toLowerCase()) ? origin : undefined;
}

/**
 * Adds the CORS headers to an answer for a cross-origin request (one with `Origin`), set before
 * anything is decided so that refusals (401, 402, 429) carry them too and the page can read why.
 */
export function addCorsHeaders(policy: CorsPolicy, origin: string, headers: Record<string, unknown>): void {
  const allowed = allowedOrigin(policy, origin);
  if (!policy.any) headers["vary"] = "Origin";
  if (allowed === undefined) return;
  headers["access-control-allow-origin"] = allowed;
  headers["access-control-expose-headers"] = EXPOSED;
}

/**
 * The answer to a preflight (OPTIONS with Access-Control-Request-Method): 204, with the CORS
 * headers when the origin is allowed, without them otherwise (the browser then refuses the request
 * it asked about). No key is needed: browsers never send one with a preflight.
 */
export function preflightResponse(policy: CorsPolicy, origin: string, request: Request): Response {
  const headers: Record<string, string> = {};
  if (!policy.any) headers["vary"] = "Origin";
  const allowed = allowedOrigin(policy, origin);
  if (allowed !== undefined) {
    headers["access-control-allow-origin"] = allowed;
    headers["access-control-allow-methods"] = METHODS;
    // The SDKs send their own headers (x-stainless-*, anthropic-version, anthropic-beta,
    // anthropic-dangerous-direct-browser-access, openai-organization …): whatever names the
    // browser asks for are allowed, as the vendors' APIs allow them.
    const asked = request.headers.get("access-control-request-headers")?.trim();
    if (asked && asked.length <= MAX_HEADER_LIST && HEADER_LIST.test(asked)) headers["access-control-allow-headers"] = asked;
    headers["access-control-max-age"] = MAX_AGE_SECONDS;
  }
  return new Response(null, { status: 204, headers });
}
