/**
 * The longest this thread's event loop went without a turn while watched: a 1 ms interval's
 * largest gap. `stop()` ends the watch and says it (ms); `longest` reads it meanwhile.
 */
export function watchLoopStall(): { readonly longest: number; stop(): number } {
  let last = performance.now();
  let longest = 0;
  const probe = setInterval(() => {
    const now = performance.now();
    longest = Math.max(longest, now - last);
    last = now;
  }, 1);
  return {
    get longest() {
      return longest;
    },
    stop() {
      clearInterval(probe);
      return longest;
    },
  };
}
