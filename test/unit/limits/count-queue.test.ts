import { describe, expect, test } from "bun:test";
import { CountRefusedError, createCountQueue } from "../../../src/limits/count-queue.ts";
import { createTokenizer } from "../../../src/billing/token-estimate.ts";

const { count: countTokens, countWhenIdle: countTokensWhenIdle } = createTokenizer();

/** A tokenizer that counts characters and records each slice it was given, in order. */
function recordingCounter() {
  const slices: string[] = [];
  return { slices, count: async (text: string) => (slices.push(text), text.length) };
}

const refusal = async (promise: Promise<unknown>) => {
  try {
    await promise;
  } catch (err) {
    expect(err).toBeInstanceOf(CountRefusedError);
    return (err as CountRefusedError).reason;
  }
  throw new Error("the count was not refused");
};

describe("free count queue", () => {
  test("a key's long counts take turns slice by slice: another key's small count is answered after one slice", async () => {
    const tokenizer = recordingCounter();
    const queue = createCountQueue({ perKeyBytes: 48, capacityBytes: 1000, timeoutMs: 60_000, count: tokenizer.count, sliceChars: 4 });
    const answered: string[] = [];
    const flood = [1, 2, 3, 4].map((i) => queue.count("B", String(i).repeat(12)).then((n) => answered.push(`B${i}:${n}`)));
    const small = queue.count("A", "a").then((n) => answered.push(`A:${n}`));
    await Promise.all([...flood, small]);
    expect(answered).toEqual(["A:1", "B1:12", "B2:12", "B3:12", "B4:12"]);
    expect(tokenizer.slices.slice(0, 3)).toEqual(["1111", "a", "1111"]);
    expect(tokenizer.slices).toHaveLength(13);
    expect(queue.size).toBe(0);
  });

  test("an account's keys share its turns: two keys of one account flooding, another account's count takes every other slice", async () => {
    const tokenizer = recordingCounter();
    const queue = createCountQueue({ perKeyBytes: 1000, capacityBytes: 1000, timeoutMs: 60_000, count: tokenizer.count, sliceChars: 4 });
    const flood = ["1", "2"].map((k) => queue.count(`m${k}`, k.repeat(16), undefined, undefined, "mallory"));
    const victim = queue.count("v", "v".repeat(12), undefined, undefined, "victim");
    await Promise.all([...flood, victim]);
    // m1, then the victim, then m2 (mallory's next turn goes to its other key), then the victim …
    expect(tokenizer.slices.slice(0, 6)).toEqual(["1111", "vvvv", "2222", "vvvv", "1111", "vvvv"]);
  });

  test("an account's keys together hold one key's share: a second key's count is refused, and `busy` says so on arrival", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const queue = createCountQueue({ perKeyBytes: 8, perAccountBytes: 8, capacityBytes: 1000, timeoutMs: 60_000, count: async (t) => (await gate, t.length), sliceChars: 2 });
    const first = queue.count("m1", "x".repeat(8), undefined, undefined, "mallory");
    expect(await refusal(queue.count("m2", "yy", undefined, undefined, "mallory"))).toBe("key_busy");
    expect(queue.busy("m2", 0, "mallory")).toBeString();
    // Another account's key is not held by it.
    expect(queue.busy("v", 0, "victim")).toBeUndefined();
    const other = queue.count("v", "vv", undefined, undefined, "victim");
    release();
    expect(await first).toBe(8);
    expect(await other).toBe(2);
    expect(queue.busy("m2", 0, "mallory")).toBeUndefined();
  });

  test("with a limit, a count stops at the first slice that takes it past the limit and answers what it has", async () => {
    const tokenizer = recordingCounter();
    const queue = createCountQueue({ perKeyBytes: 1000, capacityBytes: 1000, timeoutMs: 60_000, count: tokenizer.count, sliceChars: 4 });
    expect(await queue.count("A", "x".repeat(400), undefined, 10)).toBe(12);
    expect(tokenizer.slices).toEqual(["xxxx", "xxxx", "xxxx"]);
    expect(queue.size).toBe(0);
    // Within its limit, the whole text is counted.
    expect(await queue.count("A", "x".repeat(10), undefined, 10)).toBe(10);
  });

  test("slices end before a space in their second half, as the tokenizer's pieces do: prose is counted as a whole", async () => {
    const tokenizer = recordingCounter();
    const queue = createCountQueue({ perKeyBytes: 1000, capacityBytes: 1000, timeoutMs: 60_000, count: tokenizer.count, sliceChars: 8 });
    await queue.count("A", "one two three four");
    expect(tokenizer.slices).toEqual(["one two", " three", " four"]);
  });

  test("per-key cap on bytes of text: the key's next count is refused at once, other keys' are not; room again after one finishes", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const queue = createCountQueue({ perKeyBytes: 8, capacityBytes: 1000, timeoutMs: 60_000, count: async (t) => (await gate, t.length), sliceChars: 2 });
    const first = [queue.count("B", "xxxx")];
    expect(queue.busy("B")).toBeUndefined();
    first.push(queue.count("B", "yyyy"));
    // Full: not even a count of one slice fits, which a request's arrival can be told before its body is read.
    expect(queue.busy("B")).toBe("Too many token counts in progress for this key: at most 8 bytes of text at once. Retry when one has finished.");
    expect(queue.busy("A")).toBeUndefined();
    // A body too large for what is left is refused on arrival too, whatever one slice would find.
    expect(queue.busy("A", 8)).toBeUndefined();
    expect(await refusal(queue.count("B", "z"))).toBe("key_busy");
    const other = queue.count("A", "aaaa");
    expect(queue.sizeOf("B")).toBe(2);
    expect(queue.bytes).toBe(12);
    release();
    expect(await Promise.all([...first, other])).toEqual([4, 4, 4]);
    expect(await queue.count("B", "zzz")).toBe(3);
  });

  test("the body a request declares is weighed on arrival: one that would not fit what is left is refused before it is read", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const queue = createCountQueue({ perKeyBytes: 20, capacityBytes: 1000, timeoutMs: 60_000, count: async (t) => (await gate, t.length), sliceChars: 2 });
    const held = queue.count("B", "x".repeat(12));
    expect(queue.busy("B", 8)).toBeUndefined();
    expect(queue.busy("B", 9)).toBe("Too many token counts in progress for this key: at most 20 bytes of text at once. Retry when one has finished.");
    // A key with nothing in progress is never refused here (its size is the size limits' to judge).
    expect(queue.busy("A", 1_000)).toBeUndefined();
    release();
    expect(await held).toBe(12);
  });

  test("each count weighs at least one slice: a key may send many small counts at once, not without end", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const queue = createCountQueue({ perKeyBytes: 40, capacityBytes: 1000, timeoutMs: 60_000, count: async (t) => (await gate, t.length), sliceChars: 4 });
    const small = Array.from({ length: 10 }, () => queue.count("A", "a"));
    expect(await refusal(queue.count("A", "a"))).toBe("key_busy");
    release();
    expect(await Promise.all(small)).toEqual(Array(10).fill(1));
  });

  test("a key with nothing queued may always queue one count, heavier than its cap", async () => {
    const queue = createCountQueue({ perKeyBytes: 4, capacityBytes: 4, timeoutMs: 60_000, count: async (t) => t.length, sliceChars: 2 });
    expect(await queue.count("A", "heavier than the cap")).toBe(20);
  });

  test("bounded: past capacity, counts of every key are refused", async () => {
    const queue = createCountQueue({ perKeyBytes: 5, capacityBytes: 3, timeoutMs: 60_000, count: () => new Promise<number>(() => {}), sliceChars: 1 });
    for (const key of ["A", "B", "C"]) void queue.count(key, "x").catch(() => {});
    expect(await refusal(queue.count("D", "x"))).toBe("queue_full");
    expect(queue.size).toBe(3);
  });

  test("a count the tokenizer does not finish in time is given up, and leaves the queue", async () => {
    const queue = createCountQueue({ perKeyBytes: 1 << 20, capacityBytes: 1 << 20, timeoutMs: 20, count: () => new Promise<number>(() => {}) });
    expect(await refusal(queue.count("A", "stuck"))).toBe("timeout");
    expect(queue.size).toBe(0);
  });

  test("a client that goes away takes its count out of the queue", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const tokenizer = recordingCounter();
    const queue = createCountQueue({ perKeyBytes: 1 << 20, capacityBytes: 1 << 20, timeoutMs: 60_000, count: async (t) => (await gate, tokenizer.count(t)) });
    const running = queue.count("A", "first");
    const abort = new AbortController();
    const waiting = queue.count("B", "abandoned", abort.signal);
    abort.abort();
    expect(await refusal(waiting)).toBe("aborted");
    release();
    expect(await running).toBe(5);
    expect(tokenizer.slices).toEqual(["first"]);
  });

  test("counted in slices on the tokenizer's low-priority lane, a text gets the same count as at once", async () => {
    const text = "Sorting wagons over the hump, one cut at a time; 汉字 and 🚂 too. ".repeat(4000);
    const queue = createCountQueue({ perKeyBytes: 1 << 20, capacityBytes: 1 << 20, timeoutMs: 60_000, count: countTokensWhenIdle });
    expect(text.length).toBeGreaterThan(3 * 65536);
    expect(await queue.count("A", text)).toBe(await countTokens(text));
  });
});
