import { describe, expect, test } from "bun:test";
import { createEndOfTurn } from "../../../src/gateway/end-of-turn.ts";

const { atEndOfTurn, endOfTurn } = createEndOfTurn();

describe("end of the event loop's turn", () => {
  test("held work runs after the turn's microtasks, all of it in one go, in order", async () => {
    const order: string[] = [];
    atEndOfTurn(() => order.push("a"));
    atEndOfTurn(() => order.push("b"));
    queueMicrotask(() => order.push("microtask"));
    await Promise.resolve();
    expect(order).toEqual(["microtask"]);
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(order).toEqual(["microtask", "a", "b"]);
  });

  test("endOfTurn is one promise per turn, settled after the turn's held work", async () => {
    const order: string[] = [];
    const first = endOfTurn();
    atEndOfTurn(() => order.push("held"));
    expect(endOfTurn()).toBe(first);
    await first.then(() => order.push("resolved"));
    expect(order).toEqual(["held", "resolved"]);
    // The next turn gets its own promise.
    const next = endOfTurn();
    expect(next).not.toBe(first);
    await next;
  });

  test("work held from inside a flush waits for the next turn; one failure does not stop the rest", async () => {
    const order: string[] = [];
    atEndOfTurn(() => {
      order.push("first");
      atEndOfTurn(() => order.push("later"));
    });
    atEndOfTurn(() => {
      throw new Error("one caller's bug");
    });
    atEndOfTurn(() => order.push("second"));
    await endOfTurn();
    expect(order).toEqual(["first", "second"]);
    await endOfTurn();
    expect(order).toEqual(["first", "second", "later"]);
  });
});
