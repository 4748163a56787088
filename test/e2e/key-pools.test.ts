import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { afterAnswer, afterProbe, chooseKey, conditionOf, cooldownMs, modelStateName, probeDelayMs, RELAPSE_MS, sessionHash, soonestBackMs, type KeyState, type KeyView } from "../../src/providers/key-pool.ts";
import { createKeyPools } from "../../src/providers/key-pools.ts";
import { createMemoryKeyState } from "../../src/store/memory/memory-key-state.ts";
import type { Transport } from "../../src/transport/transport.ts";
import { sessionIdOf } from "../../src/gateway/session-id.ts";
import { ConfigError, resolveSettings } from "../../src/config/load-config.ts";
import type { Logger } from "../../src/log/log.ts";
import { startFakeUpstream, type FakeUpstream, type RecordedRequest, type Reply } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, FREE_MODEL, IMAGES_API_MODEL, OPENAI_MODEL, post, startGateway, type Gateway, type GatewayOptions } from "../helpers/gateway.ts";
import { until } from "../helpers/until.ts";

/**
 * Issue 33, vendor key pools: a provider's `keys` share its traffic by weight, a key the vendor
 * rate-limits cools down (Retry-After, else 1 s doubling to 60 s) and one it refuses (401)
 * is set aside until a models-list probe passes; a session stays on one key while it is usable.
 * The fake upstream tells the keys apart by the Authorization / x-api-key header each request carried.
 */

const SECRETS: Record<string, string> = {
  POOL_KEY_A: "sk-pool-A-SECRET-aaaaaaaaaaaaaaaaaaaa",
  POOL_KEY_B: "sk-pool-B-SECRET-bbbbbbbbbbbbbbbbbbbb",
  POOL_KEY_C: "sk-pool-C-SECRET-cccccccccccccccccccc",
};
const ENV_OF = new Map(Object.entries(SECRETS).map(([env, secret]) => [secret, env]));

/** The env name of the key a recorded request carried. */
function keyOf(req: RecordedRequest): string {
  const secret = req.headers["x-api-key"] ?? req.headers.authorization?.replace(/^Bearer /, "") ?? "";
  return ENV_OF.get(secret) ?? `unknown(${secret})`;
}
const chats = (up: FakeUpstream) => up.requests.filter((r) => r.method === "POST");

/** mulberry32: a seeded [0, 1) source, so a weighted run is the same every time. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Thousands of loopback requests per test: on a machine shared with other test runs, 5 s is short.
setDefaultTimeout(30_000);

const upstream = await startFakeUpstream();
const started: Gateway[] = [];
afterAll(async () => {
  for (const gw of started) await gw.stop();
  await upstream.stop();
});

async function gateway(o: Partial<GatewayOptions>): Promise<Gateway> {
  upstream.reset();
  const gw = await startGateway({ upstreamUrl: upstream.url, vendorEnv: SECRETS, keyProbeEveryMs: 20, ...o });
  started.push(gw);
  return gw;
}

const ask = (gw: Gateway, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}) =>
  post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "hello" }], ...extra }, headers);

/** One request each from eight sessions (spread over the keys by their hash), one after another; every status. */
async function eightSessions(gw: Gateway): Promise<number[]> {
  const statuses: number[] = [];
  for (let i = 0; i < 8; i++) {
    const res = await ask(gw, {}, { "x-session-id": `s${i}` });
    await res.arrayBuffer();
    statuses.push(res.status);
  }
  return statuses;
}

/** `n` requests, `width` at a time; every status. */
async function many(n: number, one: () => Promise<Response>, width = 20): Promise<number[]> {
  const statuses: number[] = [];
  for (let i = 0; i < n; i += width) {
    const batch = await Promise.all(Array.from({ length: Math.min(width, n - i) }, async () => {
      const res = await one();
      await res.arrayBuffer();
      return res.status;
    }));
    statuses.push(...batch);
  }
  return statuses;
}

function tally(requests: RecordedRequest[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of requests) out[keyOf(r)] = (out[keyOf(r)] ?? 0) + 1;
  return out;
}

const rateLimited = (retryAfter: string): Reply => ({ kind: "json", status: 429, headers: { "retry-after": retryAfter }, body: { error: { message: "Rate limit reached", type: "requests", code: "rate_limit_exceeded" } } });
const revoked = (secret: string): Reply => ({
  kind: "json",
  status: 401,
  // OpenAI's words, which echo part of the key: the gateway must show it nowhere.
  body: { error: { message: `Incorrect API key provided: ${secret}. You can find your API key at https://platform.openai.com/account/api-keys.`, type: "invalid_request_error", code: "invalid_api_key" } },
});

describe("config: keys", () => {
  const provider = (extra: Record<string, unknown>) => ({
    providers: [{ id: "p", kind: "openai", base_url: "http://127.0.0.1:1/v1", ...extra }],
    models: [{ id: "p/m", provider: "p", upstream_model: "m", category: "free", context_length: 1000 }],
  });

  test("a pool with weights (default 1), secrets read from each env; api_key_env is a pool of one", () => {
    const s = resolveSettings(provider({ keys: [{ env: "K1", weight: 2 }, { env: "K2" }] }), { K1: "one", K2: "two" }, "t");
    expect(s.providers.get("p")!.keys).toEqual([{ env: "K1", weight: 2, secret: "one" }, { env: "K2", weight: 1, secret: "two" }]);
    const single = resolveSettings(provider({ api_key_env: "K1" }), { K1: "one" }, "t");
    expect(single.providers.get("p")!.keys).toEqual([{ env: "K1", weight: 1, secret: "one" }]);
    expect(single.providers.get("p")!.apiKey).toBe("one");
  });

  test("a key whose variable is unset or empty is left out of the pool and named (never sent without a value)", () => {
    const s = resolveSettings(provider({ keys: [{ env: "K1" }, { env: "K2" }, { env: "K3" }] }), { K1: "one", K3: "" }, "t");
    expect(s.providers.get("p")!.keys).toEqual([{ env: "K1", weight: 1, secret: "one" }]);
    expect(s.providers.get("p")!.unsetKeyEnvs).toEqual(["K2", "K3"]);
  });

  test("both api_key_env and keys, a repeated env, a zero weight, an empty list or an unknown field in a key are refused naming the field", () => {
    expect(() => resolveSettings(provider({ api_key_env: "K1", keys: [{ env: "K2" }] }), {}, "t")).toThrow("/providers/0/keys: set either api_key_env or keys");
    expect(() => resolveSettings(provider({ keys: [{ env: "K1" }, { env: "K1" }] }), {}, "t")).toThrow("/providers/0/keys/1/env");
    expect(() => resolveSettings(provider({ keys: [{ env: "K1", weight: 0 }] }), {}, "t")).toThrow("/providers/0/keys/0/weight");
    expect(() => resolveSettings(provider({ keys: [] }), {}, "t")).toThrow("/providers/0/keys");
    expect(() => resolveSettings(provider({ keys: [{ env: "K1", wieght: 2 }] }), {}, "t")).toThrow(ConfigError);
  });
});

describe("start-up", () => {
  test("a pool with one key's variable unset says the key is left out and the pool serves, not that its calls carry no key", async () => {
    const lines: { message: string; fields?: Record<string, unknown> }[] = [];
    const log: Logger = (_level, message, fields) => void lines.push({ message, fields });
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_MISSING" }], vendorEnv: { POOL_KEY_A: SECRETS.POOL_KEY_A! }, log });
    expect(lines.find((l) => l.message.includes("carry no key"))).toBeUndefined();
    expect(lines.find((l) => l.message.startsWith("vendor keys left out of their pools"))?.fields).toEqual({ providers: ["fake-openai (POOL_KEY_MISSING)"] });
    expect((await ask(gw)).status).toBe(200);
  });
});

describe("the pure core", () => {
  const keys = [{ env: "A", weight: 1 }, { env: "B", weight: 1 }, { env: "C", weight: 2 }];
  const none: KeyView = { states: new Map() };

  test("refusals of requests already under way when a key began cooling are one strike: a burst of 529s cools it 1 s, not 60", () => {
    let state: KeyState | undefined;
    // Eight requests sent at 1,000, answered 529 (no Retry-After) one after another from 1,500.
    for (let i = 0; i < 8; i++) state = afterAnswer(state, 529, undefined, 1_000, 1_500 + i);
    expect(state).toMatchObject({ strikes: 1, cooledAt: 1_500, coolUntil: 2_500 });
    // A longer Retry-After among them lengthens the same cooldown, without a strike.
    state = afterAnswer(state, 429, 5_000, 1_000, 1_600);
    expect(state).toMatchObject({ strikes: 1, coolUntil: 6_600 });
    // A slow one's 529 after the cooldown ended is still that burst's: no strike, no new cooldown.
    expect(afterAnswer(state, 529, undefined, 1_000, 7_000)).toBe(state);
    // A request sent after the cooldown began (all keys cooling, it went anyway) and refused is a new strike.
    state = afterAnswer(state, 529, undefined, 1_700, 1_800);
    expect(state).toMatchObject({ strikes: 2, cooledAt: 1_800, coolUntil: 1_800 + 2_000 });
  });

  test("when every key refused, the wait is until the first key that is only cooling is back; every key disabled: none", () => {
    const cooling = (until: number): KeyState => ({ coolUntil: until, cooledAt: 0, strikes: 1, disabledAt: 0, probeAt: 0, probeFailures: 0 });
    const off: KeyState = { coolUntil: 0, cooledAt: 0, strikes: 0, disabledAt: 5, probeAt: 10, probeFailures: 0 };
    expect(soonestBackMs(keys, { states: new Map([["A", cooling(31_000)], ["B", cooling(2_000)], ["C", off]]) }, 1_000)).toBe(1_000);
    expect(soonestBackMs(keys, { states: new Map([["A", off], ["B", off], ["C", off]]) }, 1_000)).toBeUndefined();
    expect(soonestBackMs(keys, { states: new Map([["A", off]]) }, 1_000)).toBe(0);
  });

  test("a key cooling for one model is passed over for that model only, and the wait for it counts that model's cooldown", () => {
    const cooling = (until: number): KeyState => ({ coolUntil: until, cooledAt: 0, strikes: 1, disabledAt: 0, probeAt: 0, probeFailures: 0 });
    const view: KeyView = { states: new Map([[modelStateName("A", "m"), cooling(9_000)], [modelStateName("B", "m"), cooling(4_000)]]) };
    for (let i = 0; i < 20; i++) {
      const r = i / 20;
      expect(chooseKey(keys, view, 1_000, () => r, undefined, undefined, "m").key.env).toBe("C");
    }
    expect(new Set(Array.from({ length: 20 }, (_, i) => chooseKey(keys, view, 1_000, () => i / 20, undefined, undefined, "n").key.env))).toEqual(new Set(["A", "B", "C"]));
    expect(soonestBackMs(keys, view, 1_000, "m")).toBe(0);
    expect(soonestBackMs(keys, view, 1_000, "n")).toBe(0);
    // C refused too: the key back soonest for this model is B, in 3 s; for another model, any key now.
    const excluded = new Set(["C"]);
    expect(chooseKey(keys, view, 1_000, () => 0.5, undefined, excluded, "m")).toMatchObject({ key: { env: "B" }, usable: false });
    expect(soonestBackMs(keys.filter((k) => k.env !== "C"), view, 1_000, "m")).toBe(3_000);
    expect(conditionOf(view.states.get("A"), 1_000)).toBe("usable");
  });

  /** Two keys of one provider, K1 nearly always chosen (its weight), for the pure core's runtime tests. */
  const twoKeys = () => resolveSettings({
    providers: [{ id: "p", kind: "openai", base_url: "http://127.0.0.1:1/v1", keys: [{ env: "K1", weight: 1_000 }, { env: "K2", weight: 0.001 }] }],
    models: [{ id: "p/m", provider: "p", upstream_model: "m", category: "free", context_length: 1000 }],
  }, { K1: "one", K2: "two" }, "t");

  test("eight requests in flight on one key, all refused by one overload, cool it once (the runtime, as the pool reports them)", () => {
    let clock = 1_000;
    const settings = twoKeys();
    const store = createMemoryKeyState({ now: () => clock });
    const lines: string[] = [];
    const pools = createKeyPools({ providers: settings.providers, store, fetch: (() => { throw new Error("no probes here"); }) as unknown as Transport, now: () => clock, random: () => 0, log: (_l, message, fields) => lines.push(`${message} ${JSON.stringify(fields)}`) });
    const pool = pools.get("p")!;
    const chosen = Array.from({ length: 8 }, () => pool.choose(undefined) as ReturnType<typeof pool.choose> & { key: { env: string } });
    expect(chosen.every((c) => c.key.env === "K1")).toBe(true);
    clock = 1_400;
    for (const c of chosen) pool.report(c as never, 529, undefined);
    expect((store.read("p", undefined) as KeyView).states.get("K1")).toMatchObject({ strikes: 1, coolUntil: 2_400 });
    expect(pools.counts().find((c) => c.env === "K1")!.cooldowns).toBe(1);
    // Operators see which key cools, and for how long.
    expect(lines.filter((l) => l.startsWith("vendor key cooling"))).toEqual([`vendor key cooling ${JSON.stringify({ provider: "p", key: "K1", status: 529, ms: 1_000, strikes: 1 })}`]);
  });

  test("a late answer in one process changes what another wrote since, not its own stale view: a 30 s cooldown is not shortened nor undone, a refused key stays refused (a scale-out probe)", async () => {
    let clock = 1_000;
    const settings = twoKeys();
    const store = createMemoryKeyState({ now: () => clock });
    const make = () => createKeyPools({ providers: settings.providers, store, fetch: (() => { throw new Error("no probes here"); }) as unknown as Transport, now: () => clock, random: () => 0, log: () => {} });
    const [a, b] = [make().get("p")!, make().get("p")!];
    const k1 = () => (store.read("p", undefined) as KeyView).states.get("K1");
    const settle = () => Bun.sleep(0);
    // B sends on K1 while it is healthy (its view is that); A's request is refused with Retry-After 30 s.
    const early = (await b.choose(undefined)) as Parameters<typeof b.report>[0];
    clock = 1_100;
    a.report((await a.choose(undefined)) as never, 429, 30_000);
    await settle();
    expect(k1()).toMatchObject({ coolUntil: 31_100 });
    // B's earlier request comes back refused without Retry-After, then another succeeds: the cooldown stands.
    clock = 1_130;
    b.report(early, 429, undefined);
    b.report(early, 200, undefined);
    await settle();
    expect(k1()).toMatchObject({ coolUntil: 31_100, strikes: 1 });
    // A's 401 refuses the key; B's late 429 for a request sent before leaves it refused.
    clock = 40_000;
    const before = (await b.choose(undefined)) as Parameters<typeof b.report>[0];
    clock = 40_100;
    a.report({ ...before, at: 40_050 } as never, 401, undefined);
    await settle();
    expect(k1()!.disabledAt).toBe(40_100);
    b.report(before, 429, undefined);
    await settle();
    expect(k1()!.disabledAt).toBe(40_100);
  });

  test("a slow probe is not started again by another process while it runs (the claim lasts as long as a probe may)", async () => {
    let clock = 1_000;
    const settings = resolveSettings({
      providers: [{ id: "p", kind: "openai", base_url: "http://127.0.0.1:1/v1", keys: [{ env: "K1" }, { env: "K2" }] }],
      models: [{ id: "p/m", provider: "p", upstream_model: "m", category: "free", context_length: 1000 }],
    }, { K1: "one", K2: "two" }, "t");
    const store = createMemoryKeyState({ now: () => clock });
    await store.write("p", "K1", { coolUntil: 0, cooledAt: 0, strikes: 0, disabledAt: 500, probeAt: 900, probeFailures: 0 });
    let probes = 0;
    const slow = (async () => {
      probes++;
      await Bun.sleep(300);
      return new Response("{}", { status: 401 });
    }) as unknown as Transport;
    const make = () => createKeyPools({ providers: settings.providers, store, fetch: slow, now: () => clock, log: () => {}, probeTimeoutMs: 10_000 });
    const [a, b] = [make(), make()];
    const first = a.probeDue();
    await Bun.sleep(50);
    // 2 s later by the clock (past the old 900 ms claim), the first probe still under way.
    clock = 3_000;
    await b.probeDue();
    await first;
    expect(probes).toBe(1);
    // Done, its claim is given up: the next probe, when due, is not held back by it.
    const state = (store.read("p", undefined) as KeyView).states.get("K1")!;
    expect(state.probeFailures).toBe(1);
    clock = state.probeAt;
    await b.probeDue();
    expect(probes).toBe(2);
  });

  test("a probe whose vendor does not answer holds up no other key's probe (a raw-TCP probe: a stalled model list delayed every other probe by up to its timeout)", async () => {
    let clock = 1_000;
    const settings = resolveSettings({
      providers: [{ id: "p", kind: "openai", base_url: "http://127.0.0.1:1/v1", keys: [{ env: "K1" }, { env: "K2" }, { env: "K3" }] }],
      models: [{ id: "p/m", provider: "p", upstream_model: "m", category: "free", context_length: 1000 }],
    }, { K1: "one", K2: "two", K3: "three" }, "t");
    const store = createMemoryKeyState({ now: () => clock });
    await store.write("p", "K1", { coolUntil: 0, cooledAt: 0, strikes: 0, disabledAt: 500, probeAt: 900, probeFailures: 0 });
    await store.write("p", "K2", { coolUntil: 0, cooledAt: 0, strikes: 0, disabledAt: 500, probeAt: 5_000, probeFailures: 0 });
    let release!: () => void;
    const stalled = new Promise<void>((resolve) => (release = resolve));
    const probed: string[] = [];
    const fetchFor = (async (_url: string, init: RequestInit) => {
      const key = new Headers(init.headers).get("authorization")!.replace("Bearer ", "");
      probed.push(key);
      if (key === "one") await stalled;
      return new Response("{}", { status: 200 });
    }) as unknown as Transport;
    const lines: string[] = [];
    const pools = createKeyPools({ providers: settings.providers, store, fetch: fetchFor, now: () => clock, log: (_l, message, fields) => lines.push(`${message} ${JSON.stringify(fields)}`), probeEveryMs: 10, probeTimeoutMs: 10_000 });
    pools.start();
    try {
      await until("K1's probe", 2_000, () => probed.includes("one"));
      clock = 6_000;
      await until("K2's probe while K1's is under way", 2_000, () => probed.includes("two"));
      await until("K2 accepted", 2_000, () => lines.some((l) => l.includes("accepted again") && l.includes('"K2"')));
      // K1's probe, still under way, was not started again meanwhile.
      expect(probed.filter((k) => k === "one")).toEqual(["one"]);
      release();
      await until("K1 accepted", 2_000, () => lines.some((l) => l.includes("accepted again") && l.includes('"K1"')));
    } finally {
      release();
      pools.stop();
    }
  });

  test("a key refused again soon after a passing probe took it back, before any request on it succeeded, waits longer for each next probe; a success forgets it (a key-pool probe: a key refused for chat but allowed to list models was refused every second)", () => {
    let state: KeyState | undefined = afterAnswer(undefined, 401, undefined, 1_000, 1_000);
    expect(state!.probeAt).toBe(1_000 + probeDelayMs(0));
    const waits: number[] = [];
    let now = 1_000;
    for (let round = 0; round < 4; round++) {
      now = state!.probeAt;
      state = afterProbe(state!, true, now);
      expect(conditionOf(state, now)).toBe("usable");
      now += 500;
      state = afterAnswer(state, 401, undefined, now - 10, now);
      expect(conditionOf(state, now)).toBe("disabled");
      waits.push(state!.probeAt - now);
    }
    expect(waits).toEqual([1, 2, 3, 4].map((n) => probeDelayMs(n)));
    // Taken back, then a request on it answered: the next refusal is a first one again.
    state = afterProbe(state!, true, state!.probeAt);
    state = afterAnswer(state, 200, undefined, state!.probeAt + 1, state!.probeAt + 2);
    expect(state).toBeUndefined();
    state = afterAnswer(state, 401, undefined, 90_000, 90_000);
    expect(state!.probeAt - 90_000).toBe(probeDelayMs(0));
    // Refused long after a probe took it back: a first refusal too.
    state = afterProbe(state!, true, 100_000);
    state = afterAnswer(state, 401, undefined, 100_000 + RELAPSE_MS, 100_000 + RELAPSE_MS);
    expect(state!.probeAt - (100_000 + RELAPSE_MS)).toBe(probeDelayMs(0));
  });

  test("cooldowns honour Retry-After (up to an hour), else 1 s doubling to 60 s; probes back off from 1 s to 5 minutes", () => {
    expect(cooldownMs(0, 2_000)).toBe(2_000);
    expect(cooldownMs(0, 3_600_000)).toBe(3_600_000);
    // One 429 saying 99,999,999,999 s does not bench a key for three thousand years.
    expect(cooldownMs(0, 99_999_999_999_000)).toBe(3_600_000);
    expect([0, 1, 2, 3, 4, 5, 6, 7].map((s) => cooldownMs(s, undefined))).toEqual([1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000]);
    expect([0, 1, 2, 8, 9, 30].map(probeDelayMs)).toEqual([1_000, 2_000, 4_000, 256_000, 300_000, 300_000]);
  });

  test("sessions spread by weight over the keys (rendezvous hashing), and a session keeps its key in every process", () => {
    const counts: Record<string, number> = { A: 0, B: 0, C: 0 };
    for (let i = 0; i < 4_000; i++) counts[chooseKey(keys, none, 0, Math.random, sessionHash(`s${i}`)).key.env]!++;
    // Shares 1/4, 1/4, 1/2: within 5 points (each is ≥ 7 standard deviations of 4,000 draws away).
    expect(Math.abs(counts.A! / 4_000 - 0.25)).toBeLessThan(0.05);
    expect(Math.abs(counts.C! / 4_000 - 0.5)).toBeLessThan(0.05);
    const s = sessionHash("one session");
    const first = chooseKey(keys, none, 0, Math.random, s).key.env;
    for (let i = 0; i < 20; i++) expect(chooseKey(keys, none, 0, Math.random, s).key.env).toBe(first);
  });

  test("the session id: Anthropic metadata.user_id; OpenAI prompt_cache_key, else user; the Responses chain; else x-session-id; hashed, not kept raw", () => {
    const h = new Headers({ "x-session-id": "hdr" });
    expect(sessionIdOf("anthropic", { metadata: { user_id: "claude-user" } }, h)).toBe("claude-user");
    expect(sessionIdOf("anthropic", {}, h)).toBe("hdr");
    expect(sessionIdOf("openai", { prompt_cache_key: "pck", user: "u" }, h, "resp_1")).toBe("pck");
    expect(sessionIdOf("openai", { user: "u" }, h, "resp_1")).toBe("u");
    expect(sessionIdOf("openai", {}, h, "resp_1")).toBe("resp_1");
    expect(sessionIdOf("openai", {}, h)).toBe("hdr");
    expect(sessionIdOf("openai", {}, new Headers())).toBeUndefined();
    expect(sessionHash("claude-user")).toMatch(/^[0-9a-f]{32}$/);
    expect(sessionHash("claude-user")).not.toContain("claude");
  });
});

describe("weights over real HTTP", () => {
  test("2,000 requests with a seeded random source: A (weight 3) and B (weight 1) within ±5 % of 1,500 and 500", async () => {
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A", weight: 3 }, { env: "POOL_KEY_B" }], keyRandom: seeded(33) });
    const statuses = await many(2_000, () => ask(gw));
    expect(statuses.every((s) => s === 200)).toBe(true);
    const t = tally(chats(upstream));
    expect(t.POOL_KEY_A! + t.POOL_KEY_B!).toBe(2_000);
    expect(Math.abs(t.POOL_KEY_A! - 1_500)).toBeLessThanOrEqual(75);
    expect(Math.abs(t.POOL_KEY_B! - 500)).toBeLessThanOrEqual(25);
  });

  test("2,000 requests with Math.random: each key's share within 5 points of its weight's", async () => {
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A", weight: 3 }, { env: "POOL_KEY_B" }] });
    await many(2_000, () => ask(gw));
    const t = tally(chats(upstream));
    // A binomial of 2,000 draws at p = 0.25 has a standard deviation of 19.4 requests (0.97
    // points): 5 points is 5.2 of them, so an honest run fails about once in five million.
    expect(Math.abs(t.POOL_KEY_B! / 2_000 - 0.25)).toBeLessThan(0.05);
    expect(t.POOL_KEY_A! + t.POOL_KEY_B!).toBe(2_000);
  });
});

describe("cooldowns and refused keys (injected clock)", () => {
  test("a key answering 429 with Retry-After: 2 gets no request for 2 s; the clients see no error", async () => {
    let clock = 1_800_000_000_000;
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(7), now: () => clock });
    let limited = 0;
    let requestsSeen = 0;
    upstream.rule((req) => {
      requestsSeen++;
      return keyOf(req) === "POOL_KEY_A" && limited++ === 0 ? rateLimited("2") : undefined;
    });
    // Until A has been asked once (and refused): every client still gets its answer from B.
    const statuses: number[] = [];
    while (limited === 0) statuses.push(...(await many(5, () => ask(gw), 5)));
    expect(statuses.every((s) => s === 200)).toBe(true);
    const cooledAt = clock;
    upstream.requests.length = 0;
    clock = cooledAt + 1_999;
    expect(await many(60, () => ask(gw))).toEqual(Array(60).fill(200));
    expect(tally(chats(upstream))).toEqual({ POOL_KEY_B: 60 });
    // /ready: still ready, A listed as cooling until its time for the model the vendor limited
    // (it still serves the others, so both keys count as usable).
    const ready = await fetch(`${gw.url}/ready`);
    expect(ready.status).toBe(200);
    expect(((await ready.json()) as any).vendor_keys).toEqual([{ id: "fake-openai", usable: 2, keys: [{ env: "POOL_KEY_A", state: "cooling", model: "gpt-4o-mini", until: new Date(cooledAt + 2_000).toISOString() }] }]);
    upstream.requests.length = 0;
    clock = cooledAt + 2_000;
    expect(await many(60, () => ask(gw))).toEqual(Array(60).fill(200));
    expect(tally(chats(upstream)).POOL_KEY_A).toBeGreaterThan(0);
    const metrics = await (await fetch(`${gw.url}/metrics`)).text();
    expect(metrics).toContain('switchyard_vendor_key_cooldowns_total{provider="fake-openai",key="POOL_KEY_A"} 1');
    expect(metrics).toContain('switchyard_vendor_key_cooldowns_total{provider="fake-openai",key="POOL_KEY_B"} 0');
    expect(metrics).toContain('switchyard_vendor_key_errors_total{provider="fake-openai",key="POOL_KEY_A"} 1');
    expect(metrics).toContain('switchyard_vendor_key_errors_total{provider="fake-openai",key="POOL_KEY_B"} 0');
    expect(metrics).toContain('switchyard_vendor_key_usable{provider="fake-openai",key="POOL_KEY_A"} 1');
    // Every attempt counted on the key it carried: what the fake saw, plus nothing.
    const sent = (env: string) => Number(new RegExp(`switchyard_vendor_key_requests_total\\{provider="fake-openai",key="${env}"\\} (\\d+)`).exec(metrics)![1]);
    expect(sent("POOL_KEY_A") + sent("POOL_KEY_B")).toBe(requestsSeen);
  });

  test("OpenAI's 429 for one request past the organisation's tokens a minute cools no key: a 413 to the client at once, no other key asked, none retried", async () => {
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }, { env: "POOL_KEY_C" }], keyRandom: seeded(11) });
    upstream.rule((req) => req.path.endsWith("/chat/completions") && JSON.stringify(req.body).includes("HUGE") ? {
      kind: "json", status: 429, headers: { "retry-after": "20" },
      body: { error: { message: "Request too large for gpt-4o-mini in organization org-Ab3dE5fG7hI9jK1lM3nO5pQ7 on tokens per min (TPM): Limit 30000, Requested 50000. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.", type: "tokens", param: null, code: "rate_limit_exceeded" } },
    } : undefined);
    for (let i = 0; i < 3; i++) {
      const res = await ask(gw, { messages: [{ role: "user", content: "HUGE prompt" }] });
      expect(res.status).toBe(413);
      const body = (await res.json()) as any;
      expect(body.error.message).toBe("The request is larger than the upstream provider takes in a minute (30000 tokens a minute; this request needs 50000). Send fewer tokens, or lower max_tokens.");
    }
    // One upstream call per request, and every key still usable for everyone else.
    expect(chats(upstream)).toHaveLength(3);
    const ready = (await (await fetch(`${gw.url}/ready`)).json()) as any;
    expect(ready.vendor_keys ?? []).toEqual([]);
    expect(await many(9, () => ask(gw))).toEqual(Array(9).fill(200));
    // Another model of the request's list (another vendor, another quota) may take it.
    const fallback = await ask(gw, { models: [ANTHROPIC_MODEL], messages: [{ role: "user", content: "HUGE prompt" }] });
    expect(fallback.status).toBe(200);
    expect(((await fallback.json()) as any).model).toBe(ANTHROPIC_MODEL);
  });

  test("refusals about the request, not the key, bench no key (a hostile-tenant probe: one request had benched every key of a pool)", async () => {
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }, { env: "POOL_KEY_C" }], keyRandom: seeded(13) });
    const refusals: Reply[] = [
      // A request that alone asks for most of a key's tokens a minute (OpenAI's and Anthropic's words).
      { kind: "json", status: 429, headers: { "retry-after": "20" }, body: { error: { message: "Rate limit reached for gpt-4o-mini in organization org-x on tokens per min (TPM): Limit 30000, Used 1000, Requested 29500. Please try again in 20s.", type: "tokens", code: "rate_limit_exceeded" } } },
      { kind: "json", status: 429, headers: { "retry-after": "60" }, body: { type: "error", error: { type: "rate_limit_error", message: "This request would exceed the rate limit for your organization of 30,000 input tokens per minute. Please reduce the prompt length or the maximum tokens requested, or try again later." } } },
      { kind: "json", status: 429, headers: { "retry-after": "60" }, body: { type: "error", error: { type: "rate_limit_error", message: "This request would exceed the rate limit for your organization of 8,000 output tokens per minute. Please reduce the prompt length or the maximum tokens requested, or try again later." } } },
      // A 403 about what was asked: input a moderation flagged, a model the organisation may not use.
      { kind: "json", status: 403, body: { error: { message: "Your input was flagged by moderation.", code: 403 } } },
      { kind: "json", status: 403, body: { error: { message: "You are not allowed to sample from this model", type: "invalid_request_error", code: null } } },
      // A 403 quoting the tenant's words ("my account is disabled"): every key of a pool was disabled (a key-pool probe, twenty-ninth session).
      { kind: "json", status: 403, body: { error: { message: 'Request blocked by content filter: "help, my account is disabled"', type: "permission_error", code: null } } },
      { kind: "json", status: 403, body: { error: { message: 'Blocked: "organization_deactivated, the API key is inactive"', code: "content_filter" } } },
    ];
    // About 20,000 tokens of prompt (over half of 30,000 a minute) and an answer limit of 5,000 (over half of 8,000).
    const large = { messages: [{ role: "user", content: `MARKED ${"word ".repeat(16_000)}` }], max_tokens: 5_000 };
    for (const refusal of refusals) {
      upstream.rule((req) => (req.path.endsWith("/chat/completions") && JSON.stringify(req.body).includes("MARKED") ? refusal : undefined));
      const res = await ask(gw, large);
      expect(res.status).toBeGreaterThanOrEqual(400);
      const said = ((await res.json()) as { error: { message: string } }).error.message;
      const vendorSaid = (refusal as { body: { error: { message: string } } }).body.error.message;
      if ((refusal as { status?: number }).status === 403 && /moderation|content filter|Blocked/.test(vendorSaid)) {
        // A content refusal: told as a refusal of the request, in the vendor's words, not as the operator's credentials.
        expect(said).toStartWith("The upstream provider refused this request (status 403): ");
        expect(said).toContain(vendorSaid);
        expect(said).not.toContain("credentials");
      } else if ((refusal as { status?: number }).status === 403) {
        // A model the vendor account may not use: the operator's to fix, the vendor's words left out.
        expect(said).toBe("The upstream provider refused the gateway's credentials (status 403). Retrying will not help until the gateway's operator fixes them.");
      }
      const ready = (await (await fetch(`${gw.url}/ready`)).json()) as any;
      expect([(refusal as { status?: number }).status, ready.vendor_keys ?? []]).toEqual([(refusal as { status?: number }).status, []]);
    }
    upstream.rule(() => undefined);
    expect(await many(9, () => ask(gw))).toEqual(Array(9).fill(200));
  });

  test("a restricted key's 401 'Missing scopes' for the endpoint a tenant picked is about what was asked: no key is set aside, chat keeps every key (a hostile-tenant probe, twelfth); a key of the pool that has the scope serves it (a review)", async () => {
    // OpenAI's restricted project keys: allowed chat, not images. One image request per key had
    // disabled every key of the pool, moving every session (and its prompt cache) for everyone.
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }, { env: "POOL_KEY_C" }], keyRandom: seeded(13), keyProbeEveryMs: 60_000 });
    const scopes: Reply = { kind: "json", status: 401, body: { error: { message: "You have insufficient permissions for this operation. Missing scopes: api.model.images.request. Check that you have the correct role in your organization (Reader, Writer, Owner) and project (Member, Owner), and if you're using a restricted API key, that it has the necessary scopes.", type: "invalid_request_error", param: null, code: null } } };
    upstream.rule((req) => (req.path.endsWith("/images/generations") ? scopes : undefined));
    for (let i = 0; i < 3; i++) {
      const res = await post(gw, "/v1/chat/completions", { model: IMAGES_API_MODEL, messages: [{ role: "user", content: "a cat" }] });
      expect(res.status).toBe(502);
      // The operator's to fix (the key's permissions), in the gateway's words: not retried by the SDKs.
      expect(res.headers.get("x-should-retry")).toBe("false");
      const { error } = (await res.json()) as { error: { message: string } };
      expect(error.message).toContain("may not use this model");
    }
    // Each request asked each key once (another may have the scope), and set none aside.
    const images = () => upstream.requests.filter((r) => r.path.endsWith("/images/generations"));
    expect(images()).toHaveLength(9);
    const ready = (await (await fetch(`${gw.url}/ready`)).json()) as any;
    expect(ready.vendor_keys ?? []).toEqual([]);
    // A pool of mixed scopes: the key that may serves what the others may not (it was a 502).
    upstream.requests.length = 0;
    const drawn: Reply = { kind: "json", body: { created: 1, data: [{ b64_json: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg==" }] } };
    upstream.rule((req) => (req.path.endsWith("/images/generations") ? (keyOf(req) === "POOL_KEY_B" ? drawn : scopes) : undefined));
    for (let i = 0; i < 3; i++) {
      const res = await post(gw, "/v1/chat/completions", { model: IMAGES_API_MODEL, messages: [{ role: "user", content: "a cat" }] });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    }
    expect(images().filter((r) => keyOf(r) === "POOL_KEY_B")).toHaveLength(3);
    expect(((await (await fetch(`${gw.url}/ready`)).json()) as any).vendor_keys ?? []).toEqual([]);
    upstream.rule(() => undefined);
    upstream.requests.length = 0;
    expect(await eightSessions(gw)).toEqual(Array(8).fill(200));
    expect(new Set(chats(upstream).map(keyOf)).size).toBeGreaterThan(1);
  });

  test("a dense prompt (about a token a byte) refused for Anthropic's input tokens a minute while the key's minute is unused cools no key: the vendor's remaining count shows the request is the cause (a hostile-tenant probe, twelfth)", async () => {
    // 40 KB of digits is ~10,000 tokens by the bytes / 4 rule, under half of 30,000: read as the
    // key's used-up minute, each key cooled in turn. The vendor said its minute was untouched.
    const gw = await gateway({ anthropicKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }, { env: "POOL_KEY_C" }], keyRandom: seeded(13) });
    const itpm: Reply = {
      kind: "json", status: 429,
      headers: { "retry-after": "60", "anthropic-ratelimit-input-tokens-limit": "30000", "anthropic-ratelimit-input-tokens-remaining": "30000" },
      body: { type: "error", error: { type: "rate_limit_error", message: "This request would exceed the rate limit for your organization of 30,000 input tokens per minute. Please reduce the prompt length or the maximum tokens requested, or try again later." } },
    };
    upstream.rule((req) => (req.path === "/v1/messages" && JSON.stringify(req.body).includes("DENSE") ? itpm : undefined));
    const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 100, messages: [{ role: "user", content: `DENSE ${"1234567890".repeat(4_000)}` }] });
    expect(res.status).toBe(502);
    await res.arrayBuffer();
    const ready = (await (await fetch(`${gw.url}/ready`)).json()) as any;
    expect(ready.vendor_keys ?? []).toEqual([]);
    // The same words with the key's minute used up (nothing remaining): the key cools, as before.
    upstream.rule((req) => (req.path === "/v1/messages" && JSON.stringify(req.body).includes("SMALL") ? { ...itpm, headers: { ...itpm.headers, "anthropic-ratelimit-input-tokens-remaining": "0" } } : undefined));
    await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 100, messages: [{ role: "user", content: "SMALL" }] })).arrayBuffer();
    const after = (await (await fetch(`${gw.url}/ready`)).json()) as any;
    expect(after.vendor_keys[0].keys.length).toBeGreaterThan(0);
    upstream.rule(() => undefined);
  });

  test("a key whose minute of tokens is used up (a small request refused) still cools, and sessions on it move to another key (a reviewer's finding)", async () => {
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(13), retry: { max_retries: 1, max_wait_ms: 200 } });
    const usedUp: Reply[] = [
      { kind: "json", status: 429, headers: { "retry-after": "1" }, body: { error: { message: "Rate limit reached for gpt-4o-mini in organization org-x on tokens per min (TPM): Limit 30000, Used 29990, Requested 12. Please try again in 1s.", type: "tokens", code: "rate_limit_exceeded" } } },
      { kind: "json", status: 429, headers: { "retry-after": "1" }, body: { type: "error", error: { type: "rate_limit_error", message: "This request would exceed the rate limit for your organization of 30,000 input tokens per minute. Please reduce the prompt length or the maximum tokens requested, or try again later." } } },
    ];
    for (const refusal of usedUp) {
      upstream.rule((req) => (req.path.endsWith("/chat/completions") && keyOf(req) === "POOL_KEY_A" ? refusal : undefined));
      expect(await eightSessions(gw)).toEqual(Array(8).fill(200));
    }
    upstream.rule(() => undefined);
  });

  test("a key whose vendor account is out of credit (Anthropic's 400, a 402) cools and its requests move; clients never read the vendor's billing words (a key-pool probe)", async () => {
    const outOfCredit: Reply[] = [
      { kind: "json", status: 400, body: { type: "error", error: { type: "invalid_request_error", message: "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits." } } },
      { kind: "json", status: 402, body: { error: { message: "Insufficient Balance", type: "unknown_error", param: null, code: "invalid_request_error" } } },
    ];
    for (const refusal of outOfCredit) {
      const gw = await gateway({ anthropicKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(9), retry: { max_retries: 1, max_wait_ms: 200 } });
      upstream.rule((req) => (req.path === "/v1/messages" && keyOf(req) === "POOL_KEY_A" ? refusal : undefined));
      // Eight sessions, some bound to A: every one answered, each turn of each.
      for (let turn = 0; turn < 2; turn++) {
        for (let i = 0; i < 8; i++) {
          const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: [{ role: "user", content: "hello" }], metadata: { user_id: `user_${i}` } }, { "anthropic-version": "2023-06-01" });
          expect([(refusal as { status?: number }).status, i, res.status]).toEqual([(refusal as { status?: number }).status, i, 200]);
          await res.arrayBuffer();
        }
      }
      expect(chats(upstream).some((r) => keyOf(r) === "POOL_KEY_A")).toBe(true);
      const ready = (await (await fetch(`${gw.url}/ready`)).json()) as any;
      expect(ready.vendor_keys[0].keys).toEqual([expect.objectContaining({ env: "POOL_KEY_A", state: "cooling" })]);
      upstream.rule(() => undefined);
    }
    // A provider with one key: the client gets the gateway's words, a 502 not to retry, never the vendor's.
    const single = await gateway({ anthropicKeys: [{ env: "POOL_KEY_A" }] });
    for (const refusal of outOfCredit) {
      upstream.rule(() => refusal);
      const res = await post(single, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: [{ role: "user", content: "hello" }] }, { "anthropic-version": "2023-06-01" });
      expect(res.status).toBe(502);
      expect(res.headers.get("x-should-retry")).toBe("false");
      const said = ((await res.json()) as any).error.message as string;
      expect(said).toContain("out of credit");
      expect(said).not.toMatch(/credit balance|Insufficient Balance|Plans & Billing/);
    }
    upstream.rule(() => undefined);
  });

  test("OpenAI's 429 insufficient_quota is an account out of credit, not a rate limit: the client gets the gateway's 502 not to retry, once, and the key's requests move (a probe of the agent CLIs: Claude Code retried for minutes)", async () => {
    const quota: Reply = { kind: "json", status: 429, body: { error: { message: "You exceeded your current quota, please check your plan and billing details.", type: "insufficient_quota", param: null, code: "insufficient_quota" } } };
    const single = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }], retry: { max_retries: 3, max_wait_ms: 2_000 } });
    upstream.rule((req) => (req.path.endsWith("/chat/completions") ? quota : undefined));
    upstream.requests.length = 0;
    const res = await ask(single);
    expect(res.status).toBe(502);
    expect(res.headers.get("x-should-retry")).toBe("false");
    const said = ((await res.json()) as any).error.message as string;
    expect(said).toContain("out of credit");
    expect(said).not.toContain("exceeded your current quota");
    // Not retried on the key that said so.
    expect(chats(upstream).length).toBe(1);
    const pool = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(9), retry: { max_retries: 1, max_wait_ms: 200 } });
    upstream.rule((req) => (req.path.endsWith("/chat/completions") && keyOf(req) === "POOL_KEY_A" ? quota : undefined));
    expect(await eightSessions(pool)).toEqual(Array(8).fill(200));
    upstream.rule(() => undefined);
  });

  test("OpenRouter's 402 about this request's max_tokens ('can only afford') cools no key: the request moves, and the client is told to lower max_tokens (a review and a raw-TCP probe)", async () => {
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(13), retry: { max_retries: 2, max_wait_ms: 5_000 } });
    const afford: Reply = { kind: "json", status: 402, body: { error: { message: "This request requires more credits, or fewer max_tokens. You requested up to 4000 tokens, but can only afford 1000. To increase, visit https://openrouter.ai/settings/credits and upgrade to a paid account", code: 402 } } };
    upstream.rule((req) => (req.path.endsWith("/chat/completions") && (req.body?.max_tokens ?? 0) > 1000 ? afford : undefined));
    upstream.requests.length = 0;
    const res = await ask(gw, { max_tokens: 4000 });
    expect(res.status).toBe(502);
    expect(res.headers.get("x-should-retry")).toBeNull();
    const said = ((await res.json()) as any).error.message as string;
    expect(said).toContain("Lower max_tokens");
    expect(said).not.toContain("out of credit");
    // Each key asked once: moved, not retried on a key that just said so.
    expect(tally(chats(upstream))).toEqual({ POOL_KEY_A: 1, POOL_KEY_B: 1 });
    expect(((await (await fetch(`${gw.url}/ready`)).json()) as any).vendor_keys).toBeUndefined();
    // Smaller requests pass on both.
    expect(await many(8, () => ask(gw, { max_tokens: 500 }))).toEqual(Array(8).fill(200));
    upstream.rule(() => undefined);
  });

  test("a request large for every key's used minute is not retried at once on them: the vendor's wait reaches the client (a review: it was retried every millisecond)", async () => {
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(13), retry: { max_retries: 2, max_wait_ms: 5_000 } });
    const large: Reply = { kind: "json", status: 429, headers: { "retry-after": "20" }, body: { error: { message: "Rate limit reached for gpt-4o-mini in organization org-x on tokens per min (TPM): Limit 30000, Used 25000, Requested 16000. Please try again in 20s.", type: "tokens", code: "rate_limit_exceeded" } } };
    upstream.rule((req) => (req.path.endsWith("/chat/completions") ? large : undefined));
    upstream.requests.length = 0;
    const res = await ask(gw, { messages: [{ role: "user", content: `MARKED ${"word ".repeat(16_000)}` }] });
    expect(res.status).toBe(502);
    expect(Number(res.headers.get("retry-after"))).toBe(20);
    await res.arrayBuffer();
    expect(tally(chats(upstream))).toEqual({ POOL_KEY_A: 1, POOL_KEY_B: 1 });
    upstream.rule(() => undefined);
  });

  test("a 400 that quotes the request's own text (a tenant's 'Your credit balance is too low') is the request's: no key cools, the client reads it", async () => {
    const gw = await gateway({ anthropicKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(9) });
    upstream.rule((req) => (req.path === "/v1/messages" ? { kind: "json", status: 400, body: { type: "error", error: { type: "invalid_request_error", message: "metadata.user_id: 'Your credit balance is too low. This organization has been disabled.' is not a valid id" } } } : undefined));
    for (let i = 0; i < 4; i++) {
      const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: [{ role: "user", content: "hello" }] }, { "anthropic-version": "2023-06-01" });
      expect(res.status).toBe(400);
      expect(((await res.json()) as any).error.message).toContain("is not a valid id");
    }
    expect(((await (await fetch(`${gw.url}/ready`)).json()) as any).vendor_keys).toBeUndefined();
    upstream.rule(() => undefined);
  });

  test("Anthropic's 400 'This organization has been disabled.' sets the key aside as a 401 would; clients are answered by the other key", async () => {
    const gw = await gateway({ anthropicKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(9), retry: { max_retries: 1, max_wait_ms: 200 } });
    upstream.rule((req) => (req.path === "/v1/messages" && keyOf(req) === "POOL_KEY_A" ? { kind: "json", status: 400, body: { type: "error", error: { type: "invalid_request_error", message: "This organization has been disabled." } } } : undefined));
    for (let i = 0; i < 8; i++) {
      const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: [{ role: "user", content: "hello" }], metadata: { user_id: `user_${i}` } }, { "anthropic-version": "2023-06-01" });
      expect([i, res.status]).toEqual([i, 200]);
      await res.arrayBuffer();
    }
    const ready = (await (await fetch(`${gw.url}/ready`)).json()) as any;
    expect(ready.vendor_keys[0].keys).toEqual([expect.objectContaining({ env: "POOL_KEY_A", state: "disabled" })]);
    upstream.rule(() => undefined);
  });

  test("a request large for a key's used minute (half of it or more, less than all) moves to another key at once, and the key is not cooled for it (a key-pool probe)", async () => {
    const limited: Reply[] = [
      { kind: "json", status: 429, headers: { "retry-after": "20" }, body: { error: { message: "Rate limit reached for gpt-4o-mini in organization org-x on tokens per min (TPM): Limit 30000, Used 25000, Requested 16000. Please try again in 20s.", type: "tokens", code: "rate_limit_exceeded" } } },
      { kind: "json", status: 429, headers: { "retry-after": "20" }, body: { type: "error", error: { type: "rate_limit_error", message: "This request would exceed the rate limit for your organization of 30,000 input tokens per minute. Please reduce the prompt length or the maximum tokens requested, or try again later." } } },
    ];
    for (const refusal of limited) {
      const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(13), retry: { max_retries: 2, max_wait_ms: 10_000 } });
      upstream.rule((req) => (req.path.endsWith("/chat/completions") && keyOf(req) === "POOL_KEY_A" && JSON.stringify(req.body).includes("MARKED") ? refusal : undefined));
      // About 16,000 tokens of prompt: over half a 30,000 minute.
      const large = { messages: [{ role: "user", content: `MARKED ${"word ".repeat(16_000)}` }] };
      for (let i = 0; i < 6; i++) {
        upstream.requests.length = 0;
        const started = performance.now();
        const res = await ask(gw, large, { "x-session-id": `s${i}` });
        expect([i, res.status]).toEqual([i, 200]);
        await res.arrayBuffer();
        // Moved at once, not after the vendor's 20 s or a backoff on the same key.
        expect(performance.now() - started).toBeLessThan(5_000);
        expect(chats(upstream).filter((r) => keyOf(r) === "POOL_KEY_A").length).toBeLessThanOrEqual(1);
      }
      // Small requests still go to A: it was not cooled.
      expect(((await (await fetch(`${gw.url}/ready`)).json()) as any).vendor_keys).toBeUndefined();
      upstream.requests.length = 0;
      expect(await eightSessions(gw)).toEqual(Array(8).fill(200));
      expect(chats(upstream).some((r) => keyOf(r) === "POOL_KEY_A")).toBe(true);
      upstream.rule(() => undefined);
    }
  });

  test("a key whose upstream fails (a 500, a hang past the first-byte limit, a stream broken before it started) moves its requests to another key once, its sessions included; the key is not cooled; a 502 is still free (a key-pool probe)", async () => {
    const failures: Reply[] = [
      { kind: "json", status: 500, body: { error: { message: "The server had an error while processing your request.", type: "server_error" } } },
      { kind: "hang" },
      { kind: "sse", chunks: ['data: {"error":{"message":"internal","type":"server_error"}}\n\n'] },
    ];
    for (const failure of failures) {
      const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }, { env: "POOL_KEY_C" }], keyRandom: seeded(13), firstByteMs: 300, retry: { max_retries: 0 } });
      upstream.rule((req) => (req.path.endsWith("/chat/completions") && keyOf(req) === "POOL_KEY_A" ? failure : undefined));
      const stream = failure.kind === "sse";
      const statuses: number[] = [];
      for (let turn = 0; turn < 2; turn++) {
        for (let i = 0; i < 8; i++) {
          const res = await ask(gw, { stream }, { "x-session-id": `s${i}` });
          await res.arrayBuffer();
          statuses.push(res.status);
        }
      }
      expect([failure.kind, statuses]).toEqual([failure.kind, Array(16).fill(200)]);
      expect(chats(upstream).some((r) => keyOf(r) === "POOL_KEY_A")).toBe(true);
      expect(((await (await fetch(`${gw.url}/ready`)).json()) as any).vendor_keys).toBeUndefined();
      upstream.rule(() => undefined);
    }
    // Every key failing: one move, then the model's own rules (a 502 that costs nothing), not a walk through the pool.
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }, { env: "POOL_KEY_C" }], keyRandom: seeded(13), retry: { max_retries: 0 } });
    upstream.rule((req) => (req.path.endsWith("/chat/completions") ? failures[0] : undefined));
    const before = await gw.balanceMicro();
    upstream.requests.length = 0;
    const res = await ask(gw);
    expect(res.status).toBe(502);
    await res.arrayBuffer();
    expect(chats(upstream)).toHaveLength(2);
    await gw.app.services.settled();
    expect(before).toBeGreaterThan(0);
    expect(await gw.balanceMicro()).toBe(before);
    upstream.rule(() => undefined);
  });

  test("an answer the vendor made but that cannot be used (a 200 whose JSON is broken) is not asked of another key: it would be bought twice (a review)", async () => {
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(13), retry: { max_retries: 0 } });
    upstream.rule((req) => (req.path.endsWith("/chat/completions") ? { kind: "text", headers: { "content-type": "application/json" }, body: '{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"cut he' } : undefined));
    upstream.requests.length = 0;
    const res = await ask(gw);
    expect(res.status).toBe(502);
    await res.arrayBuffer();
    expect(chats(upstream)).toHaveLength(1);
    upstream.rule(() => undefined);
  });

  test("a 403 saying the key's organisation is disabled sets the key aside as a 401 would (a reviewer's finding)", async () => {
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(13), retry: { max_retries: 1, max_wait_ms: 200 } });
    const dead: Reply = { kind: "json", status: 403, body: { error: { message: "Your organization has been disabled.", type: "invalid_request_error", code: "organization_deactivated" } } };
    upstream.rule((req) => (keyOf(req) === "POOL_KEY_A" ? dead : undefined));
    expect(await eightSessions(gw)).toEqual(Array(8).fill(200));
    const ready = (await (await fetch(`${gw.url}/ready`)).json()) as any;
    expect(ready.vendor_keys[0].keys).toEqual([expect.objectContaining({ env: "POOL_KEY_A", state: "disabled" })]);
    // Every key of the pool disabled: the client is told it is the operator's credentials.
    upstream.rule(() => dead);
    const res = await ask(gw);
    expect(res.status).toBe(502);
    expect(res.headers.get("x-should-retry")).toBe("false");
    expect(((await res.json()) as { error: { message: string } }).error.message).toStartWith("The upstream provider refused the gateway's credentials (status 403: the vendor account is disabled)");
    upstream.rule(() => undefined);
  });

  test("a 403 outside the vendor's error shape (a gateway in front of it: {statusCode, message}) is read by its own sentence too: said at the start, the key is set aside; quoted, it is not", async () => {
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(13), retry: { max_retries: 1, max_wait_ms: 200 } });
    const quoted: Reply = { kind: "json", status: 403, body: { statusCode: 403, message: 'Request blocked by policy: "my account is disabled"' } };
    upstream.rule((req) => (keyOf(req) === "POOL_KEY_A" ? quoted : undefined));
    await eightSessions(gw);
    expect(((await (await fetch(`${gw.url}/ready`)).json()) as any).vendor_keys ?? []).toEqual([]);
    const dead: Reply = { kind: "json", status: 403, body: { statusCode: 403, message: "Your organization has been disabled." } };
    upstream.rule((req) => (keyOf(req) === "POOL_KEY_A" ? dead : undefined));
    expect(await eightSessions(gw)).toEqual(Array(8).fill(200));
    expect(((await (await fetch(`${gw.url}/ready`)).json()) as any).vendor_keys[0].keys).toEqual([expect.objectContaining({ env: "POOL_KEY_A", state: "disabled" })]);
    upstream.rule(() => undefined);
  });

  test("a revoked key (401) stops receiving traffic, is probed with backoff, and comes back by itself once accepted", async () => {
    let clock = 1_800_000_000_000;
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(11), now: () => clock });
    let accepted = false;
    upstream.rule((req) => (keyOf(req) === "POOL_KEY_A" && !accepted ? revoked(SECRETS.POOL_KEY_A!) : undefined));
    const statuses: number[] = [];
    while (!chats(upstream).some((r) => keyOf(r) === "POOL_KEY_A")) statuses.push(...(await many(5, () => ask(gw), 5)));
    expect(statuses.every((s) => s === 200)).toBe(true);
    const revokedAt = clock;
    upstream.requests.length = 0;
    expect(await many(60, () => ask(gw))).toEqual(Array(60).fill(200));
    expect(tally(chats(upstream))).toEqual({ POOL_KEY_B: 60 });
    const ready = await fetch(`${gw.url}/ready`);
    expect(ready.status).toBe(200);
    expect(((await ready.json()) as any).vendor_keys).toEqual([{ id: "fake-openai", usable: 1, keys: [{ env: "POOL_KEY_A", state: "disabled", since: new Date(revokedAt).toISOString() }] }]);

    const probes = () => upstream.requests.filter((r) => r.method === "GET" && r.path === "/v1/models");
    // No probe before its time (1 s after the refusal), one after it: refused, so the next waits 2 s.
    await Bun.sleep(100);
    expect(probes()).toHaveLength(0);
    clock = revokedAt + 1_000;
    await until("the first probe", 20_000, () => probes().length === 1);
    expect(keyOf(probes()[0]!)).toBe("POOL_KEY_A");
    clock = revokedAt + 2_999;
    await Bun.sleep(100);
    expect(probes()).toHaveLength(1);
    // The vendor takes the key again: the next probe passes and traffic returns without anyone acting.
    accepted = true;
    clock = revokedAt + 3_000;
    await until("the second probe", 20_000, () => probes().length === 2);
    await until("/ready without vendor_keys", 20_000, async () => ((await (await fetch(`${gw.url}/ready`)).json()) as any).vendor_keys === undefined);
    upstream.requests.length = 0;
    expect(await many(60, () => ask(gw))).toEqual(Array(60).fill(200));
    expect(tally(chats(upstream)).POOL_KEY_A).toBeGreaterThan(0);
    const metrics = await (await fetch(`${gw.url}/metrics`)).text();
    expect(metrics).toContain('switchyard_vendor_key_disabled_seconds_total{provider="fake-openai",key="POOL_KEY_A"} 3');
  });

  test("an operator lists the pooled keys and asks a refused one to be probed now: accepted, it takes traffic at once; refused, it stays out", async () => {
    const clock = 1_800_000_000_000;
    const admin = { authorization: "Bearer admin-token-for-pools" };
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(11), now: () => clock, adminToken: "admin-token-for-pools", keyProbeEveryMs: 60_000 });
    let accepted = false;
    upstream.rule((req) => (keyOf(req) === "POOL_KEY_A" && !accepted ? revoked(SECRETS.POOL_KEY_A!) : undefined));
    while (!chats(upstream).some((r) => keyOf(r) === "POOL_KEY_A")) await (await ask(gw)).arrayBuffer();
    const list = async () => (await (await fetch(`${gw.url}/v1/admin/vendor-keys`, { headers: admin })).json()) as any;
    const listed = await list();
    expect(listed.data).toEqual([
      { provider: "fake-openai", key: "POOL_KEY_A", state: "disabled", since: new Date(clock).toISOString(), next_probe: new Date(clock + 1_000).toISOString() },
      { provider: "fake-openai", key: "POOL_KEY_B", state: "usable" },
      // A provider with one key (api_key_env) is a pool of one.
      { provider: "fake-anthropic", key: "TEST_ANTHROPIC_KEY", state: "usable" },
    ]);
    // Never a secret in what the admin API says.
    expect(JSON.stringify(listed)).not.toContain("SECRET");
    const probeNow = (provider: string, key: string) => fetch(`${gw.url}/v1/admin/vendor-keys/${provider}/${key}/probe`, { method: "POST", headers: admin });

    // Still refused: it stays out, its next probe timed as after a failed one.
    const refused = await probeNow("fake-openai", "POOL_KEY_A");
    expect(refused.status).toBe(200);
    expect(await refused.json()).toMatchObject({ provider: "fake-openai", key: "POOL_KEY_A", accepted: false, state: "disabled" });
    upstream.requests.length = 0;
    expect(await many(20, () => ask(gw))).toEqual(Array(20).fill(200));
    expect(tally(chats(upstream))).toEqual({ POOL_KEY_B: 20 });

    // The vendor took it back: probed now (no clock moved, no scheduled probe due), it is usable at once.
    accepted = true;
    const probes = upstream.requests.filter((r) => r.method === "GET").length;
    const back = await probeNow("fake-openai", "POOL_KEY_A");
    expect(await back.json()).toEqual({ provider: "fake-openai", key: "POOL_KEY_A", state: "usable", accepted: true });
    expect(upstream.requests.filter((r) => r.method === "GET" && r.path === "/v1/models")).toHaveLength(probes + 1);
    expect((await list()).data.map((k: { state: string }) => k.state)).toEqual(["usable", "usable", "usable"]);
    upstream.requests.length = 0;
    expect(await many(40, () => ask(gw))).toEqual(Array(40).fill(200));
    expect(tally(chats(upstream)).POOL_KEY_A).toBeGreaterThan(0);

    // Two at once: the second finds the first under way (a slow model list) and says so, rather than race it.
    upstream.rule((req) => (req.method === "GET" ? { kind: "sse", headers: { "content-type": "application/json" }, chunks: ['{"object":"list",', '"data":[]}'], delayMs: 300 } : undefined));
    const [first, second] = await Promise.all([probeNow("fake-openai", "POOL_KEY_A"), probeNow("fake-openai", "POOL_KEY_A")]);
    expect([first.status, second.status].sort()).toEqual([200, 409]);
    // Once it is done, the key can be probed again.
    expect((await probeNow("fake-openai", "POOL_KEY_A")).status).toBe(200);

    // Unknown provider or key: 404; without the admin token: 401.
    expect((await probeNow("fake-openai", "POOL_KEY_Z")).status).toBe(404);
    expect((await probeNow("nope", "POOL_KEY_A")).status).toBe(404);
    expect((await fetch(`${gw.url}/v1/admin/vendor-keys`)).status).toBe(401);

    // A provider's only key, refused: set aside, with no next probe to show (none is scheduled: its
    // requests still try it; a console probe saw a "next check" long past).
    upstream.rule((req) => (req.headers["x-api-key"] !== undefined ? { kind: "json", status: 401, body: { type: "error", error: { type: "authentication_error", message: "invalid x-api-key" } } } : undefined));
    await (await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: [{ role: "user", content: "hi" }] })).arrayBuffer();
    expect((await list()).data.find((k: { key: string }) => k.key === "TEST_ANTHROPIC_KEY")).toEqual({ provider: "fake-anthropic", key: "TEST_ANTHROPIC_KEY", state: "disabled", since: new Date(clock).toISOString() });
    const alone = await probeNow("fake-anthropic", "TEST_ANTHROPIC_KEY");
    expect(await alone.json()).toEqual({ provider: "fake-anthropic", key: "TEST_ANTHROPIC_KEY", state: "disabled", since: new Date(clock).toISOString(), accepted: false });
    upstream.rule(() => undefined);
  });

  test("a key restricted from listing models (OpenAI's 401 'Missing scopes: api.model.read' to the probe) comes back once chat takes it; an operator can enable any key without a probe (a key-pool probe: such a key stayed out for good)", async () => {
    let clock = 1_800_000_000_000;
    const admin = { authorization: "Bearer admin-token-for-pools" };
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(3), now: () => clock, adminToken: "admin-token-for-pools" });
    let refusing = true;
    const restricted: Reply = { kind: "json", status: 401, body: { error: { message: "You have insufficient permissions for this operation. Missing scopes: api.model.read. Check that you have the correct role in your organization (Reader, Writer, Owner) and project (Member, Owner), and if you're using a restricted API key, that it has the necessary scopes.", type: "invalid_request_error", param: null, code: null } } };
    upstream.rule((req) => {
      if (req.method === "GET") return keyOf(req) === "POOL_KEY_A" ? restricted : undefined;
      return keyOf(req) === "POOL_KEY_A" && refusing ? revoked(SECRETS.POOL_KEY_A!) : undefined;
    });
    while (!chats(upstream).some((r) => keyOf(r) === "POOL_KEY_A")) await (await ask(gw)).arrayBuffer();
    refusing = false;
    expect(((await (await fetch(`${gw.url}/ready`)).json()) as any).vendor_keys[0].keys[0].state).toBe("disabled");
    clock += 1_000;
    await until("/ready without vendor_keys", 20_000, async () => ((await (await fetch(`${gw.url}/ready`)).json()) as any).vendor_keys === undefined);

    // Refused again, and its probe fails outright (another 401): the operator says it is fine.
    refusing = true;
    upstream.rule((req) => (keyOf(req) === "POOL_KEY_A" ? (req.method === "GET" ? revoked(SECRETS.POOL_KEY_A!) : refusing ? revoked(SECRETS.POOL_KEY_A!) : undefined) : undefined));
    while (((await (await fetch(`${gw.url}/ready`)).json()) as any).vendor_keys === undefined) await (await ask(gw)).arrayBuffer();
    refusing = false;
    const enable = (provider: string, key: string, headers: Record<string, string> = admin) => fetch(`${gw.url}/v1/admin/vendor-keys/${provider}/${key}/enable`, { method: "POST", headers });
    const enabled = await enable("fake-openai", "POOL_KEY_A");
    expect(enabled.status).toBe(200);
    expect(await enabled.json()).toEqual({ provider: "fake-openai", key: "POOL_KEY_A", state: "usable" });
    expect(((await (await fetch(`${gw.url}/ready`)).json()) as any).vendor_keys).toBeUndefined();
    upstream.requests.length = 0;
    expect(await many(40, () => ask(gw))).toEqual(Array(40).fill(200));
    expect(tally(chats(upstream)).POOL_KEY_A).toBeGreaterThan(0);
    expect((await enable("fake-openai", "POOL_KEY_Z")).status).toBe(404);
    expect((await enable("nope", "POOL_KEY_A")).status).toBe(404);
    expect((await enable("fake-openai", "POOL_KEY_A", {})).status).toBe(401);
  });

  test("a compatible server without a model list (404 to the probe) has not refused the key: it comes back", async () => {
    let clock = 1_800_000_000_000;
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(3), now: () => clock });
    let refusing = true;
    upstream.rule((req) => {
      if (req.method === "GET") return { kind: "json", status: 404, body: { detail: "Not Found" } };
      return keyOf(req) === "POOL_KEY_A" && refusing ? revoked(SECRETS.POOL_KEY_A!) : undefined;
    });
    while (!chats(upstream).some((r) => keyOf(r) === "POOL_KEY_A")) await (await ask(gw)).arrayBuffer();
    refusing = false;
    expect(((await (await fetch(`${gw.url}/ready`)).json()) as any).vendor_keys[0].keys[0].state).toBe("disabled");
    clock += 1_000;
    await until("/ready without vendor_keys", 20_000, async () => ((await (await fetch(`${gw.url}/ready`)).json()) as any).vendor_keys === undefined);
  });

  test("every key cooling or disabled: /ready names them and stays 200 (every replica shares this state); the request still goes to the key back soonest", async () => {
    let clock = 1_800_000_000_000;
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(5), now: () => clock, retry: { max_retries: 0 } });
    upstream.rule((req) => (keyOf(req) === "POOL_KEY_A" ? revoked(SECRETS.POOL_KEY_A!) : undefined));
    while (!chats(upstream).some((r) => keyOf(r) === "POOL_KEY_A")) await (await ask(gw)).arrayBuffer();
    // A is disabled; now B is rate-limited too: nothing is left to move to, and the client hears of the rate limit.
    upstream.rule((req) => (keyOf(req) === "POOL_KEY_A" ? revoked(SECRETS.POOL_KEY_A!) : req.method === "POST" ? rateLimited("5") : undefined));
    const limited = await ask(gw);
    expect(limited.status).toBe(502);
    expect(((await limited.json()) as any).error.message).toBe("The upstream provider is rate limiting the gateway. Retrying is appropriate.");
    const ready = await fetch(`${gw.url}/ready`);
    expect(ready.status).toBe(200);
    const body = (await ready.json()) as any;
    expect(body.status).toBe("ready");
    // B cools for the model the vendor limited only: it still counts as usable (for the others).
    expect(body.vendor_keys[0].usable).toBe(1);
    expect(body.vendor_keys[0].keys.map((k: { env: string; state: string; model?: string }) => `${k.env}:${k.state}${k.model ? `:${k.model}` : ""}`).sort()).toEqual(["POOL_KEY_A:disabled", "POOL_KEY_B:cooling:gpt-4o-mini"]);
    upstream.requests.length = 0;
    await ask(gw);
    expect(tally(chats(upstream))).toEqual({ POOL_KEY_B: 1 });
  });
});

describe("every key refused (real clock)", () => {
  /**
   * A asked first (its weight), then B: A rate-limited for 1 s once, then answering; B refusing
   * every time with `bRefusal`, its models-list probe too: a B refused with a 401 is probed 1 s
   * after, a few milliseconds after A is back, and a probe that passed made it usable again just
   * before the request woke on a loaded CI run (B asked twice).
   */
  async function aThenB(bRefusal: Reply, o: Partial<GatewayOptions> = {}): Promise<Gateway> {
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A", weight: 1_000 }, { env: "POOL_KEY_B", weight: 0.001 }], keyRandom: () => 0.5, ...o });
    let aRefused = 0;
    upstream.rule((req) => {
      if (req.method !== "POST") return keyOf(req) === "POOL_KEY_B" ? bRefusal : undefined;
      if (keyOf(req) === "POOL_KEY_A") return aRefused++ === 0 ? rateLimited("1") : undefined;
      return bRefusal;
    });
    return gw;
  }

  test("the wait is the first key back's, not the Retry-After of the key asked last: 30 s from the last, 1 s from the first, answered after 1 s", async () => {
    const gw = await aThenB(rateLimited("30"));
    const started = performance.now();
    const res = await ask(gw);
    expect(res.status).toBe(200);
    expect(performance.now() - started).toBeGreaterThanOrEqual(900);
    expect(chats(upstream).map(keyOf)).toEqual(["POOL_KEY_A", "POOL_KEY_B", "POOL_KEY_A"]);
  });

  test("a refused (401) key asked last does not end the request as hopeless while another is only rate limited", async () => {
    const gw = await aThenB(revoked(SECRETS.POOL_KEY_B!));
    const res = await ask(gw);
    expect(res.status).toBe(200);
    expect(res.headers.get("x-should-retry")).toBeNull();
    expect(chats(upstream).map(keyOf)).toEqual(["POOL_KEY_A", "POOL_KEY_B", "POOL_KEY_A"]);
  });

  test("a vendor's absurd Retry-After cools the key an hour at most (the admin list says until when)", async () => {
    const clock = 1_800_000_000_000;
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(5), now: () => clock, adminToken: "admin-token-for-pools" });
    let once = true;
    upstream.rule((req) => {
      if (keyOf(req) !== "POOL_KEY_A" || !once) return undefined;
      once = false;
      return rateLimited("99999999999");
    });
    while (once) await (await ask(gw)).arrayBuffer();
    const listed = (await (await fetch(`${gw.url}/v1/admin/vendor-keys`, { headers: { authorization: "Bearer admin-token-for-pools" } })).json()) as any;
    expect(listed.data[0]).toEqual({ provider: "fake-openai", key: "POOL_KEY_A", state: "usable", models_cooling: [{ model: "gpt-4o-mini", until: new Date(clock + 3_600_000).toISOString() }] });
  });

  test("every key only cooling past the retry budget: a 502 whose retry-after is the first key's return", async () => {
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A", weight: 1_000 }, { env: "POOL_KEY_B", weight: 0.001 }], keyRandom: () => 0.5, retry: { max_wait_ms: 1_000 } });
    upstream.rule((req) => (req.method !== "POST" ? undefined : keyOf(req) === "POOL_KEY_A" ? rateLimited("5") : rateLimited("40")));
    const res = await ask(gw);
    expect(res.status).toBe(502);
    expect(res.headers.get("retry-after")).toBe("5");
  });

  test("one key out of credit asked last while the others only cool: the client is told when to retry, not that retrying will not help (a raw-TCP probe)", async () => {
    const quota: Reply = { kind: "json", status: 429, body: { error: { message: "You exceeded your current quota, please check your plan and billing details.", type: "insufficient_quota", param: null, code: "insufficient_quota" } } };
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A", weight: 0.001 }, { env: "POOL_KEY_B", weight: 1_000 }], keyRandom: () => 0.5, retry: { max_retries: 0 } });
    upstream.rule((req) => (req.method !== "POST" ? undefined : keyOf(req) === "POOL_KEY_A" ? quota : rateLimited("30")));
    upstream.requests.length = 0;
    const res = await ask(gw);
    expect(res.status).toBe(502);
    // The rate-limited key was asked first, the one out of credit last.
    expect(chats(upstream).map(keyOf)).toEqual(["POOL_KEY_B", "POOL_KEY_A"]);
    expect(res.headers.get("x-should-retry")).toBeNull();
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    const said = ((await res.json()) as any).error.message as string;
    expect(said).not.toContain("Retrying will not help");
    expect(said).toContain("Every vendor key of the provider");
    // Every key out of credit: retrying will not help, as with one key.
    const broke = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: () => 0.5, retry: { max_retries: 2, max_wait_ms: 2_000 } });
    upstream.rule((req) => (req.method !== "POST" ? undefined : quota));
    upstream.requests.length = 0;
    const none = await ask(broke);
    expect(none.status).toBe(502);
    expect(none.headers.get("x-should-retry")).toBe("false");
    expect(none.headers.get("retry-after")).toBeNull();
    expect(((await none.json()) as any).error.message).toContain("out of credit");
    expect(tally(chats(upstream))).toEqual({ POOL_KEY_A: 1, POOL_KEY_B: 1 });
    upstream.rule(() => undefined);
  });
});

describe("session affinity", () => {
  test("one session's 50 requests carry one key while it is usable, and move together to one other key when it cools", async () => {
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }, { env: "POOL_KEY_C" }] });
    const session = { prompt_cache_key: "conversation-42" };
    expect(await many(50, () => ask(gw, session), 10)).toEqual(Array(50).fill(200));
    const first = tally(chats(upstream));
    expect(Object.values(first)).toEqual([50]);
    const home = Object.keys(first)[0]!;
    // Other sessions are not all on that key: affinity is per session, not a stuck pool.
    upstream.requests.length = 0;
    for (let i = 0; i < 30; i++) await (await ask(gw, { user: `someone-${i}` })).arrayBuffer();
    expect(Object.keys(tally(chats(upstream))).length).toBeGreaterThan(1);

    upstream.requests.length = 0;
    upstream.rule((req) => (keyOf(req) === home ? rateLimited("30") : undefined));
    // One conversation's turns follow each other: one at a time.
    expect(await many(50, () => ask(gw, session), 1)).toEqual(Array(50).fill(200));
    const after = tally(chats(upstream).filter((r) => keyOf(r) !== home));
    expect(Object.values(after)).toEqual([50]);
    // The cooling key was asked once (the first request, which moved on at once), never again.
    expect(chats(upstream).filter((r) => keyOf(r) === home)).toHaveLength(1);
    const metrics = await (await fetch(`${gw.url}/metrics`)).text();
    expect(metrics).toContain('switchyard_session_key_moves_total{provider="fake-openai"} 1');
  });

  test("a vendor's 429 for one model cools the key for that model only: a session on another model stays on the key, and a later success ends the model's cooldown (vendors limit per model; a hostile-tenant probe)", async () => {
    let clock = 1_800_000_000_000;
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }, { env: "POOL_KEY_C" }], keyRandom: seeded(3), now: () => clock, adminToken: "admin-token-for-pools" });
    const free = () => post(gw, "/v1/chat/completions", { model: FREE_MODEL, messages: [{ role: "user", content: "hi" }], prompt_cache_key: "free-session" });
    expect(await many(5, free, 1)).toEqual(Array(5).fill(200));
    const home = Object.keys(tally(chats(upstream)));
    expect(home).toHaveLength(1);
    // Another tenant drives gpt-4o-mini into the vendor's limit on that key: its requests move.
    upstream.rule((req) => ((req.body as { model?: string }).model === "gpt-4o-mini" && keyOf(req) === home[0] ? rateLimited("30") : undefined));
    upstream.requests.length = 0;
    while (!chats(upstream).some((r) => keyOf(r) === home[0])) expect((await ask(gw)).status).toBe(200);
    // The other model's session is not moved off its key (nor off its vendor prompt cache).
    upstream.requests.length = 0;
    expect(await many(10, free, 1)).toEqual(Array(10).fill(200));
    expect(Object.keys(tally(chats(upstream)))).toEqual(home);
    const metrics = await (await fetch(`${gw.url}/metrics`)).text();
    expect(metrics).toContain('switchyard_session_key_moves_total{provider="fake-openai"} 0');
    // gpt-4o-mini's requests stay off the key until the vendor's wait is over.
    upstream.requests.length = 0;
    expect(await many(20, () => ask(gw))).toEqual(Array(20).fill(200));
    expect(chats(upstream).some((r) => keyOf(r) === home[0])).toBe(false);
    const admin = { authorization: "Bearer admin-token-for-pools" };
    const listed = (await (await fetch(`${gw.url}/v1/admin/vendor-keys`, { headers: admin })).json()) as any;
    expect(listed.data.find((k: { key: string }) => k.key === home[0])).toEqual({ provider: "fake-openai", key: home[0], state: "usable", models_cooling: [{ model: "gpt-4o-mini", until: new Date(clock + 30_000).toISOString() }] });
    // Past it, the model is sent there again, and a success there ends its cooldown.
    upstream.rule(() => undefined);
    clock += 30_000;
    upstream.requests.length = 0;
    while (!chats(upstream).some((r) => keyOf(r) === home[0])) expect((await ask(gw)).status).toBe(200);
    await until("the model's cooldown on the key ended", 5_000, async () => {
      const now = (await (await fetch(`${gw.url}/v1/admin/vendor-keys`, { headers: admin })).json()) as any;
      return now.data.find((k: { key: string }) => k.key === home[0]).models_cooling === undefined;
    });
  });

  test("Claude Code's metadata.user_id keeps an Anthropic session on one key; x-session-id does for a client that names no session", async () => {
    const gw = await gateway({ anthropicKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }, { env: "POOL_KEY_C" }] });
    const claude = (user: string, headers: Record<string, string> = {}) =>
      post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 16, metadata: { user_id: user }, messages: [{ role: "user", content: "hi" }] }, { "anthropic-version": "2023-06-01", ...headers });
    expect(await many(30, () => claude("user_abc_account__session_1"), 10)).toEqual(Array(30).fill(200));
    expect(Object.values(tally(chats(upstream)))).toEqual([30]);
    upstream.requests.length = 0;
    expect(await many(30, () => ask(gw, {}, { "x-session-id": "cli-run-7" }), 10)).toEqual(Array(30).fill(200));
    expect(Object.values(tally(chats(upstream)))).toEqual([30]);
  });
});

describe("a key rotated under its variable", () => {
  test("a new value of a refused key starts healthy on the next start, not refused for the old one (shared state)", async () => {
    const shared = createMemoryKeyState({ now: Date.now });
    const oldSecret = "sk-pool-A-OLD-revoked-aaaaaaaaaaaaaaaa";
    const newSecret = "sk-pool-A-NEW-rotated-aaaaaaaaaaaaaaaa";
    upstream.reset();
    upstream.rule((req) => ((req.headers.authorization ?? "") === `Bearer ${oldSecret}` ? revoked(oldSecret) : undefined));
    const before = await startGateway({ upstreamUrl: upstream.url, vendorEnv: { ...SECRETS, POOL_KEY_A: oldSecret }, openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(11), keyState: shared, keyProbeEveryMs: 60_000 });
    started.push(before);
    while (!upstream.requests.some((r) => r.headers.authorization === `Bearer ${oldSecret}`)) await (await ask(before)).arrayBuffer();
    expect(((await (await fetch(`${before.url}/ready`)).json()) as any).vendor_keys[0].keys).toEqual([expect.objectContaining({ env: "POOL_KEY_A", state: "disabled" })]);
    // The operator puts a new value in POOL_KEY_A and restarts (the state lives on: Redis, another replica).
    const after = await startGateway({ upstreamUrl: upstream.url, vendorEnv: { ...SECRETS, POOL_KEY_A: newSecret }, openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(11), keyState: shared, keyProbeEveryMs: 60_000 });
    started.push(after);
    expect(((await (await fetch(`${after.url}/ready`)).json()) as any).vendor_keys).toBeUndefined();
    upstream.requests.length = 0;
    expect(await many(40, () => ask(after))).toEqual(Array(40).fill(200));
    expect(upstream.requests.filter((r) => r.headers.authorization === `Bearer ${newSecret}`).length).toBeGreaterThan(0);
    // The old value, where it still runs, is still refused there.
    expect(((await (await fetch(`${before.url}/ready`)).json()) as any).vendor_keys[0].keys[0].state).toBe("disabled");
  });
});

describe("token counts", () => {
  test("count_tokens goes through the pool too: a revoked key is set aside and the vendor's count comes from another", async () => {
    const gw = await gateway({ anthropicKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(9) });
    upstream.rule((req) => (keyOf(req) === "POOL_KEY_A" ? { kind: "json", status: 401, body: { type: "error", error: { type: "authentication_error", message: "invalid x-api-key" } } } : undefined));
    const count = () => post(gw, "/v1/messages/count_tokens", { model: ANTHROPIC_MODEL, messages: [{ role: "user", content: "count me" }] }, { "anthropic-version": "2023-06-01" });
    while (!upstream.requests.some((r) => keyOf(r) === "POOL_KEY_A")) await (await count()).arrayBuffer();
    upstream.requests.length = 0;
    for (let i = 0; i < 20; i++) expect((await count()).status).toBe(200);
    expect(tally(upstream.requests.filter((r) => r.path === "/v1/messages/count_tokens"))).toEqual({ POOL_KEY_B: 20 });
  });

  test("a count refused for the key's account (Anthropic's 400 out of credit) is answered with an estimate, never the vendor's billing words, and the key cools for answers too", async () => {
    const gw = await gateway({ anthropicKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(9) });
    upstream.rule((req) => (keyOf(req) === "POOL_KEY_A" ? { kind: "json", status: 400, body: { type: "error", error: { type: "invalid_request_error", message: "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits." } } } : undefined));
    const count = () => post(gw, "/v1/messages/count_tokens", { model: ANTHROPIC_MODEL, messages: [{ role: "user", content: "count me" }] }, { "anthropic-version": "2023-06-01" });
    while (!upstream.requests.some((r) => keyOf(r) === "POOL_KEY_A")) {
      const res = await count();
      expect(res.status).toBe(200);
      expect(typeof ((await res.json()) as any).input_tokens).toBe("number");
    }
    const ready = (await (await fetch(`${gw.url}/ready`)).json()) as any;
    expect(ready.vendor_keys[0].keys).toEqual([expect.objectContaining({ env: "POOL_KEY_A", state: "cooling" })]);
    upstream.rule(() => undefined);
  });

  test("a rate-limited count (Anthropic limits counting apart from messages) does not cool the key for answers", async () => {
    const gw = await gateway({ anthropicKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], keyRandom: seeded(9) });
    upstream.rule((req) => (req.path === "/v1/messages/count_tokens" ? { kind: "json", status: 429, headers: { "retry-after": "30" }, body: { type: "error", error: { type: "rate_limit_error", message: "Number of request tokens has exceeded your per-minute rate limit" } } } : undefined));
    const count = () => post(gw, "/v1/messages/count_tokens", { model: ANTHROPIC_MODEL, messages: [{ role: "user", content: "count me" }] }, { "anthropic-version": "2023-06-01" });
    for (let i = 0; i < 6; i++) expect((await count()).status).toBe(200); // the gateway's estimate
    expect(new Set(upstream.requests.map(keyOf))).toEqual(new Set(["POOL_KEY_A", "POOL_KEY_B"]));
    expect(((await (await fetch(`${gw.url}/ready`)).json()) as any).vendor_keys).toBeUndefined();
  });
});

describe("session affinity through the Responses API", () => {
  test("a previous_response_id chain stays on the key of its first turn", async () => {
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }, { env: "POOL_KEY_C" }] });
    // Several conversations: without affinity, 8 turns of one would all land on one key 1 time in 2,187.
    for (let c = 0; c < 6; c++) {
      upstream.requests.length = 0;
      let previous: string | undefined;
      for (let turn = 0; turn < 8; turn++) {
        const res = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: `turn ${turn} of ${c}`, ...(previous ? { previous_response_id: previous } : {}) });
        expect(res.status).toBe(200);
        previous = ((await res.json()) as { id: string }).id;
      }
      expect(Object.values(tally(chats(upstream)))).toEqual([8]);
    }
  });
});

describe("no vendor secret anywhere", () => {
  test("logs, metrics, /ready and the clients' errors never hold a pooled key's secret", async () => {
    const lines: string[] = [];
    const log: Logger = (level, message, fields) => lines.push(JSON.stringify({ level, message, ...fields }));
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], log, retry: { max_retries: 0 } });
    upstream.rule((req) => (req.method === "POST" || req.path === "/v1/models" ? revoked(keyOf(req) === "POOL_KEY_A" ? SECRETS.POOL_KEY_A! : SECRETS.POOL_KEY_B!) : undefined));
    const res = await ask(gw);
    expect(res.status).toBe(502);
    const error = await res.text();
    const ready = await (await fetch(`${gw.url}/ready`)).text();
    const metrics = await (await fetch(`${gw.url}/metrics`)).text();
    await gw.app.services.keyPools.probeDue();
    await gw.app.services.settled();
    expect(ready).toContain("POOL_KEY_A");
    expect(metrics).toContain('key="POOL_KEY_B"');
    expect(lines.some((l) => l.includes("vendor key refused"))).toBe(true);
    for (const [name, text] of [["error", error], ["ready", ready], ["metrics", metrics], ["logs", lines.join("\n")]] as const) {
      for (const secret of Object.values(SECRETS)) {
        expect({ name, leaked: text.includes(secret) || text.includes(secret.slice(0, 20)) }).toEqual({ name, leaked: false });
      }
    }
  });
});
