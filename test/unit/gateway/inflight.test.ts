import { describe, expect, test } from "bun:test";
import { createInflight, LedgerLostCut, ShutdownCut } from "../../../src/gateway/inflight.ts";

describe("inflight: the shutdown cut", () => {
  test("streams under way are told to end; the cut resolves once every one has ended", async () => {
    const inflight = createInflight();
    const ended: string[] = [];
    const a = () => ended.push("a");
    const b = () => ended.push("b");
    inflight.watch(a);
    inflight.watch(b);
    let resolved = false;
    const cut = inflight.cut().then(() => (resolved = true));
    expect(ended).toEqual(["a", "b"]);
    inflight.unwatch(a);
    await Bun.sleep(1);
    expect(resolved).toBe(false);
    inflight.unwatch(b);
    await cut;
    expect(resolved).toBe(true);
    expect(inflight.cutting).toBe(true);
  });

  test("a stream that starts while the cut waits (its head came meanwhile) is cut too (a review)", async () => {
    const inflight = createInflight();
    const early = () => {};
    inflight.watch(early);
    void inflight.cut();
    let lateEnded = false;
    const late = () => (lateEnded = true);
    inflight.watch(late);
    await Promise.resolve();
    expect(lateEnded).toBe(true);
  });

  test("with no stream under way the cut resolves at once", async () => {
    await createInflight().cut();
  });

  test("whole answers being settled and returned: `delivered` resolves once the last is done (each counted once); closing connections is said", async () => {
    const inflight = createInflight();
    await inflight.delivered();
    const a = inflight.delivering();
    const b = inflight.delivering();
    expect(inflight.deliveringCount).toBe(2);
    let resolved = false;
    const done = inflight.delivered().then(() => (resolved = true));
    a();
    a();
    await Bun.sleep(1);
    expect([inflight.deliveringCount, resolved]).toEqual([1, false]);
    b();
    await done;
    expect(inflight.deliveringCount).toBe(0);
    expect(inflight.connectionsClosed).toBe(false);
    inflight.closeConnections();
    expect(inflight.connectionsClosed).toBe(true);
  });
});

describe("inflight: the fence while the ledger's holds are at risk", () => {
  test("streams under way and calls waiting for a head are cut with the ledger's reason, streams that start meanwhile too; lifted, nothing more is cut and the gateway is not stopping", async () => {
    const inflight = createInflight();
    const ended: string[] = [];
    const reasons: unknown[] = [];
    inflight.onCut((reason) => reasons.push(reason));
    const a = () => ended.push("a");
    inflight.watch(a);
    inflight.fence(true);
    expect(ended).toEqual(["a"]);
    expect(reasons).toHaveLength(1);
    expect(reasons[0]).toBeInstanceOf(LedgerLostCut);
    expect(inflight.reason).toBeInstanceOf(LedgerLostCut);
    expect(inflight.cutting).toBe(false);
    inflight.unwatch(a);
    // A stream that starts while fenced is cut once its loop runs.
    const b = () => ended.push("b");
    inflight.watch(b);
    await Bun.sleep(1);
    expect(ended).toEqual(["a", "b"]);
    inflight.unwatch(b);
    inflight.fence(false);
    const c = () => ended.push("c");
    inflight.watch(c);
    await Bun.sleep(1);
    expect(ended).toEqual(["a", "b"]);
    // The stop that follows says its own words.
    void inflight.cut();
    expect(ended).toEqual(["a", "b", "c"]);
    expect(inflight.reason).not.toBeInstanceOf(LedgerLostCut);
    expect(inflight.reason).toBeInstanceOf(ShutdownCut);
  });
});
