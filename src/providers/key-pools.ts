import type { ResolvedProvider, ResolvedVendorKey } from "../config/load-config.ts";
import type { Logger } from "../log/log.ts";
import type { Transport } from "../transport/transport.ts";
import { ADAPTERS } from "./adapters.ts";
import { afterAnswer, afterProbe, chooseKey, conditionFor, conditionOf, fingerprintedStore, keyFingerprint, keyOfStateName, keyVerdict, modelScoped, modelStateName, sessionForModel, soonestBackMs, type Choice, type KeyCondition, type KeyState, type KeyStateStore, type KeyView } from "./key-pool.ts";

/** Counts of one vendor key, as this process saw them (read by /metrics). */
export interface KeyCounts {
  provider: string;
  env: string;
  requests: number;
  errors: number;
  cooldowns: number;
  /** Disabled time ended so far, in ms, plus the running stretch when read through `disabledMs()`. */
  disabledMsEnded: number;
  disabledSince: number | undefined;
}

/** A chosen key: its name (shown anywhere) and its secret (sent upstream only). */
export interface ChosenKey extends Choice {
  secret: string | undefined;
  /** When the choice was made (epoch ms): a success clears a refusal only if sent after it. */
  at: number;
}

export interface KeyPool {
  readonly provider: ResolvedProvider;
  /** How many keys it has (a pool of one has no choice to make). */
  readonly size: number;
  /**
   * Which key the next attempt carries; `session` is a session hash, `exclude` the keys this
   * request tried, `model` the vendor's name of the model asked (a key may cool for it alone).
   */
  choose(session: string | undefined, exclude?: ReadonlySet<string>, model?: string): Promise<ChosenKey> | ChosenKey;
  /** What the vendor answered on `key` (0: no answer at all) to a request for `model`, with its Retry-After in ms. */
  report(key: ChosenKey, status: number, retryAfterMs: number | undefined, model?: string): void;
  /** Whether a key outside `exclude` was usable for `model` at the last look (a refused request may move to it). */
  hasUsable(exclude: ReadonlySet<string>, model?: string): boolean;
  /** Ms until a key that is not disabled is usable again for `model`, at the last look; undefined when every key is disabled. */
  soonestBackMs(model?: string): number | undefined;
}

export interface KeyPoolsDeps {
  providers: ReadonlyMap<string, ResolvedProvider>;
  store: KeyStateStore;
  fetch: Transport;
  now: () => number;
  /** [0, 1): the weighted choice of requests without a session. */
  random?: () => number;
  log: Logger;
  /** How often disabled keys are looked at for a due probe (default 1 s). */
  probeEveryMs?: number;
  /** Longest a probe may take (default 10 s). */
  probeTimeoutMs?: number;
}

export interface PoolReadiness {
  ready: boolean;
  providers: { id: string; usable: number; keys: { env: string; state: Exclude<KeyCondition, "usable">; model?: string; until?: string; since?: string }[] }[];
}

export type KeyPools = ReturnType<typeof createKeyPools>;

/** One pooled vendor key as the admin API shows it: its provider, its env name, its condition and until when. */
export interface VendorKeyStatus {
  provider: string;
  key: string;
  state: KeyCondition;
  /** Cooling: when it is back (ISO 8601). */
  until?: string;
  /**
   * Disabled: since when, and when its next probe is due. A provider's only key has no probe (its
   * requests still go to it, and the first success brings it back): no `next_probe`, where a time
   * past that never came showed in the console (a console probe).
   */
  since?: string;
  next_probe?: string;
  /** Usable, but cooling for these models (a vendor's per-model rate limit or overload): which, and until when. */
  models_cooling?: { model: string; until: string }[];
}

function statusOf(provider: string, env: string, state: KeyState | undefined, now: number, alone = false, states?: ReadonlyMap<string, KeyState>): VendorKeyStatus {
  const condition = conditionOf(state, now);
  if (condition === "cooling") return { provider, key: env, state: condition, until: new Date(state!.coolUntil).toISOString() };
  if (condition === "disabled") {
    const since = new Date(state!.disabledAt).toISOString();
    return alone ? { provider, key: env, state: condition, since } : { provider, key: env, state: condition, since, next_probe: new Date(state!.probeAt).toISOString() };
  }
  const models: { model: string; until: string }[] = [];
  for (const [name, s] of states ?? []) {
    if (name !== env && keyOfStateName(name) === env && s.coolUntil > now) models.push({ model: name.slice(env.length + 1), until: new Date(s.coolUntil).toISOString() });
  }
  return models.length > 0 ? { provider, key: env, state: condition, models_cooling: models } : { provider, key: env, state: condition };
}

/**
 * Every provider's pool, the probes of disabled keys, and the counts /metrics shows. Providers
 * without keys (local servers, `simulated://`) have no pool: their requests carry no key, as before.
 */
export function createKeyPools(deps: KeyPoolsDeps) {
  // States are about one value of each key: a key rotated under its variable starts healthy.
  deps = {
    ...deps,
    store: fingerprintedStore(deps.store, new Map([...deps.providers.values()].map((p) => [p.id, new Map((p.keys ?? []).map((k) => [k.env, keyFingerprint(k.secret)]))]))),
  };
  const random = deps.random ?? Math.random;
  const pools = new Map<string, KeyPool>();
  const counts = new Map<string, KeyCounts>();
  /** Sessions moved off a cooling or disabled key, per provider. */
  const moves = new Map<string, number>();
  const lastViews = new Map<string, KeyView>();

  const countsOf = (provider: string, env: string): KeyCounts => counts.get(`${provider}\u0000${env}`)!;
  /** Keeps the disabled-time counters in step with what a read showed (other processes' refusals included). */
  const observe = (provider: string, keys: readonly ResolvedVendorKey[], view: KeyView, now: number) => {
    lastViews.set(provider, view);
    for (const k of keys) {
      const c = countsOf(provider, k.env);
      const disabled = (view.states.get(k.env)?.disabledAt ?? 0) > 0;
      if (disabled && c.disabledSince === undefined) c.disabledSince = now;
      else if (!disabled && c.disabledSince !== undefined) {
        c.disabledMsEnded += Math.max(0, now - c.disabledSince);
        c.disabledSince = undefined;
      }
    }
  };

  for (const provider of deps.providers.values()) {
    const keys = provider.keys ?? [];
    if (keys.length === 0) continue;
    for (const k of keys) counts.set(`${provider.id}\u0000${k.env}`, { provider: provider.id, env: k.env, requests: 0, errors: 0, cooldowns: 0, disabledMsEnded: 0, disabledSince: undefined });
    moves.set(provider.id, 0);
    lastViews.set(provider.id, { states: new Map() });
    const secrets = new Map(keys.map((k) => [k.env, k.secret]));
    // Each key's counters, found once: a key made of two names per request showed in a profile.
    const countsByEnv = new Map(keys.map((k) => [k.env, countsOf(provider.id, k.env)]));
    const decide = (view: KeyView, session: string | undefined, exclude: ReadonlySet<string> | undefined, model: string | undefined): ChosenKey => {
      const now = deps.now();
      observe(provider.id, keys, view, now);
      const choice = chooseKey(keys, view, now, random, session, exclude, model);
      if (session !== undefined && choice.bind) void deps.store.bind(provider.id, session, choice.key.env);
      if (choice.movedFrom) moves.set(provider.id, moves.get(provider.id)! + 1);
      countsByEnv.get(choice.key.env)!.requests++;
      return { ...choice, secret: secrets.get(choice.key.env), at: now };
    };
    pools.set(provider.id, {
      provider,
      size: keys.length,
      choose(client, exclude, model) {
        const session = client === undefined ? undefined : sessionForModel(client, model);
        // A pool of one has nothing to choose: no round trip to the store on every request.
        if (keys.length === 1) {
          countsByEnv.get(keys[0]!.env)!.requests++;
          return { key: keys[0]!, usable: true, bind: false, secret: keys[0]!.secret, at: deps.now() };
        }
        const view = deps.store.read(provider.id, session);
        return view instanceof Promise ? view.then((v) => decide(v, session, exclude, model)) : decide(view, session, exclude, model);
      },
      report(key, status, retryAfterMs, model) {
        const c = countsByEnv.get(key.key.env)!;
        const verdict = keyVerdict(status);
        if (verdict !== "ok") c.errors++;
        if (verdict === "neutral") return;
        const view = lastViews.get(provider.id)!;
        // A rate limit or an overload is the model's on this key (key-pool.ts, modelStateName); a
        // success also ends a cooldown of its model, when this process has seen one.
        const forModel = model === undefined ? undefined : modelStateName(key.key.env, model);
        if (forModel !== undefined && (verdict === "ok" ? view.states.has(forModel) : verdict === "cool" && modelScoped(status))) {
          change(key, forModel, status, retryAfterMs, model);
          if (verdict !== "ok") return;
        }
        change(key, key.key.env, status, retryAfterMs, undefined);
      },
      hasUsable(exclude, model) {
        const now = deps.now();
        const view = lastViews.get(provider.id)!;
        return keys.some((k) => !exclude.has(k.env) && conditionFor(view.states, k.env, model, now) === "usable");
      },
      soonestBackMs: (model) => soonestBackMs(keys, lastViews.get(provider.id)!, deps.now(), model),
    });

    /** One state (the key's own, or a model's on it: `name`) after the vendor's answer, in this process's view and in the store. */
    function change(key: ChosenKey, name: string, status: number, retryAfterMs: number | undefined, model: string | undefined): void {
      const c = countsByEnv.get(key.key.env)!;
      const verdict = keyVerdict(status);
      const now = deps.now();
      const view = lastViews.get(provider.id)!;
      const before = view.states.get(name);
      const after = afterAnswer(before, status, retryAfterMs, key.at, now);
      if (after === before) return;
      if (verdict === "cool" && after && after.cooledAt === now) {
        c.cooldowns++;
        // Named here (the upstream's own warning does not say which key): operators see which key cools, and for how long.
        deps.log("info", "vendor key cooling", { provider: provider.id, key: key.key.env, ...(model !== undefined ? { model } : {}), status, ms: after.coolUntil - now, strikes: after.strikes });
      }
      if (verdict === "disable" && !(before && before.disabledAt > 0)) {
        // A pool of one keeps sending on the refused key (there is no other): its requests are its probes.
        deps.log("warn", keys.length > 1 ? "vendor key refused: no traffic until a probe passes" : "vendor key refused", { provider: provider.id, key: key.key.env, status });
      }
      if (verdict === "ok" && before && before.disabledAt > 0) deps.log("info", "vendor key accepted again", { provider: provider.id, key: key.key.env });
      learn(provider.id, keys, view.states, name, after, now);
      // Stored as this answer's change of what the store holds now, not of this process's last
      // view (up to a probe round old): another process may have cooled or disabled the key
      // meanwhile, and a late 429 here shortened its 30 s cooldown to 1 s, a late success undid
      // it, a late 429 turned a refused key into a cooling one (a scale-out probe).
      void Promise.resolve(deps.store.update(provider.id, name, (current) => afterAnswer(current, status, retryAfterMs, key.at, now))).then((stored) => {
        if (stored !== after) learn(provider.id, keys, lastViews.get(provider.id)!.states, name, stored, deps.now());
      }, () => {});
    }
  }

  /** The last view learns one key's new state at once: this process's next choices need no round trip to know it. */
  function learn(providerId: string, keys: readonly ResolvedVendorKey[], from: ReadonlyMap<string, KeyState>, env: string, after: KeyState | undefined, now: number): void {
    const states = new Map(from);
    if (after) states.set(env, after);
    else states.delete(env);
    observe(providerId, keys, { states }, now);
  }

  /** Probes under way in this process, by provider and key: a round passes them by. */
  const probesUnderWay = new Set<string>();
  const failed = (err: unknown) => deps.log("warn", "key pool probes failed", { error: String(err) });

  /**
   * Starts a probe of every disabled key whose time has come, in pools of two keys or more (a pool
   * of one keeps sending its requests, which are its probes), and answers once they are started,
   * with each one's end. One process probes a key at a time (the store's claim), and a probe does
   * not hold up the next round: one vendor's stalled model list had delayed every other key's
   * probe, in every pool, by up to the probe's timeout (a raw-TCP probe).
   */
  async function startDueProbes(): Promise<Promise<void>[]> {
    const started: Promise<void>[] = [];
    await Promise.all([...pools.values()].map(async (pool) => {
      const provider = pool.provider;
      const keys = provider.keys!;
      if (keys.length < 2) return;
      const view = await deps.store.read(provider.id, undefined);
      const now = deps.now();
      observe(provider.id, keys, view, now);
      await Promise.all(keys.map(async (k) => {
        const state = view.states.get(k.env);
        if (!state || state.disabledAt === 0 || state.probeAt > now) return;
        const id = `${provider.id}\0${k.env}`;
        if (probesUnderWay.has(id)) return;
        probesUnderWay.add(id);
        let claimed = false;
        try {
          // Held for as long as a probe may take: a slow vendor's probe is not started again by another process meanwhile.
          claimed = await deps.store.claimProbe(provider.id, k.env, now + (deps.probeTimeoutMs ?? 10_000) + PROBE_CLAIM_MARGIN_MS);
        } finally {
          if (!claimed) probesUnderWay.delete(id);
        }
        if (!claimed) return;
        started.push((async () => {
          const ok = await probe(provider, k.secret);
          const at = deps.now();
          // The next probe is timed from when this one was due, not from its answer: a slow vendor
          // does not stretch the schedule.
          const after = afterProbe(state, ok, now);
          deps.log(ok ? "info" : "debug", ok ? "vendor key accepted again (probe)" : "vendor key still refused (probe)", { provider: provider.id, key: k.env, ...(!ok && after ? { nextProbeInMs: Math.max(0, after.probeAt - at) } : {}) });
          await deps.store.write(provider.id, k.env, after);
          // Its outcome is written (the next probe's time with it): the claim is not needed past here.
          await deps.store.releaseProbe(provider.id, k.env);
          learn(provider.id, keys, lastViews.get(provider.id)!.states, k.env, after, at);
        })().catch(failed).finally(() => probesUnderWay.delete(id)));
      }));
    }));
    return started;
  }

  /** Probes every disabled key whose time has come, and answers when each has its outcome (a failed one logged). */
  async function probeDue(): Promise<void> {
    await Promise.all(await startDueProbes());
  }

  /**
   * The vendor's model list with this key: 2xx means the key is accepted; so does 404 or 405 (a
   * compatible server without a model list has not refused the key), and a 401 or 403 that says
   * only that the key may not list models (OpenAI's restricted project keys: "Missing scopes:
   * api.model.read"): the vendor knew the key, and such a key once refused stayed out for good (a
   * key-pool probe, 2026-11-30). Anything else, or no answer, is a failed probe. Nothing of the
   * answer is kept.
   */
  async function probe(provider: ResolvedProvider, secret: string | undefined): Promise<boolean> {
    const request = ADAPTERS[provider.kind].modelsRequest?.(withKey(provider, secret));
    if (!request) return false;
    try {
      const res = await deps.fetch(request.url, { method: "GET", headers: request.headers, signal: AbortSignal.timeout(deps.probeTimeoutMs ?? 10_000) });
      if (res.status === 401 || res.status === 403) return MISSING_PERMISSION.test((await res.text().catch(() => "")).slice(0, 4096));
      await res.arrayBuffer().catch(() => {});
      return res.ok || res.status === 404 || res.status === 405;
    } catch {
      return false;
    }
  }

  /**
   * Every pooled key's condition, by env name (never a secret): the admin API's list and `/ready`'s
   * detail. Read from the shared store, so every process agrees.
   */
  async function listKeys(): Promise<VendorKeyStatus[]> {
    const out: VendorKeyStatus[] = [];
    for (const pool of pools.values()) {
      const keys = pool.provider.keys!;
      const view = await deps.store.read(pool.provider.id, undefined);
      const now = deps.now();
      observe(pool.provider.id, keys, view, now);
      for (const k of keys) out.push(statusOf(pool.provider.id, k.env, view.states.get(k.env), now, keys.length === 1, view.states));
    }
    return out;
  }

  let timer: ReturnType<typeof setInterval> | undefined;
  /** A round's reads and claims (not its probes): rounds never overlap, a store that is slow to answer is not asked again meanwhile. */
  let starting: Promise<void> | undefined;
  return {
    get: (provider: string) => pools.get(provider),
    /** Starts the probe timer (the app's start); a key's probes never overlap. */
    start(): void {
      if (timer || pools.size === 0) return;
      timer = setInterval(() => {
        starting ??= startDueProbes().then(() => {}, failed).finally(() => (starting = undefined));
      }, deps.probeEveryMs ?? 1_000);
      timer.unref?.();
    },
    stop(): void {
      clearInterval(timer);
      timer = undefined;
    },
    probeDue,
    list: listKeys,
    /**
     * An operator's "try it now" (the vendor restored a key, its billing was fixed): the key's
     * probe runs at once, whatever its condition and schedule. Accepted, the key is usable again
     * (a cooldown ends too); refused, a disabled key's next probe is timed as after any failed
     * one, and a usable or cooling key is left as it was (a failed probe is not a refusal of
     * traffic: the vendor may only be unreachable). Undefined for a provider or key not pooled.
     */
    async probeNow(providerId: string, env: string): Promise<(VendorKeyStatus & { accepted: boolean }) | "busy" | undefined> {
      const pool = pools.get(providerId);
      const key = pool?.provider.keys!.find((k) => k.env === env);
      if (!pool || !key) return undefined;
      const provider = pool.provider;
      const timeoutMs = deps.probeTimeoutMs ?? 10_000;
      // The scheduled probes leave the key alone meanwhile; one already under way (here or in another
      // process) is let finish: its outcome would overwrite this one's.
      if (!(await deps.store.claimProbe(provider.id, env, deps.now() + timeoutMs + PROBE_CLAIM_MARGIN_MS))) return "busy";
      try {
        const accepted = await probe(provider, key.secret);
        const now = deps.now();
        const view = await deps.store.read(provider.id, undefined);
        const state = view.states.get(env);
        const after = accepted ? undefined : state && state.disabledAt > 0 ? afterProbe(state, false, now) : state;
        if (after !== state) await deps.store.write(provider.id, env, after);
        deps.log("info", accepted ? "vendor key accepted (probe asked by an operator)" : "vendor key refused (probe asked by an operator)", { provider: provider.id, key: env });
        learn(provider.id, provider.keys!, view.states, env, after, now);
        return { ...statusOf(provider.id, env, after, now, provider.keys!.length === 1), accepted };
      } finally {
        await deps.store.releaseProbe(provider.id, env);
      }
    },
    /**
     * An operator's "it is fine, send to it": the key is usable at once, whatever its state, without
     * a probe (for a key the probe cannot judge, or a vendor that is back before its schedule). A
     * key the vendor still refuses is refused again by the next request, which moves on. Undefined
     * for a provider or key not pooled.
     */
    async enable(providerId: string, env: string): Promise<VendorKeyStatus | undefined> {
      const pool = pools.get(providerId);
      if (!pool || !pool.provider.keys!.some((k) => k.env === env)) return undefined;
      await deps.store.write(providerId, env, undefined);
      const now = deps.now();
      deps.log("info", "vendor key enabled by an operator", { provider: providerId, key: env });
      learn(providerId, pool.provider.keys!, (await deps.store.read(providerId, undefined)).states, env, undefined, now);
      return statusOf(providerId, env, undefined, now);
    },
    /** Per key counts for /metrics (disabled time includes the running stretch). */
    counts(): (KeyCounts & { disabledMs: number; condition: KeyCondition })[] {
      const now = deps.now();
      return [...counts.values()].map((c) => ({
        ...c,
        disabledMs: c.disabledMsEnded + (c.disabledSince !== undefined ? Math.max(0, now - c.disabledSince) : 0),
        condition: conditionOf(lastViews.get(c.provider)?.states.get(c.env), now),
      }));
    },
    moves: (): ReadonlyMap<string, number> => moves,
    /**
     * For /ready's detail: whether every pooled provider has a usable key; the keys that are cooling or
     * disabled, by env name (never a secret). Reads the shared store, so every process agrees.
     */
    async readiness(): Promise<PoolReadiness> {
      const byProvider = new Map<string, PoolReadiness["providers"][number]>();
      for (const pool of pools.values()) byProvider.set(pool.provider.id, { id: pool.provider.id, usable: 0, keys: [] });
      for (const k of await listKeys()) {
        const provider = byProvider.get(k.provider)!;
        if (k.state === "usable") provider.usable++;
        else provider.keys.push(k.state === "cooling" ? { env: k.key, state: k.state, until: k.until } : { env: k.key, state: k.state, since: k.since });
        // A key cooling for some models still serves the others: counted usable, and named per model.
        for (const m of k.models_cooling ?? []) provider.keys.push({ env: k.key, state: "cooling", model: m.model, until: m.until });
      }
      const providers = [...byProvider.values()];
      return { ready: providers.every((p) => p.usable > 0), providers };
    },
  };
}

/** The provider carrying another of its keys: an object over it, not a copy (requests make one each). */
export function withKey(provider: ResolvedProvider, secret: string | undefined): ResolvedProvider {
  if (provider.apiKey === secret) return provider;
  const own = Object.create(provider) as ResolvedProvider;
  own.apiKey = secret;
  return own;
}

/**
 * A 401 or 403 that says the key lacks a permission (OpenAI's restricted keys: "Missing scopes:
 * …"), not that it is unknown: to a model list, the key may not list models; to a request, it may
 * not use that endpoint or model (gateway/attempt.ts).
 */
export const MISSING_PERMISSION = /missing scopes?:|insufficient permissions/i;

/** A key's probe is claimed for the probe's timeout and this much more: the others leave it alone meanwhile. */
const PROBE_CLAIM_MARGIN_MS = 1_000;
