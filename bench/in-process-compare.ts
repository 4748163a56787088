/**
 * Our own CPU per request, this checkout against another, paired in one process: both apps
 * (`createApp` of each checkout, each on its own SQLite file) driven through `app.handle` with an
 * upstream answered from memory, in alternating rounds, so both meet the same machine at every
 * instant. The loopback bench's `--compare` measures the whole process under wrk; this isolates
 * the JavaScript and SQLite work, and with `--cpu-prof-md` before the script the profile tells the
 * two checkouts' functions apart by path. Informative: targets are judged by `bun run bench`.
 *
 *   git worktree add /tmp/ref <ref> && ln -s "$PWD/node_modules" /tmp/ref/node_modules
 *   bun bench/in-process-compare.ts /tmp/ref [--scenario nonstream|stream|translated|cc|cc-stream] [--rounds 15] [--requests 20000] [--concurrency 32]
 *
 * `--concurrency 1` is a lone client's request (each settlement its own commit, as in A).
 *
 * Prints each checkout's median µs per request and the median of the per-round ratios (this ÷ ref).
 */
import { mkdtempSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "./child-process.ts";
import { BENCH_BODIES, BENCH_ENV, BENCH_PATHS, benchConfig, cpuPerRequest, memoryUpstream } from "./in-process-answers.ts";

const REF = process.argv[2];
const args = parseArgs(process.argv.slice(3));
if (!REF || REF.startsWith("--") || !existsSync(join(REF, "src/app.ts"))) {
  console.error("usage: bun bench/in-process-compare.ts <checkout of the ref, with node_modules> [--scenario nonstream|stream|translated|cc|cc-stream] [--rounds N] [--requests N]");
  process.exit(2);
}
const ROOTS = [resolve(REF), resolve(import.meta.dir, "..")];
const SCEN = args.get("scenario") ?? "nonstream";
const N = Number(args.get("requests") ?? 20000);
const ROUNDS = Number(args.get("rounds") ?? 15);
const CONC = Number(args.get("concurrency") ?? 32);

async function make(root: string) {
  const { createApp } = await import(`${root}/src/app.ts`);
  const { resolveSettings } = await import(`${root}/src/config/load-config.ts`);
  const { openDatabase } = await import(`${root}/src/store/database.ts`);
  // Older checkouts keep these elsewhere, or not at all (a logger that does nothing, no ops settings).
  const pick = async (paths: string[], name: string) => {
    for (const path of paths) if (existsSync(`${root}/${path}`)) return (await import(`${root}/${path}`))[name];
    return undefined;
  };
  // Each checkout's own JSON logger writing nowhere (lines built and checked as in production).
  // One that cannot be told where to write (e085163's writes to stderr) gets the checkout's silent
  // logger instead, and the run says so: its access lines are then not built.
  const jsonLogger = await pick(["src/log/log.ts", "src/log.ts"], "jsonLogger");
  const takesSink = typeof jsonLogger === "function" && String(jsonLogger).slice(0, String(jsonLogger).indexOf(")")).includes(",");
  const silentLogger = takesSink ? jsonLogger("info", () => {}) : ((await pick(["src/log/log.ts", "src/log.ts"], "silentLogger")) ?? (() => {}));
  console.log(`${root}: ${takesSink ? "its JSON logger, writing nowhere" : "a silent logger (its JSON logger writes to stderr): no access lines built"}`);
  const opsSettings = await pick(["src/config/ops-settings.ts", "src/ops/ops-settings.ts"], "opsSettings");
  const offerWholeBody = (await pick(["src/transport/http1/body-queue.ts"], "offerWholeBody")) ?? (() => {});
  const dir = mkdtempSync(join(tmpdir(), "switchyard-ab-"));
  const db = openDatabase(join(dir, "gateway.sqlite"));
  const settings = resolveSettings(benchConfig(), BENCH_ENV, "bench");
  const app = createApp({ db, settings, log: silentLogger, fetch: memoryUpstream(offerWholeBody), ...(opsSettings ? { ops: opsSettings(process.env) } : {}) });
  const account = await app.services.accounts.createAccount("bench", 1e15);
  const key = (await app.services.accounts.createKey(account.id, "bench"))!.key;
  const body = BENCH_BODIES[SCEN];
  if (!body) throw new Error(`unknown scenario ${SCEN}`);
  return (n: number) => cpuPerRequest(app, key, body, n, CONC, BENCH_PATHS[SCEN]);
}
const runs = [] as ((n: number) => Promise<number>)[];
for (const r of ROOTS) runs.push(await make(r));
for (const r of runs) await r(5000);
const per: number[][] = ROOTS.map(() => []);
const ratios: number[] = [];
for (let i = 0; i < ROUNDS; i++) {
  const order = i % 2 ? [1, 0] : [0, 1];
  const v: number[] = [];
  for (const j of order) v[j] = await runs[j]!(N);
  v.forEach((x, j) => per[j]!.push(x));
  ratios.push(v[1]! / v[0]!);
}
const med = (xs: number[]) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
ROOTS.forEach((r, j) => console.log(`${r}: median ${med(per[j]!).toFixed(1)} µs/request`));
console.log(`${SCEN}: ratio ${ROOTS[1]} ÷ ${ROOTS[0]} median ${med(ratios).toFixed(3)} [${Math.min(...ratios).toFixed(3)}–${Math.max(...ratios).toFixed(3)}]`);
process.exit(0);
