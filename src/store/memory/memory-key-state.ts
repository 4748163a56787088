import type { KeyState, KeyStateStore, KeyView } from "../../providers/key-pool.ts";
import { createByteLru } from "./byte-lru.ts";

export interface MemoryKeyStateOptions {
  /** Most sessions remembered; the least recently used are forgotten first. */
  maxSessions?: number;
  /** A session unused this long is forgotten (prompt caches live minutes to an hour). */
  sessionTtlMs?: number;
  now: () => number;
}

export const DEFAULT_MAX_SESSIONS = 100_000;
export const DEFAULT_SESSION_TTL_MS = 3_600_000;

/**
 * The key pools' state in this process's memory: enough for one gateway process, and the fallback
 * of the Redis store while Redis does not answer. The affinity table is a bounded LRU (each
 * session counts as one unit of its byte bound) holding session hashes only.
 */
export function createMemoryKeyState(o: MemoryKeyStateOptions): KeyStateStore {
  const states = new Map<string, Map<string, KeyState>>();
  const sessions = createByteLru<string>({ maxBytes: o.maxSessions ?? DEFAULT_MAX_SESSIONS, ttlMs: o.sessionTtlMs ?? DEFAULT_SESSION_TTL_MS, now: o.now });
  const of = (provider: string) => {
    let map = states.get(provider);
    if (!map) states.set(provider, (map = new Map()));
    return map;
  };
  const probes = new Map<string, number>();
  return {
    read(provider, session): KeyView {
      // A copy: the caller's view must not change under it while it decides.
      return { states: new Map(of(provider)), bound: session === undefined ? undefined : sessions.get(`${provider}\u0000${session}`) };
    },
    write(provider, env, state) {
      if (state) of(provider).set(env, state);
      else of(provider).delete(env);
    },
    update(provider, env, next) {
      const after = next(of(provider).get(env));
      if (after) of(provider).set(env, after);
      else of(provider).delete(env);
      return after;
    },
    bind(provider, session, env) {
      sessions.set(`${provider}\u0000${session}`, env, 1);
    },
    claimProbe(provider, env, untilMs) {
      const key = `${provider}\u0000${env}`;
      if ((probes.get(key) ?? 0) > o.now()) return false;
      probes.set(key, untilMs);
      return true;
    },
    releaseProbe(provider, env) {
      probes.delete(`${provider}\u0000${env}`);
    },
  };
}
