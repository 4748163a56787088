import type { Logger } from "../log/log.ts";
import type { AlertOutbox, OutboxRow } from "./alert-outbox.ts";
import { EVENT_ID_HEADER, SIGNATURE_HEADER, signatureHeader } from "./alert-signature.ts";

export interface AlertDispatcherOptions {
  outbox: AlertOutbox;
  url: string;
  /** SWITCHYARD_ALERT_SECRET: signs every delivery when set. */
  secret?: string;
  timeoutMs: number;
  retryInitialMs: number;
  retryMaxMs: number;
  /** How often an idle dispatcher looks at the outbox (other processes insert too). */
  pollMs?: number;
  /** Rows sent at once at most. */
  batch?: number;
  log: Logger;
  /** Wall clock of the signature's timestamp. */
  clock?: () => number;
  /** Counts for /metrics. */
  onDelivered?: () => void;
  onFailed?: () => void;
}

export type AlertDispatcher = ReturnType<typeof createAlertDispatcher>;

/** Backoff after the `attempts`th failure: `initial`, doubling, at most `max`. */
export function retryDelay(attempts: number, initialMs: number, maxMs: number): number {
  return Math.min(maxMs, initialMs * 2 ** Math.min(Math.max(attempts - 1, 0), 30));
}

/**
 * Sends what the outbox holds: claims due rows (a lease, so other processes leave them alone),
 * POSTs each with a timeout, marks it delivered on a 2xx and otherwise leaves it for a retry with
 * exponential backoff. A receiver that is down only delays its own events: nothing here is on a
 * request's path. Timers are unref'd; `stop` aborts sends under way (their leases expire and
 * they are sent again: at least once).
 */
export function createAlertDispatcher(o: AlertDispatcherOptions) {
  const pollMs = o.pollMs ?? 2_000;
  const batch = o.batch ?? 16;
  const clock = o.clock ?? Date.now;
  // A lease outlives a send (its timeout) by a margin, so a live sender is never overtaken.
  const leaseMs = o.timeoutMs + 5_000;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let cycle: Promise<void> | undefined;
  let again = false;
  let stopped = true;
  let aborter = new AbortController();

  async function deliver(row: OutboxRow): Promise<void> {
    const headers: Record<string, string> = {
      "content-type": "application/json",
      "user-agent": "switchyard-alerts",
      [EVENT_ID_HEADER]: row.eventId,
    };
    if (o.secret) headers[SIGNATURE_HEADER] = signatureHeader(o.secret, row.body, Math.floor(clock() / 1000));
    let failure: string;
    try {
      const signal = AbortSignal.any([aborter.signal, AbortSignal.timeout(o.timeoutMs)]);
      const res = await fetch(o.url, { method: "POST", headers, body: row.body, signal, redirect: "manual" });
      await res.arrayBuffer().catch(() => {});
      if (res.status >= 200 && res.status < 300) {
        await o.outbox.delivered(row.id);
        o.onDelivered?.();
        return;
      }
      failure = `HTTP ${res.status}`;
    } catch (err) {
      if (stopped) {
        // Cut by stop(): due again at once for the next process (a crash leaves it to the lease).
        await o.outbox.retryLater(row.id, 0, "interrupted by a stop").catch(() => {});
        return;
      }
      failure = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    }
    o.onFailed?.();
    const delay = retryDelay(row.attempts, o.retryInitialMs, o.retryMaxMs);
    // The event's id and type only: never the body (names, amounts) nor the secret.
    o.log("warn", "spend alert not delivered; retrying", { eventId: row.eventId, type: row.type, attempt: row.attempts, retryInMs: delay, error: failure.slice(0, 200) });
    await o.outbox.retryLater(row.id, delay, failure.slice(0, 500));
  }

  async function run(): Promise<void> {
    let wait = pollMs;
    try {
      do {
        again = false;
        for (;;) {
          // A read first: an idle outbox costs no write (a claim is an UPDATE).
          const next = await o.outbox.nextDueInMs();
          if (next === null || next > 0) {
            wait = next === null ? pollMs : Math.min(pollMs, Math.max(next, 10));
            break;
          }
          const rows = await o.outbox.claim(batch, leaseMs);
          if (rows.length === 0 || stopped) break; // another process took them
          await Promise.all(rows.map((row) => deliver(row).catch((err) => o.log("warn", "spend alert outbox update failed", { eventId: row.eventId, error: String(err) }))));
          if (stopped) return;
        }
      } while (again && !stopped);
    } catch (err) {
      if (!stopped) o.log("warn", "spend alert outbox unreadable; retrying", { error: err instanceof Error ? err.message : String(err) });
    }
    schedule(wait);
  }

  function schedule(ms: number): void {
    if (stopped) return;
    clearTimeout(timer);
    timer = setTimeout(tick, ms);
    timer.unref?.();
  }

  function tick(): void {
    if (stopped) return;
    if (cycle) {
      again = true;
      return;
    }
    cycle = run().finally(() => (cycle = undefined));
  }

  return {
    start(): void {
      if (!stopped) return;
      stopped = false;
      aborter = new AbortController();
      tick();
    },
    /** New events were queued: send them now rather than at the next poll. */
    wake(): void {
      if (stopped) return;
      clearTimeout(timer);
      tick();
    },
    async stop(): Promise<void> {
      stopped = true;
      clearTimeout(timer);
      aborter.abort();
      await cycle?.catch(() => {});
    },
  };
}
