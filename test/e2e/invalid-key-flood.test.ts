/**
 * Failed API key checks per client address (http/plugins/admission.ts, keyFailures): past the
 * limit a failure is 429 with Retry-After, keys found before still pass, and on a shared key store
 * a throttled address's made-up keys wait for no read while another of its reads is under way. A
 * hostile-tenant probe (thirty-second session): 64 connections of fresh made-up keys took the
 * PostgreSQL pool from another tenant, whose p99 went from 136 to 692 ms.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, startGateway, useGateway, type Gateway } from "../helpers/gateway.ts";
import { postgresMissing, useTestDatabase } from "../helpers/backends.ts";
import { openPostgresStores, type SharedStores } from "../../src/store/stores.ts";
import { createCachedKeyResolver } from "../../src/accounts/key-resolver.ts";
import type { AccountStore } from "../../src/accounts/account-store.ts";

const upstream = useFakeUpstream();
const question = [{ role: "user", content: "Hi" }];
const madeUp = (i: number) => `svc-sk-${String(i).padStart(43, "x")}`;
const asKey = (gw: Gateway, key: string) => ({ url: gw.url, key }) as Gateway;

describe("on SQLite", () => {
  const gw = useGateway(() => ({ upstreamUrl: upstream.url, keyAuthFailures: { limit: 3 } }));

  test("three failures are 401; the next is 429 with Retry-After, Anthropic-shaped on /v1/messages; a good key from the same address still passes", async () => {
    for (let i = 0; i < 3; i++) {
      const res = await post(asKey(gw, madeUp(i)), "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
      expect(res.status).toBe(401);
      await res.arrayBuffer();
    }
    const throttled = await post(asKey(gw, madeUp(3)), "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
    expect(throttled.status).toBe(429);
    expect(Number(throttled.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(((await throttled.json()) as any).error).toMatchObject({ type: "rate_limit_error", message: expect.stringContaining("invalid API keys") });
    const anthropic = await post(asKey(gw, madeUp(4)), "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 5, messages: question }, { "anthropic-version": "2023-06-01" });
    expect(anthropic.status).toBe(429);
    expect(await anthropic.json()).toMatchObject({ type: "error", error: { type: "rate_limit_error" } });
    const good = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
    expect(good.status).toBe(200);
    await good.arrayBuffer();
  });
});

const missing = await postgresMissing();
const database = useTestDatabase();
if (missing) {
  test.skip(`on PostgreSQL — skipped: ${missing}`, () => {});
} else {
  describe("on PostgreSQL (a shared key store)", () => {
    let stores: SharedStores;
    let gw: Gateway;
    const reads = { count: 0, inFlight: 0, most: 0 };
    beforeAll(async () => {
      const opened = await openPostgresStores(await database(), { ledger: { timeoutMs: 1_000, retryMaxMs: 40 } });
      // Every read of a key counted, and slow, as a loaded pool's are: reads under way overlap.
      const accounts = new Proxy(opened.accounts, {
        get(target, name, receiver) {
          if (name !== "findActiveKey") return Reflect.get(target, name, receiver);
          return async (hash: string) => {
            reads.count++;
            reads.most = Math.max(reads.most, ++reads.inFlight);
            try {
              await Bun.sleep(20);
              return await target.findActiveKey(hash);
            } finally {
              reads.inFlight--;
            }
          };
        },
      }) as AccountStore;
      stores = { ...opened, keys: createCachedKeyResolver(accounts, Date.now) };
      gw = await startGateway({ upstreamUrl: upstream.url, stores, keyAuthFailures: { limit: 3 } });
    });
    afterAll(async () => {
      await gw?.stop();
      await stores?.close(500);
    });

    test("a throttled address's keys the gateway has not found before are read one at a time; a new valid key among a flood's gets its turn; a key found before waits for none; past the line, 429 at once", async () => {
      // The good key, found once (and so known to this process).
      expect((await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question })).status).toBe(200);
      for (let i = 0; i < 4; i++) await (await post(asKey(gw, madeUp(100 + i)), "/v1/chat/completions", { model: OPENAI_MODEL, messages: question })).arrayBuffer();
      // A key made now: valid, and never found by this process.
      const fresh = (await stores.accounts.createKey(gw.accountId, { name: "new during the flood" }))!.key;
      reads.most = 0;
      const flood = Array.from({ length: 20 }, (_, i) => post(asKey(gw, madeUp(200 + i)), "/v1/chat/completions", { model: OPENAI_MODEL, messages: question }));
      const newcomer = post(asKey(gw, fresh), "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
      const known = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
      expect(known.status).toBe(200);
      expect((await newcomer).status).toBe(200);
      const statuses = await Promise.all(flood.map(async (r) => (await r).status));
      expect(statuses.every((s) => s === 429)).toBe(true);
      // One read under way at a time for the address.
      expect(reads.most).toBe(1);
      // More at once than the line holds: the rest are refused without waiting.
      const burst = await Promise.all(Array.from({ length: 60 }, (_, i) => post(asKey(gw, madeUp(300 + i)), "/v1/chat/completions", { model: OPENAI_MODEL, messages: question })));
      const said = await Promise.all(burst.map(async (r) => ((await r.json()) as any).error.message as string));
      expect(burst.every((r) => r.status === 429)).toBe(true);
      expect(said.filter((m) => m.includes("at once")).length).toBeGreaterThan(0);
      expect(reads.most).toBe(1);
    }, 30_000);
  });
}
