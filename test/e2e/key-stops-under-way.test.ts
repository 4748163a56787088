/**
 * A key that stops being good stops its requests under way at once (docs/decisions.md, "A key that
 * stops being good stops at once", twenty-first session): before each upstream attempt (the first
 * one too, after whatever the request waited for since admission: its body, its parse turn, a
 * near-window count) the request reads its key again through the key cache. Revoked (here, from
 * another connection on the file, or on another gateway of a shared PostgreSQL) or past its expiry,
 * the request ends with admission's 401 and asks no upstream; what it used so far is settled as for
 * any failure (here: nothing, since no answer reached the client).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import net from "node:net";
import { Database } from "bun:sqlite";
import { useFakeUpstream, type Reply } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, startGateway, type Gateway } from "../helpers/gateway.ts";
import { until } from "../helpers/until.ts";
import { scripted } from "../helpers/scripted-answers.ts";
import { RedisClient } from "bun";
import { postgresMissing, REDIS_URL, redisMissing, useRedisPrefix, useTestDatabase } from "../helpers/backends.ts";
import { openPostgresStores, type SharedStores } from "../../src/store/stores.ts";
import { createRedisConcurrency } from "../../src/store/redis/redis-concurrency.ts";

const ADMIN = "admin-keystate-0123456789abcdef0123456789abcd";
const INVALID = "Invalid API key: send a key of the form svc-sk-… in the Authorization (Bearer) or x-api-key header.";
const upstream = useFakeUpstream();

const adminOf = (gw: Gateway) => (method: string, path: string, body?: unknown) =>
  fetch(`${gw.url}/v1/admin${path}`, { method, headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });

/** A new key of the gateway's account (fresh, so one test's revoke leaves the others' key alone). */
async function newKey(gw: Gateway, fields: Record<string, unknown> = {}, accountId = gw.accountId): Promise<{ id: string; key: string }> {
  const res = await adminOf(gw)("POST", `/accounts/${accountId}/keys`, { name: "under-way", ...fields });
  expect(res.status).toBe(201);
  return (await res.json()) as { id: string; key: string };
}

/** The next answer: the role chunk only, held open (the head waits for the first text), then a close: a failure before anything reached the client. */
function holdThenBreak(): void {
  const opening = scripted("openai", { text: "Hi" }) as Extract<Reply, { kind: "sse" }>;
  upstream.reply({ ...opening, chunks: opening.chunks.slice(0, 1), holdOpen: true, afterHold: [] });
}

/** A chat stream with `models` [OPENAI_MODEL, ANTHROPIC_MODEL]: the break of the first falls back to the second, which answers unless the key is refused. */
const fallingBack = (gw: Gateway, key: string) =>
  post(gw, "/v1/chat/completions", { models: [OPENAI_MODEL, ANTHROPIC_MODEL], stream: true, messages: [{ role: "user", content: "hello" }] }, { authorization: `Bearer ${key}` });

/**
 * Holds a request open at its first upstream attempt, runs `stop` (the key stops being good), lets
 * the attempt fail before its first text, and checks that the fallback was not asked: a 401 with
 * admission's words, nothing charged.
 */
async function stopsAtTheFallback(gw: Gateway, key: string, stop: () => Promise<void>): Promise<void> {
  holdThenBreak();
  const balance = await gw.balanceMicro();
  const asked = upstream.requests.length;
  const pending = fallingBack(gw, key);
  await until("the stream is open", 2_000, () => upstream.openStreams() === 1);
  await stop();
  upstream.finishHeld();
  const res = await pending;
  expect(res.status).toBe(401);
  expect(await res.json()).toEqual({ error: { message: INVALID, type: "authentication_error", param: null, code: "invalid_api_key" } });
  // The first model only: the fallback was not asked.
  expect(upstream.requests.length).toBe(asked + 1);
  expect(await gw.balanceMicro()).toBe(balance);
}

describe("a key that stops being good while its request is under way (SQLite)", () => {
  let gw: Gateway;
  beforeAll(async () => {
    gw = await startGateway({ upstreamUrl: upstream.url, adminToken: ADMIN, retry: { max_retries: 0 } });
  });
  afterAll(() => gw?.stop());

  test("revoked by the admin API while its stream waits for its first text: the fallback is not asked, a 401 that costs nothing", async () => {
    const { id, key } = await newKey(gw);
    await stopsAtTheFallback(gw, key, async () => {
      expect((await adminOf(gw)("DELETE", `/keys/${id}`)).status).toBe(200);
    });
  });

  test("an Anthropic client's request gets admission's 401 in Anthropic's shape", async () => {
    const { id, key } = await newKey(gw);
    holdThenBreak();
    const asked = upstream.requests.length;
    const pending = post(gw, "/v1/messages", { model: OPENAI_MODEL, models: [ANTHROPIC_MODEL], max_tokens: 50, stream: true, messages: [{ role: "user", content: "hello" }] }, { authorization: `Bearer ${key}` });
    await until("the stream is open", 2_000, () => upstream.openStreams() === 1);
    expect((await adminOf(gw)("DELETE", `/keys/${id}`)).status).toBe(200);
    upstream.finishHeld();
    const res = await pending;
    expect(res.status).toBe(401);
    // As admission's: the same key meets the same refusal (Claude Code would retry it otherwise).
    expect(res.headers.get("x-should-retry")).toBe("false");
    expect(await res.json()).toEqual({ type: "error", error: { type: "authentication_error", message: INVALID } });
    expect(upstream.requests.length).toBe(asked + 1);
  });

  test("revoked from another connection on the file (the admin CLI, a second gateway): refused at the next attempt, within the change watch", async () => {
    const { id, key } = await newKey(gw);
    const other = new Database(gw.dbPath);
    try {
      await stopsAtTheFallback(gw, key, async () => {
        other.query("UPDATE api_keys SET revoked_at = ? WHERE id = ?").run(Date.now(), id);
      });
    } finally {
      other.close();
    }
  });

  test("past its expiry while its stream waits (nothing dropped from the cache: the key's own expires_at is read): the fallback is not asked", async () => {
    const expiresAt = Date.now() + 1_500;
    const { key } = await newKey(gw, { expires_at: new Date(expiresAt).toISOString() });
    await stopsAtTheFallback(gw, key, async () => {
      await until("the key has expired", 3_000, () => Date.now() > expiresAt + 5, 20);
    });
  });

  test("revoked while its body is still coming: its first attempt is never made, a 401 that holds and costs nothing", async () => {
    const { id, key } = await newKey(gw);
    const balance = await gw.balanceMicro();
    const asked = upstream.requests.length;
    const body = JSON.stringify({ model: OPENAI_MODEL, messages: [{ role: "user", content: "hello ".repeat(200) }] });
    const cut = body.length - 10;
    const port = Number(new URL(gw.url).port);
    const socket = net.connect(port, "127.0.0.1");
    const answer = new Promise<string>((resolve) => {
      let got = "";
      socket.on("data", (d) => (got += d.toString("utf8")));
      socket.on("close", () => resolve(got));
      socket.on("error", () => resolve(got));
    });
    await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
    // The head and most of the body: admission has the key (it runs on the head) and lets it in.
    socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: ${body.length}\r\n\r\n${body.slice(0, cut)}`);
    await Bun.sleep(150);
    expect((await adminOf(gw)("DELETE", `/keys/${id}`)).status).toBe(200);
    socket.write(body.slice(cut));
    const raw = await answer;
    expect(raw.startsWith("HTTP/1.1 401")).toBe(true);
    expect(JSON.parse(raw.slice(raw.indexOf("\r\n\r\n") + 4)).error.message).toBe(INVALID);
    expect(upstream.requests.length).toBe(asked);
    expect(await gw.balanceMicro()).toBe(balance);
    expect((await gw.app.services.ledger.balance(gw.accountId))!.heldMicro).toBe(0);
  });

  test("narrowed to models that leave out the fallback while its stream waits: the fallback is not asked, admission's 403 naming what the key may use", async () => {
    const { id, key } = await newKey(gw);
    holdThenBreak();
    const balance = await gw.balanceMicro();
    const asked = upstream.requests.length;
    const pending = fallingBack(gw, key);
    await until("the stream is open", 2_000, () => upstream.openStreams() === 1);
    expect((await adminOf(gw)("PATCH", `/keys/${id}`, { models: [OPENAI_MODEL] })).status).toBe(200);
    upstream.finishHeld();
    const res = await pending;
    expect(res.status).toBe(403);
    expect(((await res.json()) as any).error).toMatchObject({ type: "permission_error", message: `This API key may not use model: ${ANTHROPIC_MODEL} (it is limited to ${OPENAI_MODEL}). GET /v1/models lists the models it may use.` });
    expect(upstream.requests.length).toBe(asked + 1);
    expect(await gw.balanceMicro()).toBe(balance);
  });

  test("a key that still works: the fallback answers, charged once", async () => {
    const { key } = await newKey(gw);
    holdThenBreak();
    const balance = await gw.balanceMicro();
    const asked = upstream.requests.length;
    const pending = fallingBack(gw, key);
    await until("the stream is open", 2_000, () => upstream.openStreams() === 1);
    upstream.finishHeld();
    const res = await pending;
    expect(res.status).toBe(200);
    expect(await res.text()).toContain("[DONE]");
    expect(upstream.requests.length).toBe(asked + 2);
    expect(await gw.balanceMicro()).toBeLessThan(balance);
  });
});

const missing = (await postgresMissing()) ?? (await redisMissing());
const database = useTestDatabase();
const prefix = useRedisPrefix();
if (missing) {
  test.skip(`a key revoked on another gateway of a shared PostgreSQL and Redis — skipped: ${missing}`, () => {});
} else {
  describe("a key revoked on another gateway of a shared PostgreSQL and Redis", () => {
    const stores: SharedStores[] = [];
    const clients: RedisClient[] = [];
    let a: Gateway, b: Gateway;
    /** Requests under way counted in Redis, by both gateways together. */
    const shared = () => {
      const client = new RedisClient(REDIS_URL);
      clients.push(client);
      return createRedisConcurrency(client, { prefix, leaseMs: 1_500 });
    };
    beforeAll(async () => {
      const url = await database();
      // Each gateway its own key cache, as two processes have; B trusts a lookup for 200 ms.
      stores.push(await openPostgresStores(url, { ledger: { timeoutMs: 1_000, retryMaxMs: 40 } }), await openPostgresStores(url, { keyCacheMs: 200, ledger: { timeoutMs: 1_000, retryMaxMs: 40 } }));
      a = await startGateway({ upstreamUrl: upstream.url, adminToken: ADMIN, retry: { max_retries: 0 }, stores: stores[0], concurrency: shared() });
      b = await startGateway({ upstreamUrl: upstream.url, adminToken: ADMIN, retry: { max_retries: 0 }, stores: stores[1], concurrency: shared() });
    });
    afterAll(async () => {
      await a?.stop();
      await b?.stop();
      for (const s of stores) await s.close(500);
      for (const c of clients) c.close();
    });

    test("its request under way on the other gateway asks no upstream again once that gateway's cached lookup ages out: a 401 that costs nothing, its place in Redis given back", async () => {
      // B's account, one request under way at a time across both gateways; its keys made through A (one database).
      expect((await adminOf(a)("PATCH", `/accounts/${b.accountId}`, { max_concurrent_requests: 1 })).status).toBe(200);
      const { id, key } = await newKey(a, {}, b.accountId);
      const sibling = await newKey(a, {}, b.accountId);
      await stopsAtTheFallback(b, key, async () => {
        expect((await adminOf(a)("DELETE", `/keys/${id}`)).status).toBe(200);
        await Bun.sleep(250);
      });
      await b.app.services.settled();
      // The account's one place is free again: its other key is answered on A.
      const next = await post(a, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "hello" }] }, { authorization: `Bearer ${sibling.key}` });
      expect(next.status).toBe(200);
    });
  });
}
