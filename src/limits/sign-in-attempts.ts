/**
 * Failed console sign-ins, counted per client address and per login over a sliding window. Unlike
 * the admin token's throttle (limits/auth-failures.ts), a blocked address or login is refused even
 * with the right password: a password can be guessed, a 32-character token cannot. A success
 * clears the login's count. Per process; memory bounded by `maxEntries`.
 *
 * A login that signed in from an address before (within `knownMs`, 30 days) is not held by that
 * address's block: behind a proxy or a company's NAT every holder shares one address, and 20 wrong
 * sign-ins with made-up logins locked every holder there out for 15 minutes (a hostile-tenant
 * probe, 2026-11-30). Guessing many logins from one address is still stopped, for every login that
 * has not signed in from it.
 *
 * Nor is it held by the failures from elsewhere: from an address it signed in from, a login is
 * counted apart (per address and login), and from every other address together. Anyone who knew a
 * holder's login could otherwise lock them out for good with five wrong passwords every 15 minutes
 * (the lockout OWASP's authentication guidance warns of). A guesser still gets five tries a window
 * from the places the holder never used, and five from each place the holder did use.
 */
export interface SignInAttemptOptions {
  /** Failures from one address within the window before it is refused (default 20). */
  perAddress?: number;
  /** Failures for one login within the window before it is refused (default 5). */
  perLogin?: number;
  windowMs?: number;
  /** How long a login's success from an address exempts it from that address's block (default 30 days). */
  knownMs?: number;
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
  /** The login signed in from this address another way (an invite accepted): the place is known, as after a sign-in. */
  remember(address: string, login: string): void;
}

export function createSignInAttempts(o: SignInAttemptOptions = {}): SignInAttempts {
  const windowMs = o.windowMs ?? 15 * 60_000;
  const now = o.now ?? Date.now;
  const maxEntries = o.maxEntries ?? 10_000;
  const knownMs = o.knownMs ?? 30 * 86_400_000;
  const seen = new Map<string, number[]>();
  /** Address and login pairs that signed in, and when last; apart from `seen`, so failures cannot push them out. */
  const known = new Map<string, number>();
  const pair = (address: string, login: string) => `${address}\u0000${login}`;
  const isKnown = (address: string, login: string | null, t: number) => {
    if (login === null) return false;
    const at = known.get(pair(address, login));
    return at !== undefined && t - at < knownMs;
  };
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
  const remember = (address: string, login: string, t: number) => {
    const key = pair(address, login);
    known.delete(key);
    if (known.size >= maxEntries) known.delete(known.keys().next().value!);
    known.set(key, t);
  };
  /** The count a login's attempt from this address goes to: its own from an address it signed in from, else the login's from everywhere else. */
  const loginCount = (address: string, login: string, t: number) => (isKnown(address, login, t) ? `p:${pair(address, login)}` : `l:${login}`);
  return {
    begin(address, login) {
      const t = now();
      const byAddress = isKnown(address, login, t) ? 0 : wait(`a:${address}`, o.perAddress ?? 20, t);
      const count = login === null ? undefined : loginCount(address, login, t);
      const blocked = Math.max(byAddress, count === undefined ? 0 : wait(count, o.perLogin ?? 5, t));
      if (blocked > 0) return blocked;
      add(`a:${address}`, t);
      if (count !== undefined) add(count, t);
      return 0;
    },
    succeeded(address, login) {
      // The address keeps its other failures; this attempt's own entry goes.
      seen.get(`a:${address}`)?.pop();
      if (login !== null) {
        const t = now();
        // Only the count it was checked against: a holder's success at their desk does not give a
        // guesser elsewhere five more tries.
        seen.delete(loginCount(address, login, t));
        remember(address, login, t);
      }
    },
    remember: (address, login) => remember(address, login, now()),
    cancel(address, login) {
      seen.get(`a:${address}`)?.pop();
      if (login !== null) seen.get(loginCount(address, login, now()))?.pop();
    },
  };
}
