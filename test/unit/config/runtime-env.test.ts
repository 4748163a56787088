/**
 * The entry point's first import (config/runtime-env.ts) puts Elysia in production mode unless
 * NODE_ENV says otherwise: outside it, every body refused by a route's schema was reported whole
 * (all errors, pretty-printed), hundreds of milliseconds of the request thread for a large body.
 */
import { expect, test } from "bun:test";
import { join } from "node:path";
import { ALLOCATOR_DEFAULTS, DEFAULT_MAX_HTTP_REQUESTS, missingStartEnv } from "../../../src/config/start-env.ts";

const ROOT = join(import.meta.dir, "../../..");
/** What Elysia decided, in a fresh process that imports what src/index.ts imports first. */
function elysiaMode(env: Record<string, string | undefined>): string {
  const script = `import "./src/config/runtime-env.ts"; const { isProduction } = await import("elysia/error"); console.log(JSON.stringify({ isProduction, env: process.env.NODE_ENV }));`;
  const { NODE_ENV: _unset, ...base } = process.env;
  const run = Bun.spawnSync([process.execPath, "-e", script], { cwd: ROOT, env: { ...base, BUN_CONFIG_MAX_HTTP_REQUESTS: "4096", ...env } });
  expect(run.exitCode).toBe(0);
  return run.stdout.toString().trim();
}

test("without NODE_ENV the gateway runs Elysia in production mode", () => {
  expect(elysiaMode({})).toBe(JSON.stringify({ isProduction: true, env: "production" }));
});

test("an operator's own NODE_ENV is kept", () => {
  expect(elysiaMode({ NODE_ENV: "development" })).toBe(JSON.stringify({ isProduction: false, env: "development" }));
});

/** The allocator settings a fresh process that imports runtime-env.ts runs with (after it replaced itself). */
function allocatorEnv(env: Record<string, string | undefined>): Record<string, string | null> {
  const script = `import "./src/config/runtime-env.ts"; console.log(JSON.stringify({ holes: process.env.MIMALLOC_PURGE_HOLES_MIN_INTERVAL ?? null, delay: process.env.MIMALLOC_PURGE_DELAY ?? null, fetches: process.env.BUN_CONFIG_MAX_HTTP_REQUESTS ?? null, pid: process.pid }));`;
  const { MIMALLOC_PURGE_HOLES_MIN_INTERVAL: _h, MIMALLOC_PURGE_DELAY: _d, BUN_CONFIG_MAX_HTTP_REQUESTS: _f, ...base } = process.env;
  const child = Bun.spawnSync([process.execPath, "-e", script], { cwd: ROOT, env: { ...base, ...env } });
  expect(child.exitCode).toBe(0);
  const out = JSON.parse(child.stdout.toString().trim()) as Record<string, string | number | null>;
  // Replaced in place (execve), not a child of itself: the pid is the one spawned.
  expect(out.pid).toBe(child.pid);
  return { holes: out.holes as string | null, delay: out.delay as string | null, fetches: out.fetches as string | null };
}

test("the gateway starts with its allocator settings: free pages and free stretches in pages given back after a second", () => {
  expect(missingStartEnv({})).toEqual({ BUN_CONFIG_MAX_HTTP_REQUESTS: DEFAULT_MAX_HTTP_REQUESTS, ...ALLOCATOR_DEFAULTS });
  expect(ALLOCATOR_DEFAULTS).toEqual({ MIMALLOC_PURGE_DELAY: "1000", MIMALLOC_PURGE_HOLES_MIN_INTERVAL: "1000" });
  expect(allocatorEnv({})).toEqual({ holes: "1000", delay: "1000", fetches: "4096" });
  // Only what is missing is added: with the fetch limit set, the allocator settings still are.
  expect(allocatorEnv({ BUN_CONFIG_MAX_HTTP_REQUESTS: "512" })).toEqual({ holes: "1000", delay: "1000", fetches: "512" });
});

test("an operator's own allocator settings are kept", () => {
  expect(missingStartEnv({ BUN_CONFIG_MAX_HTTP_REQUESTS: "4096", MIMALLOC_PURGE_HOLES_MIN_INTERVAL: "100", MIMALLOC_PURGE_DELAY: "100" })).toEqual({});
  expect(allocatorEnv({ MIMALLOC_PURGE_HOLES_MIN_INTERVAL: "100", MIMALLOC_PURGE_DELAY: "-1" })).toEqual({ holes: "100", delay: "-1", fetches: "4096" });
});
