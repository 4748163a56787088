import { afterAll, describe, expect, test } from "bun:test";
import { RedisClient } from "bun";
import { createRateLimiter } from "../../src/limits/rate-limiter.ts";
import { createRedisRateLimiter } from "../../src/store/redis/redis-rate-limiter.ts";
import { closedPort, REDIS_URL, redisMissing, useRedisPrefix } from "../helpers/backends.ts";
import { rateLimitContract } from "../helpers/rate-limit-contract.ts";

rateLimitContract("in-process", async () => createRateLimiter(Date.now));

const missing = await redisMissing();
const prefix = useRedisPrefix();
/** Redis's db 0 is shared with other programs' keys; the tests use db 3 (a db index in the URL) and a prefix of their own. */
const url = `${REDIS_URL.replace(/\/\d+$/, "")}/3`;
const clients: { close(): void }[] = [];
afterAll(() => {
  for (const c of clients) c.close();
});
const redisLimiter = async (options: Parameters<typeof createRedisRateLimiter>[1] = {}, at = url) => {
  const limiter = createRedisRateLimiter(at, { prefix, ...options });
  clients.push(limiter);
  await limiter.ready();
  return limiter;
};

if (missing) {
  test.skip(`RateLimitStore contract on Redis — skipped: ${missing}`, () => {});
} else {
  rateLimitContract("Redis", () => redisLimiter());

  describe("Redis rate limits", () => {
    test("the bucket's key lives in the URL's db, under the prefix, with an expiry (TTL > 0)", async () => {
      const limiter = await redisLimiter();
      await limiter.take("key_ttl", 60);
      const probe = new RedisClient(url);
      clients.push(probe);
      const ttl = Number(await probe.send("PTTL", [`${prefix}rl:key_ttl`]));
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(2_000);
      const elsewhere = new RedisClient(REDIS_URL.replace(/\/\d+$/, "") + "/0");
      clients.push(elsewhere);
      expect(Number(await elsewhere.send("EXISTS", [`${prefix}rl:key_ttl`]))).toBe(0);
    });

    test("two gateways share one bucket per key: 10 per minute across both", async () => {
      const [a, b] = [await redisLimiter(), await redisLimiter()];
      const decisions = await Promise.all(Array.from({ length: 60 }, (_, i) => (i % 2 ? a : b).take("key_shared", 10)));
      expect(decisions.filter((d) => d.allowed)).toHaveLength(10);
    });

    test("a Redis that forgot the script (restart, SCRIPT FLUSH) is sent it again", async () => {
      const limiter = await redisLimiter();
      expect((await limiter.take("key_flush", 5)).allowed).toBe(true);
      await limiter.client.send("SCRIPT", ["FLUSH"]);
      const after = await limiter.take("key_flush", 5);
      expect(after).toMatchObject({ allowed: true, remaining: 3 });
    });

    test("unreachable: every decision fails closed (unavailable), promptly, never allowed", async () => {
      const limiter = await redisLimiter({ connectTimeoutMs: 200 }, `redis://127.0.0.1:${closedPort()}/3`);
      const started = performance.now();
      const decisions = await Promise.all(Array.from({ length: 20 }, () => limiter.take("key_down", 1_000)));
      expect(performance.now() - started).toBeLessThan(1_000);
      for (const d of decisions) expect(d).toMatchObject({ allowed: false, unavailable: true });
    });

    // A worker starting under load, a long task, a CPU taken by others: the answer arrives while the
    // thread does not run, and at its wake-up Bun ran the deadline's timer before reading it (a fault
    // probe of workers under load, twenty-fourth session: 503s with Redis well).
    test("an answer that arrived while the thread was stalled past the deadline is taken, not refused as unavailable", async () => {
      // A deadline of 100 ms and stalls of 400: Redis has four times the deadline to answer while
      // the thread is stalled (a busy CI machine once left it without an answer after 320 ms of 250).
      const limiter = await redisLimiter({ timeoutMs: 100 });
      expect((await limiter.take("key_stall", 1_000_000)).allowed).toBe(true);
      let unavailable = 0;
      for (let i = 0; i < 6; i++) {
        const decision = limiter.take("key_stall", 1_000_000);
        const until = performance.now() + 400;
        while (performance.now() < until) {}
        if ((await decision).unavailable) unavailable++;
      }
      expect(unavailable).toBe(0);
    });

    test("a connection Redis dropped (CLIENT KILL) comes back by itself", async () => {
      const limiter = await redisLimiter();
      expect((await limiter.take("key_drop", 100)).allowed).toBe(true);
      const id = await limiter.client.send("CLIENT", ["ID"]);
      const admin = new RedisClient(url);
      clients.push(admin);
      await admin.send("CLIENT", ["KILL", "ID", String(id)]);
      const deadline = Date.now() + 3_000;
      let after = await limiter.take("key_drop", 100);
      while (!after.allowed && Date.now() < deadline) {
        await Bun.sleep(50);
        after = await limiter.take("key_drop", 100);
      }
      expect(after).toMatchObject({ allowed: true });
    });
  });
}
