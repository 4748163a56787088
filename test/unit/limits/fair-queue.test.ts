import { describe, expect, test } from "bun:test";
import { createFairQueue } from "../../../src/limits/fair-queue.ts";

/** Serves the queue to the end, one turn per item (each finished in its turn); the order served. */
function drain(queue: ReturnType<typeof createFairQueue<string>>): string[] {
  const served: string[] = [];
  for (let turn = queue.next(); turn; turn = queue.next()) {
    served.push(turn.item);
    queue.remove(turn.key, turn.item);
  }
  return served;
}

describe("fair queue", () => {
  test("one key's flood of 100: another key's single item is served second", () => {
    const queue = createFairQueue<string>({ capacity: 1000, perKey: 1000 });
    for (let i = 1; i <= 100; i++) expect(queue.push("B", `B${i}`)).toBe("queued");
    expect(queue.push("A", "A1")).toBe("queued");
    const served = drain(queue);
    expect(served.indexOf("A1")).toBe(1);
    expect(served.filter((s) => s.startsWith("B"))).toEqual(Array.from({ length: 100 }, (_, i) => `B${i + 1}`));
  });

  test("arriving in the middle of a flood: served at the next turn", () => {
    const queue = createFairQueue<string>({ capacity: 1000, perKey: 1000 });
    for (let i = 1; i <= 100; i++) queue.push("B", `B${i}`);
    const served: string[] = [];
    for (let i = 0; i < 40; i++) {
      const turn = queue.next()!;
      served.push(turn.item);
      queue.remove(turn.key, turn.item);
    }
    queue.push("A", "A1");
    served.push(...drain(queue));
    expect(served.slice(40, 42)).toEqual(["A1", "B41"]);
  });

  test("an item served over several turns alternates with the other keys' items", () => {
    const queue = createFairQueue<string>({ capacity: 10, perKey: 10 });
    queue.push("B", "big");
    queue.push("A", "a1");
    queue.push("A", "a2");
    queue.push("C", "c1");
    // "big" needs 3 turns; the others one each.
    const left = new Map([["big", 3]]);
    const served: string[] = [];
    for (let turn = queue.next(); turn; turn = queue.next()) {
      served.push(turn.item);
      const rest = (left.get(turn.item) ?? 1) - 1;
      left.set(turn.item, rest);
      if (rest === 0) queue.remove(turn.key, turn.item);
    }
    expect(served).toEqual(["big", "a1", "c1", "big", "a2", "big"]);
  });

  test("per-key cap and capacity: refused, and room again once items leave", () => {
    const queue = createFairQueue<number>({ capacity: 5, perKey: 3 });
    expect([1, 2, 3, 4].map((n) => queue.push("B", n))).toEqual(["queued", "queued", "queued", "key_full"]);
    expect(queue.push("A", 1)).toBe("queued");
    expect(queue.push("A", 2)).toBe("queued");
    expect(queue.push("C", 1)).toBe("queue_full");
    expect(queue.size).toBe(5);
    expect(queue.sizeOf("B")).toBe(3);
    expect(queue.remove("B", 2)).toBe(true);
    expect(queue.remove("B", 2)).toBe(false);
    expect(queue.push("C", 1)).toBe("queued");
    expect(queue.push("B", 4)).toBe("queue_full");
  });

  test("weights: the caps bound the sum, a key with nothing queued may queue one heavy item", () => {
    const queue = createFairQueue<string>({ capacity: 100, perKey: 10 });
    expect(queue.push("A", "huge", 50)).toBe("queued");
    expect(queue.push("A", "small", 1)).toBe("key_full");
    expect(queue.push("B", "b1", 6)).toBe("queued");
    expect(queue.push("B", "b2", 4)).toBe("queued");
    expect(queue.push("B", "b3", 1)).toBe("key_full");
    expect(queue.push("C", "c1", 41)).toBe("queue_full");
    expect(queue.push("C", "c1", 40)).toBe("queued");
    expect(queue.weight).toBe(100);
    queue.remove("B", "b1");
    expect(queue.weight).toBe(94);
    expect(queue.push("B", "b3", 6)).toBe("queued");
    expect(drain(queue)).toEqual(["huge", "b2", "c1", "b3"]);
    expect(queue.weight).toBe(0);
  });

  test("a key whose last item leaves drops out of the rotation without skipping the next key's turn", () => {
    const queue = createFairQueue<string>({ capacity: 10, perKey: 10 });
    queue.push("A", "a1");
    queue.push("B", "b1");
    queue.push("C", "c1");
    queue.push("C", "c2");
    expect(queue.next()!.item).toBe("a1");
    // A's item is abandoned (timed out) while B's turn is next.
    queue.remove("A", "a1");
    expect(drain(queue)).toEqual(["b1", "c1", "c2"]);
    expect(queue.size).toBe(0);
    expect(queue.next()).toBeUndefined();
  });

  test("grouped by account: five keys of one account share its turn; another account's key gets every other turn", () => {
    const queue = createFairQueue<string>({ capacity: 1000, perKey: 1000 });
    for (let k = 1; k <= 5; k++) for (let i = 1; i <= 4; i++) queue.push(`m${k}`, `m${k}.${i}`, 1, "mallory");
    for (let i = 1; i <= 4; i++) queue.push("v", `v${i}`, 1, "victim");
    const served = drain(queue);
    // The victim's four are served at turns 2, 4, 6 and 8: one in two, not one in six.
    expect(served.slice(0, 8).filter((s) => s.startsWith("v"))).toEqual(["v1", "v2", "v3", "v4"]);
    // Within mallory's turns its keys take turns: m1, m2, m3, m4, m5, then m1 again.
    expect(served.filter((s) => s.startsWith("m")).slice(0, 6)).toEqual(["m1.1", "m2.1", "m3.1", "m4.1", "m5.1", "m1.2"]);
    expect(served.length).toBe(24);
  });

  test("grouped: the caps stay per key, and a group whose last key empties leaves the rotation without skipping the next", () => {
    const queue = createFairQueue<string>({ capacity: 1000, perKey: 2 });
    expect(queue.push("a1", "x", 1, "A")).toBe("queued");
    expect(queue.push("a1", "y", 1, "A")).toBe("queued");
    expect(queue.push("a1", "z", 1, "A")).toBe("key_full");
    expect(queue.push("a2", "z", 1, "A")).toBe("queued");
    queue.push("b1", "b", 1, "B");
    queue.push("c1", "c", 1, "C");
    const first = queue.next()!;
    expect(first).toEqual({ key: "a1", item: "x" });
    // B is served next; it leaves, and C's turn is not skipped.
    const second = queue.next()!;
    expect(second.item).toBe("b");
    queue.remove(second.key, second.item);
    expect(queue.next()!.item).toBe("c");
  });

  test("grouped: a group's keys together hold no more than perGroup; another group is not held by it", () => {
    const queue = createFairQueue<string>({ capacity: 1000, perKey: 3, perGroup: 3 });
    expect(queue.push("a1", "x", 2, "A")).toBe("queued");
    expect(queue.push("a2", "y", 1, "A")).toBe("queued");
    // A third key of the account buys no more.
    expect(queue.push("a3", "z", 1, "A")).toBe("key_full");
    expect(queue.push("b1", "b", 3, "B")).toBe("queued");
    expect(queue.weightOfGroup("A")).toBe(3);
    queue.remove("a1", "x");
    expect(queue.weightOfGroup("A")).toBe(1);
    expect(queue.push("a3", "z", 2, "A")).toBe("queued");
    expect(drain(queue)).toEqual(["y", "b", "z"]);
    expect(queue.weightOfGroup("A")).toBe(0);
  });
});
