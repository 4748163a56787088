/**
 * Issue 32 item 4: `max_concurrent_requests` per key. A key's requests are counted from admission
 * to settlement — a stream until it ends — and one more than the cap is a 429 in the route's
 * error shape. The place is given back on every path: a completed answer, an upstream failure,
 * a client that went away.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { RedisClient } from "bun";
import { useFakeUpstream, type Reply } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, startGateway, useGateway, type Gateway } from "../helpers/gateway.ts";
import { closedPort, postgresMissing, REDIS_URL, redisMissing, useRedisPrefix, useTestDatabase } from "../helpers/backends.ts";
import { openPostgresStores, type SharedStores } from "../../src/store/stores.ts";
import { createRedisConcurrency } from "../../src/store/redis/redis-concurrency.ts";
import { until } from "../helpers/until.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, retry: { max_retries: 0 } }));

/** An OpenAI stream that sends its first chunk and then stays open until `finishHeld()` or the client leaves. */
const HELD: Reply = {
  kind: "sse",
  holdOpen: true,
  chunks: [`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}\n\n`],
};
/** The same, let go by `finishHeld()`: the rest of a normal answer, then `[DONE]`. */
const HELD_THEN_DONE: Reply = {
  ...HELD,
  afterHold: [
    `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n`,
    `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}\n\n`,
    "data: [DONE]\n\n",
  ],
};
const chatBody = (stream: boolean) => ({ model: OPENAI_MODEL, stream, messages: [{ role: "user", content: "hello" }] });

async function keyWith(g: Gateway, maxConcurrentRequests: number | null): Promise<Gateway> {
  const issued = (await g.app.services.accounts.createKey(g.accountId, { name: "capped", maxConcurrentRequests }))!;
  // The fixture is a proxy: its fields are read one by one, not spread.
  return { url: g.url, key: issued.key, keyId: issued.id } as Gateway;
}

/** Waits (by polling a count, not a clock) until the fake upstream has `n` streams open. */
async function untilOpenStreams(n: number): Promise<void> {
  for (let i = 0; i < 2_000 && upstream.openStreams() !== n; i++) await Bun.sleep(5);
  expect(upstream.openStreams()).toBe(n);
}

const OPENAI_429 = (limit: number) => ({
  error: {
    message: `Too many requests at once for this key: at most ${limit} may be under way (max_concurrent_requests), streams included until they end. Retry when one of them has finished.`,
    type: "rate_limit_error", param: null, code: "rate_limit_exceeded",
  },
});

test("the cap holds with concurrent slow streams: the next request, streamed or not, on any route, is a 429 in that route's shape; other keys are not affected", async () => {
  const capped = await keyWith(gw, 3);
  const streams: Response[] = [];
  for (let i = 0; i < 3; i++) {
    upstream.reply(HELD);
    const res = await post(capped, "/v1/chat/completions", chatBody(true));
    expect(res.status).toBe(200);
    streams.push(res);
  }
  await untilOpenStreams(3);
  const before = upstream.requests.length;

  const streamed = await post(capped, "/v1/chat/completions", chatBody(true));
  expect(streamed.status).toBe(429);
  expect(streamed.headers.get("retry-after")).toBe("1");
  expect(await streamed.json()).toEqual(OPENAI_429(3));
  const plain = await post(capped, "/v1/chat/completions", chatBody(false));
  expect(plain.status).toBe(429);
  await plain.text();
  const messages = await post(capped, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, messages: [{ role: "user", content: "hello" }] });
  expect(messages.status).toBe(429);
  expect(await messages.json()).toEqual({ type: "error", error: { type: "rate_limit_error", message: OPENAI_429(3).error.message } });
  const responses = await post(capped, "/v1/responses", { model: OPENAI_MODEL, input: "hello" });
  expect(responses.status).toBe(429);
  await responses.text();
  // Nothing refused reached the upstream.
  expect(upstream.requests.length).toBe(before);

  // The account's other key has no cap: answered while the capped one is full.
  const other = await post(gw, "/v1/chat/completions", chatBody(false));
  expect(other.status).toBe(200);
  await other.text();

  upstream.finishHeld();
  for (const s of streams) await s.text();
  await gw.app.services.settled();
});

test("a released place is reused: sequential answers never hit the cap, and the place a finished stream held is free for the next request", async () => {
  const capped = await keyWith(gw, 1);
  for (let i = 0; i < 5; i++) {
    const res = await post(capped, "/v1/chat/completions", chatBody(i % 2 === 0));
    expect(res.status).toBe(200);
    await res.text();
    await gw.app.services.settled();
  }
  upstream.reply(HELD_THEN_DONE);
  const held = await post(capped, "/v1/chat/completions", chatBody(true));
  expect(held.status).toBe(200);
  await untilOpenStreams(1);
  const refused = await post(capped, "/v1/chat/completions", chatBody(false));
  expect(refused.status).toBe(429);
  await refused.text();
  upstream.finishHeld();
  // Given back when the stream is settled, before its last frame: read to its end, the place is free.
  expect(await held.text()).toEndWith("data: [DONE]\n\n");
  const after = await post(capped, "/v1/chat/completions", chatBody(false));
  expect(after.status).toBe(200);
  await after.text();
});

test("an aborted client frees its place; so does an upstream failure", async () => {
  const capped = await keyWith(gw, 1);
  upstream.reply(HELD);
  const controller = new AbortController();
  const held = await post(capped, "/v1/chat/completions", chatBody(true), {}, controller.signal);
  expect(held.status).toBe(200);
  await untilOpenStreams(1);
  expect((await post(capped, "/v1/chat/completions", chatBody(false))).status).toBe(429);
  controller.abort();
  await held.text().catch(() => {});
  // Settled once the gateway saw the client go: its place with it.
  await gw.app.services.settled();
  const next = await post(capped, "/v1/chat/completions", chatBody(false));
  expect(next.status).toBe(200);
  await next.text();

  upstream.reply({ kind: "json", status: 500, body: { error: { message: "boom", type: "server_error" } } });
  const failed = await post(capped, "/v1/chat/completions", chatBody(false));
  expect(failed.status).toBe(502);
  await failed.text();
  await gw.app.services.settled();
  const again = await post(capped, "/v1/chat/completions", chatBody(false));
  expect(again.status).toBe(200);
  await again.text();
});

describe("limits.max_concurrent_requests: the default for keys without their own", () => {
  let withDefault: Gateway;
  beforeAll(async () => {
    withDefault = await startGateway({ upstreamUrl: upstream.url, retry: { max_retries: 0 }, maxConcurrentRequests: 1 });
  });
  afterAll(async () => {
    await withDefault?.stop();
  });

  test("a key without its own cap has the default; a key's own cap wins; GET /v1/key says which applies", async () => {
    const keyInfo = async (g: Pick<Gateway, "url" | "key">) => ((await (await fetch(`${g.url}/v1/key`, { headers: { authorization: `Bearer ${g.key}` } })).json()) as any).key.max_concurrent_requests;
    expect(await keyInfo(withDefault)).toBe(1);
    upstream.reply(HELD);
    const held = await post(withDefault, "/v1/chat/completions", chatBody(true));
    expect(held.status).toBe(200);
    await untilOpenStreams(1);
    const refused = await post(withDefault, "/v1/chat/completions", chatBody(false));
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as any).error.message).toContain("at most 1 may be under way");

    const own = await keyWith(withDefault, 2);
    expect(await keyInfo(own)).toBe(2);
    upstream.reply(HELD);
    const first = await post(own, "/v1/chat/completions", chatBody(true));
    expect(first.status).toBe(200);
    await untilOpenStreams(2);
    const second = await post(own, "/v1/chat/completions", chatBody(false));
    expect(second.status).toBe(200);
    await second.text();
    upstream.finishHeld();
    await held.text();
    await first.text();
    await withDefault.app.services.settled();
  });
});

test("a shared count that cannot be read refuses capped keys with 503 (never admits them uncounted); keys without a cap do not ask it", async () => {
  const client = new RedisClient(`redis://127.0.0.1:${closedPort()}`, { connectionTimeout: 200, autoReconnect: false, enableOfflineQueue: false });
  const down = await startGateway({ upstreamUrl: upstream.url, retry: { max_retries: 0 }, concurrency: createRedisConcurrency(client, { timeoutMs: 200 }) });
  try {
    const capped = await keyWith(down, 2);
    const refused = await post(capped, "/v1/chat/completions", chatBody(false));
    expect(refused.status).toBe(503);
    expect(refused.headers.get("retry-after")).toBe("5");
    expect(((await refused.json()) as any).error).toEqual({
      message: "The gateway cannot check this key's requests under way right now. Retry in a few seconds.", type: "server_error", param: null, code: null,
    });
    const uncapped = await post(down, "/v1/chat/completions", chatBody(false));
    expect(uncapped.status).toBe(200);
    await uncapped.text();
  } finally {
    await down.stop();
    client.close();
  }
});

const missing = (await postgresMissing()) ?? (await redisMissing());
const database = useTestDatabase();
const prefix = useRedisPrefix();

if (missing) {
  test.skip(`max_concurrent_requests shared through Redis — skipped: ${missing}`, () => {});
} else {
  describe("shared through Redis: two gateways on one PostgreSQL and one Redis count a key's requests together", () => {
    let stores: SharedStores;
    let a: Gateway, b: Gateway;
    const clients: RedisClient[] = [];
    const shared = () => {
      const client = new RedisClient(REDIS_URL);
      clients.push(client);
      return createRedisConcurrency(client, { prefix, leaseMs: 1_500 });
    };
    beforeAll(async () => {
      stores = await openPostgresStores(await database(), { ledger: { timeoutMs: 1_000, retryMaxMs: 40 } });
      a = await startGateway({ upstreamUrl: upstream.url, retry: { max_retries: 0 }, stores, concurrency: shared() });
      b = await startGateway({ upstreamUrl: upstream.url, retry: { max_retries: 0 }, stores, concurrency: shared() });
    });
    afterAll(async () => {
      await a?.stop();
      await b?.stop();
      await stores?.close(500);
      for (const c of clients) c.close();
    });

    test("the cap holds across both; a stream ended or aborted on one frees its place for the other", async () => {
      const issued = (await stores.accounts.createKey(a.accountId, { name: "shared", maxConcurrentRequests: 2 }))!;
      const onA = { url: a.url, key: issued.key } as Gateway;
      const onB = { url: b.url, key: issued.key } as Gateway;
      upstream.reply(HELD);
      const first = await post(onA, "/v1/chat/completions", chatBody(true));
      expect(first.status).toBe(200);
      upstream.reply(HELD);
      const controller = new AbortController();
      const second = await post(onB, "/v1/chat/completions", chatBody(true), {}, controller.signal);
      expect(second.status).toBe(200);
      await untilOpenStreams(2);
      for (const g of [onA, onB]) {
        const refused = await post(g, "/v1/chat/completions", chatBody(false));
        expect(refused.status).toBe(429);
        expect(((await refused.json()) as any).error.message).toContain("at most 2 may be under way");
      }
      controller.abort();
      await second.text().catch(() => {});
      await b.app.services.settled();
      const reused = await post(onA, "/v1/chat/completions", chatBody(false));
      expect(reused.status).toBe(200);
      await reused.text();
      upstream.finishHeld();
      await first.text();
      await a.app.services.settled();
      // Both places are free again: two at once are admitted.
      upstream.reply(HELD);
      upstream.reply(HELD);
      const [x, y] = await Promise.all([post(onA, "/v1/chat/completions", chatBody(true)), post(onB, "/v1/chat/completions", chatBody(true))]);
      expect([x.status, y.status]).toEqual([200, 200]);
      upstream.finishHeld();
      await x.text();
      await y.text();
      await a.app.services.settled();
      await b.app.services.settled();
    });

    test("an acquire Redis answered too late takes no place: it is given back once Redis runs it, not left to its lease", async () => {
      const client = new RedisClient(REDIS_URL);
      clients.push(client);
      const conc = createRedisConcurrency(client, { prefix, timeoutMs: 100, leaseMs: 30_000 });
      const pauser = new RedisClient(REDIS_URL);
      clients.push(pauser);
      // Redis holds every command for 400 ms: the acquire times out here, and runs after.
      await pauser.send("CLIENT", ["PAUSE", "400", "ALL"]);
      await expect(conc.acquire("key_paused", 1)).rejects.toThrow(/within 100 ms/);
      // Redis runs it once the pause ends; the place it took is given back right after.
      await Bun.sleep(400);
      await until("the late place given back", 5_000, async () => conc.unreturned() === 0 && Number(await pauser.send("ZCARD", [`${prefix}conc:key_paused`])) === 0);
      const slot = await conc.acquire("key_paused", 1);
      expect(slot).not.toBeNull();
      slot!.release();
      await until("the release confirmed", 2_000, () => conc.unreturned() === 0);
      conc.close();
    });

    test("a graceful stop gives every place back before its connection closes: the next process finds the key's places free", async () => {
      const client = new RedisClient(REDIS_URL);
      const conc = createRedisConcurrency(client, { prefix, leaseMs: 30_000 });
      const ended = (await conc.acquire("key_stop", 2))!;
      expect(await conc.acquire("key_stop", 2)).not.toBeNull(); // still held at the stop (a request cut)
      ended.release();
      // As index.ts stops: the store closed, then at once the connection its ZREMs go over.
      await conc.close();
      client.close();
      const reader = new RedisClient(REDIS_URL);
      clients.push(reader);
      expect(Number(await reader.send("ZCARD", [`${prefix}conc:key_stop`]))).toBe(0);
    });

    test("places Redis forgot (restarted empty, failed over) are put back by the next renewal while their requests run; a released one is not (a scale-out probe: a key capped at 2 ran 4)", async () => {
      const conc = shared();
      const reader = new RedisClient(REDIS_URL);
      clients.push(reader);
      const set = `${prefix}conc:key_forgotten`;
      const first = (await conc.acquire("key_forgotten", 2))!;
      const second = (await conc.acquire("key_forgotten", 2))!;
      expect([first, second].every((slot) => slot !== null)).toBe(true);
      // Redis loses its data.
      await reader.send("DEL", [set]);
      second.release();
      // One renewal round later (a third of the 1.5 s lease) the running request counts again; the released one does not.
      await until("the running place put back", 3_000, async () => Number(await reader.send("ZCARD", [set])) === 1);
      await Bun.sleep(700);
      expect(Number(await reader.send("ZCARD", [set]))).toBe(1);
      const third = (await conc.acquire("key_forgotten", 2))!;
      expect(third).not.toBeNull();
      expect(await conc.acquire("key_forgotten", 2)).toBeNull();
      first.release();
      third.release();
      await conc.close();
    });

    test("a place put back after Redis forgot it is sent whole (EVAL), never by hash: a NOSCRIPT answer's fallback would go after a release sent meanwhile (a review)", async () => {
      const real = new RedisClient(REDIS_URL);
      clients.push(real);
      const sent: string[] = [];
      const client = new Proxy(real, {
        get(target, prop) {
          if (prop !== "send") return Reflect.get(target, prop);
          return (cmd: string, args: string[]) => {
            if (args.at(-1) === "1" && (cmd === "EVAL" || cmd === "EVALSHA")) sent.push(cmd);
            return target.send(cmd, args);
          };
        },
      }) as RedisClient;
      const conc = createRedisConcurrency(client, { prefix, leaseMs: 600 });
      const slot = (await conc.acquire("key_whole", 1))!;
      await real.send("DEL", [`${prefix}conc:key_whole`]);
      await until("the place put back", 3_000, () => sent.length > 0);
      expect(sent.every((cmd) => cmd === "EVAL")).toBe(true);
      slot.release();
      await conc.close();
    });

    test("a process that died holding places (no release) frees them when their lease runs out; a live one renews its own", async () => {
      // A process that dies: its connection gone, its places never given back (a stop would give them back).
      const deadClient = new RedisClient(REDIS_URL);
      const dead = createRedisConcurrency(deadClient, { prefix, leaseMs: 1_500 });
      const live = shared();
      expect(await dead.acquire("key_leases", 2)).not.toBeNull();
      const kept = (await live.acquire("key_leases", 2))!;
      expect(kept).not.toBeNull();
      expect(await live.acquire("key_leases", 2)).toBeNull();
      deadClient.close();
      await dead.close(0);
      // Polls until the dead process's lease lapsed (Redis's own clock); the live place is renewed meanwhile.
      let again = null;
      for (let i = 0; i < 200 && again === null; i++) {
        await Bun.sleep(50);
        again = await live.acquire("key_leases", 2);
      }
      expect(again).not.toBeNull();
      // The live process's first place outlived several leases: it was renewed, so the cap is full.
      expect(await live.acquire("key_leases", 2)).toBeNull();
      kept.release();
      again!.release();
      live.close();
    });
  });
}
