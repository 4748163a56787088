import type { DeadlineClock } from "../../src/gateway/deadline.ts";

/**
 * A clock that moves only when the test says so: `advance(ms)` runs every timer that comes due on
 * the way, in the order they are due, with `now()` reading each one's moment as it runs.
 */
export interface ManualClock extends DeadlineClock {
  advance(ms: number): void;
  /** Timers set and not yet run or cleared. */
  pending(): number;
}

export function manualClock(start = 0): ManualClock {
  let now = start;
  let nextId = 1;
  const timers = new Map<number, { at: number; fn: () => void }>();
  return {
    now: () => now,
    setTimer(fn, ms, arg) {
      const id = nextId++;
      timers.set(id, { at: now + ms, fn: () => fn(arg) });
      return id;
    },
    clearTimer(timer) {
      timers.delete(timer as number);
    },
    advance(ms) {
      const end = now + ms;
      for (;;) {
        let due: [number, { at: number; fn: () => void }] | undefined;
        for (const entry of timers) if (entry[1].at <= end && (!due || entry[1].at < due[1].at)) due = entry;
        if (!due) break;
        timers.delete(due[0]);
        now = Math.max(now, due[1].at);
        due[1].fn();
      }
      now = end;
    },
    pending: () => timers.size,
  };
}
