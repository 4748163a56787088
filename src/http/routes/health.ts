import { Elysia } from "elysia";
import type { LedgerHealth } from "../../billing/ledger.ts";

export interface HealthDeps {
  ledger: { health(): LedgerHealth };
  /** True once the process was told to stop: load balancers should send no new requests. */
  draining: () => boolean;
  /** The shared rate-limit store (Redis), when there is one: requests are refused while it is unreachable. */
  limiter?: { health?(): { reachable: boolean } };
}

/**
 * `/health`: the process answers. `/ready`: it should be sent traffic — the ledger writes, the
 * shared rate-limit store (if any) answers, and the gateway is not shutting down. Neither needs a key (probes have none) and neither says more
 * than an operator's dashboard needs: no paths, no error text beyond the store's own words.
 */
export function healthRoutes(deps: HealthDeps) {
  const json = { "content-type": "application/json", "cache-control": "no-store" };
  return new Elysia({ name: "switchyard/health" })
    .get("/health", () => new Response('{"status":"ok"}', { headers: json }))
    .get("/ready", () => {
      const ledger = deps.ledger.health();
      const draining = deps.draining();
      const limiter = deps.limiter?.health?.();
      const ready = ledger.writable && ledger.queued < ledger.maxQueued && !draining && (limiter?.reachable ?? true);
      const body = {
        status: ready ? "ready" : "not_ready",
        draining,
        ledger: { writable: ledger.writable, queued: ledger.queued, ...(ledger.failingSince ? { failing_since: new Date(ledger.failingSince).toISOString() } : {}) },
        ...(limiter ? { rate_limiter: { reachable: limiter.reachable } } : {}),
      };
      return new Response(JSON.stringify(body), { status: ready ? 200 : 503, headers: json });
    });
}
