/**
 * Imported first by the entry point (src/index.ts), before any other module runs.
 *
 * Bun reads BUN_CONFIG_MAX_HTTP_REQUESTS once, when the process starts: fetch runs at most that
 * many requests at once (256 by default) and queues the rest. API calls use our own client, but
 * image downloads and every call through an HTTP(S) proxy go through fetch, where a queued
 * stream waits for another to finish. Setting it from JavaScript is too late, so when it (or an
 * allocator setting below) is unset the process replaces itself (execve: same pid, same
 * arguments, no supervisor left behind) with the variable set. An operator's own value is kept
 * as it is.
 */
import { missingStartEnv } from "./start-env.ts";

/**
 * Elysia reads NODE_ENV once, when it is first imported: outside "production" every request that
 * fails its schema builds a report of the whole body (all its errors, the expected value, the body
 * pretty-printed), ~380 ms of the request thread for a 10 MB body of 300,000 messages, which any
 * key could send a few times a second to stall every other tenant. The gateway only ever uses the
 * first error (http/plugins/errors.ts), so it runs in production mode unless told otherwise (an
 * empty NODE_ENV, as `ENV NODE_ENV=` leaves it, says nothing).
 */
process.env.NODE_ENV ||= "production";

const healthCheck = process.argv.includes("--health-check");
const missing = missingStartEnv(process.env);
if (Object.keys(missing).length > 0 && !healthCheck && typeof process.execve === "function" && process.platform !== "win32") {
  // A compiled binary's argv[1] is its embedded entry (/$bunfs/…), not an argument to pass again.
  const compiled = process.argv[1]?.startsWith("/$bunfs/") ?? false;
  const args = compiled ? process.argv.slice(2) : [...process.execArgv, ...process.argv.slice(1)];
  try {
    process.execve(process.execPath, [process.execPath, ...args], { ...process.env, ...missing });
  } catch {
    // Cannot replace the process (a sandbox without execve): run with Bun's default.
  }
}
