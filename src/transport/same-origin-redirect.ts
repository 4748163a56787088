import { responseHeader } from "./transport.ts";

/**
 * Which upstream redirects the transports follow: only to the request's own origin (scheme, host
 * and port), at most `MAX_SAME_ORIGIN_REDIRECTS` in a row, so a vendor key and a prompt never
 * reach an origin the operator did not configure. Anything else is handed over as the 3xx it is (a
 * 502 for an API call, a failed key probe).
 *
 * `fetch`'s own following carried the request to any origin the upstream named: the prompt (307,
 * 308) and every key header but `Authorization` (Anthropic's `x-api-key`), and that origin's
 * answer was billed as the vendor's (a raw-TCP probe). Following none at all failed every key
 * probe of a compatible server whose `GET …/models` redirects to itself (a trailing slash), so a
 * disabled key of it was never taken back, and every call to one whose POST routes do the same
 * (FastAPI's 307 for a slash), where the vendors' SDKs, which follow redirects, got their answer.
 *
 * 307 and 308 keep the method and body (a string body, or none, is sent again); 301, 302 and 303
 * are followed as `fetch` would only for a GET or HEAD: fetch turns a POST into a GET without its
 * body there, which is never what an API call meant.
 */
export const MAX_SAME_ORIGIN_REDIRECTS = 5;

/** The URL to send the request to next, or null to hand `res` over as it is. */
export function sameOriginRedirect(url: string, res: Response, method: string, body: unknown): string | null {
  const status = res.status;
  if (status !== 301 && status !== 302 && status !== 303 && status !== 307 && status !== 308) return null;
  const keepsMethod = status === 307 || status === 308;
  if (keepsMethod ? body !== undefined && body !== null && typeof body !== "string" : method !== "GET" && method !== "HEAD") return null;
  const location = responseHeader(res, "location");
  if (!location) return null;
  let from: URL;
  let next: URL;
  try {
    from = new URL(url);
    next = new URL(location, from);
  } catch {
    return null;
  }
  // A scheme without an origin (data:, file:) has the opaque "null" one, equal to any other's.
  if (next.origin !== from.origin || next.origin === "null") return null;
  // The fragment is the client's own; it never goes on the wire.
  next.hash = "";
  return next.href;
}
