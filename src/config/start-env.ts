/**
 * What Bun reads from the environment when a process starts, before any JavaScript runs, and the
 * values the gateway wants there when the operator set none (config/runtime-env.ts starts the
 * process again with them). No side effects: tests import it.
 */

/** fetch's concurrency (see runtime-env.ts). */
export const DEFAULT_MAX_HTTP_REQUESTS = "4096";

/**
 * The allocator's settings Bun reads at start (mimalloc's `MIMALLOC_*`), where the gateway's
 * defaults differ from Bun's. Bun's mimalloc gives freed memory back to the system from a
 * background thread: every free stretch inside a page ("holes", every 100 ms) and every free page
 * 100 ms after it was freed. Under a gateway's steady load that memory is wanted again at once, so
 * it was given back and faulted in again request after request, and the thread took the request
 * thread's core for up to 8 ms at a time (`perf sched`). Without hole purging, and with pages
 * given back after a second instead of 100 ms: 0.95–0.98× the CPU per non-stream response and
 * 0.90–0.94× per stream (paired, `bun run bench --compare HEAD` with BENCH_GATEWAY_ENV), added p99
 * latency for one client 1.45–1.86 → 0.89–1.75 ms, for 3–4 % more peak memory under 10,000 slow
 * streams (docs/decisions.md, "The allocator's give-back"). Memory still goes back to the system
 * a second after a load ends. An operator's own values are kept.
 */
export const ALLOCATOR_DEFAULTS: Record<string, string> = { MIMALLOC_PURGE_HOLES: "0", MIMALLOC_PURGE_DELAY: "1000" };

/** What the process must be started with that it was not: Bun reads these before any JavaScript runs. */
export function missingStartEnv(env: Record<string, string | undefined>): Record<string, string> {
  const missing: Record<string, string> = {};
  if (!env.BUN_CONFIG_MAX_HTTP_REQUESTS) missing.BUN_CONFIG_MAX_HTTP_REQUESTS = DEFAULT_MAX_HTTP_REQUESTS;
  for (const [name, value] of Object.entries(ALLOCATOR_DEFAULTS)) if (env[name] === undefined || env[name] === "") missing[name] = value;
  return missing;
}

