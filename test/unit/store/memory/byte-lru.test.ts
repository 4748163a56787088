import { describe, expect, test } from "bun:test";
import { createByteLru } from "../../../../src/store/memory/byte-lru.ts";

function clock(start = 1_000_000) {
  let now = start;
  return { now: () => now, advance: (ms: number) => void (now += ms) };
}

describe("byte-bounded LRU", () => {
  test("never holds more bytes than its bound: the least recently used go first", () => {
    const c = clock();
    const lru = createByteLru<string>({ maxBytes: 100, ttlMs: 60_000, now: c.now });
    for (let i = 0; i < 10; i++) expect(lru.set(`k${i}`, `v${i}`, 30)).toBe(true);
    expect(lru.bytes).toBe(90);
    expect(lru.size).toBe(3);
    expect([...Array(10).keys()].map((i) => lru.get(`k${i}`))).toEqual([undefined, undefined, undefined, undefined, undefined, undefined, undefined, "v7", "v8", "v9"]);
  });

  test("a read counts as a use: the entry read survives the next eviction, the one not read does not", () => {
    const lru = createByteLru<string>({ maxBytes: 90, ttlMs: 60_000, now: clock().now });
    lru.set("a", "A", 30);
    lru.set("b", "B", 30);
    lru.set("c", "C", 30);
    expect(lru.get("a")).toBe("A");
    lru.set("d", "D", 30);
    expect(lru.get("b")).toBeUndefined();
    expect(lru.get("a")).toBe("A");
    expect(lru.get("c")).toBe("C");
    expect(lru.get("d")).toBe("D");
  });

  test("an entry unused for longer than the TTL cannot be read, and its bytes are freed at the next use", () => {
    const c = clock();
    const lru = createByteLru<string>({ maxBytes: 1_000, ttlMs: 1_000, now: c.now });
    lru.set("old", "O", 100);
    c.advance(600);
    lru.set("young", "Y", 100);
    c.advance(400);
    // Exactly the TTL: still there.
    expect(lru.get("old")).toBe("O");
    c.advance(1_001);
    expect(lru.get("old")).toBeUndefined();
    expect(lru.get("young")).toBeUndefined();
    expect(lru.bytes).toBe(0);
    expect(lru.size).toBe(0);
  });

  test("the TTL runs from the last use, not from the write: an entry read now and then stays", () => {
    const c = clock();
    const lru = createByteLru<string>({ maxBytes: 1_000, ttlMs: 1_000, now: c.now });
    lru.set("chat", "history", 100);
    lru.set("other", "x", 100);
    for (let i = 0; i < 5; i++) {
      c.advance(900);
      expect(lru.get("chat")).toBe("history");
    }
    expect(lru.get("other")).toBeUndefined();
    expect(lru.bytes).toBe(100);
  });

  test("an entry bigger than the entry bound is refused and evicts nothing", () => {
    const lru = createByteLru<string>({ maxBytes: 100, ttlMs: 60_000, now: clock().now, maxEntryBytes: 25 });
    lru.set("a", "A", 20);
    lru.set("b", "B", 20);
    expect(lru.set("huge", "H", 26)).toBe(false);
    expect(lru.get("huge")).toBeUndefined();
    expect(lru.get("a")).toBe("A");
    expect(lru.get("b")).toBe("B");
    expect(lru.bytes).toBe(40);
  });

  test("setting a key again replaces its value and its bytes", () => {
    const lru = createByteLru<string>({ maxBytes: 100, ttlMs: 60_000, now: clock().now });
    lru.set("a", "first", 60);
    lru.set("a", "second", 10);
    expect(lru.get("a")).toBe("second");
    expect(lru.bytes).toBe(10);
    lru.delete("a");
    expect(lru.bytes).toBe(0);
  });

  test("a bound of 0 keeps nothing", () => {
    const lru = createByteLru<string>({ maxBytes: 0, ttlMs: 60_000, now: clock().now });
    expect(lru.set("a", "A", 1)).toBe(false);
    expect(lru.get("a")).toBeUndefined();
  });
});
