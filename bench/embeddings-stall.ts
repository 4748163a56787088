/**
 * What one large embeddings answer costs the request thread: 2,048 inputs answered with
 * 1,400-dimension vectors (a ~60 MB float JSON body, ~16 MB as base64), through the real app on
 * loopback. The upstream and the client are child processes (so neither's work lands on the
 * gateway's thread); the gateway's thread runs a 1 ms interval whose longest late tick is the
 * stall every other tenant's request would have waited through.
 *
 *   bun bench/embeddings-stall.ts [--rounds 3] [--dimensions 1400] [--inputs 2048] [--only float-float,base64-base64,…]
 *
 * A case is `<client asks>-<upstream answers>`. Reported per case: the longest stall (ms), the
 * process's CPU (all threads, ms; the request thread's alone from /proc, in 10 ms ticks) and the
 * wall time of the request, best and worst of the rounds.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApp, SERVER_BODY_LIMIT } from "../src/app.ts";
import { resolveSettings } from "../src/config/load-config.ts";
import { openDatabase } from "../src/store/database.ts";
import { silentLogger } from "../src/log/log.ts";
import { float32Base64 } from "../src/formats/openai-embeddings/encode-embeddings.ts";
import { parseArgs, readyPort, serveAsChild } from "./child-process.ts";
import { watchLoopStall } from "../test/helpers/loop-stall.ts";

const args = parseArgs(process.argv.slice(2).filter((a) => a !== "--serve"));
const DIMENSIONS = Number(args.get("dimensions") ?? 1400);
const INPUTS = Number(args.get("inputs") ?? 2048);

if (process.argv.includes("--serve")) {
  // The upstream: one vector per input, float32 values printed as JSON numbers, or base64 as asked.
  // `--answers float|base64` makes it ignore the asked encoding, as some compatible servers do.
  const forced = args.get("answers");
  let seed = 1;
  const random = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
  const vectors = Array.from({ length: INPUTS }, () => Array.from({ length: DIMENSIONS }, () => Math.fround(random() * 0.1 - 0.05)));
  const answer = (encoding: string) =>
    JSON.stringify({
      object: "list",
      data: vectors.map((v, index) => ({ object: "embedding", index, embedding: encoding === "base64" ? float32Base64(v) : v })),
      model: "text-embedding-3-large",
      usage: { prompt_tokens: INPUTS * 3, total_tokens: INPUTS * 3 },
    });
  const bodies = { float: answer("float"), base64: answer("base64") };
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      const body = (await req.json()) as { encoding_format?: string };
      const encoding = forced ?? (body.encoding_format === "base64" ? "base64" : "float");
      return new Response(bodies[encoding as "float" | "base64"], { headers: { "content-type": "application/json" } });
    },
  });
  serveAsChild(server, true);
} else {
  await main();
}

/** CPU ms of each of this process's threads, by name (Linux; empty elsewhere): the request thread is the one named like the process. */
function threadCpu(): Map<string, number> {
  const out = new Map<string, number>();
  let tasks: string[] = [];
  try {
    tasks = readdirSync("/proc/self/task");
  } catch {
    return out;
  }
  for (const tid of tasks) {
    try {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      const name = tid === String(process.pid) ? "main" : readFileSync(`/proc/self/task/${tid}/comm`, "utf8").trim();
      // utime and stime, in clock ticks (10 ms).
      out.set(name, (out.get(name) ?? 0) + (Number(fields[11]) + Number(fields[12])) * 10);
    } catch {}
  }
  return out;
}

async function startUpstream(answers: string): Promise<{ url: string; stop(): void }> {
  const child = Bun.spawn([process.execPath, import.meta.path, "--serve", "--answers", answers, "--dimensions", String(DIMENSIONS), "--inputs", String(INPUTS)], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
  return { url: `http://127.0.0.1:${await readyPort(child.stdout, "the upstream")}`, stop: () => child.kill() };
}

async function main(): Promise<void> {
  const ROUNDS = Number(args.get("rounds") ?? 3);
  const ONLY = (args.get("only") ?? "float-float,base64-base64,base64-float,float-base64").split(",");
  const dir = mkdtempSync(join(tmpdir(), "switchyard-embstall-"));
  for (const name of ONLY) {
    const [asks, answers] = name.split("-") as [string, string];
    const upstream = await startUpstream(answers);
    const db = openDatabase(join(dir, `${name}.sqlite`));
    const settings = resolveSettings(
      {
        providers: [{ id: "up", kind: "openai", base_url: `${upstream.url}/v1`, api_key_env: "BENCH_KEY", timeouts: { first_byte_ms: 60_000, whole_answer_ms: 60_000, idle_ms: 60_000, total_ms: 600_000 } }],
        models: [{ id: "bench/embed", provider: "up", upstream_model: "text-embedding-3-large", category: "embedding", context_length: 8192, pricing: { input_per_mtok: 130, output_per_mtok: 0 } }],
        limits: { requests_per_minute: 1_000_000 },
      },
      { BENCH_KEY: "sk-bench" },
      "bench",
    );
    const app = createApp({ db, settings, log: silentLogger });
    const account = await app.services.accounts.createAccount("bench", 1e12);
    const key = (await app.services.accounts.createKey(account.id, "bench"))!.key;
    app.listen({ port: 0, hostname: "127.0.0.1", maxRequestBodySize: SERVER_BODY_LIMIT });
    const url = `http://127.0.0.1:${app.server!.port}/v1/embeddings`;
    const body = JSON.stringify({ model: "bench/embed", input: Array.from({ length: INPUTS }, (_, i) => `input number ${i}`), encoding_format: asks });
    const bodyFile = join(dir, "body.json");
    await Bun.write(bodyFile, body);

    const results: { stall: number; cpu: number; mainCpu: number; wall: number; bytes: number }[] = [];
    for (let round = 0; round < ROUNDS + 1; round++) {
      await Bun.sleep(200);
      Bun.gc(true);
      const watch = watchLoopStall();
      const threads0 = threadCpu();
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      const client = Bun.spawn(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{size_download}", "-H", `authorization: Bearer ${key}`, "-H", "content-type: application/json", "--data-binary", `@${bodyFile}`, url], { stdout: "pipe" });
      const out = await new Response(client.stdout).text();
      const wall = performance.now() - t0;
      const cpu = process.cpuUsage(cpu0);
      const threads = threadCpu();
      const mainCpu = (threads.get("main") ?? 0) - (threads0.get("main") ?? 0);
      const stall = watch.stop();
      const [status, bytes] = out.split(" ").map(Number) as [number, number];
      if (status !== 200) throw new Error(`${name}: status ${status}`);
      // The first round warms the JIT and the workers.
      if (round > 0) results.push({ stall, cpu: (cpu.user + cpu.system) / 1000, mainCpu, wall, bytes });
    }
    const range = (f: (r: (typeof results)[number]) => number) => `${Math.min(...results.map(f)).toFixed(0)}–${Math.max(...results.map(f)).toFixed(0)}`;
    console.log(`${name.padEnd(14)} answer ${(results[0]!.bytes / 1e6).toFixed(1)} MB  longest stall ${range((r) => r.stall)} ms  CPU ${range((r) => r.cpu)} ms (request thread ${range((r) => r.mainCpu)})  wall ${range((r) => r.wall)} ms`);
    await app.stop(true);
    await app.services.settled();
    await app.services.ledger.close();
    db.close();
    upstream.stop();
  }
  rmSync(dir, { recursive: true, force: true });
  const peak = /VmHWM:\s*(\d+) kB/.exec(readFileSync("/proc/self/status", "utf8"))?.[1];
  if (peak) console.log(`peak RSS of the run: ${(Number(peak) / 1024).toFixed(0)} MB`);
  process.exit(0);
}
