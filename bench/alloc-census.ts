/**
 * What a request allocates, by JavaScriptCore cell type: `heapStats()` counts every cell not yet
 * collected, so its counts after a full collection and again after a few requests (too few to
 * fill the young generation) differ by what those requests made. Types only, not sizes or places;
 * bench/alloc-per-request.ts gives the bytes.
 *
 *   bun bench/alloc-census.ts [--only nonstream] [--requests 200] [--warmup 20000]
 */
import { heapStats } from "bun:jsc";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApp } from "../src/app.ts";
import { resolveSettings } from "../src/config/load-config.ts";
import { openDatabase } from "../src/store/database.ts";
import { jsonLogger } from "../src/log/log.ts";
import { opsSettings } from "../src/config/ops-settings.ts";
import { offerWholeBody } from "../src/transport/http1/body-queue.ts";
import { parseArgs } from "./child-process.ts";
import { BENCH_BODIES, BENCH_ENV, BENCH_PATHS, benchConfig, memoryUpstream } from "./in-process-answers.ts";

const args = parseArgs();
const ONLY = (args.get("only") ?? "nonstream").split(",");
const REQUESTS = Number(args.get("requests") ?? 200);
const WARMUP = Number(args.get("warmup") ?? 20_000);

const dir = mkdtempSync(join(tmpdir(), "switchyard-census-"));
const db = openDatabase(join(dir, "gateway.sqlite"));
const app = createApp({ db, settings: resolveSettings(benchConfig(), BENCH_ENV, "bench"), log: jsonLogger("info", () => {}), fetch: memoryUpstream(offerWholeBody), ops: opsSettings(process.env) });
const account = await app.services.accounts.createAccount("bench", 1e15);
const key = (await app.services.accounts.createKey(account.id, "bench"))!.key;
await app.services.tokenizer.count("warm");

async function run(body: string, path: string, n: number) {
  const headers = { authorization: `Bearer ${key}`, "anthropic-version": "2023-06-01", "content-type": "application/json", "content-length": String(body.length) };
  for (let i = 0; i < n; i++) {
    const res = await app.handle(new Request(`http://localhost${path}`, { method: "POST", headers, body }));
    if (res.status !== 200) throw new Error(`status ${res.status}`);
    await res.arrayBuffer();
  }
  await app.services.settled();
}

for (const name of ONLY) {
  const body = BENCH_BODIES[name]!;
  const path = BENCH_PATHS[name] ?? "/v1/chat/completions";
  await run(body, path, WARMUP);
  Bun.gc(true);
  const before = heapStats().objectTypeCounts;
  await run(body, path, REQUESTS);
  const after = heapStats().objectTypeCounts;
  const rows = Object.entries(after).map(([type, n]) => [type, (n - (before[type] ?? 0)) / REQUESTS] as const).filter(([, n]) => n >= 0.5).sort((a, b) => b[1] - a[1]);
  const total = rows.reduce((sum, [, n]) => sum + n, 0);
  console.log(`${name}: ${total.toFixed(0)} cells a request`);
  for (const [type, n] of rows) console.log(`  ${n.toFixed(1).padStart(7)}  ${type}`);
}
db.close();
rmSync(dir, { recursive: true, force: true });
process.exit(0);
