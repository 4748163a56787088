/**
 * Limits per account (docs/decisions.md, "Limits per account"): an account's requests a minute and
 * requests under way, for all its keys together, beside each key's own. Without them an account
 * holding ten keys had ten keys' limits: the holder's console makes keys, so a tenant could widen
 * its own share of the gateway by making more of them.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { RedisClient } from "bun";
import { useFakeUpstream, type Reply } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, startGateway, type Gateway } from "../helpers/gateway.ts";
import { postgresMissing, REDIS_URL, redisMissing, useRedisPrefix, useTestDatabase } from "../helpers/backends.ts";
import { openPostgresStores, type SharedStores } from "../../src/store/stores.ts";
import { createRedisConcurrency } from "../../src/store/redis/redis-concurrency.ts";
import { createRedisRateLimiter } from "../../src/store/redis/redis-rate-limiter.ts";

const ADMIN = "admin-account-limits-0123456789abcdef0123456789";
const upstream = useFakeUpstream();

/** An OpenAI stream that sends its first chunk and stays open until `finishHeld()`. */
const HELD: Reply = {
  kind: "sse",
  holdOpen: true,
  chunks: [`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}\n\n`],
  afterHold: [
    `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n`,
    `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}\n\n`,
    "data: [DONE]\n\n",
  ],
};
const chatBody = (stream = false) => ({ model: OPENAI_MODEL, stream, messages: [{ role: "user", content: "hello" }] });
const ACCOUNT_RATE = (n: number) => `Rate limit exceeded: ${n} requests per minute for this account (all its keys together).`;
const ACCOUNT_CAP = (n: number) =>
  `Too many requests at once for this account (all its keys together): at most ${n} may be under way (max_concurrent_requests), streams included until they end. Retry when one of them has finished.`;

const admin = (g: Gateway, method: string, path: string, body?: unknown) =>
  fetch(`${g.url}/v1/admin${path}`, { method, headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });

/** A key of `accountId`, as a client that holds it (the fixture is a proxy: its fields are read one by one). */
async function keyOf(g: Gateway, accountId: string, options: { maxConcurrentRequests?: number; rateLimitPerMinute?: number } = {}): Promise<Gateway> {
  const issued = (await g.app.services.accounts.createKey(accountId, { name: "k", ...options }))!;
  return { url: g.url, key: issued.key, keyId: issued.id } as Gateway;
}

async function untilOpenStreams(n: number): Promise<void> {
  for (let i = 0; i < 2_000 && upstream.openStreams() !== n; i++) await Bun.sleep(5);
  expect(upstream.openStreams()).toBe(n);
}

/** `holder` opens a stream that stays open; `other`, of the same account capped at one at once, is refused (429). The stream, still open. */
async function heldThenRefused(holder: Gateway, other: Gateway): Promise<Response> {
  upstream.reply(HELD);
  const held = await post(holder, "/v1/chat/completions", chatBody(true));
  expect(held.status).toBe(200);
  await untilOpenStreams(1);
  const refused = await post(other, "/v1/chat/completions", chatBody());
  expect(refused.status).toBe(429);
  expect(((await refused.json()) as any).error.message).toBe(ACCOUNT_CAP(1));
  return held;
}

async function drain(res: Response): Promise<number> {
  await res.text();
  return res.status;
}

describe("an account's own limits, set by the admin API", () => {
  let gw: Gateway;
  beforeAll(async () => {
    gw = await startGateway({ upstreamUrl: upstream.url, retry: { max_retries: 0 }, adminToken: ADMIN, requestsPerMinute: 60 });
  });
  afterAll(async () => {
    await gw?.stop();
  });

  test("requests a minute: the account's keys share its bucket; the 429 names the account, in the route's shape, with the account's headers", async () => {
    const made = await admin(gw, "POST", "/accounts", { name: "tenant", credits: 100, rate_limit_per_minute: 3 });
    expect(made.status).toBe(201);
    const account = (await made.json()) as any;
    expect(account).toMatchObject({ name: "tenant", rate_limit_per_minute: 3, max_concurrent_requests: null });
    const [a, b, c] = [await keyOf(gw, account.id), await keyOf(gw, account.id), await keyOf(gw, account.id)];
    const first = await post(a, "/v1/chat/completions", chatBody());
    expect(first.status).toBe(200);
    // The binding bucket is the account's (2 left of 3), not the key's (59 of 60).
    expect([first.headers.get("x-ratelimit-limit-requests"), first.headers.get("x-ratelimit-remaining-requests")]).toEqual(["3", "2"]);
    await first.text();
    expect(await drain(await post(b, "/v1/chat/completions", chatBody()))).toBe(200);
    expect(await drain(await post(c, "/v1/chat/completions", chatBody()))).toBe(200);
    const before = upstream.requests.length;
    const refused = await post(a, "/v1/chat/completions", chatBody());
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(refused.headers.get("x-ratelimit-limit-requests")).toBe("3");
    const body = (await refused.json()) as any;
    expect(body.error.type).toBe("rate_limit_error");
    expect(body.error.message).toStartWith(ACCOUNT_RATE(3));
    const messages = await post(b, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 20, messages: [{ role: "user", content: "hello" }] });
    expect(messages.status).toBe(429);
    expect(((await messages.json()) as any)).toMatchObject({ type: "error", error: { type: "rate_limit_error" } });
    expect(upstream.requests.length).toBe(before);
    // Another account's keys are not touched.
    expect(await drain(await post(gw, "/v1/chat/completions", chatBody()))).toBe(200);
    // Token counts have their own bucket, ten times the account's: counting is not refused.
    const counted = await post(a, "/v1/messages/count_tokens", { model: ANTHROPIC_MODEL, messages: [{ role: "user", content: "hello" }] });
    expect(counted.status).toBe(200);
    await counted.text();
  });

  test("a key refused by its own bucket does not spend its account's: the sibling keys keep the account's share", async () => {
    const account = (await (await admin(gw, "POST", "/accounts", { name: "siblings", credits: 100, rate_limit_per_minute: 4 })).json()) as any;
    const noisy = await keyOf(gw, account.id, { rateLimitPerMinute: 1 });
    const quiet = await keyOf(gw, account.id);
    expect(await drain(await post(noisy, "/v1/chat/completions", chatBody()))).toBe(200);
    for (let i = 0; i < 10; i++) {
      const res = await post(noisy, "/v1/chat/completions", chatBody());
      expect(res.status).toBe(429);
      expect(((await res.json()) as any).error.message).toContain("for this key.");
    }
    // 1 of the account's 4 spent: the quiet key gets the other 3.
    for (let i = 0; i < 3; i++) expect(await drain(await post(quiet, "/v1/chat/completions", chatBody()))).toBe(200);
    const refused = await post(quiet, "/v1/chat/completions", chatBody());
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as any).error.message).toStartWith(ACCOUNT_RATE(4));
  });

  test("a request its account refuses spends nothing of its key's own bucket: a quiet key is not locked out by its noisy siblings", async () => {
    const account = (await (await admin(gw, "POST", "/accounts", { name: "quiet", credits: 100, rate_limit_per_minute: 3 })).json()) as any;
    const noisy = await keyOf(gw, account.id);
    const quiet = await keyOf(gw, account.id, { rateLimitPerMinute: 1 });
    for (let i = 0; i < 3; i++) expect(await drain(await post(noisy, "/v1/chat/completions", chatBody()))).toBe(200);
    for (let i = 0; i < 2; i++) {
      const refused = await post(quiet, "/v1/chat/completions", chatBody());
      expect(refused.status).toBe(429);
      expect(((await refused.json()) as any).error.message).toStartWith(ACCOUNT_RATE(3));
    }
    // The account gets room (a higher limit, from the next request): the quiet key's one request a minute is still there.
    expect((await admin(gw, "PATCH", `/accounts/${account.id}`, { rate_limit_per_minute: 60_000 })).status).toBe(200);
    await Bun.sleep(20);
    expect(await drain(await post(quiet, "/v1/chat/completions", chatBody()))).toBe(200);
    const own = await post(quiet, "/v1/chat/completions", chatBody());
    expect(own.status).toBe(429);
    expect(((await own.json()) as any).error.message).toContain("for this key.");
  });

  test("requests under way: streams of all the account's keys count together; a refused request gives its key's place back; a finished stream frees one", async () => {
    const account = (await (await admin(gw, "POST", "/accounts", { name: "streams", credits: 100, max_concurrent_requests: 2 })).json()) as any;
    const a = await keyOf(gw, account.id);
    // A key capped at 1: its place must be given back when the account refuses it.
    const b = await keyOf(gw, account.id, { maxConcurrentRequests: 1 });
    upstream.reply(HELD);
    const s1 = await post(a, "/v1/chat/completions", chatBody(true));
    upstream.reply(HELD);
    const s2 = await post(a, "/v1/chat/completions", chatBody(true));
    expect([s1.status, s2.status]).toEqual([200, 200]);
    await untilOpenStreams(2);
    const before = upstream.requests.length;
    for (let i = 0; i < 3; i++) {
      const refused = await post(b, "/v1/chat/completions", chatBody(false));
      expect(refused.status).toBe(429);
      expect(refused.headers.get("retry-after")).toBe("1");
      expect(((await refused.json()) as any).error.message).toBe(ACCOUNT_CAP(2));
    }
    const responses = await post(b, "/v1/responses", { model: OPENAI_MODEL, input: "hello" });
    expect(responses.status).toBe(429);
    await responses.text();
    expect(upstream.requests.length).toBe(before);
    // Another account is not held up by this one's streams.
    expect(await drain(await post(gw, "/v1/chat/completions", chatBody()))).toBe(200);
    upstream.finishHeld();
    await s1.text();
    await s2.text();
    await gw.app.services.settled();
    // Both places are free, and key b's own place was never kept by the refusals.
    upstream.reply(HELD);
    const again = await post(b, "/v1/chat/completions", chatBody(true));
    expect(again.status).toBe(200);
    upstream.reply(HELD);
    const other = await post(a, "/v1/chat/completions", chatBody(true));
    expect(other.status).toBe(200);
    await untilOpenStreams(2);
    upstream.finishHeld();
    await again.text();
    await other.text();
    await gw.app.services.settled();
  });

  test("PATCH sets and clears them from the next request; GET shows them; GET /v1/key says what applies; bad values are 400s naming the field", async () => {
    const account = (await (await admin(gw, "POST", "/accounts", { name: "patched", credits: 100 })).json()) as any;
    const k = await keyOf(gw, account.id);
    const keyInfo = async () => ((await (await fetch(`${gw.url}/v1/key`, { headers: { authorization: `Bearer ${k.key}` } })).json()) as any).account;
    // Cached by the first request, before the account had limits.
    expect(await drain(await post(k, "/v1/chat/completions", chatBody()))).toBe(200);
    expect(await keyInfo()).toMatchObject({ rate_limit_per_minute: null, max_concurrent_requests: null });

    const patched = await admin(gw, "PATCH", `/accounts/${account.id}`, { rate_limit_per_minute: 1, max_concurrent_requests: 7 });
    expect(patched.status).toBe(200);
    expect(await patched.json()).toMatchObject({ id: account.id, rate_limit_per_minute: 1, max_concurrent_requests: 7, spend_limit: null });
    expect(await keyInfo()).toMatchObject({ rate_limit_per_minute: 1, max_concurrent_requests: 7 });
    expect(await drain(await post(k, "/v1/chat/completions", chatBody()))).toBe(200);
    expect(await drain(await post(k, "/v1/chat/completions", chatBody()))).toBe(429);
    const listed = (await (await admin(gw, "GET", `/accounts?name=patched`)).json()) as any;
    expect(listed.data[0]).toMatchObject({ id: account.id, rate_limit_per_minute: 1, max_concurrent_requests: 7 });

    // null clears: the gateway's default (none here), from the next request.
    expect((await admin(gw, "PATCH", `/accounts/${account.id}`, { rate_limit_per_minute: null })).status).toBe(200);
    expect(await drain(await post(k, "/v1/chat/completions", chatBody()))).toBe(200);
    expect(await keyInfo()).toMatchObject({ rate_limit_per_minute: null, max_concurrent_requests: 7 });

    for (const bad of [0, -1, 1.5, 1_000_001, "many", true]) {
      const res = await admin(gw, "PATCH", `/accounts/${account.id}`, { rate_limit_per_minute: bad });
      expect([bad, res.status]).toEqual([bad, 400]);
      expect(((await res.json()) as any).error.message).toContain("rate_limit_per_minute");
    }
    for (const bad of [0, 100_001, 2.5]) {
      const res = await admin(gw, "PATCH", `/accounts/${account.id}`, { max_concurrent_requests: bad });
      expect([bad, res.status]).toEqual([bad, 400]);
      expect(((await res.json()) as any).error.message).toContain("max_concurrent_requests");
    }
    const badCreate = await admin(gw, "POST", "/accounts", { name: "bad", credits: 1, max_concurrent_requests: 0 });
    expect(badCreate.status).toBe(400);
    // Nothing was made by the refused create.
    expect(((await (await admin(gw, "GET", "/accounts?name=bad")).json()) as any).data).toEqual([]);
    expect((await admin(gw, "PATCH", "/accounts/acct_missing", { rate_limit_per_minute: 5 })).status).toBe(404);
  });
});

describe("limits.account_requests_per_minute and limits.account_max_concurrent_requests: the defaults for accounts without their own", () => {
  let gw: Gateway;
  beforeAll(async () => {
    gw = await startGateway({ upstreamUrl: upstream.url, retry: { max_retries: 0 }, adminToken: ADMIN, limits: { account_requests_per_minute: 2, account_max_concurrent_requests: 1 } });
  });
  afterAll(async () => {
    await gw?.stop();
  });

  test("an account without its own limits has the defaults, across its keys; an account's own limits win", async () => {
    const other = await keyOf(gw, gw.accountId);
    const info = ((await (await fetch(`${gw.url}/v1/key`, { headers: { authorization: `Bearer ${other.key}` } })).json()) as any).account;
    expect(info).toMatchObject({ rate_limit_per_minute: 2, max_concurrent_requests: 1 });
    const held = await heldThenRefused(gw, other);
    upstream.finishHeld();
    await held.text();
    await gw.app.services.settled();
    // Two requests of the account's two a minute are spent (the refused one was counted too).
    const third = await post(other, "/v1/chat/completions", chatBody());
    expect(third.status).toBe(429);
    expect(((await third.json()) as any).error.message).toStartWith(ACCOUNT_RATE(2));

    // An account with its own, wider limits.
    const wide = (await (await admin(gw, "POST", "/accounts", { name: "wide", credits: 100, rate_limit_per_minute: 10, max_concurrent_requests: 3 })).json()) as any;
    const [x, y] = [await keyOf(gw, wide.id), await keyOf(gw, wide.id)];
    for (let i = 0; i < 3; i++) upstream.reply(HELD);
    const open = await Promise.all([post(x, "/v1/chat/completions", chatBody(true)), post(y, "/v1/chat/completions", chatBody(true)), post(x, "/v1/chat/completions", chatBody(true))]);
    expect(open.map((r) => r.status)).toEqual([200, 200, 200]);
    await untilOpenStreams(3);
    const fourth = await post(y, "/v1/chat/completions", chatBody());
    expect(fourth.status).toBe(429);
    expect(((await fourth.json()) as any).error.message).toBe(ACCOUNT_CAP(3));
    upstream.finishHeld();
    for (const r of open) await r.text();
    await gw.app.services.settled();
  });
});

const missing = (await postgresMissing()) ?? (await redisMissing());
const database = useTestDatabase();
const prefix = useRedisPrefix();

if (missing) {
  test.skip(`account limits shared through Redis — skipped: ${missing}`, () => {});
} else {
  describe("shared through Redis: two gateways on one PostgreSQL and one Redis count an account's keys together", () => {
    let stores: SharedStores;
    let a: Gateway, b: Gateway;
    const clients: RedisClient[] = [];
    const limiters: { close(): void }[] = [];
    const gateway = () => {
      const client = new RedisClient(REDIS_URL);
      clients.push(client);
      const limiter = createRedisRateLimiter(REDIS_URL, { prefix });
      limiters.push(limiter);
      return startGateway({ upstreamUrl: upstream.url, retry: { max_retries: 0 }, adminToken: ADMIN, stores, limiter, concurrency: createRedisConcurrency(client, { prefix, leaseMs: 1_500 }) });
    };
    beforeAll(async () => {
      stores = await openPostgresStores(await database(), { ledger: { timeoutMs: 1_000, retryMaxMs: 40 } });
      a = await gateway();
      b = await gateway();
    });
    afterAll(async () => {
      await a?.stop();
      await b?.stop();
      await stores?.close(500);
      for (const c of clients) c.close();
      for (const l of limiters) l.close();
    });

    test("one key on each gateway: the account's rate and its requests under way hold across both; PATCH on one applies on the other", async () => {
      const account = (await (await admin(a, "POST", "/accounts", { name: "shared", credits: 100, rate_limit_per_minute: 4, max_concurrent_requests: 1 })).json()) as any;
      const onA = { url: a.url, key: (await stores.accounts.createKey(account.id, "a"))!.key } as Gateway;
      const onB = { url: b.url, key: (await stores.accounts.createKey(account.id, "b"))!.key } as Gateway;
      const held = await heldThenRefused(onA, onB);
      upstream.finishHeld();
      await held.text();
      await a.app.services.settled();
      // 2 of 4 spent (the held stream and the refusal): two more, on either gateway, then 429.
      expect(await drain(await post(onB, "/v1/chat/completions", chatBody()))).toBe(200);
      expect(await drain(await post(onA, "/v1/chat/completions", chatBody()))).toBe(200);
      const rate = await post(onB, "/v1/chat/completions", chatBody());
      expect(rate.status).toBe(429);
      expect(((await rate.json()) as any).error.message).toStartWith(ACCOUNT_RATE(4));
      // Raised through gateway A; gateway B reads it within its key cache's 2 s.
      expect((await admin(a, "PATCH", `/accounts/${account.id}`, { rate_limit_per_minute: 1_000 })).status).toBe(200);
      let status = 429;
      for (let i = 0; i < 60 && status === 429; i++) {
        status = await drain(await post(onB, "/v1/chat/completions", chatBody()));
        if (status === 429) await Bun.sleep(100);
      }
      expect(status).toBe(200);
      await b.app.services.settled();
    });

    test("Redis takes a key's place and its account's in one script, or neither", async () => {
      const client = new RedisClient(REDIS_URL);
      clients.push(client);
      const store = createRedisConcurrency(client, { prefix, leaseMs: 5_000 });
      try {
        const key = { id: `key_both_${Date.now()}`, limit: 1 };
        const account = { id: `account:acct_both_${Date.now()}`, limit: 2 };
        const first = await store.acquireBoth!(key, account);
        expect("slot" in first).toBe(true);
        // The key is full: refused, and the account's count did not move.
        expect(await store.acquireBoth!(key, account)).toEqual({ full: "first" });
        const sibling = await store.acquireBoth!({ id: `${key.id}_sibling`, limit: 5 }, account);
        expect("slot" in sibling).toBe(true);
        // The account is full now: refused, and the sibling key's count did not move either.
        expect(await store.acquireBoth!({ id: `${key.id}_third`, limit: 5 }, account)).toEqual({ full: "second" });
        expect(await client.send("ZCARD", [`${prefix}conc:${key.id}_third`])).toBe(0);
        expect(await client.send("ZCARD", [`${prefix}conc:${account.id}`])).toBe(2);
        // Given back, both counts drop.
        (first as { slot: { release(): void } }).slot.release();
        for (let i = 0; i < 100 && Number(await client.send("ZCARD", [`${prefix}conc:${account.id}`])) !== 1; i++) await Bun.sleep(5);
        expect(await client.send("ZCARD", [`${prefix}conc:${key.id}`])).toBe(0);
        expect(await client.send("ZCARD", [`${prefix}conc:${account.id}`])).toBe(1);
        (sibling as { slot: { release(): void } }).slot.release();
      } finally {
        store.close();
      }
    });

    test("a key and its account both capped: both places taken in one step; the 429 names whichever was full; a refused request holds neither; an ended one frees both", async () => {
      const account = (await (await admin(a, "POST", "/accounts", { name: "both", credits: 100, max_concurrent_requests: 2 })).json()) as any;
      const one = { url: a.url, key: (await stores.accounts.createKey(account.id, { name: "one", maxConcurrentRequests: 1 }))!.key } as Gateway;
      const other = { url: b.url, key: (await stores.accounts.createKey(account.id, { name: "other", maxConcurrentRequests: 5 }))!.key } as Gateway;
      upstream.reply(HELD);
      const held = await post(one, "/v1/chat/completions", chatBody(true));
      expect(held.status).toBe(200);
      await untilOpenStreams(1);
      const keyFull = await post(one, "/v1/chat/completions", chatBody());
      expect(keyFull.status).toBe(429);
      expect(((await keyFull.json()) as any).error.message).toContain("for this key: at most 1");
      upstream.reply(HELD);
      const second = await post(other, "/v1/chat/completions", chatBody(true));
      expect(second.status).toBe(200);
      await untilOpenStreams(2);
      const accountFull = await post(other, "/v1/chat/completions", chatBody());
      expect(accountFull.status).toBe(429);
      expect(((await accountFull.json()) as any).error.message).toBe(ACCOUNT_CAP(2));
      upstream.finishHeld();
      await held.text();
      await second.text();
      await a.app.services.settled();
      await b.app.services.settled();
      // Both places of both requests are free again, and the refusals left none behind.
      upstream.reply(HELD);
      upstream.reply(HELD);
      const again = await Promise.all([post(one, "/v1/chat/completions", chatBody(true)), post(other, "/v1/chat/completions", chatBody(true))]);
      expect(again.map((r) => r.status)).toEqual([200, 200]);
      await untilOpenStreams(2);
      upstream.finishHeld();
      for (const r of again) await r.text();
      await a.app.services.settled();
      await b.app.services.settled();
    });
  });
}
