import { describe, expect, test } from "bun:test";
import { createSettlementQueue, type QueuedSettlement, type SettlementStore } from "../../../src/billing/settlement-queue.ts";
import type { Settlement } from "../../../src/billing/ledger.ts";

/** A store that records each transaction's batch: the queue's scheduling is what is under test. */
function recordingStore() {
  const batches: string[][] = [];
  const store: SettlementStore<QueuedSettlement> = {
    write(batch) {
      batches.push(batch.map((q) => q.settlement.requestId));
    },
    probe() {},
    classify: () => "storage",
    describe: (err) => String(err),
    committed() {},
    dropped() {},
  };
  return { store, batches };
}

const settlement = (requestId: string): Settlement => ({
  requestId, accountId: "acct", keyId: "key", model: "m", provider: "p", promptTokens: 1, completionTokens: 1,
  estimated: false, costMicro: 1, status: "ok", latencyMs: 1,
});

const options = { now: Date.now, log: () => {}, maxQueued: 1_000, busyLimitMs: 1_000, retryMaxMs: 1_000, probeIntervalMs: 60_000 };
const nextTurn = () => new Promise((resolve) => setImmediate(resolve));

describe("group commit's delay (commit_delay / commit_siblings)", () => {
  test("a lone settlement is written at the end of its turn, delay or not", async () => {
    const { store, batches } = recordingStore();
    const queue = createSettlementQueue(store, { ...options, maxBatch: 100, commitDelay: { ms: 1_000, inFlight: () => 1 } });
    const done = queue.enqueue({ settlement: settlement("a") });
    await nextTurn();
    expect(batches).toEqual([["a"]]);
    await done;
    await queue.close(100);
  });

  test("while others are on their way, settlements of several turns wait for each other and share one commit", async () => {
    const { store, batches } = recordingStore();
    const queue = createSettlementQueue(store, { ...options, maxBatch: 100, commitDelay: { ms: 40, inFlight: () => 10 } });
    const started = performance.now();
    const done = [queue.enqueue({ settlement: settlement("a") })];
    await nextTurn();
    done.push(queue.enqueue({ settlement: settlement("b") }));
    await nextTurn();
    done.push(queue.enqueue({ settlement: settlement("c") }));
    expect(batches).toEqual([]);
    await Promise.all(done);
    expect(batches).toEqual([["a", "b", "c"]]);
    // The wait is bounded by the delay (timers fire a little late, never early).
    expect(performance.now() - started).toBeGreaterThanOrEqual(35);
    await queue.close(100);
  });

  test("once every request in flight has settled, the batch goes at the end of that turn, not at the end of the delay", async () => {
    const { store, batches } = recordingStore();
    const queue = createSettlementQueue(store, { ...options, maxBatch: 100, commitDelay: { ms: 60_000, inFlight: () => 3 } });
    const started = performance.now();
    const done = [queue.enqueue({ settlement: settlement("a") })];
    await nextTurn();
    done.push(queue.enqueue({ settlement: settlement("b") }));
    await nextTurn();
    expect(batches).toEqual([]);
    done.push(queue.enqueue({ settlement: settlement("c") }));
    expect(batches).toEqual([]);
    await Promise.all(done);
    expect(batches).toEqual([["a", "b", "c"]]);
    expect(performance.now() - started).toBeLessThan(1_000);
    await queue.close(100);
  });

  test("a full batch does not wait for the delay", async () => {
    const { store, batches } = recordingStore();
    const queue = createSettlementQueue(store, { ...options, maxBatch: 3, commitDelay: { ms: 60_000, inFlight: () => 10 } });
    const done = ["a", "b", "c"].map((id) => queue.enqueue({ settlement: settlement(id) }));
    await Promise.all(done);
    expect(batches).toEqual([["a", "b", "c"]]);
    await queue.close(100);
  });

  test("flush() writes what waits for the delay at once", async () => {
    const { store, batches } = recordingStore();
    const queue = createSettlementQueue(store, { ...options, maxBatch: 100, commitDelay: { ms: 60_000, inFlight: () => 10 } });
    const done = queue.enqueue({ settlement: settlement("a") });
    await queue.flush();
    expect(batches).toEqual([["a"]]);
    await done;
    await queue.close(100);
  });
});

describe("settlements that arrive after the queue closed (an answer that ends while the process stops)", () => {
  test("each is kept in the spill file with all kept before it, durably, before its promise resolves", async () => {
    const spills: string[][] = [];
    let failWrites = true;
    const { store } = recordingStore();
    const failing: SettlementStore<QueuedSettlement> = {
      ...store,
      write(batch) {
        if (failWrites) throw new Error("disk full");
        store.write(batch, [], 0);
      },
      spill(queued) {
        spills.push(queued.map((q) => q.settlement.requestId));
      },
    };
    const logs: string[] = [];
    const queue = createSettlementQueue(failing, { ...options, maxBatch: 100, log: (_level, message) => logs.push(message) });
    const early = queue.enqueue({ settlement: settlement("early") });
    await nextTurn();
    await queue.close(5);
    await early;
    expect(spills).toEqual([["early"]]);
    failWrites = false;
    // Late: not queued where nobody writes it, but kept with what close kept, before it resolves.
    await queue.enqueue({ settlement: settlement("late-1") });
    expect(spills.at(-1)).toEqual(["early", "late-1"]);
    await queue.enqueue({ settlement: settlement("late-2") });
    expect(spills.at(-1)).toEqual(["early", "late-1", "late-2"]);
    expect(logs.filter((m) => m.includes("apply it by hand"))).toEqual([]);
  });

  test("without a spill file the settlement is logged in full and its promise never resolves: its answer does not end as whole", async () => {
    const { store, batches } = recordingStore();
    const logged: { message: string; fields?: Record<string, unknown> }[] = [];
    const queue = createSettlementQueue(store, { ...options, maxBatch: 100, log: (_level, message, fields) => logged.push({ message, fields }) });
    await queue.close(5);
    let resolved = false;
    void queue.enqueue({ settlement: settlement("late") }).then(() => (resolved = true));
    await Bun.sleep(20);
    expect(resolved).toBe(false);
    expect(batches).toEqual([]);
    const line = logged.find((l) => l.message.includes("apply it by hand"))!;
    expect((line.fields!.settlement as Settlement).requestId).toBe("late");
  });
});

describe("lock conflicts", () => {
  /** A store where writes touching a locked account fail as lock conflicts; `storeLocked` makes every write and the probe fail so (SQLite's write lock). */
  function lockingStore() {
    const locked = new Set<string>();
    const written: string[] = [];
    const state = { storeLocked: false };
    const busy = () => Object.assign(new Error("lock timeout"), { busy: true });
    const store: SettlementStore<QueuedSettlement> = {
      write(batch) {
        if (state.storeLocked || batch.some((q) => locked.has(q.settlement.accountId))) throw busy();
        written.push(...batch.map((q) => q.settlement.requestId));
      },
      probe() {
        if (state.storeLocked) throw busy();
      },
      classify: (err) => ((err as { busy?: boolean }).busy ? "busy" : "storage"),
      describe: (err) => String(err),
      committed() {},
      dropped() {},
    };
    return { store, locked, written, state };
  }
  const of = (requestId: string, accountId: string): Settlement => ({ ...settlement(requestId), accountId });

  test("a store that takes no writes (its probe conflicts too) counts as failing past busyLimitMs, and writes again after", async () => {
    const { store, state } = lockingStore();
    const queue = createSettlementQueue(store, { ...options, maxBatch: 100, busyLimitMs: 50 });
    state.storeLocked = true;
    void queue.enqueue({ settlement: of("a1", "a") });
    void queue.enqueue({ settlement: of("b1", "b") });
    for (const until = Date.now() + 2_000; queue.health().writable && Date.now() < until; ) await Bun.sleep(10);
    expect(queue.health().writable).toBe(false);
    state.storeLocked = false;
    await queue.flush();
    for (const until = Date.now() + 2_000; !queue.health().writable && Date.now() < until; ) await Bun.sleep(10);
    expect(queue.health().writable).toBe(true);
    await queue.close(100);
  });
});

describe("stopped at once (a second signal during shutdown)", () => {
  test("what is queued, a batch being written included, is kept in the spill file at once; without one, logged in full; nothing is written after", async () => {
    const spills: string[][] = [];
    let writes = 0;
    const { store } = recordingStore();
    const failing: SettlementStore<QueuedSettlement> = {
      ...store,
      write() {
        writes++;
        throw new Error("disk full");
      },
      spill(queued) {
        spills.push(queued.map((q) => q.settlement.requestId));
      },
    };
    const queue = createSettlementQueue(failing, { ...options, maxBatch: 100 });
    void queue.enqueue({ settlement: settlement("a") });
    void queue.enqueue({ settlement: settlement("b") });
    await nextTurn();
    queue.abandon();
    expect(spills).toEqual([["a", "b"]]);
    const before = writes;
    await Bun.sleep(30);
    expect(writes).toBe(before);

    const logged: unknown[] = [];
    const noSpill = createSettlementQueue({ ...failing, spill: undefined }, { ...options, maxBatch: 100, log: (_level, message, fields) => logged.push({ message, fields }) });
    void noSpill.enqueue({ settlement: settlement("c") });
    await nextTurn();
    noSpill.abandon();
    expect(JSON.stringify(logged)).toContain("apply it by hand");
    expect(JSON.stringify(logged)).toContain('"requestId":"c"');
  });
});

describe("a stop when the store's failure cannot pass (the ledger file replaced, removed, corrupt)", () => {
  test("close() keeps the queue in the spill file at once, instead of retrying through its grace; a failure that may pass is still retried", async () => {
    for (const hopeless of [true, false]) {
      let writes = 0;
      const spills: string[][] = [];
      const failing: SettlementStore<QueuedSettlement> = {
        ...recordingStore().store,
        write() {
          writes++;
          throw Object.assign(new Error(hopeless ? "the ledger file was replaced" : "disk full"), { code: hopeless ? "GONE" : "SQLITE_FULL" });
        },
        spill(queued) {
          spills.push(queued.map((q) => q.settlement.requestId));
        },
        hopeless: (err) => (err as { code?: string }).code === "GONE",
      };
      const queue = createSettlementQueue(failing, { ...options, maxBatch: 100, retryMaxMs: 5 });
      void queue.enqueue({ settlement: settlement("a") });
      await nextTurn();
      const before = writes;
      await queue.close(300);
      // Counted, not timed: the grace's retries are writes.
      if (hopeless) expect(writes - before).toBeLessThanOrEqual(1);
      else expect(writes - before).toBeGreaterThan(3);
      expect(spills.at(-1)).toEqual(["a"]);
    }
  });
});

describe("while the store fails (a kill -9 then must not lose what was delivered whole)", () => {
  /** A store whose writes fail while `state.failing`, with a spill file it can also remove. */
  function failingStore() {
    const state = { failing: true, spillThrows: false };
    const written: string[] = [];
    /** The spill file's content after each rewrite; null after it was removed. */
    const files: (string[] | null)[] = [];
    const store: SettlementStore<QueuedSettlement> = {
      write(batch) {
        if (state.failing) throw new Error("disk full");
        written.push(...batch.map((q) => q.settlement.requestId));
      },
      probe() {
        if (state.failing) throw new Error("disk full");
      },
      classify: () => "storage",
      describe: (err) => String(err),
      committed() {},
      dropped() {},
      spill(queued) {
        if (state.spillThrows) throw new Error("EROFS: read-only file system");
        files.push(queued.map((q) => q.settlement.requestId));
      },
      unspill() {
        files.push(null);
      },
    };
    return { store, state, written, files };
  }
  const free = (requestId: string): Settlement => ({ ...settlement(requestId), costMicro: 0 });

  test("a charge's promise resolves only once every charge queued is in the spill file; free records do not wait; once all is written the file goes", async () => {
    const { store, state, written, files } = failingStore();
    const queue = createSettlementQueue(store, { ...options, maxBatch: 100, retryMaxMs: 5 });
    // Queued before the failure is seen: its write fails, and it is kept before it is released.
    const seenAtA: (string[] | null)[] = [];
    const a = queue.enqueue({ settlement: settlement("a") }).then(() => seenAtA.push(files.at(-1) ?? null));
    await a;
    expect(queue.health().writable).toBe(false);
    expect(seenAtA).toEqual([["a"]]);
    // While failing: a free record is released at once and kept nowhere; a charge waits for the file.
    let freeDone = false;
    void queue.enqueue({ settlement: free("f") }).then(() => (freeDone = true));
    await Promise.resolve();
    expect(freeDone).toBe(true);
    let seenAtB: string[] | null | undefined;
    await queue.enqueue({ settlement: settlement("b") }).then(() => (seenAtB = files.at(-1)));
    expect(seenAtB).toEqual(["a", "b"]);
    // The disk takes writes again: everything is written once and the file removed.
    state.failing = false;
    for (const until = Date.now() + 2_000; (queue.health().queued > 0 || files.at(-1) !== null) && Date.now() < until; ) await Bun.sleep(5);
    expect(written).toEqual(["a", "f", "b"]);
    expect(files.at(-1)).toBeNull();
    expect(files.filter((f) => f === null)).toHaveLength(1);
    await queue.close(50);
  });

  test("when the spill file cannot be written either, a charge waits for the store (up to unkeptWaitMs), and the log says so once", async () => {
    const { store, state, files, written } = failingStore();
    state.spillThrows = true;
    const logs: string[] = [];
    const queue = createSettlementQueue(store, { ...options, maxBatch: 100, retryMaxMs: 5, unkeptWaitMs: 60_000, log: (_level, message) => logs.push(message) });
    let aDone = false;
    const a = queue.enqueue({ settlement: settlement("a") }).then(() => (aDone = true));
    await Bun.sleep(30);
    expect(queue.health().writable).toBe(false);
    // Neither the store nor the file took it: its answer does not end yet.
    expect(aDone).toBe(false);
    expect(files).toEqual([]);
    expect(logs.filter((m) => m.includes("could not be kept in the spill file either"))).toHaveLength(1);
    // The fault clears: it is written, and only then released.
    state.failing = false;
    await a;
    expect(written).toEqual(["a"]);
    await queue.close(50);

    // A fault that lasts: released after unkeptWaitMs, as before (its record waits in memory).
    const second = failingStore();
    second.state.spillThrows = true;
    const waits = createSettlementQueue(second.store, { ...options, maxBatch: 100, retryMaxMs: 5, unkeptWaitMs: 80 });
    const started = performance.now();
    await waits.enqueue({ settlement: settlement("b") });
    expect(performance.now() - started).toBeGreaterThanOrEqual(70);
    expect(waits.health().queued).toBe(1);
    await waits.close(0);
  });
});
