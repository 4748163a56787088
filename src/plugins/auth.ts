import { Elysia } from "elysia";
import type { KeyResolver } from "../accounts/key-resolver.ts";
import { extractKey, isWellFormedKey } from "../accounts/key-resolver.ts";
import type { ActiveKey } from "../accounts/account-store.ts";
import { errorResponse, isAnthropicPath } from "./errors.ts";

const principals = new WeakMap<Request, ActiveKey>();

/** The key that the auth hook attached to this request (present on every authenticated route). */
export function principalOf(request: Request): ActiveKey {
  const principal = principals.get(request);
  if (!principal) throw new Error("route reached without authentication");
  return principal;
}

/** The key of an authenticated request, or undefined for routes that need none. */
export function maybePrincipalOf(request: Request): ActiveKey | undefined {
  return principals.get(request);
}

export function pathOf(url: string): string {
  const start = url.indexOf("/", url.indexOf("//") + 2);
  const query = url.indexOf("?", start);
  return query === -1 ? url.slice(start) : url.slice(start, query);
}

/**
 * Authentication runs on request arrival, before the body is parsed, so a client without a
 * valid key learns nothing else (not even that its JSON is broken). One message for every
 * failure: a caller cannot tell a revoked key from one that never existed.
 */
export function authPlugin(keys: KeyResolver) {
  return new Elysia({ name: "switchyard/auth" }).onRequest(({ request }) => {
    const path = pathOf(request.url);
    if (!path.startsWith("/v1/") || path.startsWith("/v1/admin/")) return;
    const key = extractKey(request.headers);
    const found = key && isWellFormedKey(key) ? keys.resolve(key) : null;
    if (!found) {
      return errorResponse(isAnthropicPath(request.url), 401, "authentication",
        "Invalid API key: send a key of the form svc-sk-… in the Authorization (Bearer) or x-api-key header.");
    }
    principals.set(request, found);
  });
}
