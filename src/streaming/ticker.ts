/**
 * Timers shared by every open stream: one interval per period, however many streams are open,
 * instead of an interval created and cleared for each stream. An interval runs only while some
 * stream listens, so an idle gateway (or a finished test) holds no timer. One ticker per
 * gateway, created by app.ts and passed to the streams.
 */
export interface Ticker {
  /** Calls `fn` every `periodMs` until the returned function is called. */
  every(periodMs: number, fn: () => void): () => void;
}

export function createTicker(): Ticker {
  const groups = new Map<number, { listeners: Set<() => void>; timer: ReturnType<typeof setInterval> }>();
  return {
    every(periodMs, fn) {
      let group = groups.get(periodMs);
      if (!group) {
        const listeners = new Set<() => void>();
        const timer = setInterval(() => {
          for (const listener of listeners) {
            try {
              listener();
            } catch {
              // One stream's failure must not stop the others' clocks.
            }
          }
        }, periodMs);
        groups.set(periodMs, (group = { listeners, timer }));
      }
      const { listeners, timer } = group;
      listeners.add(fn);
      return () => {
        if (!listeners.delete(fn) || listeners.size > 0) return;
        clearInterval(timer);
        groups.delete(periodMs);
      };
    },
  };
}
