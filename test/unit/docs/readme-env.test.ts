import { expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

/**
 * The README's Configuration table names every environment variable the gateway reads: config/
 * reads them all (test/unit/config/env.test.ts keeps it so), and an operator reading the table
 * found no SWITCHYARD_HEALTH_CHECK_TIMEOUT_MS, SWITCHYARD_SPILL_DIR, SWITCHYARD_ALERT_SECRET,
 * SWITCHYARD_CONTAINER, proxy variables or NODE_ENV.
 */

const ROOT = join(import.meta.dir, "..", "..", "..");
const CONFIG = join(ROOT, "src", "config");

/** Every variable name config/ reads: `env.NAME`, `env["NAME"]`, and names handed to the readers as strings. */
function variablesRead(): Set<string> {
  const names = new Set<string>();
  for (const file of readdirSync(CONFIG).filter((f) => f.endsWith(".ts"))) {
    const code = readFileSync(join(CONFIG, file), "utf8").replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, "");
    for (const m of code.matchAll(/\benv\.([A-Z][A-Z0-9_]*)\b|\benv\[\s*"([A-Z][A-Z0-9_]*)"\s*\]/g)) names.add(m[1] ?? m[2]!);
    // A reader given the name: wholeNumber(env, "PORT", …), bearerToken(env, "…"), the proxy list.
    for (const m of code.matchAll(/"([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|PORT|HOST)"/g)) names.add(m[1]!);
  }
  return names;
}

test("every environment variable config/ reads is in the README's Configuration section", () => {
  const readme = readFileSync(join(ROOT, "README.md"), "utf8");
  const start = readme.indexOf("\n## Configuration\n");
  const section = readme.slice(start, readme.indexOf("\n## ", start + 1));
  // Set by the supervisor in its workers' environment, not by an operator (config/env.ts, WORKER_SLOT_ENV).
  const read = [...variablesRead()].filter((name) => name !== "SWITCHYARD_WORKER_SLOT");
  // The reader sees what it should: the variables of several files and kinds.
  for (const name of ["PORT", "LOG_LEVEL", "SWITCHYARD_SHUTDOWN_GRACE_MS", "SWITCHYARD_ALERT_SECRET", "HTTPS_PROXY", "NODE_ENV", "SWITCHYARD_WORKERS"]) expect(read).toContain(name);
  const missing = read.filter((name) => !section.includes(`\`${name}\``));
  expect(missing.sort()).toEqual([]);
});
