import { RedisClient } from "bun";
import { evalScript } from "./eval-script.ts";
import { answerIdOfItem, ENTRY_OVERHEAD_BYTES, ResponseStoreUnavailableError, storedAnswer, storedTexts, type ResponseStore } from "../../formats/openai-responses/response-store.ts";
import type { Json } from "../../formats/common/wire-types.ts";
import type { Logger } from "../../log/log.ts";
import { answerWithin } from "./answer-within.ts";

export interface RedisResponseStoreOptions {
  /** Prefix of every key (several deployments can share one Redis); the store adds `resp:`. */
  prefix?: string;
  /** Most bytes of all accounts together; 0 switches storage off. */
  maxBytes: number;
  accountMaxBytes: number;
  answerMaxBytes: number;
  ttlMs: number;
  now: () => number;
  /** Longest one store operation may take (a 16 MiB answer included); past it the request gets a 503. */
  timeoutMs?: number;
  connectTimeoutMs?: number;
  log?: Logger;
}

/**
 * The same rules as store/memory/account-quota-lru.ts, in Redis, each operation one Lua script
 * (atomic: two processes storing for one account at once cannot both fit in its last bytes).
 * Per account (`<p>resp:a:<account>:`): `d`, a hash of each answer's JSON (`<id>:i` its input,
 * `<id>:r` its Response object) and size (`<id>:n`); `u`, a sorted set of answer ids by last use
 * (milliseconds, the gateway's clock); `b`, the bytes it holds. All three expire together one
 * TTL after the account's last use, so an idle account costs nothing. Across accounts: `g:b`,
 * the bytes of all, and `g:a`, a sorted set of accounts by bytes (who gives way at the total),
 * expiring one TTL after any account's last use.
 * An account whose keys expired is taken out of both when it is next met (as a victim, or when
 * it comes back). Keys are built inside the scripts, so this needs one Redis, not a cluster.
 */
const PRELUDE = `
local P = ARGV[1]
local now = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local scope = ARGV[4]
local function k(s, name) return P .. 'a:' .. s .. ':' .. name end
local function touch(s)
  redis.call('PEXPIRE', k(s, 'd'), ttl)
  redis.call('PEXPIRE', k(s, 'u'), ttl)
  redis.call('PEXPIRE', k(s, 'b'), ttl)
  -- The totals live as long as some account is used: when every account has expired, so have they.
  redis.call('PEXPIRE', P .. 'g:b', ttl)
  redis.call('PEXPIRE', P .. 'g:a', ttl)
end
-- An account whose keys expired: its bytes leave the totals.
local function reconcile(s)
  if redis.call('EXISTS', k(s, 'b')) == 1 then return end
  local held = tonumber(redis.call('ZSCORE', P .. 'g:a', s) or '0')
  if held ~= 0 then redis.call('DECRBY', P .. 'g:b', held) end
  redis.call('ZREM', P .. 'g:a', s)
end
local function drop(s, id)
  local n = tonumber(redis.call('HGET', k(s, 'd'), id .. ':n') or '0')
  redis.call('HDEL', k(s, 'd'), id .. ':i', id .. ':r', id .. ':n')
  local was = redis.call('ZREM', k(s, 'u'), id)
  if n > 0 then
    redis.call('DECRBY', k(s, 'b'), n)
    redis.call('DECRBY', P .. 'g:b', n)
    redis.call('ZINCRBY', P .. 'g:a', -n, s)
  end
  return was
end
local function sweep(s)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', k(s, 'u'), '-inf', '(' .. (now - ttl))) do drop(s, id) end
end
-- The answer's score when it can still be read, else nil (an expired one is dropped).
local function live(s, id)
  local used = redis.call('ZSCORE', k(s, 'u'), id)
  if not used then return nil end
  if tonumber(used) < now - ttl then
    drop(s, id)
    return nil
  end
  return used
end
`;

/** ARGV[5]: id, ARGV[6]: 'r' (the Response object) or 'ir' (input and Response object). Returns the fields, or nil. */
const GET = `${PRELUDE}
reconcile(scope)
local id = ARGV[5]
if not live(scope, id) then return nil end
redis.call('ZADD', k(scope, 'u'), now, id)
touch(scope)
if ARGV[6] == 'r' then return redis.call('HMGET', k(scope, 'd'), id .. ':r') end
return redis.call('HMGET', k(scope, 'd'), id .. ':i', id .. ':r')`;

/** ARGV[5]: id. Returns 1 when a readable answer was deleted. */
const DELETE = `${PRELUDE}
reconcile(scope)
local id = ARGV[5]
if not live(scope, id) then return 0 end
drop(scope, id)
return 1`;

/**
 * ARGV[5]: id, [6]: input JSON, [7]: Response JSON, [8]: account quota, [9]: total, [10]: per
 * answer, [11]: overhead per answer. Returns 1 when kept, 0 when too large (nothing kept).
 */
const KEEP = `${PRELUDE}
local id, input, response = ARGV[5], ARGV[6], ARGV[7]
local quota, total, most = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local bytes = #input + #response + #id + tonumber(ARGV[11])
reconcile(scope)
sweep(scope)
drop(scope, id)
if bytes > most or bytes > quota or bytes > total then return 0 end
redis.call('HSET', k(scope, 'd'), id .. ':i', input, id .. ':r', response, id .. ':n', bytes)
redis.call('ZADD', k(scope, 'u'), now, id)
redis.call('INCRBY', k(scope, 'b'), bytes)
redis.call('INCRBY', P .. 'g:b', bytes)
redis.call('ZINCRBY', P .. 'g:a', bytes, scope)
-- The account's own quota: its least recently used go first (never the answer just kept).
local function evictOldest(s)
  for _, old in ipairs(redis.call('ZRANGE', k(s, 'u'), 0, 1)) do
    if not (s == scope and old == id) then
      drop(s, old)
      return true
    end
  end
  return false
end
while tonumber(redis.call('GET', k(scope, 'b')) or '0') > quota do
  if not evictOldest(scope) then break end
end
-- The total: the account with the most evictable bytes gives way (the writer on a tie).
for _ = 1, 100000 do
  if tonumber(redis.call('GET', P .. 'g:b') or '0') <= total then break end
  local top = redis.call('ZREVRANGE', P .. 'g:a', 0, 1, 'WITHSCORES')
  local victim, most = scope, tonumber(redis.call('ZSCORE', P .. 'g:a', scope) or '0') - bytes
  for i = 1, #top, 2 do
    if top[i] ~= scope and tonumber(top[i + 1]) > most then victim, most = top[i], tonumber(top[i + 1]) end
  end
  if most <= 0 then break end
  if victim ~= scope and redis.call('EXISTS', k(victim, 'b')) == 0 then
    reconcile(victim)
  else
    sweep(victim)
    if tonumber(redis.call('GET', P .. 'g:b') or '0') > total then
      if not evictOldest(victim) then break end
    end
  end
end
touch(scope)
return 1`;

const SCRIPTS = { GET, DELETE, KEEP } as const;
type Script = keyof typeof SCRIPTS;

/** Reconnection attempts while Redis is down, at most this often. */
const RECONNECT_MS = 500;

/**
 * The Responses API's stored answers in Redis, shared by every worker and every gateway on it:
 * a `previous_response_id` works wherever the next request lands. Its own connection (an answer
 * of megabytes must not hold up the rate limiter's small calls behind it). Fails closed: while
 * Redis cannot be reached or answer within `timeoutMs`, lookups throw
 * ResponseStoreUnavailableError (the route answers 503) and nothing is kept (the answer goes
 * out saying `store: false`); never a silent fallback to this process's memory, which another
 * process could not read.
 */
export function createRedisResponseStore(url: string, o: RedisResponseStoreOptions): ResponseStore & { close(): void; ready(): Promise<boolean> } {
  const prefix = `${o.prefix ?? "switchyard:"}resp:`;
  const timeoutMs = o.timeoutMs ?? 2_000;
  const log = o.log ?? (() => {});
  const client = new RedisClient(url, { connectionTimeout: o.connectTimeoutMs ?? 1_000, autoReconnect: true, maxRetries: 1_000_000, enableOfflineQueue: false });
  const shas = Object.fromEntries(Object.entries(SCRIPTS).map(([name, body]) => [name, new Bun.CryptoHasher("sha1").update(body).digest("hex")])) as Record<Script, string>;
  const enabled = o.maxBytes > 0;
  const maxAnswerBytes = Math.min(o.answerMaxBytes, o.accountMaxBytes, o.maxBytes);
  let connecting: Promise<void> | undefined;
  let lastAttempt = 0;
  let down = false;

  const connect = (): Promise<void> => {
    lastAttempt = performance.now();
    connecting ??= client.connect().then(
      () => {
        connecting = undefined;
      },
      (err) => {
        connecting = undefined;
        throw err;
      },
    );
    return connecting;
  };
  void connect().catch(() => {});

  const bounded = <T>(promise: Promise<T>): Promise<T> => answerWithin(promise, timeoutMs, () => new Error(`no answer from Redis within ${timeoutMs} ms`));

  async function run(script: Script, scope: string, args: string[]): Promise<unknown> {
    if (!client.connected) {
      // Not waited for (a Redis that is down would hold every request): ready() waits once, at start.
      if (!connecting && performance.now() - lastAttempt >= RECONNECT_MS) void connect().catch(() => {});
      throw unavailable(new Error("not connected"));
    }
    const argv = [prefix, String(o.now()), String(o.ttlMs), scope, ...args];
    try {
      const result = await bounded(evalScript(client, { text: SCRIPTS[script], sha: shas[script] }, [], argv));
      if (down) log("info", "stored responses: Redis answers again");
      down = false;
      return result;
    } catch (err) {
      throw unavailable(err);
    }
  }
  const unavailable = (err: unknown) => {
    if (!down) log("error", "stored responses: Redis cannot be reached; previous_response_id and item_reference get 503 and answers are not kept until it answers", { error: err instanceof Error ? err.message : String(err) });
    down = true;
    return new ResponseStoreUnavailableError("Redis cannot be reached");
  };
  const fields = (reply: unknown): (string | null)[] | undefined => (Array.isArray(reply) ? (reply as (string | null)[]) : undefined);

  return {
    enabled,
    maxAnswerBytes,
    async item(scope, id) {
      const answer = answerIdOfItem(id);
      if (!enabled || answer === undefined) return undefined;
      const [input, response] = fields(await run("GET", scope, [answer, "ir"])) ?? [];
      if (typeof input !== "string" || typeof response !== "string") return undefined;
      return storedAnswer(input, response).response.output.find((item: Json) => item.id === id);
    },
    async response(scope, id, maxBytes) {
      if (!enabled) return undefined;
      const [input, response] = fields(await run("GET", scope, [id, "ir"])) ?? [];
      if (typeof input !== "string" || typeof response !== "string") return undefined;
      return storedAnswer(input, response, maxBytes);
    },
    async body(scope, id) {
      if (!enabled) return undefined;
      const response = fields(await run("GET", scope, [id, "r"]))?.[0];
      return typeof response === "string" ? response : undefined;
    },
    async keep(scope, id, stored) {
      if (!enabled) return false;
      const { input, response } = storedTexts(stored);
      const kept = await run("KEEP", scope, [id, input, response, String(o.accountMaxBytes), String(o.maxBytes), String(maxAnswerBytes), String(ENTRY_OVERHEAD_BYTES)]);
      return kept === 1;
    },
    async delete(scope, id) {
      if (!enabled) return false;
      return (await run("DELETE", scope, [id])) === 1;
    },
    /** Waits (at most the connection timeout) for the first connection: requests at start find it open. */
    async ready(): Promise<boolean> {
      if (client.connected) return true;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const attempt = (connecting ?? connect()).then(() => true, () => false);
      const gaveUp = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), o.connectTimeoutMs ?? 1_000)));
      const answered = await Promise.race([attempt, gaveUp]);
      clearTimeout(timer);
      return answered;
    },
    close() {
      client.close();
    },
  };
}
