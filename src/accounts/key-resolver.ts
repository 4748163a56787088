import type { Database } from "bun:sqlite";
import { timingSafeEqual } from "node:crypto";
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
 * Key lookups are cached in memory. SQLite's data_version changes whenever another
 * connection (the admin CLI, a second gateway) commits, and then the cache is dropped,
 * so a revoke anywhere takes effect on the next request.
 */
export function createKeyResolver(db: Database, store: AccountStore, now: () => number) {
  const cache = new Map<string, ActiveKey & { hash: string }>();
  const dataVersion = db.query<{ data_version: number }, []>("PRAGMA data_version");
  let version = dataVersion.get()!.data_version;

  return {
    resolve(key: string): ActiveKey | null {
      const current = dataVersion.get()!.data_version;
      if (current !== version) {
        version = current;
        cache.clear();
      }
      const hash = hashKey(key);
      let hit = cache.get(hash);
      if (!hit) {
        const found = store.findActiveKey(hash);
        if (!found) return null;
        hit = { ...found, hash };
        cache.set(hash, hit);
      }
      if (hit.expiresAt !== null && hit.expiresAt <= now()) return null;
      // The lookup is by hash; this constant-time compare makes sure no near-miss ever matches.
      return timingSafeEqual(Buffer.from(hit.hash), Buffer.from(hash)) ? hit : null;
    },
    /** In-process revokes and changes do not bump data_version for our own connection. */
    forget(keyId: string): void {
      for (const [hash, entry] of cache) if (entry.keyId === keyId) cache.delete(hash);
    },
  };
}

export type KeyResolver = ReturnType<typeof createKeyResolver>;
