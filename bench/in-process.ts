/**
 * The gateway's own CPU per request, without sockets: the real app (auth, limiter, ledger on)
 * driven through `app.handle`, with an upstream `fetch` that answers from memory. What it
 * measures is what the gateway adds on top of the floor's work (accepting a request, one fetch,
 * one response), so it moves with every change to the hot path while the loopback bench's
 * ratios drown small changes in noise. Informative: the targets are judged by `bun run bench`.
 *
 *   bun bench/in-process.ts [--requests N] [--concurrency C] [--only nonstream,stream,translated,cc,cc-stream,large]
 *
 * SWITCHYARD_METRICS=off and SWITCHYARD_ACCESS_LOG=off measure what counting and access-log lines
 * cost (the lines go to the gateway's JSON logger with nowhere to write: building them is
 * measured, writing them is not).
 *
 * With `--cpu-prof-md` before the script (`bun --cpu-prof-md bench/in-process.ts`) it doubles as
 * the quickest profile of the hot path.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApp } from "../src/app.ts";
import { resolveSettings } from "../src/config/load-config.ts";
import { openDatabase } from "../src/store/database.ts";
import { jsonLogger } from "../src/log/log.ts";
import { opsSettings } from "../src/config/ops-settings.ts";
import { parseArgs } from "./child-process.ts";
import { agentConversation } from "./agent-conversation.ts";
import { offerWholeBody } from "../src/transport/http1/body-queue.ts";
import { BENCH_BODIES, BENCH_ENV, BENCH_PATHS, benchConfig, cpuPerRequest, memoryUpstream } from "./in-process-answers.ts";

const args = parseArgs();
const REQUESTS = Number(args.get("requests") ?? 40_000);
const CONCURRENCY = Number(args.get("concurrency") ?? 32);
const ONLY = (args.get("only") ?? "nonstream,stream,translated").split(",");
/** A real upstream (bench/fake-upstream.ts) instead of answers from memory: adds the fetch's own cost. */
const UPSTREAM = args.get("upstream");

/** `--one-read`: the whole answer in one chunk, as the loopback bench's fake upstream delivers it under load. */
const ONE_READ = process.argv.includes("--one-read");

const dir = mkdtempSync(join(tmpdir(), "switchyard-inproc-"));
const db = openDatabase(join(dir, "gateway.sqlite"));
const settings = resolveSettings(benchConfig(UPSTREAM), BENCH_ENV, "bench");
// The gateway's own logger with its lines going nowhere: built and checked for secrets as in
// production, not written (a silent logger would be wrapped in the scrubbing copy instead).
const app = createApp({ db, settings, log: jsonLogger("info", () => {}), fetch: UPSTREAM ? undefined : memoryUpstream(offerWholeBody, ONE_READ), ops: opsSettings(process.env) });
const account = await app.services.accounts.createAccount("bench", 1e15);
const key = (await app.services.accounts.createKey(account.id, "bench"))!.key;

const scenarios: Record<string, string> = {
  ...BENCH_BODIES,
  /** An agent-sized conversation, about 210 KB (not run unless asked for with --only). */
  large: JSON.stringify({ model: "bench/gpt", messages: agentConversation(), max_tokens: 20 }),
};
for (const name of ONLY) {
  const body = scenarios[name];
  if (!body) throw new Error(`unknown scenario ${name}`);
  const run = (body: string, n: number) => cpuPerRequest(app, key, body, n, CONCURRENCY, BENCH_PATHS[name]);
  await run(body, Math.min(5000, REQUESTS)); // warm-up: JIT, caches, tokenizer
  const rounds = [await run(body, REQUESTS / 2), await run(body, REQUESTS / 2)];
  console.log(`${name.padEnd(11)} ${Math.min(...rounds).toFixed(1)} µs CPU per request (rounds ${rounds.map((r) => r.toFixed(1)).join(", ")}; concurrency ${CONCURRENCY})`);
}
db.close();
rmSync(dir, { recursive: true, force: true });
