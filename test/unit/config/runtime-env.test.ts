/**
 * The entry point's first import (config/runtime-env.ts) puts Elysia in production mode unless
 * NODE_ENV says otherwise: outside it, every body refused by a route's schema was reported whole
 * (all errors, pretty-printed), hundreds of milliseconds of the request thread for a large body.
 */
import { expect, test } from "bun:test";
import { join } from "node:path";

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
