import { describe, expect, test } from "bun:test";
import { Deadline, DeadlineExpired } from "../src/gateway/deadline.ts";
import { listenForAbort, stopListeningForAbort } from "../src/transport/transport.ts";

const limits = { firstByteMs: 60, idleMs: 40, totalMs: 300 };
const expiry = (d: Deadline) =>
  new Promise<{ kind: string | undefined; at: number }>((resolve) => {
    const started = performance.now();
    d.signal.addEventListener("abort", () => resolve({ kind: (d.signal.reason as DeadlineExpired).kind, at: performance.now() - started }), { once: true });
  });

describe("one deadline per attempt", () => {
  test("no head in time: first_byte", async () => {
    const d = new Deadline(limits);
    const { kind, at } = await expiry(d);
    expect(kind).toBe("first_byte");
    expect(d.expired).toBe("first_byte");
    expect(at).toBeGreaterThanOrEqual(55);
    expect(d.signal.reason).toBeInstanceOf(DeadlineExpired);
    expect((d.signal.reason as Error).name).toBe("TimeoutError");
  });

  test("head, then silence: idle, counted from the last byte", async () => {
    const d = new Deadline(limits);
    const ended = expiry(d);
    await Bun.sleep(20);
    d.headArrived();
    for (let i = 0; i < 4; i++) {
      await Bun.sleep(20);
      d.touch();
    }
    const { kind, at } = await ended;
    expect(kind).toBe("idle");
    // 20 ms to the head, 4 × 20 ms of bytes, then 40 ms of silence.
    expect(at).toBeGreaterThanOrEqual(135);
  });

  test("bytes that keep coming cannot outlast the total", async () => {
    const d = new Deadline({ firstByteMs: 60, idleMs: 40, totalMs: 150 });
    const ended = expiry(d);
    d.headArrived();
    const ticker = setInterval(() => d.touch(), 10);
    const { kind, at } = await ended;
    clearInterval(ticker);
    expect(kind).toBe("total");
    expect(at).toBeGreaterThanOrEqual(145);
  });

  test("waiting for a slow client is not the upstream's silence; the total still holds", async () => {
    const d = new Deadline({ firstByteMs: 60, idleMs: 30, totalMs: 200 });
    const ended = expiry(d);
    d.headArrived();
    d.pause();
    await Bun.sleep(100);
    expect(d.signal.aborted).toBe(false);
    d.resume();
    const { kind } = await ended;
    expect(kind).toBe("idle");
  });

  test("a cleared deadline never fires; an abort carries the caller's reason", async () => {
    const d = new Deadline({ firstByteMs: 20, idleMs: 20, totalMs: 20 });
    d.clear();
    await Bun.sleep(40);
    expect(d.signal.aborted).toBe(false);
    const reason = new Error("client left");
    d.abort(reason);
    expect(d.signal.reason).toBe(reason);
    expect(d.expired).toBeUndefined();
  });
});

test("a head that arrives long before the first-byte limit switches to the (shorter) idle limit at once", async () => {
  const d = new Deadline({ firstByteMs: 5_000, idleMs: 50, totalMs: 60_000 });
  const ended = expiry(d);
  d.headArrived();
  const { kind, at } = await ended;
  expect(kind).toBe("idle");
  expect(at).toBeLessThan(1_000);
});

test("after waiting on a slow client, the idle limit applies again from the moment it caught up", async () => {
  const d = new Deadline({ firstByteMs: 5_000, idleMs: 60, totalMs: 60_000 });
  const ended = expiry(d);
  d.headArrived();
  d.pause();
  await Bun.sleep(20);
  d.resume();
  const { kind, at } = await ended;
  expect(kind).toBe("idle");
  expect(at).toBeLessThan(1_000);
});

describe("the deadline keeps its signal's abort listeners itself (the transport's, without an event listener)", () => {
  test("a listener runs once, after the signal aborted with its reason; a removed one never; one added after the abort never", async () => {
    const d = new Deadline({ firstByteMs: 20, idleMs: 20, totalMs: 100 });
    const seen: string[] = [];
    const kept = () => seen.push(`kept:${(d.signal.reason as DeadlineExpired).kind}:${d.signal.aborted}`);
    const removed = () => seen.push("removed");
    listenForAbort(d.signal, kept);
    listenForAbort(d.signal, removed);
    stopListeningForAbort(d.signal, removed);
    await new Promise((resolve) => d.signal.addEventListener("abort", resolve, { once: true }));
    listenForAbort(d.signal, () => seen.push("late"));
    d.abort(new Error("again"));
    await Bun.sleep(30);
    expect(seen).toEqual(["kept:first_byte:true"]);
  });

  test("an abort of the caller's (the client left) reaches them too; any other signal falls back to event listeners", () => {
    const d = new Deadline({ firstByteMs: 1_000, idleMs: 1_000, totalMs: 1_000 });
    const seen: unknown[] = [];
    listenForAbort(d.signal, () => seen.push(d.signal.reason));
    const reason = new DOMException("client disconnected", "AbortError");
    d.abort(reason);
    expect(seen).toEqual([reason]);

    const plain = new AbortController();
    const heard: string[] = [];
    const fn = () => heard.push("plain");
    listenForAbort(plain.signal, fn);
    plain.abort();
    stopListeningForAbort(plain.signal, fn);
    expect(heard).toEqual(["plain"]);
  });

  test("as with event listeners: one removed by another while they are called is skipped; one added during the abort (by an event listener) never runs", () => {
    const d = new Deadline({ firstByteMs: 1_000, idleMs: 1_000, totalMs: 1_000 });
    const seen: string[] = [];
    const second = () => seen.push("second");
    listenForAbort(d.signal, () => {
      seen.push("first");
      stopListeningForAbort(d.signal, second);
    });
    listenForAbort(d.signal, second);
    d.signal.addEventListener("abort", () => listenForAbort(d.signal, () => seen.push("added during the abort")));
    d.abort(new Error("stop"));
    expect(seen).toEqual(["first"]);
  });
});
