import { afterAll, describe, expect, test } from "bun:test";
import { resolve } from "node:path";
import { createRedisRateLimiter } from "../../src/store/redis/redis-rate-limiter.ts";
import { openPostgresStores, type SharedStores } from "../../src/store/stores.ts";
import { closedPort, postgresMissing, REDIS_URL, redisMissing, useRedisPrefix, useTestDatabase } from "../helpers/backends.ts";
import { startFakeUpstream, type FakeUpstream } from "../helpers/fake-upstream.ts";
import { FREE_MODEL, OPENAI_MODEL, post, startGateway, type Gateway } from "../helpers/gateway.ts";
import { tcpProxy } from "../helpers/tcp-proxy.ts";

const ROOT = resolve(import.meta.dir, "../..");
const missing = (await postgresMissing()) ?? (await redisMissing());
const database = useTestDatabase();
const prefix = useRedisPrefix();
const redisUrl = `${REDIS_URL.replace(/\/\d+$/, "")}/3`;
const cleanups: (() => unknown)[] = [];
afterAll(async () => {
  for (const fn of cleanups.reverse()) await fn();
});

/** The admin CLI as an operator runs it, against PostgreSQL. */
async function cli(url: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const proc = Bun.spawn(["bun", "src/cli/admin.ts", ...args], {
    cwd: ROOT,
    env: { ...process.env, SWITCHYARD_DATABASE_URL: url, SWITCHYARD_DB: "/nonexistent/never-written.sqlite" },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [code, stdout, stderr] = await Promise.all([proc.exited, new Response(proc.stdout).text(), new Response(proc.stderr).text()]);
  return { code, stdout, stderr };
}

/** A gateway process's stores and app, on the shared PostgreSQL (optionally through a relay) and Redis. */
async function gateway(upstream: FakeUpstream, url: string, options: { credits?: number; redis?: string } = {}): Promise<Gateway & { stores: SharedStores }> {
  const stores = await openPostgresStores(url, {
    keyCacheMs: 200,
    pool: { max: 4, connectTimeoutMs: 500, statementTimeoutMs: 1_000 },
    ledger: { timeoutMs: 500, retryMaxMs: 40, heartbeatMs: 50 },
  });
  const limiter = createRedisRateLimiter(options.redis ?? redisUrl, { prefix, connectTimeoutMs: 300 });
  await limiter.ready();
  const gw = await startGateway({ upstreamUrl: upstream.url, credits: options.credits, stores, limiter, requestsPerMinute: 1_000 });
  cleanups.push(async () => {
    await gw.stop();
    await stores.close(500);
    limiter.close();
  });
  return Object.assign(gw, { stores });
}

const chat = (gw: Gateway, model = OPENAI_MODEL, key = gw.key) =>
  post(gw, "/v1/chat/completions", { model, messages: [{ role: "user", content: "hi" }] }, { authorization: `Bearer ${key}` });

if (missing) {
  test.skip(`Gateways on PostgreSQL and Redis — skipped: ${missing}`, () => {});
} else {
  describe("gateways on PostgreSQL and Redis", () => {
    test("two gateways share money, keys and limits; the admin CLI works on the same database", async () => {
      const upstream = await startFakeUpstream();
      cleanups.push(() => upstream.stop());
      const url = await database();
      const a = await gateway(upstream, url, { credits: 50 });
      const b = await gateway(upstream, url);

      // A key of A's account works on B: one database.
      for (const gw of [a, b]) {
        const res = await chat(gw, OPENAI_MODEL, a.key);
        expect(res.status).toBe(200);
        await res.text();
      }
      await a.app.services.settled();
      await b.app.services.settled();
      const balance = (await a.stores.ledger.balance(a.accountId))!;
      expect(balance.heldMicro).toBe(0);
      expect(balance.balanceMicro).toBeLessThan(50_000_000);

      const shown = await cli(url, "accounts", "show", a.accountId);
      expect(shown.code).toBe(0);
      expect(JSON.parse(shown.stdout)).toMatchObject({ id: a.accountId, balance: balance.balanceMicro / 1e6, reserved: 0 });
      expect((await cli(url, "accounts", "topup", a.accountId, "5")).code).toBe(0);
      expect((await a.stores.ledger.balance(a.accountId))!.balanceMicro).toBe(balance.balanceMicro + 5_000_000);
      const usage = JSON.parse((await cli(url, "usage", a.accountId)).stdout);
      expect(usage.total.requests).toBe(2);
      const audit = await cli(url, "audit");
      expect(audit.code).toBe(0);
      expect(JSON.parse(audit.stdout)).toMatchObject({ clean: true, heldDrift: [] });

      // A key made by the CLI with a limit of 3 a minute: the limit holds across both gateways.
      const account = JSON.parse((await cli(url, "accounts", "create", "cross", "3")).stdout) as { id: string };
      const made = JSON.parse((await cli(url, "keys", "create", account.id, "ops", "--rpm", "3")).stdout) as { id: string; key: string };
      const statuses: number[] = [];
      for (let i = 0; i < 4; i++) {
        const res = await fetch((i % 2 ? a : b).url + "/v1/models", { headers: { authorization: `Bearer ${made.key}` } });
        statuses.push(res.status);
        if (res.status === 429) expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      }
      expect(statuses).toEqual([200, 200, 200, 429]);

      // Revoked on the CLI: refused by both gateways within their key cache's TTL (200 ms here, 2 s by default).
      expect(JSON.parse((await cli(url, "keys", "list", account.id)).stdout).data).toHaveLength(1);
      expect((await cli(url, "keys", "revoke", made.id)).code).toBe(0);
      await Bun.sleep(250);
      for (const gw of [a, b]) expect((await fetch(gw.url + "/v1/models", { headers: { authorization: `Bearer ${made.key}` } })).status).toBe(401);
    });

    test("PostgreSQL unreachable: paid requests get 503 at once, free ones keep working; back: paid requests pass again", async () => {
      const upstream = await startFakeUpstream();
      cleanups.push(() => upstream.stop());
      const target = new URL(await database());
      const proxy = tcpProxy(Number(target.port || 5432));
      cleanups.push(() => proxy.stop());
      target.port = String(proxy.port);
      const gw = await gateway(upstream, target.toString());
      const warm = await chat(gw);
      expect(warm.status).toBe(200);
      await warm.text();

      proxy.cut();
      const started = performance.now();
      const paid = await chat(gw);
      expect(paid.status).toBe(503);
      expect(paid.headers.get("retry-after")).toBe("5");
      expect(((await paid.json()) as { error: { message: string } }).error.message).not.toContain("127.0.0.1");
      expect(performance.now() - started).toBeLessThan(2_000);
      const free = await chat(gw, FREE_MODEL);
      expect(free.status).toBe(200);
      await free.text();
      const ready = await fetch(gw.url + "/ready");
      expect(ready.status).toBe(503);

      proxy.restore();
      const deadline = Date.now() + 5_000;
      let again = await chat(gw);
      while (again.status !== 200 && Date.now() < deadline) {
        await again.text();
        await Bun.sleep(50);
        again = await chat(gw);
      }
      expect(again.status).toBe(200);
      await again.text();
      await gw.app.services.settled();
      expect(gw.stores.ledger.health()).toMatchObject({ writable: true, queued: 0 });
    });

    test("Redis unreachable: requests are refused with 503 (limits fail closed), in both formats, never admitted unmetered", async () => {
      const upstream = await startFakeUpstream();
      cleanups.push(() => upstream.stop());
      const gw = await gateway(upstream, await database(), { redis: `redis://127.0.0.1:${closedPort()}` });
      const res = await chat(gw, FREE_MODEL);
      expect(res.status).toBe(503);
      expect(res.headers.get("retry-after")).toBe("5");
      expect(((await res.json()) as { error: { type: string; message: string } }).error.message).toContain("rate limits");
      const messages = await post(gw, "/v1/messages", { model: FREE_MODEL, max_tokens: 10, messages: [{ role: "user", content: "hi" }] });
      expect(messages.status).toBe(503);
      expect(((await messages.json()) as { type: string }).type).toBe("error");
      expect(upstream.requests).toHaveLength(0);
      // A load balancer learns it from /ready too.
      const ready = await fetch(gw.url + "/ready");
      expect(ready.status).toBe(503);
      expect(((await ready.json()) as { rate_limiter: unknown }).rate_limiter).toEqual({ reachable: false });
    });
  });
}
