import { Elysia } from "elysia";
import type { LedgerHealth } from "../../billing/ledger.ts";
import type { PoolReadiness } from "../../providers/key-pools.ts";

export interface HealthDeps {
  ledger: { health(): LedgerHealth };
  /** True once the process was told to stop: load balancers should send no new requests. */
  draining: () => boolean;
  /** The shared rate-limit store (Redis), when there is one: requests are refused while it is unreachable. */
  limiter?: { health?(): { reachable: boolean } };
  /**
   * Vendor key pools: cooling and disabled keys are listed by env name. Detail only: the keys' state is
   * shared by every replica (Redis), so it would take them all out of rotation at once, and with them
   * every other provider; a provider with no usable key answers its own requests with an error instead.
   */
  keyPools?: { readiness(): Promise<PoolReadiness> };
  /** Providers whose key variables are unset (names only, config/load-config.ts `providersWithoutKeys`). */
  keyless?: { provider: string; env: string[] }[];
}

/**
 * `/health`: the process answers. `/ready`: it should be sent traffic — the ledger writes, the
 * shared rate-limit store (if any) answers, and the gateway is not shutting down. Neither needs a key (probes have none) and neither says more
 * than an operator's dashboard needs: no paths, no error text beyond the store's own words. `/ready`
 * also names providers whose key variables are unset (the variables' names, never a value).
 */
export function healthRoutes(deps: HealthDeps) {
  const json = { "content-type": "application/json", "cache-control": "no-store" };
  return new Elysia({ name: "switchyard/health" })
    .get("/health", () => new Response('{"status":"ok"}', { headers: json }))
    .get("/ready", async () => {
      const ledger = deps.ledger.health();
      const draining = deps.draining();
      const limiter = deps.limiter?.health?.();
      const pools = await deps.keyPools?.readiness();
      const ready = ledger.writable && ledger.queued < ledger.maxQueued && !draining && (limiter?.reachable ?? true);
      const body = {
        status: ready ? "ready" : "not_ready",
        draining,
        ledger: { writable: ledger.writable, queued: ledger.queued, ...(ledger.failingSince ? { failing_since: new Date(ledger.failingSince).toISOString() } : {}) },
        ...(limiter ? { rate_limiter: { reachable: limiter.reachable } } : {}),
        // Only what is not plainly healthy, by env name: no secret, no vendor URL.
        ...(pools && pools.providers.some((p) => p.keys.length > 0) ? { vendor_keys: pools.providers.filter((p) => p.keys.length > 0) } : {}),
        // Other providers still serve, so this is detail, not a reason to take the gateway out of rotation.
        ...(deps.keyless && deps.keyless.length > 0 ? { providers_without_key: deps.keyless } : {}),
      };
      return new Response(JSON.stringify(body), { status: ready ? 200 : 503, headers: json });
    });
}
