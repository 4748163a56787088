import { afterAll, describe, expect, test } from "bun:test";
import { RedisClient } from "bun";
import type { KeyState, KeyStateStore } from "../../src/providers/key-pool.ts";
import { createMemoryKeyState } from "../../src/store/memory/memory-key-state.ts";
import { createRedisKeyState } from "../../src/store/redis/redis-key-state.ts";
import { closedPort, REDIS_URL, redisMissing, useRedisPrefix } from "../helpers/backends.ts";

/**
 * The KeyStateStore port (providers/key-pool.ts), one suite for every implementation: this
 * process's memory, and Redis (two clients on one Redis stand for two gateway processes).
 */

const cooling: KeyState = { coolUntil: 2_000, cooledAt: 1_000, strikes: 1, disabledAt: 0, probeAt: 0, probeFailures: 0 };
const disabled: KeyState = { coolUntil: 0, cooledAt: 0, strikes: 0, disabledAt: 1_000, probeAt: 2_000, probeFailures: 2 };

function contract(name: string, make: () => Promise<{ a: KeyStateStore; b: KeyStateStore; clock: { now: number } }>) {
  describe(name, () => {
    test("a key's state is kept, replaced and cleared; another provider's keys are apart", async () => {
      const { a, b } = await make();
      expect((await a.read("p", undefined)).states.size).toBe(0);
      await a.write("p", "K1", cooling);
      await a.write("p", "K2", disabled);
      expect([...(await b.read("p", undefined)).states].sort()).toEqual([["K1", cooling], ["K2", disabled]]);
      expect((await b.read("q", undefined)).states.size).toBe(0);
      await b.write("p", "K1", undefined);
      expect([...(await a.read("p", undefined)).states]).toEqual([["K2", disabled]]);
    });

    test("a state's key fingerprint is kept with it", async () => {
      const { a, b } = await make();
      const marked: KeyState = { ...cooling, fp: "0123456789ab" };
      await a.write("p", "K9", marked);
      expect((await b.read("p", undefined)).states.get("K9")).toEqual(marked);
    });

    test("an update changes the state held now, not one read before: another process's write meanwhile is kept, and changes made at once from two processes all count", async () => {
      const { a, b } = await make();
      const stale = (await b.read("p", undefined)).states.get("K4");
      expect(stale).toBeUndefined();
      await a.write("p", "K4", cooling);
      // B decides from what the store holds at the update, not from its stale read.
      expect(await b.update("p", "K4", (current) => current ?? disabled)).toEqual(cooling);
      expect((await a.read("p", undefined)).states.get("K4")).toEqual(cooling);
      const strike = (current: KeyState | undefined): KeyState => ({ ...cooling, strikes: (current?.strikes ?? 0) + 1 });
      await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? a : b).update("p", "K5", strike)));
      expect((await b.read("p", undefined)).states.get("K5")!.strikes).toBe(20);
      expect(await a.update("p", "K5", () => undefined)).toBeUndefined();
      expect((await b.read("p", undefined)).states.has("K5")).toBe(false);
    });

    test("a session's binding is read with the states; moving it replaces it", async () => {
      const { a, b } = await make();
      expect((await a.read("p", "s1")).bound).toBeUndefined();
      await a.bind("p", "s1", "K1");
      expect((await b.read("p", "s1")).bound).toBe("K1");
      await b.bind("p", "s1", "K2");
      expect((await a.read("p", "s1")).bound).toBe("K2");
      expect((await a.read("q", "s1")).bound).toBeUndefined();
    });

    test("one claimant probes a key at a time; once the claim runs out, another may", async () => {
      const { a, b, clock } = await make();
      expect(await a.claimProbe("p", "K1", clock.now + 150)).toBe(true);
      expect(await b.claimProbe("p", "K1", clock.now + 150)).toBe(false);
      expect(await b.claimProbe("p", "K2", clock.now + 150)).toBe(true);
      clock.now += 200;
      await Bun.sleep(200);
      expect(await b.claimProbe("p", "K1", clock.now + 150)).toBe(true);
    });

    test("a claim released by its claimant (its probe is done) can be taken at once", async () => {
      const { a, b, clock } = await make();
      expect(await a.claimProbe("p", "K3", clock.now + 60_000)).toBe(true);
      expect(await b.claimProbe("p", "K3", clock.now + 60_000)).toBe(false);
      await a.releaseProbe("p", "K3");
      expect(await b.claimProbe("p", "K3", clock.now + 60_000)).toBe(true);
    });
  });
}


contract("memory", async () => {
  const clock = { now: 1_000 };
  const store = createMemoryKeyState({ now: () => clock.now });
  return { a: store, b: store, clock };
});

test("memory: the affinity table is bounded, least recently used out first", () => {
  const store = createMemoryKeyState({ now: () => 0, maxSessions: 2 });
  store.bind("p", "s1", "K1");
  store.bind("p", "s2", "K1");
  expect((store.read("p", "s1") as { bound?: string }).bound).toBe("K1");
  store.bind("p", "s3", "K2");
  expect((store.read("p", "s2") as { bound?: string }).bound).toBeUndefined();
  expect((store.read("p", "s1") as { bound?: string }).bound).toBe("K1");
});

const missing = await redisMissing();
if (missing) {
  test.skip(`redis — skipped: ${missing}`, () => {});
} else {
  const prefix = useRedisPrefix();
  const opened: { close(): void }[] = [];
  afterAll(() => opened.forEach((s) => s.close()));
  let run = 0;
  contract("redis", async () => {
    // Each test on providers of its own: a run's keys never meet another's.
    const own = `${prefix}${++run}:`;
    const clock = { now: Date.now() };
    const a = createRedisKeyState(REDIS_URL, { prefix: own, now: () => clock.now });
    const b = createRedisKeyState(REDIS_URL, { prefix: own, now: () => clock.now });
    opened.push(a, b);
    expect(await a.ready()).toBe(true);
    expect(await b.ready()).toBe(true);
    return { a, b, clock };
  });

  test("redis: states written by older releases (five numbers) and by later ones (more fields) are read", async () => {
    const own = `${prefix}formats:`;
    const store = createRedisKeyState(REDIS_URL, { prefix: own, now: () => 0 });
    opened.push(store);
    expect(await store.ready()).toBe(true);
    const raw = new RedisClient(REDIS_URL);
    try {
      await raw.send("HSET", [`${own}kp:p:keys`, "OLD", "2000:1:0:0:0", "NEXT", "2000:1:0:0:0:1000:0123456789ab:some-later-field"]);
      const view = await store.read("p", undefined);
      expect(view.states.get("OLD")).toEqual({ coolUntil: 2_000, cooledAt: 0, strikes: 1, disabledAt: 0, probeAt: 0, probeFailures: 0 });
      expect(view.states.get("NEXT")).toEqual({ coolUntil: 2_000, cooledAt: 1_000, strikes: 1, disabledAt: 0, probeAt: 0, probeFailures: 0, fp: "0123456789ab" });
    } finally {
      raw.close();
    }
  });

  test("redis: a Redis that does not answer leaves each process its own view (fail open), never an error", async () => {
    const store = createRedisKeyState(`redis://127.0.0.1:${closedPort()}`, { now: () => 0, log: () => {} });
    opened.push(store);
    await store.write("p", "K1", cooling);
    await store.bind("p", "s1", "K2");
    const view = await store.read("p", "s1");
    expect([...view.states]).toEqual([["K1", cooling]]);
    expect(view.bound).toBe("K2");
    expect(await store.claimProbe("p", "K1", 100)).toBe(true);
  });
}
