import { hashKey, KEY_PREFIX, type AccountStore, type ActiveKey } from "./account-store.ts";

/**
 * Says when another connection committed (the admin CLI, a second gateway), so copies of rows go;
 * store/sqlite/change-watch.ts implements it on SQLite's data_version.
 */
export interface ChangeWatch {
  onChange(fn: () => void): void;
  sync(): void;
}

/** Resolves a presented key to the key it names: synchronously from a cache, or with a promise on a miss (PostgreSQL). */
export interface KeyResolver {
  resolve(key: string): ActiveKey | null | Promise<ActiveKey | null>;
  /**
   * A key `resolve` gave earlier (a request's principal) as a lookup would give it now: the same
   * object while its cached lookup stands, read again by its hash (never by the secret) once a
   * revoke, a change or the cache's age dropped it; null once it was revoked or has expired. What a
   * request under way asks before each upstream attempt (gateway/forward.ts): while nothing
   * changed it costs two map reads and no hash, where `resolve` would hash the key again (~0.3 µs).
   */
  recheck(principal: ActiveKey): ActiveKey | null | Promise<ActiveKey | null>;
  /** Drops what is cached for a key this process revoked or changed. */
  forget(keyId: string): void;
  /** Drops what is cached for every key of an account whose limits this process changed (a lookup carries them). */
  forgetAccount(accountId: string): void;
  /**
   * Whether the key was found before and is still cached (fresh or not): a lookup of one that is
   * not may cost the shared store a read. Absent where every lookup is cheap (SQLite's).
   */
  known?(key: string): boolean;
}

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
export function createKeyResolver(store: { findActiveKey(keyHash: string): ActiveKey | null }, now: () => number, changes: ChangeWatch): KeyResolver {
  const cache = new Map<string, ActiveKey>();
  changes.onChange(() => cache.clear());
  /** Each key given out, by its hash: what `recheck` reads it again by. */
  const hashes = new WeakMap<ActiveKey, string>();

  const byHash = (hash: string): ActiveKey | null => {
    changes.sync();
    let hit = cache.get(hash);
    if (!hit) {
      const found = store.findActiveKey(hash);
      if (!found) return null;
      hit = found;
      cache.set(hash, hit);
      hashes.set(hit, hash);
    }
    return hit.expiresAt !== null && hit.expiresAt <= now() ? null : hit;
  };

  return {
    resolve: (key: string): ActiveKey | null => byHash(hashKey(key)),
    recheck(principal: ActiveKey): ActiveKey | null {
      const hash = hashes.get(principal);
      // Not a key this resolver gave (none in the gateway): only its own expiry can be read.
      if (hash === undefined) return principal.expiresAt !== null && principal.expiresAt <= now() ? null : principal;
      return byHash(hash);
    },
    forget(keyId: string): void {
      for (const [hash, entry] of cache) if (entry.keyId === keyId) cache.delete(hash);
    },
    forgetAccount(accountId: string): void {
      for (const [hash, entry] of cache) if (entry.accountId === accountId) cache.delete(hash);
    },
  };
}

/** How long a key lookup from a shared store is trusted (a revoke on another gateway takes effect within it). */
export const KEY_CACHE_MS = 2_000;
/** While the store cannot be read, a key seen this recently still resolves (free models keep working). */
const KEY_STALE_MS = 60_000;
/** Entries kept before the cache is emptied (a flood of made-up keys cannot grow it without bound). */
const KEY_CACHE_MAX = 100_000;

/**
 * Key lookups against a store other processes write (PostgreSQL). Nothing tells this process
 * that another one revoked a key, so each lookup is trusted for `ttlMs` (2 s) and then read
 * again: a revoke anywhere takes effect everywhere within that; one through this process's
 * admin API at once (`forget`). Unknown keys are remembered too, for the same time, so a
 * flood of made-up keys costs the database one read per key and TTL, not one per request.
 * Concurrent misses for one key share one read. If the store cannot be read, a key read
 * successfully within the last minute still resolves; otherwise the lookup throws (503).
 */
export function createCachedKeyResolver(store: AccountStore, now: () => number, o: { ttlMs?: number } = {}): KeyResolver {
  const ttlMs = o.ttlMs ?? KEY_CACHE_MS;
  /** `failedAt`: when a read meant to refresh the entry last failed (the store unreachable). */
  type Entry = { key: ActiveKey | null; at: number; failedAt?: number };
  /** Keys found. */
  const cache = new Map<string, Entry>();
  /**
   * Keys not found, apart: a flood of made-up keys that fills this map empties only this map, never
   * the keys found, whose entries keep free models working while the store is down (KEY_STALE_MS).
   */
  const unknown = new Map<string, Entry>();
  const pending = new Map<string, Promise<ActiveKey | null>>();
  /** Each key given out, by its hash: what `recheck` reads it again by. */
  const hashes = new WeakMap<ActiveKey, string>();
  // Moved by every `forget`: a read that began before a change (a PATCH this process made) does
  // not put what it read back in the cache after the change dropped it.
  let generation = 0;
  const live = (found: ActiveKey | null) => (found && found.expiresAt !== null && found.expiresAt <= now() ? null : found);

  const lookup = (hash: string, stale: Entry | undefined): Promise<ActiveKey | null> => {
    let read = pending.get(hash);
    if (!read) {
      const began = generation;
      let reading: Promise<ActiveKey | null> | undefined;
      reading = (async () => {
        try {
          const found = await store.findActiveKey(hash);
          if (found) hashes.set(found, hash);
          if (began === generation) {
            const into = found ? cache : unknown;
            if (into.size >= KEY_CACHE_MAX) into.clear();
            if (found) unknown.delete(hash);
            else cache.delete(hash);
            into.set(hash, { key: found, at: performance.now() });
          }
          return found;
        } finally {
          // Only its own entry: a change may have let a newer read take its place.
          if (pending.get(hash) === reading) pending.delete(hash);
        }
      })();
      read = reading;
      pending.set(hash, read);
    }
    return read.then(live, (err) => {
      if (stale) stale.failedAt = performance.now();
      if (stale?.key && performance.now() - stale.at < KEY_STALE_MS) return live(stale.key);
      throw err;
    });
  };

  const byHash = (hash: string): ActiveKey | null | Promise<ActiveKey | null> => {
    const hit = cache.get(hash) ?? unknown.get(hash);
    if (hit && performance.now() - hit.at < ttlMs) return live(hit.key);
    return lookup(hash, hit);
  };

  return {
    resolve: (key: string) => byHash(hashKey(key)),
    recheck(principal: ActiveKey) {
      const hash = hashes.get(principal);
      if (hash === undefined) return live(principal);
      // The store just failed to refresh this key (admission's read, most likely, for this very
      // request): the request was let in on what was cached, and waits for no second read of a
      // store that is down (up to its connect or statement timeout) before each attempt.
      const hit = cache.get(hash) ?? unknown.get(hash);
      if (hit?.failedAt !== undefined && performance.now() - hit.failedAt < ttlMs) return live(principal);
      return byHash(hash);
    },
    forget(keyId: string): void {
      generation++;
      // Reads under way began before the change: the next request reads again rather than wait for one.
      pending.clear();
      for (const [hash, entry] of cache) if (entry.key?.keyId === keyId) cache.delete(hash);
    },
    known: (key: string) => cache.has(hashKey(key)),
    forgetAccount(accountId: string): void {
      generation++;
      pending.clear();
      for (const [hash, entry] of cache) if (entry.key?.accountId === accountId) cache.delete(hash);
    },
  };
}
