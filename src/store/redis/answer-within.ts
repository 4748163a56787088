/**
 * How long a Redis call may take before it counts as unanswered: `promise`, or `error()` once
 * `timeoutMs` passed. The deadline's timer and an answer that arrived while this thread was not
 * running (a long task on it, a worker starting under load, a CPU taken by other processes) are
 * ready at the same wake-up, and Bun runs the timer first: the answer, there within microseconds,
 * lost to it, and a request was refused 503 "Redis cannot be reached" with Redis well (a fault
 * probe of workers under load, twenty-fourth session: 5 of 10 calls stalled 300 ms after they were
 * sent). So the deadline takes one more short timer, which the event loop only reaches after
 * polling its sockets: an answer that is there wins; a Redis that is silent costs 5 ms more.
 */
export function answerWithin<T>(promise: Promise<T>, timeoutMs: number, error: () => Error): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const started = performance.now();
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      // A timer this late says the thread did not run for a while: the call may have left only at
      // this wake-up (a client that writes on the loop's next turn), and 5 ms was too short for a
      // busy Redis to answer it (a CI run: one stalled call of six refused). It gets its time again, once.
      const late = performance.now() - started - timeoutMs;
      timer = setTimeout(() => reject(error()), late > STALLED_MS ? timeoutMs : LAST_LOOK_MS);
    }, timeoutMs);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** The deadline's second timer (see answerWithin). */
const LAST_LOOK_MS = 5;
/** A deadline's timer later than this ran after a stall of the thread (see answerWithin). */
const STALLED_MS = 20;
