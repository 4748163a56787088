/**
 * Large bodies take turns to be parsed (limits/parse-turns.ts): one at a time, round-robin across
 * accounts, the next only after the others had as long as the last turn took. Driven by hand: the
 * schedule runs when the test says, the clock is the test's.
 */
import { describe, expect, test } from "bun:test";
import { createParseTurns, endTurnOf, endTurnOfRequest, holdTurn } from "../../../src/limits/parse-turns.ts";

function manual() {
  const pending: { run: () => void; delayMs: number }[] = [];
  let clock = 0;
  const turns = createParseTurns({ schedule: (run, delayMs) => void pending.push({ run, delayMs }), now: () => clock, maxHoldMs: 60_000 });
  const started: string[] = [];
  const ends = new Map<string, () => void>();
  const take = (name: string, key: string, account: string) => void turns.take(key, account).then((end) => { started.push(name); ends.set(name, end); });
  /** Runs the scheduled start, then lets its promise settle. */
  const step = async () => {
    const next = pending.shift();
    next?.run();
    await Bun.sleep(0);
    return next?.delayMs;
  };
  return { turns, started, ends, take, step, pending, advance: (ms: number) => void (clock += ms) };
}

describe("parse turns", () => {
  test("one at a time: the second waits for the first to end, and then for its scheduled start", async () => {
    const t = manual();
    t.take("a1", "ka", "A");
    t.take("a2", "ka", "A");
    expect(t.started).toEqual([]);
    await t.step();
    expect(t.started).toEqual(["a1"]);
    // Nothing else is scheduled while a turn runs.
    expect(t.pending.length).toBe(0);
    t.ends.get("a1")!();
    expect(t.pending.length).toBe(1);
    expect(t.started).toEqual(["a1"]);
    await t.step();
    expect(t.started).toEqual(["a1", "a2"]);
    t.ends.get("a2")!();
    expect(t.turns.size).toBe(0);
    expect(t.pending.length).toBe(0);
  });

  test("another account's body goes second, however many one account has queued (from however many keys)", async () => {
    const t = manual();
    for (let i = 0; i < 5; i++) t.take(`a${i}`, `ka${i}`, "A");
    t.take("b", "kb", "B");
    for (let i = 0; i < 6; i++) {
      await t.step();
      t.ends.get(t.started.at(-1)!)!();
    }
    expect(t.started[1]).toBe("b");
    expect(t.started.length).toBe(6);
  });

  test("the next turn starts as long after as the last one took: a backlog takes at most half of the thread", async () => {
    const t = manual();
    t.take("a1", "ka", "A");
    t.take("a2", "ka", "A");
    expect(await t.step()).toBe(0);
    t.advance(30);
    t.ends.get("a1")!();
    expect(t.pending[0]!.delayMs).toBe(30);
    await t.step();
    t.ends.get("a2")!();
    // With nothing waiting, nothing is scheduled; the next body starts at once.
    t.take("a3", "ka", "A");
    expect(t.pending[0]!.delayMs).toBe(0);
  });

  test("a turn ended twice ends once; a turn nobody ends is ended after maxHoldMs", async () => {
    const t = manual();
    t.take("a1", "ka", "A");
    t.take("a2", "ka", "A");
    await t.step();
    t.ends.get("a1")!();
    t.ends.get("a1")!();
    expect(t.pending.length).toBe(1);

    const turns = createParseTurns({ maxHoldMs: 5 });
    let second = false;
    await turns.take("k", "A");
    const next = turns.take("k", "A").then(() => (second = true));
    await next;
    expect(second).toBe(true);
  });

  test("a request holds its turn by its signal until endTurnOf, once; its end (endTurnOfRequest) ends it too, and a request that held none is not looked up", () => {
    const request = new Request("http://gw/v1/embeddings", { method: "POST" });
    let ended = 0;
    holdTurn(request, () => ended++);
    endTurnOf(request.signal);
    endTurnOf(request.signal);
    expect(ended).toBe(1);
    const refused = new Request("http://gw/v1/embeddings", { method: "POST" });
    holdTurn(refused, () => ended++);
    endTurnOfRequest(refused);
    endTurnOfRequest(refused);
    expect(ended).toBe(2);
    // A request that held no turn: its signal is never asked for (Bun makes it on first use).
    const plain = new Request("http://gw/v1/chat/completions", { method: "POST" });
    let asked = false;
    Object.defineProperty(plain, "signal", { get: () => ((asked = true), new AbortController().signal) });
    endTurnOfRequest(plain);
    expect(asked).toBe(false);
  });
});
