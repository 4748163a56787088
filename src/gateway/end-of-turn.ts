/**
 * Work held back until the event loop has run every callback of the current turn, so the
 * socket writes a busy turn produces leave back to back instead of one per callback.
 *
 * Why: a write that reaches a peer which has gone to sleep pays for waking it, and that wake-up
 * is charged to the writer. Under load a turn handles a batch of requests (one readiness poll,
 * many sockets), each with tens of microseconds of work; writing as each one finishes wakes the
 * upstream or the client once per request, holding them until the turn ends wakes it once per
 * batch. Measured on the bench's loopback (docs/benchmarks.md): CPU per non-stream response
 * 83 → 64 µs. Callers only hold work back while other requests are in flight: an idle
 * gateway writes at once, so a lone request's latency does not change.
 *
 * `setImmediate` is the turn's end: Bun runs immediates after the I/O callbacks of the turn.
 */
let held: (() => void)[] = [];
let turn: Promise<void> | null = null;
let releaseTurn: (() => void) | null = null;
let scheduled = false;

function schedule(): void {
  if (scheduled) return;
  scheduled = true;
  setImmediate(flush);
}

function flush(): void {
  scheduled = false;
  const due = held;
  held = [];
  const resolve = releaseTurn;
  turn = null;
  releaseTurn = null;
  for (const fn of due) {
    try {
      fn();
    } catch {
      // One caller's failure is its own; the others' writes still go out.
    }
  }
  resolve?.();
}

/** Runs `fn` once the current turn's callbacks have all run; in the order queued. */
export function atEndOfTurn(fn: () => void): void {
  schedule();
  held.push(fn);
}

/** Resolves once the current turn's callbacks have all run (one promise shared by the turn). */
export function endOfTurn(): Promise<void> {
  schedule();
  turn ??= new Promise<void>((resolve) => (releaseTurn = resolve));
  return turn;
}
