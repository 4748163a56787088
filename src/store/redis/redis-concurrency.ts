import { RedisClient } from "bun";
import type { ConcurrencySlot, ConcurrencyStore, PlacePair } from "../../limits/concurrency-limiter.ts";
import type { Logger } from "../../log/log.ts";
import { evalScript, redisScript } from "./eval-script.ts";
import { answerWithin } from "./answer-within.ts";

export interface RedisConcurrencyOptions {
  /** Prefix of every key written (the rate limiter's, so one deployment's keys sit together). */
  prefix?: string;
  /** Longest an acquire may take; past it the request is refused (503), not admitted. */
  timeoutMs?: number;
  /**
   * How long a place stays counted without being renewed. Each process renews its places every
   * third of it while their requests run, so a process that dies (kill -9, a lost host) frees its
   * places within one lease instead of holding them for ever.
   */
  leaseMs?: number;
  log?: Logger;
}

/**
 * One sorted set per key: a member per request under way, scored by when its lease ends (Redis's
 * clock, TIME, so processes on several hosts agree). Expired members are dropped, the set is
 * counted and a member added only below the cap, in one atomic script: no two processes can both
 * take the last place. KEYS[1]: the set; ARGV: cap, member, lease ms. Returns 1 (taken) or 0.
 */
const ACQUIRE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + lease, ARGV[2])
redis.call('PEXPIRE', KEYS[1], lease)
return 1`;

/**
 * ACQUIRE over two sets at once (a key's and its account's): a member added to each, or to
 * neither when either is at its cap. KEYS: the two sets; ARGV: their caps, their members, lease
 * ms. Returns 1 (both taken), 0 (the first full) or -1 (the second full).
 */
const ACQUIRE_BOTH = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[2]) then return -1 end
redis.call('ZADD', KEYS[1], now + lease, ARGV[3])
redis.call('PEXPIRE', KEYS[1], lease)
redis.call('ZADD', KEYS[2], now + lease, ARGV[4])
redis.call('PEXPIRE', KEYS[2], lease)
return 1`;

/**
 * Pushes a running request's lease on. KEYS[1]: the set; ARGV: member, lease ms, and "1" to put the
 * member back when it is gone. Returns 1, or 0 when the member was not there and was not put back.
 * The first call of a round does not put it back: a ZREM sent just before it may have taken it
 * away. One that finds it gone is followed, if the request still runs, by a call that does
 * (renewal, below): a Redis that lost its data (restarted empty, failed over) had forgotten every
 * running request, and a key capped at 2 ran 4 at once until they ended (a scale-out probe).
 */
const RENEW = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
if ARGV[3] ~= '1' and not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
redis.call('PEXPIRE', KEYS[1], lease)
return 1`;

/**
 * Requests under way per key, counted in Redis and so shared by every worker and gateway on it
 * (docs/decisions.md, "Requests at once per key"). Only keys with a cap ask Redis; it costs one
 * script call when a capped key's request starts and one ZREM when it ends. Fails closed, like
 * the rate limits: while Redis does not answer, a capped key's request is refused (503); a place
 * whose release, or an acquire whose answer, was lost is given back once Redis answers again (its
 * lease frees it if this process dies first).
 */
export function createRedisConcurrency(client: RedisClient, o: RedisConcurrencyOptions = {}): ConcurrencyStore & { close(waitMs?: number): Promise<void>; held(): number; unreturned(): number } {
  const prefix = (o.prefix ?? "switchyard:") + "conc:";
  const timeoutMs = o.timeoutMs ?? 250;
  const leaseMs = o.leaseMs ?? 30_000;
  const log = o.log ?? (() => {});
  const owner = Bun.randomUUIDv7("hex").slice(-12);
  let counter = 0;
  /** This process's places: member → set, renewed while held. */
  const held = new Map<string, string>();
  /**
   * Places to give back that Redis has not confirmed: a release whose ZREM failed, and an acquire
   * that timed out (Redis may have run it after all). Sent again every renewal round until Redis
   * answers. Left to their lease, a Redis blip kept a key's places taken for 30 s after it ended
   * (every request of a key capped at 25 refused with 429; a scale-out probe, 2026-11-30).
   */
  const unreturned = new Map<string, { set: string; at: number }>();
  /** Sends the ZREM; kept for the renewal rounds until Redis confirms it, or its lease has ended anyway. */
  const sendBack = (member: string, set: string, at = Date.now(), onError: (err: unknown) => void = () => {}): void => {
    unreturned.set(member, { set, at });
    client.send("ZREM", [set, member]).then(() => unreturned.delete(member), onError);
  };

  const script = (body: string, keys: string[], args: string[], whole = false): Promise<unknown> => evalScript(client, SCRIPTS.get(body)!, keys, args, whole);
  const bounded = <T>(promise: Promise<T>): Promise<T> => answerWithin(promise, timeoutMs, () => new AcquireTimeout(`no answer from Redis within ${timeoutMs} ms`));

  // One line per round at most, however many places failed (Redis down fails them all).
  const renew = setInterval(() => {
    const now = Date.now();
    for (const [member, { set, at }] of unreturned) {
      // Past its lease Redis has dropped it itself (or will at the next acquire): nothing to send.
      if (now - at > leaseMs) unreturned.delete(member);
      else sendBack(member, set, at);
    }
    if (held.size === 0) return;
    const lease = String(leaseMs);
    // Put back only if still held when Redis said it was gone: a release after this check sends
    // its ZREM on the same connection after the put-back, so Redis runs them in that order.
    const rounds = [...held].map(([member, set]) =>
      // Sent whole (EVAL): a NOSCRIPT answer's fallback would go after a release's ZREM sent meanwhile, and put a released place back (a review).
      script(RENEW, [set], [member, lease, "0"]).then((kept) => (Number(kept) === 0 && held.get(member) === set ? script(RENEW, [set], [member, lease, "1"], true) : kept)));
    void Promise.allSettled(rounds).then((results) => {
      const failed = results.filter((r) => r.status === "rejected");
      if (failed.length > 0) log("warn", "requests at once: leases could not be renewed in Redis; a place lapsed meanwhile stops counting", { failed: failed.length, error: String((failed[0] as PromiseRejectedResult).reason) });
    });
  }, Math.max(10, Math.floor(leaseMs / 3)));
  renew.unref?.();

  return {
    async acquire(keyId: string, limit: number): Promise<ConcurrencySlot | null> {
      const set = prefix + keyId;
      const member = `${owner}:${++counter}`;
      const acquiring = script(ACQUIRE, [set], [String(limit), member, String(leaseMs)]);
      let taken: number;
      try {
        taken = Number(await bounded(acquiring));
      } catch (err) {
        // No answer in time: Redis may still run it (its NOSCRIPT fallback included) and take the
        // place, which is given back once the script has an answer, so the ZREM runs after it. A
        // script that failed (Redis down) took nothing.
        if (err instanceof AcquireTimeout) acquiring.then((answer) => Number(answer) === 1 && sendBack(member, set), () => {});
        throw err;
      }
      if (taken !== 1) return null;
      held.set(member, set);
      let done = false;
      return {
        release() {
          if (done) return;
          done = true;
          held.delete(member);
          sendBack(member, set, Date.now(), (err) =>
            log("warn", "requests at once: a place could not be given back in Redis yet; it is sent again until Redis takes it", { error: err instanceof Error ? err.message : String(err) }));
        },
      };
    },
    async acquireBoth(first, second): Promise<PlacePair> {
      const sets = [prefix + first.id, prefix + second.id] as const;
      const n = ++counter;
      const members = [`${owner}:${n}`, `${owner}:${n}b`] as const;
      const acquiring = script(ACQUIRE_BOTH, [...sets], [String(first.limit), String(second.limit), members[0], members[1], String(leaseMs)]);
      let answer: number;
      try {
        answer = Number(await bounded(acquiring));
      } catch (err) {
        // As one acquire: places Redis takes after the wait ended are given back once it answers.
        if (err instanceof AcquireTimeout) {
          acquiring.then((late) => {
            if (Number(late) !== 1) return;
            sendBack(members[0], sets[0]);
            sendBack(members[1], sets[1]);
          }, () => {});
        }
        throw err;
      }
      if (answer !== 1) return { full: answer === 0 ? "first" : "second" };
      held.set(members[0], sets[0]);
      held.set(members[1], sets[1]);
      let done = false;
      return {
        slot: {
          release() {
            if (done) return;
            done = true;
            for (const i of [0, 1] as const) {
              held.delete(members[i]);
              sendBack(members[i], sets[i], Date.now(), (err) =>
                log("warn", "requests at once: a place could not be given back in Redis yet; it is sent again until Redis takes it", { error: err instanceof Error ? err.message : String(err) }));
            }
          },
        },
      };
    },
    /** Places this process holds now (tests). */
    held: () => held.size,
    /** Places given back that Redis has not confirmed yet (tests). */
    unreturned: () => unreturned.size,
    /**
     * Gives back what this process still holds and waits (up to `waitMs`) until Redis has taken
     * every place back, before the connection is closed: a graceful stop that closed at once lost
     * its last ZREMs, and its keys' places stayed taken for their 30 s lease after the restart
     * (every request of a capped key refused with 429; a kill -9 and disk-fault probe).
     */
    async close(waitMs = 1_000): Promise<void> {
      clearInterval(renew);
      for (const [member, set] of held) sendBack(member, set);
      held.clear();
      for (const until = Date.now() + waitMs; unreturned.size > 0 && Date.now() < until; ) await Bun.sleep(5);
    },
  };
}

const SCRIPTS = new Map([ACQUIRE, ACQUIRE_BOTH, RENEW].map((body) => [body, redisScript(body)]));

/** An acquire Redis did not answer in time (it may still run it): not a failed one. */
class AcquireTimeout extends Error {}

