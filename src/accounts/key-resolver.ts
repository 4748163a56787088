import type { ChangeWatch } from "../store/change-watch.ts";
import { hashKey, KEY_PREFIX, type AccountStore, type ActiveKey } from "./account-store.ts";

/** Key bodies are base64url; anything else cannot be a key we issued. */
const KEY_BODY = /^[A-Za-z0-9_-]{16,256}$/;

/** Bearer first, then x-api-key; a client that sends both with one of them stale still gets in with the other. */
export function extractKey(headers: Headers): string | undefined {
  const auth = headers.get("authorization");
  // Scheme names are case-insensitive (RFC 9110).
  const bearer = auth && auth.length > 7 && auth.slice(0, 7).toLowerCase() === "bearer " ? auth.slice(7).trim() : undefined;
  const apiKey = headers.get("x-api-key")?.trim() || undefined;
  if (bearer && (isWellFormedKey(bearer) || !apiKey)) return bearer;
  return apiKey ?? auth?.trim();
}

export function isWellFormedKey(key: string): boolean {
  return key.startsWith(KEY_PREFIX) && KEY_BODY.test(key.slice(KEY_PREFIX.length));
}

/**
 * Key lookups are cached in memory, by the key's SHA-256: the map is never searched with the
 * secret itself, so its timing tells nothing about a key. The cache is dropped when another
 * connection (the admin CLI, a second gateway) commits, so a revoke anywhere takes effect
 * within the change watch's interval; in-process revokes call `forget`.
 */
export function createKeyResolver(store: AccountStore, now: () => number, changes: ChangeWatch) {
  const cache = new Map<string, ActiveKey>();
  changes.onChange(() => cache.clear());

  return {
    resolve(key: string): ActiveKey | null {
      changes.sync();
      const hash = hashKey(key);
      let hit = cache.get(hash);
      if (!hit) {
        const found = store.findActiveKey(hash);
        if (!found) return null;
        hit = found;
        cache.set(hash, hit);
      }
      return hit.expiresAt !== null && hit.expiresAt <= now() ? null : hit;
    },
    forget(keyId: string): void {
      for (const [hash, entry] of cache) if (entry.keyId === keyId) cache.delete(hash);
    },
  };
}

export type KeyResolver = ReturnType<typeof createKeyResolver>;
