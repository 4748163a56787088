import { RedisClient } from "bun";
import { evalScript } from "./eval-script.ts";
import type { RateLimitStore } from "../../limits/rate-limiter.ts";
import type { BucketDecision } from "../../limits/token-bucket.ts";
import type { Logger } from "../../log/log.ts";
import { answerWithin } from "./answer-within.ts";

export interface RedisRateLimiterOptions {
  /** Prefix of every key this limiter writes (several deployments can share one Redis). */
  prefix?: string;
  /** Longest a decision may take; past it the request is refused (503), not admitted. */
  timeoutMs?: number;
  connectTimeoutMs?: number;
  /** How often an idle limiter asks Redis whether it answers (PING), so `/ready` knows without traffic. */
  probeMs?: number;
  log?: Logger;
}

/**
 * KEYS[1]'s bucket refilled to now, on Redis's clock: `now`, `cap` (ARGV[1], a minute's tokens),
 * `full` and `units` (what it holds, in 1/60,000 of a token), for the scripts below to go on from.
 */
const REFILLED = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cap = tonumber(ARGV[1])
local full = cap * 60000
local state = redis.call('HMGET', KEYS[1], 'u', 't')
local units = full
if state[1] then
  local elapsed = now - tonumber(state[2])
  if elapsed < 0 then elapsed = 0 end
  units = math.min(full, tonumber(state[1]) + elapsed * cap)
end
`;

/**
 * The token bucket of limits/token-bucket.ts as one Lua script, run atomically by Redis on its
 * own clock (TIME), so every gateway process shares one bucket per key and no two of them can
 * both take its last token. Tokens are kept in units of 1/60,000 of a token, so that at N per
 * minute a millisecond refills exactly N units: integer arithmetic only, no float drifting
 * between processes. The key's expiry is set in the same call (when the bucket would be full
 * again, plus a second), so idle keys cost Redis nothing.
 * KEYS[1]: the bucket; ARGV[1]: requests per minute.
 * Returns {allowed, remaining, retryAfterMs, resetMs}.
 */
const TAKE = `${REFILLED}local allowed = 0
if units >= 60000 then
  allowed = 1
  units = units - 60000
end
local reset = math.ceil((full - units) / cap)
redis.call('HSET', KEYS[1], 'u', units, 't', now)
redis.call('PEXPIRE', KEYS[1], reset + 1000)
local retry = 0
if units < 60000 then retry = math.ceil((60000 - units) / cap) end
return {allowed, math.floor(units / 60000), retry, reset}`;

/**
 * TAKE over two buckets at once (a key's and its account's): a token from each when both have one,
 * from neither otherwise, in one atomic call. KEYS[1], KEYS[2]: the buckets; ARGV[1], ARGV[2]:
 * their requests per minute. Returns TAKE's four numbers for each, first then second; `allowed`
 * is each bucket's own answer.
 */
const TAKE_BOTH = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function fill(key, cap)
  local units = cap * 60000
  local state = redis.call('HMGET', key, 'u', 't')
  if state[1] then
    local elapsed = now - tonumber(state[2])
    if elapsed < 0 then elapsed = 0 end
    units = math.min(cap * 60000, tonumber(state[1]) + elapsed * cap)
  end
  return units
end
local function keep(key, cap, units, allowed)
  local reset = math.ceil((cap * 60000 - units) / cap)
  redis.call('HSET', key, 'u', units, 't', now)
  redis.call('PEXPIRE', key, reset + 1000)
  local retry = 0
  if units < 60000 then retry = math.ceil((60000 - units) / cap) end
  return {allowed, math.floor(units / 60000), retry, reset}
end
local capA = tonumber(ARGV[1])
local capB = tonumber(ARGV[2])
local a = fill(KEYS[1], capA)
local b = fill(KEYS[2], capB)
local okA = 0
local okB = 0
if a >= 60000 then okA = 1 end
if b >= 60000 then okB = 1 end
if okA == 1 and okB == 1 then
  a = a - 60000
  b = b - 60000
end
local first = keep(KEYS[1], capA, a, okA)
local second = keep(KEYS[2], capB, b, okB)
return {first[1], first[2], first[3], first[4], second[1], second[2], second[3], second[4]}`;

/**
 * limits/token-budget.ts's spendTokens as one script, on Redis's clock, in the same units (1/60,000
 * of a token). KEYS[1]: the budget; ARGV[1]: tokens a minute; ARGV[2]: the tokens taken (negative:
 * given back); ARGV[3]: 1 to admit (refused, nothing taken, while in debt), 0 to settle. The debt
 * is bounded by a minute's tokens. Returns {allowed, remaining, retryAfterMs, resetMs}.
 */
const SPEND = `${REFILLED}local allowed = 1
if ARGV[3] == '1' and units <= 0 then allowed = 0 end
if allowed == 1 then
  units = math.max(-full, math.min(full, units - tonumber(ARGV[2]) * 60000))
end
local reset = math.ceil((full - units) / cap)
redis.call('HSET', KEYS[1], 'u', units, 't', now)
redis.call('PEXPIRE', KEYS[1], reset + 1000)
local retry = 0
if units <= 0 then retry = math.ceil(-units / cap) + 1 end
local remaining = 0
if units > 0 then remaining = math.floor(units / 60000) end
return {allowed, remaining, retry, reset}`;

/** How long a refused client is told to wait while Redis cannot be reached. */
const UNAVAILABLE_RETRY_MS = 5_000;
/** Reconnection attempts while Redis is down, at most this often. */
const RECONNECT_MS = 500;

/**
 * Rate limits shared by every gateway process, in Redis. One script call per request (about
 * 30 µs on this machine). Fails closed: while Redis cannot be reached or does not answer within
 * `timeoutMs`, every decision is `unavailable` (503), so limits are never silently off.
 *
 * Only refusals are remembered locally: a key refused here is refused again without asking
 * Redis until its retry time has passed. A refusal can only be early by the refill other
 * processes cannot have added, so caching it never admits a request Redis would refuse.
 */
export function createRedisRateLimiter(url: string, o: RedisRateLimiterOptions = {}): RateLimitStore & { close(): void; ready(): Promise<boolean>; health(): { reachable: boolean }; client: RedisClient } {
  const prefix = o.prefix ?? "switchyard:";
  const timeoutMs = o.timeoutMs ?? 250;
  const log = o.log ?? (() => {});
  // No offline queue: a command while disconnected fails at once instead of waiting in memory.
  const connectTimeoutMs = o.connectTimeoutMs ?? 1_000;
  // connect() keeps retrying (with backoff) while Redis is down, and its promise waits for that.
  const client = new RedisClient(url, { connectionTimeout: connectTimeoutMs, autoReconnect: true, maxRetries: 1_000_000, enableOfflineQueue: false });
  const sha = new Bun.CryptoHasher("sha1").update(TAKE).digest("hex");
  const shaBoth = new Bun.CryptoHasher("sha1").update(TAKE_BOTH).digest("hex");
  const shaSpend = new Bun.CryptoHasher("sha1").update(SPEND).digest("hex");
  const refused = new Map<string, { until: number; perMinute: number; resetAt: number }>();
  let connecting: Promise<void> | undefined;
  let lastAttempt = 0;
  let down = false;
  let closed = false;

  const connect = (): Promise<void> => {
    lastAttempt = performance.now();
    connecting ??= client.connect().then(
      () => {
        connecting = undefined;
        if (down) log("info", "rate limits: Redis answers again");
        down = false;
      },
      (err) => {
        connecting = undefined;
        throw err;
      },
    );
    return connecting;
  };
  void connect().catch(() => {});

  const unavailable = (err: unknown): BucketDecision => {
    if (!down) log("error", "rate limits: Redis cannot be reached; requests are refused (503) until it answers", { error: err instanceof Error ? err.message : String(err) });
    down = true;
    if (!client.connected && !connecting && performance.now() - lastAttempt >= RECONNECT_MS) void connect().catch(() => {});
    return { allowed: false, unavailable: true, remaining: 0, retryAfterMs: UNAVAILABLE_RETRY_MS, resetMs: 0 };
  };
  const answered = () => {
    if (down) log("info", "rate limits: Redis answers again");
    down = false;
  };

  const bounded = <T>(promise: Promise<T>): Promise<T> => answerWithin(promise, timeoutMs, () => new Error(`no answer from Redis within ${timeoutMs} ms`));

  // The probe: a Redis that went away while no request asked is noticed within a period, and one
  // that came back is reconnected to without waiting for a request.
  const probe = setInterval(() => {
    if (closed) return;
    if (!client.connected) {
      unavailable(new Error("not connected"));
      return;
    }
    bounded(client.send("PING", [])).then(answered, (err) => unavailable(err));
  }, o.probeMs ?? 1_000);
  probe.unref?.();

  async function run(key: string, perMinute: number): Promise<unknown> {
    return script(sha, TAKE, [key], [String(perMinute)]);
  }

  function script(hash: string, text: string, keys: string[], args: string[]): Promise<unknown> {
    return evalScript(client, { text, sha: hash }, keys, args);
  }

  /** A refusal remembered for `id` (still in force, for the same limit), or undefined. */
  const cachedRefusal = (id: string, perMinute: number, at: number): BucketDecision | undefined => {
    const cached = refused.get(id);
    if (!cached) return undefined;
    if (cached.until > at && cached.perMinute === perMinute) {
      return { allowed: false, remaining: 0, retryAfterMs: Math.ceil(cached.until - at), resetMs: Math.max(0, Math.ceil(cached.resetAt - at)) };
    }
    refused.delete(id);
    return undefined;
  };
  /** Redis's four numbers as a decision; a refusal is remembered until its retry time. */
  const decided = (id: string, perMinute: number, at: number, [allowed, remaining, retryAfterMs, resetMs]: number[]): BucketDecision => {
    if (allowed !== 1) {
      if (refused.size > 100_000) refused.clear();
      refused.set(id, { until: at + retryAfterMs!, perMinute, resetAt: at + resetMs! });
    }
    return { allowed: allowed === 1, remaining: remaining!, retryAfterMs: retryAfterMs!, resetMs: resetMs! };
  };
  /** What an unasked bucket is taken to hold beside one known to refuse: nothing was taken from it. */
  const notAsked = (perMinute: number): BucketDecision => ({ allowed: true, remaining: perMinute, retryAfterMs: 0, resetMs: 0 });

  return {
    client,
    take(keyId: string, perMinute: number): BucketDecision | Promise<BucketDecision> {
      const at = performance.now();
      const cached = cachedRefusal(keyId, perMinute, at);
      if (cached) return cached;
      if (!client.connected) return unavailable(new Error("not connected"));
      return bounded(run(prefix + "rl:" + keyId, perMinute)).then(
        (reply) => {
          if (down) answered();
          return decided(keyId, perMinute, at, (reply as unknown[]).map(Number));
        },
        (err) => unavailable(err),
      );
    },
    takeBoth(first, second): [BucketDecision, BucketDecision] | Promise<[BucketDecision, BucketDecision]> {
      const at = performance.now();
      // A bucket known to refuse decides without a round trip, and nothing is taken from the other.
      const a = cachedRefusal(first.id, first.perMinute, at);
      if (a) return [a, notAsked(second.perMinute)];
      const b = cachedRefusal(second.id, second.perMinute, at);
      if (b) return [notAsked(first.perMinute), b];
      if (!client.connected) {
        const none = unavailable(new Error("not connected"));
        return [none, none];
      }
      return bounded(script(shaBoth, TAKE_BOTH, [prefix + "rl:" + first.id, prefix + "rl:" + second.id], [String(first.perMinute), String(second.perMinute)])).then(
        (reply) => {
          if (down) answered();
          const n = (reply as unknown[]).map(Number);
          return [decided(first.id, first.perMinute, at, n.slice(0, 4)), decided(second.id, second.perMinute, at, n.slice(4, 8))] as [BucketDecision, BucketDecision];
        },
        (err) => {
          const failed = unavailable(err);
          return [failed, failed] as [BucketDecision, BucketDecision];
        },
      );
    },
    spend(id, perMinute, tokens, how): BucketDecision | Promise<BucketDecision> {
      // Not remembered when refused: a settlement elsewhere may give tokens back at any time.
      if (!client.connected) return unavailable(new Error("not connected"));
      return bounded(script(shaSpend, SPEND, [prefix + "tb:" + id], [String(perMinute), String(Math.round(tokens)), how === "admit" ? "1" : "0"])).then(
        (reply) => {
          if (down) answered();
          const [allowed, remaining, retryAfterMs, resetMs] = (reply as unknown[]).map(Number);
          return { allowed: allowed === 1, remaining: remaining!, retryAfterMs: retryAfterMs!, resetMs: resetMs! };
        },
        (err) => unavailable(err),
      );
    },
    /** Connected and the last decision did not fail: no round trip, so `/ready` can ask it on every probe. */
    health(): { reachable: boolean } {
      return { reachable: client.connected && !down };
    },
    /** Whether Redis answered within the connect timeout (the client keeps reconnecting on its own either way). */
    async ready(): Promise<boolean> {
      if (client.connected) return true;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const attempt = (connecting ?? connect()).then(() => true, () => false);
      const gaveUp = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), connectTimeoutMs)));
      const answered = await Promise.race([attempt, gaveUp]);
      clearTimeout(timer);
      return answered;
    },
    close(): void {
      closed = true;
      clearInterval(probe);
      client.close();
    },
  };
}
