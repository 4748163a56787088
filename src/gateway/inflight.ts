/**
 * Counts requests between their reservation and their settlement, so shutdown (and tests)
 * can wait until every answer has been paid for.
 */
export function createInflight() {
  let count = 0;
  let waiters: (() => void)[] = [];
  let cutting = false;
  return {
    /**
     * The gateway is about to cut what still runs (shutdown, past its grace): a request that ends
     * "cancelled" from now on was ended by us, not by its client (billing-session.ts).
     */
    cut(): void {
      cutting = true;
    },
    get cutting(): boolean {
      return cutting;
    },
    begin(): void {
      count += 1;
    },
    end(): void {
      count -= 1;
      if (count === 0) {
        const ready = waiters;
        waiters = [];
        for (const resolve of ready) resolve();
      }
    },
    get count(): number {
      return count;
    },
    idle(): Promise<void> {
      return count === 0 ? Promise.resolve() : new Promise((resolve) => waiters.push(resolve));
    },
  };
}

export type Inflight = ReturnType<typeof createInflight>;
