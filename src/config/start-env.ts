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
 * background thread: free stretches inside pages ("holes") at most every 100 ms, and free pages
 * 100 ms after they were freed. Under a gateway's steady load that memory is wanted again at
 * once, so it was given back and faulted in again request after request, and the thread took the
 * request thread's core for up to 8 ms at a time (`perf sched`). Here both wait a second: memory
 * still goes back a second after a load ends, at about a third of the CPU (docs/decisions.md,
 * "The allocator's give-back"). Turning hole purging off saved 2–4 % more CPU but kept ~60 MB
 * more after the soak (E: 143 → 206 MB idle, its growth check missed), so it stays on. An
 * operator's own values are kept.
 */
export const ALLOCATOR_DEFAULTS: Record<string, string> = { MIMALLOC_PURGE_DELAY: "1000", MIMALLOC_PURGE_HOLES_MIN_INTERVAL: "1000" };

const START_DEFAULTS: Record<string, string> = { BUN_CONFIG_MAX_HTTP_REQUESTS: DEFAULT_MAX_HTTP_REQUESTS, ...ALLOCATOR_DEFAULTS };

/** What the process must be started with that it was not (unset or empty): Bun reads these before any JavaScript runs. */
export function missingStartEnv(env: Record<string, string | undefined>): Record<string, string> {
  const missing: Record<string, string> = {};
  for (const [name, value] of Object.entries(START_DEFAULTS)) if (!env[name]) missing[name] = value;
  return missing;
}

