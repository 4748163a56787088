import { describe, expect, test } from "bun:test";
import { Deadline, DeadlineExpired, type DeadlineKind } from "../../../src/gateway/deadline.ts";
import { manualClock, type ManualClock } from "../../helpers/manual-clock.ts";
import { attemptHooksOf, attemptHooksOfInit, attemptInit } from "../../../src/transport/transport.ts";

/**
 * Every deadline here runs on a clock the test moves by hand: each limit must pass at its exact
 * moment, not a millisecond before.
 */
const limits = { firstByteMs: 60, idleMs: 40, totalMs: 300 };

/** Moves the clock to `at` (ms since the deadline started) one millisecond short of it, then onto it; the signal must abort exactly there. */
function expectExpiryAt(clock: ManualClock, d: Deadline, at: number, kind: DeadlineKind): void {
  clock.advance(at - 1 - clock.now());
  expect(d.signal.aborted).toBe(false);
  clock.advance(1);
  expect(d.signal.aborted).toBe(true);
  expect(d.expired).toBe(kind);
  expect((d.signal.reason as DeadlineExpired).kind).toBe(kind);
}

describe("one deadline per attempt", () => {
  test("no head in time: first_byte, at the first-byte limit", () => {
    const clock = manualClock();
    const d = new Deadline(limits, clock);
    expectExpiryAt(clock, d, 60, "first_byte");
    expect(d.signal.reason).toBeInstanceOf(DeadlineExpired);
    expect((d.signal.reason as Error).name).toBe("TimeoutError");
  });

  test("head, then silence: idle, counted from the last byte", () => {
    const clock = manualClock();
    const d = new Deadline(limits, clock);
    clock.advance(20);
    d.headArrived();
    for (let i = 0; i < 4; i++) {
      clock.advance(20);
      d.touch();
    }
    // 20 ms to the head, 4 × 20 ms of bytes, then 40 ms of silence.
    expectExpiryAt(clock, d, 140, "idle");
  });

  test("bytes that keep coming cannot outlast the total", () => {
    const clock = manualClock();
    const d = new Deadline({ firstByteMs: 60, idleMs: 40, totalMs: 150 }, clock);
    d.headArrived();
    for (let t = 10; t < 150; t += 10) {
      clock.advance(10);
      d.touch();
    }
    expectExpiryAt(clock, d, 150, "total");
  });

  test("waiting for a slow client is not the upstream's silence; the idle limit runs again from the resume", () => {
    const clock = manualClock();
    const d = new Deadline({ firstByteMs: 60, idleMs: 30, totalMs: 200 }, clock);
    d.headArrived();
    d.pause();
    clock.advance(100);
    expect(d.signal.aborted).toBe(false);
    d.resume();
    expectExpiryAt(clock, d, 130, "idle");
  });

  test("paused, the total still holds", () => {
    const clock = manualClock();
    const d = new Deadline({ firstByteMs: 60, idleMs: 30, totalMs: 200 }, clock);
    d.headArrived();
    d.pause();
    expectExpiryAt(clock, d, 200, "total");
  });

  test("a cleared deadline never fires; an abort carries the caller's reason", () => {
    const clock = manualClock();
    const d = new Deadline({ firstByteMs: 20, idleMs: 20, totalMs: 20 }, clock);
    d.clear();
    expect(clock.pending()).toBe(0);
    clock.advance(1_000);
    expect(d.signal.aborted).toBe(false);
    const reason = new Error("client left");
    d.abort(reason);
    expect(d.signal.reason).toBe(reason);
    expect(d.expired).toBeUndefined();
  });
});

test("a head that arrives long before the first-byte limit switches to the (shorter) idle limit at once", () => {
  const clock = manualClock();
  const d = new Deadline({ firstByteMs: 5_000, idleMs: 50, totalMs: 60_000 }, clock);
  d.headArrived();
  expectExpiryAt(clock, d, 50, "idle");
});

test("after waiting on a slow client, the idle limit applies again from the moment it caught up", () => {
  const clock = manualClock();
  const d = new Deadline({ firstByteMs: 5_000, idleMs: 60, totalMs: 60_000 }, clock);
  d.headArrived();
  d.pause();
  clock.advance(20);
  d.resume();
  expectExpiryAt(clock, d, 80, "idle");
});

describe("the deadline keeps its abort listeners itself (the transport's, without an event listener)", () => {
  test("a listener runs once, after the deadline aborted with its reason; a removed one never; one added after the abort never", () => {
    const clock = manualClock();
    const d = new Deadline({ firstByteMs: 20, idleMs: 20, totalMs: 100 }, clock);
    const seen: string[] = [];
    const kept = () => seen.push(`kept:${(d.reason as DeadlineExpired).kind}:${d.aborted}`);
    const removed = () => seen.push("removed");
    d.addAbortListener(kept);
    d.addAbortListener(removed);
    d.removeAbortListener(removed);
    clock.advance(20);
    expect(d.aborted).toBe(true);
    expect(d.signal.aborted).toBe(true);
    d.addAbortListener(() => seen.push("late"));
    d.abort(new Error("again"));
    clock.advance(1_000);
    expect(seen).toEqual(["kept:first_byte:true"]);
  });

  test("an abort of the caller's (the client left) reaches them too, with its reason", () => {
    const d = new Deadline({ firstByteMs: 1_000, idleMs: 1_000, totalMs: 1_000 });
    const seen: unknown[] = [];
    d.addAbortListener(() => seen.push(d.reason));
    const reason = new DOMException("client disconnected", "AbortError");
    d.abort(reason);
    expect(seen).toEqual([reason]);
    d.clear();
  });

  test("as with event listeners: one removed by another while they are called is skipped; one added during the abort (by an event listener) never runs", () => {
    const d = new Deadline({ firstByteMs: 1_000, idleMs: 1_000, totalMs: 1_000 });
    const seen: string[] = [];
    const second = () => seen.push("second");
    d.addAbortListener(() => {
      seen.push("first");
      d.removeAbortListener(second);
    });
    d.addAbortListener(second);
    d.signal.addEventListener("abort", () => d.addAbortListener(() => seen.push("added during the abort")));
    d.abort(new Error("stop"));
    expect(seen).toEqual(["first"]);
  });
});

describe("listeners that are objects, not closures (what a waiting request keeps)", () => {
  test("an EventListener-like object is told through handleEvent, once; removed, never", () => {
    const clock = manualClock();
    const d = new Deadline({ firstByteMs: 20, idleMs: 20, totalMs: 100 }, clock);
    const told = { n: 0, handleEvent() { this.n++; } };
    const removed = { n: 0, handleEvent() { this.n++; } };
    d.addAbortListener(told);
    d.addAbortListener(removed);
    d.removeAbortListener(removed);
    clock.advance(20);
    d.abort(new Error("again"));
    expect(told.n).toBe(1);
    expect(removed.n).toBe(0);
  });

  test("the deadline is the client's abort listener itself: the client's signal aborting ends the attempt as the client leaving", () => {
    const d = new Deadline({ firstByteMs: 1_000, idleMs: 1_000, totalMs: 1_000 });
    const client = new AbortController();
    client.signal.addEventListener("abort", d);
    client.abort();
    expect(d.aborted).toBe(true);
    expect((d.reason as DOMException).name).toBe("AbortError");
    expect((d.reason as DOMException).message).toBe("client disconnected");
    expect(d.expired).toBeUndefined();
    // Removed, it hears nothing more.
    const other = new Deadline({ firstByteMs: 1_000, idleMs: 1_000, totalMs: 1_000 });
    const second = new AbortController();
    second.signal.addEventListener("abort", other);
    second.signal.removeEventListener("abort", other);
    second.abort();
    expect(other.aborted).toBe(false);
    other.clear();
  });

  test("its timer passes the deadline to one shared callback: two deadlines on one clock each expire at their own limit", () => {
    const clock = manualClock();
    const a = new Deadline({ firstByteMs: 10, idleMs: 10, totalMs: 100 }, clock);
    const b = new Deadline({ firstByteMs: 30, idleMs: 10, totalMs: 100 }, clock);
    clock.advance(10);
    expect(a.expired).toBe("first_byte");
    expect(b.aborted).toBe(false);
    clock.advance(20);
    expect(b.expired).toBe("first_byte");
  });
});

describe("the deadline's AbortSignal is made only when asked for", () => {
  test("asked for after the abort, it is already aborted with the deadline's reason, and carries the deadline's hooks", () => {
    const clock = manualClock();
    const d = new Deadline({ firstByteMs: 20, idleMs: 20, totalMs: 100 }, clock);
    clock.advance(20);
    expect(d.aborted).toBe(true);
    expect(d.reason).toBeInstanceOf(DeadlineExpired);
    expect(d.signal.aborted).toBe(true);
    expect(d.signal.reason).toBe(d.reason);
    expect(attemptHooksOf(d.signal)).toBe(d);
  });

  test("asked for before, it aborts with the deadline, before the deadline's own listeners run", () => {
    const d = new Deadline({ firstByteMs: 1_000, idleMs: 1_000, totalMs: 1_000 });
    const signal = d.signal;
    expect(d.signal).toBe(signal);
    const seen: string[] = [];
    signal.addEventListener("abort", () => seen.push("event"));
    d.addAbortListener(() => seen.push(`hook:${signal.aborted}`));
    const reason = new Error("stop");
    d.abort(reason);
    expect(signal.reason).toBe(reason);
    expect(seen).toEqual(["event", "hook:true"]);
  });

  test("an abort without a reason is an AbortError, as AbortController's: for the hooks and the signal alike", () => {
    const d = new Deadline({ firstByteMs: 1_000, idleMs: 1_000, totalMs: 1_000 });
    d.abort(undefined);
    expect(d.reason).toBeInstanceOf(DOMException);
    expect((d.reason as DOMException).name).toBe("AbortError");
    expect(d.signal.reason).toBe(d.reason);
  });

  test("a request's init carries the hooks, and its `signal` is the deadline's, made when read (by fetch or any other transport)", () => {
    const d = new Deadline({ firstByteMs: 1_000, idleMs: 1_000, totalMs: 1_000 });
    const init = attemptInit(d, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    expect(attemptHooksOfInit(init)).toBe(d);
    // Its signal set over by a wrapper: no hooks, the wrapper's signal rules.
    expect(attemptHooksOfInit({ ...init, signal: new AbortController().signal })).toBeUndefined();
    expect(init.method).toBe("POST");
    expect(init.body).toBe("{}");
    expect(init.signal).toBe(d.signal);
    // A transport that copies the init (a test's wrapper, a proxy) copies the signal.
    expect({ ...init }.signal).toBe(d.signal);
    d.abort(new Error("stop"));
    expect(init.signal!.aborted).toBe(true);
  });
});
