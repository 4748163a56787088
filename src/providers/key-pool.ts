/**
 * A provider's vendor keys as a pool: which key an attempt carries, and what the vendor's answer
 * does to that key. This file holds the port (`KeyStateStore`: what every gateway process must
 * agree on) and the pure core (choice, cooldowns, disabling, probes' backoff), which takes plain
 * values, `now` and a random source. The runtime that wires them to a store, the transport and
 * metrics is providers/key-pools.ts; the stores are store/memory/ and store/redis/.
 *
 * Keys are named by their `env` (the environment variable holding them) everywhere: a secret
 * never reaches a state, a log line, a metric or /ready.
 */

/** What is known of one key that is not plainly healthy. A key with no state is healthy. */
export interface KeyState {
  /** Epoch ms until which the key is cooling (429, 503, 529, 402); 0 or past: not cooling. */
  coolUntil: number;
  /** Epoch ms at which the latest cooldown began (0: none); refusals of requests sent before it belong to it. */
  cooledAt: number;
  /** Cooldowns in a row without a success in between: the next one without Retry-After lasts 1 s · 2^strikes. */
  strikes: number;
  /** Epoch ms at which the vendor refused the key (401, 403); 0: not disabled. */
  disabledAt: number;
  /**
   * Epoch ms at which a disabled key is probed next. Of a key that is not disabled: when a passing
   * probe took it back (0: it was not), remembered until a request on it succeeds (`RELAPSE_MS`).
   */
  probeAt: number;
  /** Probes that failed since the key was disabled (the next waits longer); taken back by a probe, kept for a relapse. */
  probeFailures: number;
  /**
   * Which value of the key the state is about (a short hash of the secret, never the secret):
   * a key rotated under the same variable starts healthy, not refused for its predecessor.
   * Absent (a state written before): taken as the current value's.
   */
  fp?: string;
}

/** The states of a provider's keys (absent: healthy) and, when asked, the key a session is bound to. */
export interface KeyView {
  states: Map<string, KeyState>;
  bound?: string;
}

/**
 * The port: the state every process shares (in one process's memory, or in Redis for several
 * workers and replicas). Sessions are given as hashes only.
 */
export interface KeyStateStore {
  /** The provider's key states and, with `session`, the key that session is bound to (refreshing its use). */
  read(provider: string, session: string | undefined): KeyView | Promise<KeyView>;
  /** Sets a key's state; `undefined`: the key is healthy again. A promise settles once the write is taken (callers on the request path do not wait). */
  write(provider: string, env: string, state: KeyState | undefined): void | Promise<void>;
  /**
   * Changes a key's state by `next` applied to the state the store holds now (not to a view read
   * earlier), atomically: another process's change made meanwhile is never overwritten. Answers
   * the state written.
   */
  update(provider: string, env: string, next: (current: KeyState | undefined) => KeyState | undefined): KeyState | undefined | Promise<KeyState | undefined>;
  /** Binds a session to a key (least recently used sessions are forgotten past the store's bound). */
  bind(provider: string, session: string, env: string): void | Promise<void>;
  /** True for the one process that may probe this key until `untilMs` (the others leave it). */
  claimProbe(provider: string, env: string, untilMs: number): boolean | Promise<boolean>;
  /** Gives up this process's claim once its probe's outcome is written (another's claim is left alone). */
  releaseProbe(provider: string, env: string): void | Promise<void>;
}

/** A key as the pool sees it: its name and share. */
export interface PoolKey {
  env: string;
  weight: number;
}

/** First cooldown without Retry-After; each one in a row doubles it. */
export const COOLDOWN_BASE_MS = 1_000;
export const COOLDOWN_MAX_MS = 60_000;
/** The longest a vendor's Retry-After cools a key. */
export const RETRY_AFTER_MAX_MS = 60 * 60_000;
/** First probe of a disabled key comes this long after it was refused; each failed one doubles the wait. */
export const PROBE_BASE_MS = 1_000;
export const PROBE_MAX_MS = 5 * 60_000;

export type KeyCondition = "usable" | "cooling" | "disabled";

export function conditionOf(state: KeyState | undefined, now: number): KeyCondition {
  if (!state) return "usable";
  if (state.disabledAt > 0) return "disabled";
  return state.coolUntil > now ? "cooling" : "usable";
}

/**
 * Vendors limit rates and capacity per model (OpenAI's "Rate limit reached for gpt-… on tokens per
 * min", Anthropic's per-model limits, an overloaded model's 529): a 429, 503 or 529 cools the key
 * for the model the request named only, kept in the store beside the key's own state under this
 * name. One tenant driving one model into its limit had cooled the key for every model, and the
 * other models' sessions moved off the key (and off their vendor prompt cache) for nothing (a
 * hostile-tenant probe). Credit (402) and refusals of the key (401) stay the whole key's.
 */
export function modelStateName(env: string, model: string): string {
  return `${env}${MODEL_SEPARATOR}${model}`;
}
/** The key a state's name is about: itself for a key's own state, its key for a model's. */
export function keyOfStateName(name: string): string {
  const at = name.indexOf(MODEL_SEPARATOR);
  return at === -1 ? name : name.slice(0, at);
}
/** Never in an environment variable's name, which names a key. */
const MODEL_SEPARATOR = "\u001f";

/** Whether a refusal with this status cools the key for the model asked only (see modelStateName). */
export function modelScoped(status: number): boolean {
  return status === 429 || status === 503 || status === 529;
}

/** A key's condition for a request naming `model`: its own, else the model's on it (never disabled). */
export function conditionFor(states: ReadonlyMap<string, KeyState>, env: string, model: string | undefined, now: number): KeyCondition {
  const own = conditionOf(states.get(env), now);
  if (own !== "usable" || model === undefined) return own;
  return conditionOf(states.get(modelStateName(env, model)), now);
}

/** Epoch ms until which a key is cooling for `model`, for itself or for the model (0: not cooling). */
function coolingUntil(states: ReadonlyMap<string, KeyState>, env: string, model: string | undefined): number {
  const own = states.get(env)?.coolUntil ?? 0;
  return model === undefined ? own : Math.max(own, states.get(modelStateName(env, model))?.coolUntil ?? 0);
}

/**
 * What a vendor's status means for the key that carried the request. Only 401 says the key itself
 * is refused: a 403 is about what was asked (a model the organisation may not use, input a
 * moderation flagged, a region), and disabling the key for it let one tenant's request take every
 * key of a pool out of service for everyone (a hostile-tenant probe, 2026-11-30).
 */
export function keyVerdict(status: number): "ok" | "cool" | "disable" | "neutral" {
  if (status >= 200 && status < 300) return "ok";
  // 402: the key's vendor account is out of credit (gateway/attempt.ts, accountRefusal), which an
  // operator may fix at any time: it cools, doubling to a minute, rather than waiting for a probe
  // (a model list answers whatever the balance).
  if (status === 429 || status === 503 || status === 529 || status === 402) return "cool";
  if (status === 401) return "disable";
  return "neutral";
}

/** The cooldown after a 429/503/529: the vendor's Retry-After when it sent one, else 1 s doubling to 60 s. */
export function cooldownMs(strikes: number, retryAfterMs: number | undefined): number {
  // The vendor's own wait, up to an hour: one 429 saying `retry-after: 99999999999` (a raw-TCP
  // probe, 2026-11-30) had benched the key until the year 5195, in Redis without an expiry too.
  // A longer quota wait is told again by the next 429 after the hour.
  if (retryAfterMs !== undefined) return Math.min(retryAfterMs, RETRY_AFTER_MAX_MS);
  return Math.min(COOLDOWN_MAX_MS, COOLDOWN_BASE_MS * 2 ** Math.min(strikes, 16));
}

/** The wait before the next probe of a disabled key after `failures` failed ones: 1 s doubling to 5 minutes. */
export function probeDelayMs(failures: number): number {
  return Math.min(PROBE_MAX_MS, PROBE_BASE_MS * 2 ** Math.min(failures, 20));
}

/**
 * A key's state after the vendor answered `status` to a request sent at `sentAt`; `undefined`:
 * healthy. Unchanged when the status says nothing of the key. A success clears the key only if
 * its request was sent after the key was refused and once it is no longer cooling: answers to
 * requests already under way when the vendor started refusing must not undo the refusal.
 */
export function afterAnswer(state: KeyState | undefined, status: number, retryAfterMs: number | undefined, sentAt: number, now: number): KeyState | undefined {
  switch (keyVerdict(status)) {
    case "ok":
      if (!state) return undefined;
      if (state.coolUntil > now || (state.disabledAt > 0 && state.disabledAt >= sentAt)) return state;
      return undefined;
    case "cool": {
      // Requests already under way when the key began cooling are refused by the same overload:
      // one burst of 529s is one strike (eight in flight had benched a key for 60 s, not 1 s),
      // also when a slow one's answer comes after that cooldown ended. A longer Retry-After among
      // them still lengthens the cooldown.
      if (state && state.cooledAt > 0 && sentAt <= state.cooledAt) {
        const until = retryAfterMs === undefined ? state.coolUntil : Math.max(state.coolUntil, now + retryAfterMs);
        return until === state.coolUntil ? state : { ...state, coolUntil: until };
      }
      const strikes = state?.strikes ?? 0;
      return { coolUntil: now + cooldownMs(strikes, retryAfterMs), cooledAt: now, strikes: strikes + 1, disabledAt: state?.disabledAt ?? 0, probeAt: state?.probeAt ?? 0, probeFailures: state?.probeFailures ?? 0 };
    }
    case "disable": {
      // Already disabled: the probe schedule stands (a late answer must not push it back).
      if (state && state.disabledAt > 0) return state;
      // Refused again soon after a probe took it back, before any request on it succeeded: the
      // probe does not tell (a key refused for chat but allowed to list models passed every probe
      // and was refused again every second; a key-pool probe), so its probes wait longer each time.
      const relapse = state !== undefined && state.probeAt > 0 && now - state.probeAt < RELAPSE_MS;
      const failures = relapse ? state!.probeFailures + 1 : 0;
      return { coolUntil: 0, cooledAt: state?.cooledAt ?? 0, strikes: state?.strikes ?? 0, disabledAt: now, probeAt: now + probeDelayMs(failures), probeFailures: failures };
    }
    default:
      return state;
  }
}

/** How soon after a passing probe a refusal counts as the same refusal again (see afterAnswer, "disable"). */
export const RELAPSE_MS = 60_000;

/**
 * A disabled key's state after a probe: usable when the vendor took it (remembering when, and how
 * many probes had failed, for a relapse), else probed again later.
 */
export function afterProbe(state: KeyState, ok: boolean, now: number): KeyState | undefined {
  if (ok) return { coolUntil: 0, cooledAt: state.cooledAt, strikes: state.strikes, disabledAt: 0, probeAt: now, probeFailures: state.probeFailures, ...(state.fp ? { fp: state.fp } : {}) };
  const failures = state.probeFailures + 1;
  return { ...state, probeFailures: failures, probeAt: now + probeDelayMs(failures) };
}

export interface Choice {
  key: PoolKey;
  /** False when no key was usable and this is the one that comes back soonest (a pool of one, or all cooling). */
  usable: boolean;
  /** The session was bound to another key that is cooling or disabled now: it moves to `key`. */
  movedFrom?: { env: string; condition: Exclude<KeyCondition, "usable"> };
  /** The session's binding must be written (new, or moved). */
  bind: boolean;
}

/**
 * Which key an attempt carries. A session stays on its bound key while that key is usable; a new
 * session, or one whose key is cooling or disabled, goes where weighted rendezvous hashing of its
 * hash puts it among the usable keys, so every process that sees the same key states picks the
 * same key for it, and the sessions of a key that cools spread over the others by weight. Without
 * a session: weighted random among the usable keys. Keys in `exclude` (tried by this request
 * already) are passed over. When no key is usable, the one that comes back soonest is used: a
 * pool of one behaves as a single key always did (the vendor's answer decides).
 */
export function chooseKey(
  keys: readonly PoolKey[],
  view: KeyView,
  now: number,
  random: () => number,
  session: string | undefined,
  exclude: ReadonlySet<string> = NO_KEYS,
  model?: string,
): Choice {
  const usable = keys.filter((k) => !exclude.has(k.env) && conditionFor(view.states, k.env, model, now) === "usable");
  let movedFrom: Choice["movedFrom"];
  if (session !== undefined && view.bound !== undefined) {
    const bound = keys.find((k) => k.env === view.bound);
    if (bound && usable.includes(bound)) return { key: bound, usable: true, bind: false };
    const condition = conditionFor(view.states, view.bound, model, now);
    if (bound && condition !== "usable") movedFrom = { env: bound.env, condition };
  }
  if (usable.length === 0) return { key: soonestBack(keys, view, exclude, model), usable: false, bind: false };
  const key = session !== undefined ? rendezvous(usable, session) : weighted(usable, random());
  return { key, usable: true, movedFrom, bind: session !== undefined };
}

const NO_KEYS: ReadonlySet<string> = new Set();

/** Weighted random: each key's share of [0, total) is its weight. */
function weighted(keys: readonly PoolKey[], r: number): PoolKey {
  let total = 0;
  for (const k of keys) total += k.weight;
  let at = r * total;
  for (const k of keys) {
    at -= k.weight;
    if (at < 0) return k;
  }
  return keys[keys.length - 1]!;
}

/**
 * Weighted rendezvous (highest random weight) hashing: each key scores -weight / ln(u) with u a
 * hash of (session, key) in (0, 1); the highest wins. A key that leaves moves only its own
 * sessions, and a key's share of sessions is its share of the weight.
 */
function rendezvous(keys: readonly PoolKey[], session: string): PoolKey {
  let best = keys[0]!;
  let bestScore = -Infinity;
  for (const k of keys) {
    const h = Bun.hash.wyhash(`${session}\u0000${k.env}`, 0x5357_4b50n);
    const u = (Number(BigInt.asUintN(52, h)) + 0.5) / 2 ** 52;
    const score = -k.weight / Math.log(u);
    if (score > bestScore) {
      bestScore = score;
      best = k;
    }
  }
  return best;
}

/** No key usable: a cooling key whose cooldown ends first, else the disabled key probed soonest. */
function soonestBack(keys: readonly PoolKey[], view: KeyView, exclude: ReadonlySet<string>, model: string | undefined): PoolKey {
  const candidates = keys.filter((k) => !exclude.has(k.env));
  const pool = candidates.length > 0 ? candidates : keys;
  const backAt = (k: PoolKey) => {
    const s = view.states.get(k.env);
    return s && s.disabledAt > 0 ? Number.MAX_SAFE_INTEGER / 2 + s.probeAt : coolingUntil(view.states, k.env, model);
  };
  return pool.reduce((a, b) => (backAt(b) < backAt(a) ? b : a));
}

/**
 * Milliseconds until any key that is not disabled is usable again (0: one is usable now);
 * undefined when every key is disabled. When every key has refused
 * a request, this — not the Retry-After of the key asked last — says whether and how long to wait.
 */
export function soonestBackMs(keys: readonly PoolKey[], view: KeyView, now: number, model?: string): number | undefined {
  let soonest: number | undefined;
  for (const k of keys) {
    const s = view.states.get(k.env);
    if (s && s.disabledAt > 0) continue;
    const wait = Math.max(0, coolingUntil(view.states, k.env, model) - now);
    if (soonest === undefined || wait < soonest) soonest = wait;
  }
  return soonest;
}

/** A short, one-way fingerprint of a key's value (see KeyState.fp). */
export function keyFingerprint(secret: string | undefined): string {
  return new Bun.CryptoHasher("sha256").update(`switchyard key ${secret ?? ""}`).digest("hex").slice(0, 12);
}

/**
 * The store as a pool sees it: every state it writes carries its key's fingerprint, and a state
 * left by another value of the key (rotated under the same variable, a restart ago; a replica
 * still on the old value) is not this key's, so it reads as healthy. States written before
 * fingerprints (none) are taken as this key's.
 */
export function fingerprintedStore(store: KeyStateStore, fingerprints: ReadonlyMap<string, ReadonlyMap<string, string>>): KeyStateStore {
  // A model's state on a key is about the key's value too.
  const fpOf = (provider: string, env: string) => fingerprints.get(provider)?.get(keyOfStateName(env));
  const own = (provider: string, view: KeyView): KeyView => {
    let states: Map<string, KeyState> | undefined;
    for (const [env, state] of view.states) {
      if (state.fp === undefined || state.fp === fpOf(provider, env)) continue;
      states ??= new Map(view.states);
      states.delete(env);
    }
    return states ? { ...view, states } : view;
  };
  return {
    read(provider, session) {
      const view = store.read(provider, session);
      return view instanceof Promise ? view.then((v) => own(provider, v)) : own(provider, view);
    },
    write: (provider, env, state) => store.write(provider, env, state && { ...state, fp: fpOf(provider, env) }),
    // A state about another value of the key reads as none, as `read` drops it.
    update: (provider, env, next) => store.update(provider, env, (current) => {
      const after = next(current && (current.fp === undefined || current.fp === fpOf(provider, env)) ? current : undefined);
      return after && { ...after, fp: fpOf(provider, env) };
    }),
    bind: (provider, session, env) => store.bind(provider, session, env),
    claimProbe: (provider, env, untilMs) => store.claimProbe(provider, env, untilMs),
    releaseProbe: (provider, env) => store.releaseProbe(provider, env),
  };
}

/**
 * A session's binding is per model: a vendor's prompt cache is (a conversation's turns on another
 * model share none of it), and so are its rate limits, so a model cooling on the session's key
 * moves that model's turns only (see modelStateName).
 */
export function sessionForModel(session: string, model: string | undefined): string {
  return model === undefined ? session : `${session}:${model}`;
}

/** The session as the pool stores it: a SHA-256 of the client's id, never the id itself. */
export function sessionHash(id: string): string {
  return new Bun.CryptoHasher("sha256").update(id).digest("hex").slice(0, 32);
}
