/**
 * Waits until `probe` gives a truthy value, and returns it; fails naming `what` once `timeoutMs`
 * passed without one. For what happens on its own time (sockets closing, settlements written,
 * processes starting), never to measure how fast: the bound only keeps a broken test from hanging.
 */
export async function until<T>(what: string, timeoutMs: number, probe: () => T | Promise<T>, everyMs = 10): Promise<Exclude<T, false | 0 | "" | null | undefined>> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value as Exclude<T, false | 0 | "" | null | undefined>;
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await Bun.sleep(everyMs);
  }
}
