import { expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

/** docs/api.md's metrics table names every metric the gateway exposes (the three spend-alert counters were missing). */

const ROOT = join(import.meta.dir, "..", "..", "..");
const OPS = join(ROOT, "src", "ops");

test("every metric src/ops/ registers is a row of docs/api.md's metrics table", () => {
  const registered = new Set<string>();
  for (const file of readdirSync(OPS).filter((f) => f.endsWith(".ts"))) {
    for (const m of readFileSync(join(OPS, file), "utf8").matchAll(/new \w+\(\s*"((?:switchyard|process)_[a-z_]+)"/g)) registered.add(m[1]!);
  }
  expect(registered).toContain("switchyard_requests_total");
  expect(registered).toContain("switchyard_alerts_failed_total");
  const api = readFileSync(join(ROOT, "docs", "api.md"), "utf8");
  const rows = api.split("\n").filter((l) => l.startsWith("| `switchyard_") || l.startsWith("| `process_"));
  expect([...registered].filter((name) => !rows.some((row) => row.includes(`\`${name}\``))).sort()).toEqual([]);
});
