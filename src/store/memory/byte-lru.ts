/**
 * A least-recently-used map bounded by bytes, whose entries expire when unused for `ttlMs`.
 * Pure apart from the clock it is given: no timers, no I/O.
 *
 * A JavaScript Map iterates in insertion order, so re-inserting an entry on every use keeps the
 * map sorted by last use, oldest first. Eviction and expiry both take entries from the front:
 * expiry costs nothing while nothing is expired, and an expired entry is dropped at the next
 * `get` or `set` (whichever comes first) — it can never be read after its time.
 */

export interface ByteLruOptions {
  /** Most bytes kept, counted as each entry's `bytes` at `set`; 0 keeps nothing. */
  maxBytes: number;
  /** An entry unused (neither set nor read) for longer than this is gone. */
  ttlMs: number;
  now: () => number;
}

interface Entry<V> {
  value: V;
  bytes: number;
  usedAt: number;
}

export interface ByteLru<V> {
  /** The value, which counts as a use (it moves to the back of the line and its TTL restarts). */
  get(key: string): V | undefined;
  /**
   * Keeps `value` as the most recent entry, evicting the least recently used until it fits.
   * Returns false, keeping nothing, when `bytes` alone is more than `maxEntryBytes`.
   */
  set(key: string, value: V, bytes: number): boolean;
  /** True when the key was held (expired or not). */
  delete(key: string): boolean;
  /** Drops the least recently used entry, unless it is `keep`'s (then the next one); the bytes freed, 0 when none. */
  evictOldest(keep?: string): number;
  /** Drops what has expired by now. */
  sweep(): void;
  /** Bytes held now (expired entries not yet swept included). */
  readonly bytes: number;
  readonly size: number;
}

export function createByteLru<V>(o: ByteLruOptions & { maxEntryBytes?: number }): ByteLru<V> {
  const entries = new Map<string, Entry<V>>();
  let held = 0;
  const maxEntry = Math.min(o.maxEntryBytes ?? o.maxBytes, o.maxBytes);

  const drop = (key: string, entry: Entry<V>) => {
    entries.delete(key);
    held -= entry.bytes;
  };

  /** Drops expired entries; they are all at the front, since the map is ordered by last use. */
  const sweep = (now: number) => {
    for (const [key, entry] of entries) {
      if (now - entry.usedAt <= o.ttlMs) return;
      drop(key, entry);
    }
  };

  return {
    get(key) {
      const now = o.now();
      sweep(now);
      const entry = entries.get(key);
      if (!entry) return undefined;
      entries.delete(key);
      entry.usedAt = now;
      entries.set(key, entry);
      return entry.value;
    },
    set(key, value, bytes) {
      const now = o.now();
      sweep(now);
      const old = entries.get(key);
      if (old) drop(key, old);
      if (bytes > maxEntry) return false;
      for (const [k, entry] of entries) {
        if (held + bytes <= o.maxBytes) break;
        drop(k, entry);
      }
      entries.set(key, { value, bytes, usedAt: now });
      held += bytes;
      return true;
    },
    delete(key) {
      const entry = entries.get(key);
      if (entry) drop(key, entry);
      return entry !== undefined;
    },
    evictOldest(keep) {
      for (const [k, entry] of entries) {
        if (k === keep) continue;
        drop(k, entry);
        return entry.bytes;
      }
      return 0;
    },
    sweep() {
      sweep(o.now());
    },
    get bytes() {
      return held;
    },
    get size() {
      return entries.size;
    },
  };
}
