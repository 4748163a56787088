import { expect, test } from "bun:test";
import { EventEmitter } from "node:events";
import { guardedLines } from "../../../src/log/log.ts";

/** A destination that takes `room` bytes, then holds the rest back (write says false) until drained; or fails. */
class FakeSink extends EventEmitter {
  taken = "";
  held = "";
  constructor(private room: number) {
    super();
  }
  write(text: string): boolean {
    if (this.taken.length + text.length <= this.room) {
      this.taken += text;
      return true;
    }
    this.held += text;
    return false;
  }
  /** The reader catches up: everything held goes, and the destination says so. */
  drain(room: number): void {
    this.room = room;
    this.taken += this.held;
    this.held = "";
    this.emit("drain");
  }
}

const line = (i: number) => `{"n":${i}}\n`;

test("a reader that stopped reading: past the backlog, lines are dropped, not held; once it reads again, the next line says how many", () => {
  const sink = new FakeSink(100);
  const out = guardedLines(sink, [], 1_000);
  for (let i = 0; i < 500; i++) out(line(i));
  // What went out, and what is held, stays within the backlog's bound (plus the one write that crossed it).
  expect(sink.held.length).toBeLessThanOrEqual(1_000 + line(499).length);
  sink.drain(1_000_000);
  out(line(500));
  const lines = sink.taken.trim().split("\n").map((l) => JSON.parse(l));
  const notice = lines.find((l) => l.message?.startsWith("log lines were lost"));
  expect(notice.dropped).toBe(500 - lines.filter((l) => typeof l.n === "number" && l.n < 500).length);
  expect(notice.dropped).toBeGreaterThan(0);
  expect(lines.at(-1)).toEqual({ n: 500 });
});

test("a destination that fails (ENOSPC, EPIPE) does not throw: the next line that goes out says why lines were lost", () => {
  const sink = new FakeSink(1_000_000);
  const out = guardedLines(sink);
  sink.emit("error", Object.assign(new Error("no space left on device"), { code: "ENOSPC" }));
  out(line(1));
  const [notice, first] = sink.taken.trim().split("\n").map((l) => JSON.parse(l));
  expect(notice).toMatchObject({ level: "warn", error: "ENOSPC" });
  expect(first).toEqual({ n: 1 });
  out(line(2));
  expect(sink.taken.trim().split("\n")).toHaveLength(3);
});

test("what was lost is counted for /metrics: lines dropped past the backlog, and writes the destination refused", () => {
  const losses = { dropped: 0, failedWrites: 0 };
  const slow = new FakeSink(100);
  const out = guardedLines(slow, [], 1_000, losses);
  for (let i = 0; i < 500; i++) out(line(i));
  const kept = (slow.taken + slow.held).trim().split("\n").length;
  expect(losses.dropped).toBe(500 - kept);
  expect(losses.dropped).toBeGreaterThan(0);
  const failing = new FakeSink(1_000_000);
  guardedLines(failing, [], 1_000, losses);
  failing.emit("error", Object.assign(new Error("no space left on device"), { code: "ENOSPC" }));
  failing.emit("error", Object.assign(new Error("broken pipe"), { code: "EPIPE" }));
  expect(losses.failedWrites).toBe(2);
});
