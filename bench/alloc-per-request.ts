/**
 * JavaScriptCore heap bytes the gateway allocates per request: what fills the young generation
 * and so sets how often an eden collection pauses a request (docs/benchmarks.md). The app is
 * built as bench/in-process.ts builds it (answers from memory, logger writing nowhere) and
 * driven through `app.handle`; bytes, unlike time, do not move with the machine's load.
 *
 *   bun bench/alloc-per-request.ts [--only nonstream,stream,translated,cc,cc-stream]
 *     [--requests 8000] [--rounds 3] [--warmup 20000] [--concurrency 1] [--loopback 1]
 *
 * How: the script runs itself as a child with `BUN_JSC_logGC=1`, where JavaScriptCore prints the
 * bytes allocated since the last collection each time that count triggers one ("Requesting GC
 * because bytes allocated this cycle: N"), and the child writes a marker line after each
 * request to the same stderr, in order. A cycle's bytes over the requests finished in it is the
 * figure; a collection that no count requested (JavaScriptCore's and Bun's timers, pushed far
 * out in the child but not off) resets the count without printing it, so the cycle it ends is
 * left out, as is each round's first (begun before the round). Concurrent collection is off in the child,
 * so nothing is allocated while a collection runs. The tokenizer worker's heap logs too: its
 * lines are told apart by the heap's address. Timers that fire during a round (the ledger's
 * folds, key-pool probes) are counted with the requests.
 *
 * `--loopback 1`: the gateway as users run it instead (`bun src/index.ts`: Bun's server, our
 * HTTP/1.1 client to bench/fake-upstream.ts, the access log written to stderr), this script its
 * sequential client over loopback. The gateway's stderr, its log and the collector's together,
 * goes to a file; a request is counted by its access-log line (so SWITCHYARD_ACCESS_LOG=off
 * cannot be measured this way), a round by the file's length.
 *
 * Rounds agree within ~0.3 %; separate runs of one commit within ~1-2 % (the JIT's choices).
 * ALLOC_FLOOR=1: the loop alone, against a handler that answers at once (~1 KB a request: the
 * Request and reading the answer). ALLOC_LOG=<file> keeps the parsed log; ALLOC_CYCLES=1 prints
 * each cycle's requests:bytes-per-request.
 */
import { writeSync } from "node:fs";
import { parseArgs } from "./child-process.ts";

const args = parseArgs(process.argv.slice(process.argv.includes("--child") ? 3 : 2));
const ONLY = (args.get("only") ?? "nonstream,stream").split(",");
const REQUESTS = Number(args.get("requests") ?? 8000);
const ROUNDS = Number(args.get("rounds") ?? 3);
/** The figure falls ~8 % over the first 20,000 requests as the optimising JIT sinks allocations, then holds. */
const WARMUP = Number(args.get("warmup") ?? 20_000);
const CONCURRENCY = Number(args.get("concurrency") ?? 1);
const LOOPBACK = args.get("loopback") === "1";

/**
 * Markers: each written in one call, so another thread's log line may surround one but never
 * splits it (the collector prints its lines in pieces).
 */
const mark = (text: string) => writeSync(2, `@@${text}@@\n`);
/** A constant, so writing it allocates nothing on the heap being measured. */
const DONE_MARK = "@@R@@\n";

async function child(): Promise<void> {
  const { mkdtempSync, rmSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const { createApp } = await import("../src/app.ts");
  const { resolveSettings } = await import("../src/config/load-config.ts");
  const { openDatabase } = await import("../src/store/database.ts");
  const { jsonLogger } = await import("../src/log/log.ts");
  const { opsSettings } = await import("../src/config/ops-settings.ts");
  const { offerWholeBody } = await import("../src/transport/http1/body-queue.ts");
  const { BENCH_BODIES, BENCH_ENV, BENCH_PATHS, benchConfig, memoryUpstream } = await import("./in-process-answers.ts");

  const dir = mkdtempSync(join(tmpdir(), "switchyard-alloc-"));
  const db = openDatabase(join(dir, "gateway.sqlite"));
  const settings = resolveSettings(benchConfig(), BENCH_ENV, "bench");
  const app = createApp({ db, settings, log: jsonLogger("info", () => {}), fetch: memoryUpstream(offerWholeBody), ops: opsSettings(process.env) });
  const account = await app.services.accounts.createAccount("bench", 1e15);
  const key = (await app.services.accounts.createKey(account.id, "bench"))!.key;
  // The tokenizer thread's heap logs too: its table load is over before any round starts.
  await app.services.tokenizer.count("warm");

  // ALLOC_FLOOR=1: what the loop itself allocates (the Request, reading the answer), against a handler that answers at once.
  const handle = process.env.ALLOC_FLOOR === "1" ? async (_: Request) => new Response('{"ok":true}') : (request: Request) => app.handle(request);
  const run = async (body: string, path: string, n: number, marked: boolean) => {
    const headers = { authorization: `Bearer ${key}`, "anthropic-version": "2023-06-01", "content-type": "application/json", "content-length": String(body.length) };
    const url = `http://localhost${path}`;
    let next = 0;
    await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
      while (next++ < n) {
        const res = await handle(new Request(url, { method: "POST", headers, body }));
        if (res.status !== 200) throw new Error(`status ${res.status}: ${await res.text()}`);
        await res.arrayBuffer();
        if (marked) writeSync(2, DONE_MARK);
      }
    }));
    await app.services.settled();
  };

  for (const name of ONLY) {
    const body = BENCH_BODIES[name];
    if (!body) throw new Error(`unknown scenario ${name}`);
    const path = BENCH_PATHS[name] ?? "/v1/chat/completions";
    await run(body, path, WARMUP, false);
    for (let round = 0; round < ROUNDS; round++) {
      Bun.gc(true);
      mark(`BEGIN ${name}`);
      await run(body, path, REQUESTS, true);
      mark("END");
    }
  }
  // The markers alone, for the parent to check that they allocate nothing.
  Bun.gc(true);
  mark("BEGIN markers");
  for (let i = 0; i < 100_000; i++) writeSync(2, DONE_MARK);
  mark("END");
  db.close();
  rmSync(dir, { recursive: true, force: true });
  process.exit(0);
}

interface Cycle {
  bytes: number;
  requests: number;
}

/** Reads the child's stderr: the cycles each round counted whole, by scenario. */
function parse(log: string): Map<string, Cycle[][]> {
  // The main thread's heap: the one that collects most once the rounds begin (the tokenizer's
  // thread idles through them, a count or two aside).
  const collections = new Map<string, number>();
  for (const [, heap] of log.slice(log.indexOf("@@BEGIN ")).matchAll(/\[GC<(0x[0-9a-f]+)>: START/g)) collections.set(heap!, (collections.get(heap!) ?? 0) + 1);
  const main = [...collections].sort((a, b) => b[1] - a[1])[0]![0];
  // The events of a round: markers, collections requested by the count, and collections started.
  const events = /@@([^@]+)@@|Requesting GC because bytes allocated this cycle: (\d+)|\[GC<(0x[0-9a-f]+)>: START/g;
  const rounds = new Map<string, Cycle[][]>();
  let name: string | undefined;
  let cycles: Cycle[] = [];
  let requests = 0;
  let pending: number | undefined;
  let others = 0;
  let counting = false;
  for (const [, marker, bytes, heap] of log.matchAll(events)) {
    if (marker === "R") requests++;
    else if (marker?.startsWith("BEGIN ")) {
      name = marker.slice(6);
      cycles = [];
      requests = 0;
      pending = undefined;
      // A cycle counts from a collection seen in the round: the one under way at its start began before it.
      counting = false;
    } else if (marker === "END" && name) {
      rounds.set(name, [...(rounds.get(name) ?? []), cycles]);
      name = undefined;
    } else if (bytes !== undefined) pending = Number(bytes);
    else if (heap === main) {
      // Requested by the count: a whole cycle. Otherwise a timer's, whose count is lost.
      if (pending !== undefined && name && counting) cycles.push({ bytes: pending, requests });
      counting = true;
      requests = 0;
      pending = undefined;
    } else if (heap !== undefined) {
      // Another heap's: a request just before it was its own.
      if (name) others++;
      pending = undefined;
    }
  }
  if (others > 0) console.log(`note: the tokenizer thread collected ${others} times during the rounds (its counts are told apart by the address that follows them)`);
  return rounds;
}

function report(results: Map<string, Cycle[][]>): void {
  for (const [name, rounds] of results) {
    if (name === "markers") {
      const cycles = rounds.flat().length;
      if (cycles > 0) console.log(`warning: 100,000 markers alone filled ${cycles} cycles`);
      continue;
    }
    const perRequest = rounds.map((cycles) => {
      const bytes = cycles.reduce((sum, c) => sum + c.bytes, 0);
      const requests = cycles.reduce((sum, c) => sum + c.requests, 0);
      return { perRequest: bytes / requests, cycles: cycles.length, requests };
    });
    if (process.env.ALLOC_CYCLES) for (const cycles of rounds) console.log(cycles.map((c) => `${c.requests}:${Math.round(c.bytes / c.requests)}`).join(" "));
    const figures = perRequest.map((r) => r.perRequest).sort((a, b) => a - b);
    const median = figures[figures.length >> 1]!;
    const spread = ((figures.at(-1)! - figures[0]!) / median) * 100;
    console.log(`${name.padEnd(10)} ${Math.round(median)} bytes per request, median of ${rounds.length} rounds (${perRequest.map((r) => `${Math.round(r.perRequest)} over ${r.requests} in ${r.cycles} cycles`).join("; ")}; spread ${spread.toFixed(2)} %; concurrency ${CONCURRENCY})`);
  }
}

/** The child's environment: the collector's log, and nothing that resets its count unprinted. */
const GC_ENV = {
  BUN_JSC_logGC: "1",
  BUN_JSC_useConcurrentGC: "0",
  // JavaScriptCore's idle timers collect sooner the more was allocated, and a timer's
  // collection resets the count unprinted: pushed out of any round's reach.
  BUN_JSC_percentCPUPerMBForEdenTimer: "0.00000001",
  BUN_JSC_percentCPUPerMBForFullTimer: "0.00000001",
};

/** `--loopback`: a gateway process, its upstream, and this process as its client. */
async function loopback(): Promise<string> {
  const { mkdtempSync, rmSync, writeFileSync, statSync, readFileSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const { readyPort } = await import("./child-process.ts");
  const { BENCH_BODIES, BENCH_PATHS } = await import("./in-process-answers.ts");
  const root = join(import.meta.dir, "..");
  const dir = mkdtempSync(join(tmpdir(), "switchyard-alloc-"));
  const upstream = Bun.spawn([process.execPath, join(import.meta.dir, "fake-upstream.ts"), "--port", "0", "--exit-on-stdin-eof", "1"], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
  const up = `http://127.0.0.1:${await readyPort(upstream.stdout, "the fake upstream")}`;
  const config = join(dir, "switchyard.json");
  const model = (id: string, provider: string) => ({ id, provider, upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: { input_per_mtok: 150, output_per_mtok: 600 } });
  writeFileSync(config, JSON.stringify({
    providers: [
      { id: "o", kind: "openai", base_url: `${up}/v1`, api_key_env: "K" },
      { id: "a", kind: "anthropic", base_url: up, api_key_env: "K" },
    ],
    models: [model("bench/gpt", "o"), { ...model("bench/claude", "a"), upstream_model: "claude-sonnet-4-5" }, model("bench/claude-code", "o")],
    limits: { requests_per_minute: 1e9 },
  }));
  const server = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = server.port;
  server.stop(true);
  const logPath = join(dir, "gateway.log");
  const adminToken = `alloc-${crypto.randomUUID()}`;
  const gateway = Bun.spawn([process.execPath, "src/index.ts"], {
    cwd: root,
    env: { ...process.env, ...GC_ENV, K: "sk-bench", PORT: String(port), HOST: "127.0.0.1", SWITCHYARD_CONFIG: config, SWITCHYARD_DB: join(dir, "gateway.sqlite"), SWITCHYARD_ADMIN_TOKEN: adminToken, SWITCHYARD_DEMO: "0" },
    stdin: "ignore",
    stdout: "inherit",
    stderr: Bun.file(logPath),
  });
  const url = `http://127.0.0.1:${port}`;
  try {
    for (let until = Date.now() + 20_000; !(await fetch(`${url}/v1/models`).then((r) => r.status > 0, () => false)); await Bun.sleep(100)) {
      if (Date.now() > until || gateway.exitCode !== null) throw new Error(`the gateway did not start:\n${readFileSync(logPath, "utf8").slice(-2000)}`);
    }
    const admin = async (path: string, body: unknown) => {
      const r = await fetch(`${url}/v1/admin${path}`, { method: "POST", headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" }, body: JSON.stringify(body) });
      if (r.status !== 201) throw new Error(`admin ${path}: ${r.status} ${await r.text()}`);
      return (await r.json()) as { id: string; key: string };
    };
    const account = await admin("/accounts", { name: "bench", credits: 1_000_000_000 });
    const { key } = await admin(`/accounts/${account.id}/keys`, { name: "bench" });
    const run = async (body: string, path: string, n: number) => {
      const init = { method: "POST", headers: { authorization: `Bearer ${key}`, "anthropic-version": "2023-06-01", "content-type": "application/json" }, body };
      let next = 0;
      await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
        while (next++ < n) {
          const res = await fetch(`${url}${path}`, init);
          if (res.status !== 200) throw new Error(`status ${res.status}: ${await res.text()}`);
          await res.arrayBuffer();
        }
      }));
      // The last access-log line goes out at the end of its turn.
      await Bun.sleep(50);
    };
    // Rounds are the log's spans between these offsets, marked into the parsed text below.
    const spans: { name: string; from: number; to: number }[] = [];
    for (const name of ONLY) {
      const body = BENCH_BODIES[name];
      if (!body) throw new Error(`unknown scenario ${name}`);
      const path = BENCH_PATHS[name] ?? "/v1/chat/completions";
      await run(body, path, WARMUP);
      for (let round = 0; round < ROUNDS; round++) {
        const from = statSync(logPath).size;
        await run(body, path, REQUESTS);
        spans.push({ name, from, to: statSync(logPath).size });
      }
    }
    const log = readFileSync(logPath, "utf8");
    const requests = log.split('"message":"request"').length - 1;
    if (requests < WARMUP) throw new Error(`the gateway's log holds ${requests} access-log lines`);
    // Each access line is a request's marker; the spans become BEGIN/END markers.
    let marked = "";
    let at = 0;
    for (const span of spans) {
      marked += `${log.slice(at, span.from)}@@BEGIN ${span.name}@@\n${log.slice(span.from, span.to)}@@END@@\n`;
      at = span.to;
    }
    return marked.replaceAll('"message":"request"', "@@R@@");
  } finally {
    gateway.kill();
    await gateway.exited;
    upstream.stdin.end();
    upstream.kill();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[2] === "--child") {
  await child();
} else if (LOOPBACK) {
  const log = await loopback();
  if (process.env.ALLOC_LOG) await Bun.write(process.env.ALLOC_LOG, log);
  report(parse(log));
} else {
  const proc = Bun.spawn([process.execPath, import.meta.path, "--child", ...process.argv.slice(2)], {
    env: { ...process.env, ...GC_ENV },
    stdout: "inherit",
    stderr: "pipe",
  });
  const log = await new Response(proc.stderr).text();
  if (process.env.ALLOC_LOG) await Bun.write(process.env.ALLOC_LOG, log);
  if ((await proc.exited) !== 0) throw new Error(`the child failed:\n${log.split("\n").filter((l) => !/^(F|\[GC|GC END|Requesting)/.test(l)).join("\n")}`);
  report(parse(log));
}
