import { METRICS_GATHER_MS, type MetricsMessage } from "../supervisor.ts";
import { mergeExpositions } from "./metrics-merge.ts";

/**
 * A worker's side of `/metrics` across workers (see MetricsMessage in supervisor.ts): it answers
 * the supervisor's `metrics-collect` with its own exposition, and gathers everyone's for a scrape
 * it serves. Without an answer from the supervisor (it is gone, or slow) a scrape gets this
 * worker's own samples, labelled as they would be in the whole.
 */
export function workerMetrics(slot: number, send: (message: MetricsMessage) => void, onMessage: (handler: (message: unknown) => void) => void) {
  let own: () => string = () => "";
  let lastId = 0;
  const pending = new Map<number, (parts: { worker: number; text: string }[]) => void>();
  onMessage((message) => {
    const m = message as MetricsMessage | null;
    if (m?.type === "metrics-collect") {
      send({ type: "metrics-part", id: m.id, text: own() });
    } else if (m?.type === "metrics-response") {
      const resolve = pending.get(m.id);
      pending.delete(m.id);
      resolve?.(m.parts);
    }
  });
  return {
    /** Where this worker's own exposition comes from (the app, once built). */
    serve(expose: () => string): void {
      own = expose;
    },
    /** Every worker's exposition, merged; `ownText` is this worker's, the fallback. */
    gather(ownText: string): Promise<string> {
      const id = ++lastId;
      const alone = () => mergeExpositions([{ worker: slot, text: ownText }]);
      return new Promise<string>((resolve) => {
        const timer = setTimeout(() => {
          pending.delete(id);
          resolve(alone());
        }, METRICS_GATHER_MS + 500);
        pending.set(id, (parts) => {
          clearTimeout(timer);
          resolve(parts.length > 0 ? mergeExpositions(parts) : alone());
        });
        try {
          send({ type: "metrics-request", id });
        } catch {
          pending.delete(id);
          clearTimeout(timer);
          resolve(alone());
        }
      });
    },
  };
}
