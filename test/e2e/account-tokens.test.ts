/**
 * An account's tokens a minute (limits/token-budget.ts, gateway/token-hold.ts): the vendors' keys
 * are shared by every tenant, and so are their tokens a minute; a tenant sending long prompts back
 * to back used the vendor's minute and the others met its 429. A request is admitted while its
 * account's budget is not in debt; the vendor's count (prompt and answer) is taken when it settles.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { useFakeUpstream, type Reply } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, startGateway, type Gateway } from "../helpers/gateway.ts";
import { postgresMissing, REDIS_URL, redisMissing, useRedisPrefix, useTestDatabase } from "../helpers/backends.ts";
import { openPostgresStores, type SharedStores } from "../../src/store/stores.ts";
import { createRedisRateLimiter } from "../../src/store/redis/redis-rate-limiter.ts";
import { until } from "../helpers/until.ts";

const ADMIN = "admin-account-tokens-0123456789abcdef0123456789";
const upstream = useFakeUpstream();

/** An OpenAI answer whose usage says `prompt` and `completion` tokens. */
const counted = (prompt: number, completion: number): Reply => ({
  kind: "json",
  body: {
    id: "c1", object: "chat.completion", created: 1, model: "gpt-4o-mini",
    choices: [{ index: 0, message: { role: "assistant", content: "Hi" }, finish_reason: "stop" }],
    usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion },
  },
});
const chat = { model: OPENAI_MODEL, messages: [{ role: "user", content: "hello" }] };

const admin = (g: Gateway, method: string, path: string, body?: unknown) =>
  fetch(`${g.url}/v1/admin${path}`, { method, headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });

async function keyOf(g: Gateway, accountId: string): Promise<Gateway> {
  const issued = (await g.app.services.accounts.createKey(accountId, { name: "k" }))!;
  return { url: g.url, key: issued.key, keyId: issued.id } as Gateway;
}

const balanceOf = async (g: Gateway, accountId: string) => ((await (await admin(g, "GET", `/accounts/${accountId}`)).json()) as any).balance as number;

describe("an account's tokens a minute", () => {
  let gw: Gateway;
  beforeAll(async () => {
    gw = await startGateway({ upstreamUrl: upstream.url, retry: { max_retries: 0 }, adminToken: ADMIN, requestsPerMinute: 1_000 });
  });
  afterAll(async () => {
    await gw?.stop();
  });

  test("set by the admin API: once the vendor's counts spend the minute, the account's next request is 429 with Retry-After and OpenAI's token headers, costs nothing and reaches no upstream; another account is served", async () => {
    const made = await admin(gw, "POST", "/accounts", { name: "long prompts", credits: 100, tokens_per_minute: 1_000 });
    expect(made.status).toBe(201);
    const account = (await made.json()) as any;
    expect(account).toMatchObject({ tokens_per_minute: 1_000, rate_limit_per_minute: null });
    const [a, b] = [await keyOf(gw, account.id), await keyOf(gw, account.id)];
    const other = await keyOf(gw, ((await (await admin(gw, "POST", "/accounts", { name: "neighbour", credits: 100 })).json()) as any).id);

    // 900 prompt and 200 answer tokens: the minute's 1,000 are spent (and 100 more).
    upstream.reply(counted(900, 200));
    const first = await post(a, "/v1/chat/completions", chat);
    expect(first.status).toBe(200);
    await first.text();
    const calls = upstream.requests.length;
    const balance = await balanceOf(gw, account.id);

    // Either key of the account: refused.
    for (const key of [a, b]) {
      const refused = await post(key, "/v1/chat/completions", chat);
      expect(refused.status).toBe(429);
      const wait = Number(refused.headers.get("retry-after"));
      // 100 tokens of debt at 1,000 a minute: 6 s.
      expect(wait).toBeGreaterThanOrEqual(5);
      expect(wait).toBeLessThanOrEqual(7);
      expect(refused.headers.get("x-ratelimit-limit-tokens")).toBe("1000");
      expect(refused.headers.get("x-ratelimit-remaining-tokens")).toBe("0");
      expect(refused.headers.get("x-ratelimit-reset-tokens")).toMatch(/^1m6(\.\d+)?s$|^1m5(\.\d+)?s$/);
      const body = (await refused.json()) as any;
      expect(body.error).toMatchObject({ type: "rate_limit_error", code: "rate_limit_exceeded" });
      expect(body.error.message).toContain("1000 prompt and answer tokens a minute");
    }
    // On /v1/messages, in Anthropic's shape.
    const messages = await post(a, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: [{ role: "user", content: "hi" }] });
    expect(messages.status).toBe(429);
    expect(((await messages.json()) as any)).toMatchObject({ type: "error", error: { type: "rate_limit_error" } });
    expect(upstream.requests.length).toBe(calls);
    expect(await balanceOf(gw, account.id)).toBe(balance);

    // The neighbour shares no budget.
    upstream.reply(counted(10, 2));
    expect((await post(other, "/v1/chat/completions", chat)).status).toBe(200);

    // GET /v1/key says what applies.
    const info = (await (await fetch(`${gw.url}/v1/key`, { headers: { authorization: `Bearer ${a.key}` } })).json()) as any;
    expect(info.account.tokens_per_minute).toBe(1_000);

    // Cleared (null: the gateway's default, unset here): served at once.
    const cleared = await admin(gw, "PATCH", `/accounts/${account.id}`, { tokens_per_minute: null });
    expect(cleared.status).toBe(200);
    expect(((await cleared.json()) as any).tokens_per_minute).toBeNull();
    upstream.reply(counted(10, 2));
    expect((await post(b, "/v1/chat/completions", chat)).status).toBe(200);
  });

  test("a request is charged its vendor's count, not its estimate: an answer that used fewer tokens than its body's size gives them back", async () => {
    const account = (await (await admin(gw, "POST", "/accounts", { name: "short answers", credits: 100, tokens_per_minute: 3_000 })).json()) as any;
    const key = await keyOf(gw, account.id);
    // Each body is ~2,400 bytes (about 600 tokens expected); the vendor counts 100. Ten in a row fit
    // 3,000 a minute only because each gives back what it did not use.
    const long = { model: OPENAI_MODEL, messages: [{ role: "user", content: "x ".repeat(1_200) }] };
    for (let i = 0; i < 10; i++) {
      upstream.reply(counted(90, 10));
      const res = await post(key, "/v1/chat/completions", long);
      expect(res.status).toBe(200);
      await res.text();
    }
  });

  test("an upstream failure (502) gives the request's tokens back: it used none", async () => {
    const account = (await (await admin(gw, "POST", "/accounts", { name: "failing vendor", credits: 100, tokens_per_minute: 700 })).json()) as any;
    const key = await keyOf(gw, account.id);
    // ~2,400 bytes each: 600 expected, within 700 only while nothing is kept of the failures.
    const long = { model: OPENAI_MODEL, messages: [{ role: "user", content: "x ".repeat(1_200) }] };
    for (let i = 0; i < 3; i++) {
      upstream.reply({ kind: "json", status: 500, body: { error: { message: "down", type: "server_error" } } });
      const res = await post(key, "/v1/chat/completions", long);
      expect(res.status).toBe(502);
      await res.text();
    }
    upstream.reply(counted(10, 2));
    expect((await post(key, "/v1/chat/completions", long)).status).toBe(200);
  });

  test("counted as each vendor counts its own tokens a minute: cache reads count on an OpenAI-kind model, not on an Anthropic-kind one", async () => {
    const long = (model: string) => ({ model, max_tokens: 50, messages: [{ role: "user", content: "x ".repeat(6_000) }] });
    // 3,000 prompt tokens of which 2,500 cached, 10 answered: 3,010 of OpenAI's minute.
    const openaiAccount = (await (await admin(gw, "POST", "/accounts", { name: "cached on openai", credits: 100, tokens_per_minute: 2_000 })).json()) as any;
    const onOpenAI = await keyOf(gw, openaiAccount.id);
    upstream.reply({ kind: "json", body: { ...(counted(3_000, 10) as any).body, usage: { prompt_tokens: 3_000, completion_tokens: 10, total_tokens: 3_010, prompt_tokens_details: { cached_tokens: 2_500 } } } });
    expect((await post(onOpenAI, "/v1/chat/completions", long(OPENAI_MODEL))).status).toBe(200);
    expect((await post(onOpenAI, "/v1/chat/completions", long(OPENAI_MODEL))).status).toBe(429);
    // The same on Anthropic: 500 fresh, 2,500 read from the cache, 10 answered: 510 of its minute.
    const anthropicAccount = (await (await admin(gw, "POST", "/accounts", { name: "cached on anthropic", credits: 100, tokens_per_minute: 2_000 })).json()) as any;
    const onAnthropic = await keyOf(gw, anthropicAccount.id);
    for (let i = 0; i < 2; i++) {
      upstream.reply({ kind: "json", body: {
        id: "msg_1", type: "message", role: "assistant", model: "claude", content: [{ type: "text", text: "Hi" }], stop_reason: "end_turn", stop_sequence: null,
        usage: { input_tokens: 500, cache_read_input_tokens: 2_500, cache_creation_input_tokens: 0, output_tokens: 10 },
      } });
      const res = await post(onAnthropic, "/v1/messages", long(ANTHROPIC_MODEL));
      expect(res.status).toBe(200);
      await res.text();
    }
  });

  test("bad values are 400s naming the field", async () => {
    for (const tokens of [0, -5, 1.5, "100", 2_000_000_000]) {
      const res = await admin(gw, "POST", "/accounts", { name: "bad", credits: 1, tokens_per_minute: tokens });
      expect(res.status).toBe(400);
      expect(((await res.json()) as any).error.message).toContain("tokens_per_minute");
    }
  });
});

describe("limits.account_tokens_per_minute: the default for accounts without their own", () => {
  let gw: Gateway;
  beforeAll(async () => {
    gw = await startGateway({ upstreamUrl: upstream.url, retry: { max_retries: 0 }, adminToken: ADMIN, requestsPerMinute: 1_000, limits: { account_tokens_per_minute: 500 } });
  });
  afterAll(async () => {
    await gw?.stop();
  });

  test("applies to every account without its own; an account's own limit wins", async () => {
    const plain = (await (await admin(gw, "POST", "/accounts", { name: "plain", credits: 100 })).json()) as any;
    const big = (await (await admin(gw, "POST", "/accounts", { name: "big", credits: 100, tokens_per_minute: 100_000 })).json()) as any;
    const [p, q] = [await keyOf(gw, plain.id), await keyOf(gw, big.id)];
    for (const key of [p, q]) {
      upstream.reply(counted(500, 100));
      expect((await post(key, "/v1/chat/completions", chat)).status).toBe(200);
    }
    expect((await post(p, "/v1/chat/completions", chat)).status).toBe(429);
    upstream.reply(counted(5, 1));
    expect((await post(q, "/v1/chat/completions", chat)).status).toBe(200);
    const info = (await (await fetch(`${gw.url}/v1/key`, { headers: { authorization: `Bearer ${p.key}` } })).json()) as any;
    expect(info.account.tokens_per_minute).toBe(500);
  });
});

const missing = (await postgresMissing()) ?? (await redisMissing());
const database = useTestDatabase();
const prefix = useRedisPrefix();

if (missing) {
  test.skip(`an account's tokens a minute shared through Redis — skipped: ${missing}`, () => {});
} else {
  describe("shared through Redis: two gateways on one PostgreSQL and one Redis", () => {
    let stores: SharedStores;
    let a: Gateway, b: Gateway;
    const limiters: { close(): void }[] = [];
    const gateway = () => {
      const limiter = createRedisRateLimiter(REDIS_URL, { prefix });
      limiters.push(limiter);
      return startGateway({ upstreamUrl: upstream.url, retry: { max_retries: 0 }, adminToken: ADMIN, stores, limiter });
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
      for (const l of limiters) l.close();
    });

    test("the minute's tokens spent through one gateway refuse the account on the other; what one gives back, the other admits", async () => {
      const account = (await (await admin(a, "POST", "/accounts", { name: "shared tokens", credits: 100, tokens_per_minute: 1_000 })).json()) as any;
      const onA = { url: a.url, key: (await stores.accounts.createKey(account.id, "a"))!.key } as Gateway;
      const onB = { url: b.url, key: (await stores.accounts.createKey(account.id, "b"))!.key } as Gateway;
      // (A vendor's prompt count is taken up to what the prompt could be: billedPromptMax.)
      upstream.reply(counted(900, 200));
      const spent = await post(onA, "/v1/chat/completions", chat);
      expect(spent.status).toBe(200);
      await spent.text();
      await a.app.services.settled();
      // The count goes to Redis as the answer ends, not awaited by it: seen there (a zero-token
      // settlement reads the budget, refilled, and changes nothing) before B is asked.
      const observer = createRedisRateLimiter(REDIS_URL, { prefix });
      limiters.push(observer);
      await until("A's count in Redis", 5_000, async () => (await observer.spend(`account:${account.id}`, 1_000, 0, "settle")).remaining === 0);
      const refused = await post(onB, "/v1/chat/completions", chat);
      expect(refused.status).toBe(429);
      expect(refused.headers.get("x-ratelimit-limit-tokens")).toBe("1000");
      await refused.text();
      // Given more room through gateway B's PATCH: served on A once its key cache reads it (2 s).
      expect((await admin(b, "PATCH", `/accounts/${account.id}`, { tokens_per_minute: 1_000_000 })).status).toBe(200);
      let status = 429;
      for (let i = 0; i < 60 && status === 429; i++) {
        upstream.reply(counted(5, 1));
        const res = await post(onA, "/v1/chat/completions", chat);
        status = res.status;
        await res.text();
        if (status === 429) await Bun.sleep(100);
      }
      expect(status).toBe(200);
      await a.app.services.settled();
    });
  });
}
