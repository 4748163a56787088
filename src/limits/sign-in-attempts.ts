/**
 * Failed console sign-ins, counted per client address and per login over a sliding window. Unlike
 * the admin token's throttle (limits/auth-failures.ts), a blocked address or login is refused even
 * with the right password: a password can be guessed, a 32-character token cannot. A success
 * clears the login's count. Per process; memory bounded by `maxEntries`.
 */
export interface SignInAttemptOptions {
  /** Failures from one address within the window before it is refused (default 20). */
  perAddress?: number;
  /** Failures for one login within the window before it is refused (default 5). */
  perLogin?: number;
  windowMs?: number;
  now?: () => number;
  maxEntries?: number;
}

export interface SignInAttempts {
  /**
   * A sign-in is about to be checked: 0 when it may go ahead, and it then counts as a failure
   * until `succeeded` says otherwise; else the seconds to wait, and it is not checked at all.
   * Counted before the (slow) password check, so guesses sent in parallel cannot all pass a
   * check made before any of them failed: a burst is checked no further than the limit.
   */
  begin(address: string, login: string | null): number;
  /** The attempt begun for this address and login was right: not a failure, and the login's failures are forgotten. */
  succeeded(address: string, login: string | null): void;
  /** The attempt begun checked nothing (a malformed request): it does not count; earlier failures stay. */
  cancel(address: string, login: string | null): void;
}

export function createSignInAttempts(o: SignInAttemptOptions = {}): SignInAttempts {
  const windowMs = o.windowMs ?? 15 * 60_000;
  const now = o.now ?? Date.now;
  const maxEntries = o.maxEntries ?? 10_000;
  const seen = new Map<string, number[]>();
  const recent = (key: string, t: number) => (seen.get(key) ?? []).filter((at) => t - at < windowMs);
  const wait = (key: string, limit: number, t: number) => {
    const times = recent(key, t);
    return times.length >= limit ? Math.max(1, Math.ceil((times[times.length - limit]! + windowMs - t) / 1000)) : 0;
  };
  const add = (key: string, t: number) => {
    const times = recent(key, t);
    times.push(t);
    seen.delete(key);
    if (seen.size >= maxEntries) seen.delete(seen.keys().next().value!);
    seen.set(key, times.slice(-100));
  };
  return {
    begin(address, login) {
      const t = now();
      const blocked = Math.max(wait(`a:${address}`, o.perAddress ?? 20, t), login === null ? 0 : wait(`l:${login}`, o.perLogin ?? 5, t));
      if (blocked > 0) return blocked;
      add(`a:${address}`, t);
      if (login !== null) add(`l:${login}`, t);
      return 0;
    },
    succeeded(address, login) {
      // The address keeps its other failures; this attempt's own entry goes.
      seen.get(`a:${address}`)?.pop();
      if (login !== null) seen.delete(`l:${login}`);
    },
    cancel(address, login) {
      seen.get(`a:${address}`)?.pop();
      if (login !== null) seen.get(`l:${login}`)?.pop();
    },
  };
}
