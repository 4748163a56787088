/**
 * `bun run bench`: the gateway against going direct to the upstream and against a bare Bun
 * proxy (the floor), all on loopback, measured in alternating rounds in one run. These
 * machines are shared and noisy, so the ratios are the figures; absolute numbers inform only.
 * `--quick` runs every scenario smaller (about a minute).
 */
import { Database } from "bun:sqlite";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnSync, type Subprocess } from "bun";

const quick = process.argv.includes("--quick");
const ROOT = join(import.meta.dir, "..");
const work = mkdtempSync(join(tmpdir(), "switchyard-bench-"));
const children: Subprocess[] = [];
const hasTaskset = spawnSync(["sh", "-c", "command -v taskset"]).exitCode === 0;
const cores = navigator.hardwareConcurrency;
const pin = (core: number, cmd: string[]) => (hasTaskset && cores > 1 ? ["taskset", "-c", String(core), ...cmd] : cmd);

function cleanup() {
  for (const child of children) child.kill("SIGKILL");
  rmSync(work, { recursive: true, force: true });
}
process.on("SIGINT", () => {
  cleanup();
  process.exit(130);
});

async function start(cmd: string[], env: Record<string, string>, ready: RegExp): Promise<{ proc: Subprocess; match: RegExpMatchArray }> {
  const proc = Bun.spawn(cmd, { cwd: ROOT, env: { ...process.env, ...env }, stdout: "pipe", stderr: "inherit" });
  children.push(proc);
  const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
  let text = "";
  for (;;) {
    const match = text.match(ready);
    if (match) {
      reader.releaseLock();
      return { proc, match };
    }
    const { value, done } = await reader.read();
    if (done) throw new Error(`${cmd.join(" ")} exited: ${text}`);
    text += new TextDecoder().decode(value);
  }
}

function cpuTicks(pid: number): number {
  const fields = require("node:fs").readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return Number(fields[11]) + Number(fields[12]); // utime + stime, in clock ticks
}
function rssKb(pid: number, field = "VmRSS"): number {
  const status = require("node:fs").readFileSync(`/proc/${pid}/status`, "utf8") as string;
  return Number(status.match(new RegExp(`${field}:\\s+(\\d+)`))![1]);
}
const TICK_US = 1e6 / Number(spawnSync(["getconf", "CLK_TCK"]).stdout.toString().trim() || 100);

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
const median = (xs: number[]) => pct([...xs].sort((a, b) => a - b), 0.5);
const spread = (xs: number[]) => `${Math.min(...xs).toFixed(3)}–${Math.max(...xs).toFixed(3)}`;

// ---- the three targets ----
const upstream = await start(pin(1, ["bun", "bench/fake-upstream.ts"]), {}, /READY (\d+)/);
const upstreamUrl = `http://127.0.0.1:${upstream.match[1]}`;
const floor = await start(pin(0, ["bun", "bench/floor-proxy.ts"]), { UPSTREAM: upstreamUrl }, /READY (\d+)/);
const floorUrl = `http://127.0.0.1:${floor.match[1]}`;

const config = join(work, "switchyard.json");
writeFileSync(config, JSON.stringify({
  providers: [
    { id: "bench-openai", kind: "openai", base_url: `${upstreamUrl}/v1` },
    { id: "bench-anthropic", kind: "anthropic", base_url: upstreamUrl },
  ],
  models: [
    { id: "bench/gpt", provider: "bench-openai", upstream_model: "m", category: "text", context_length: 128000, pricing: { input_per_mtok: 150, output_per_mtok: 600 } },
    { id: "bench/claude", provider: "bench-anthropic", upstream_model: "m", category: "text", context_length: 200000, pricing: { input_per_mtok: 3000, output_per_mtok: 15000 } },
  ],
  limits: { requests_per_minute: 100_000_000 },
}));
const dbPath = join(work, "ledger.sqlite");
const gateway = await start(pin(0, ["bun", "src/index.ts"]), {
  PORT: "0", HOST: "127.0.0.1", SWITCHYARD_CONFIG: config, SWITCHYARD_DB: dbPath, SWITCHYARD_ADMIN_TOKEN: "bench-admin",
  LOG_LEVEL: "error", BUN_CONFIG_MAX_HTTP_REQUESTS: "8192",
}, /listening on (http:\/\/\S+)/);
const gatewayUrl = gateway.match[1]!.replace("localhost", "127.0.0.1");
const admin = (path: string, body: unknown) =>
  fetch(`${gatewayUrl}/v1/admin${path}`, { method: "POST", headers: { authorization: "Bearer bench-admin", "content-type": "application/json" }, body: JSON.stringify(body) }).then((r) => r.json() as Promise<any>);
const account = await admin("/accounts", { name: "bench", credits: 1_000_000_000 });
const { key } = await admin(`/accounts/${account.id}/keys`, { name: "bench" });

interface Target { name: "direct" | "floor" | "gateway"; url: string; model: string; path: string }
const targets = (anthropicUpstream = false): Target[] => [
  { name: "direct", url: anthropicUpstream ? `${upstreamUrl}/v1/messages` : `${upstreamUrl}/v1/chat/completions`, model: "m", path: "" },
  { name: "floor", url: anthropicUpstream ? `${floorUrl}/v1/messages` : `${floorUrl}/v1/chat/completions`, model: "m", path: "" },
  { name: "gateway", url: `${gatewayUrl}/v1/chat/completions`, model: anthropicUpstream ? "bench/claude" : "bench/gpt", path: "" },
];
const headers = { authorization: `Bearer ${key}`, "content-type": "application/json" };
const body = (model: string, extra: Record<string, unknown> = {}) => JSON.stringify({ model, max_tokens: 20, messages: [{ role: "user", content: "Hello from the bench" }], ...extra });

const rounds = quick ? 3 : 5;
const results: Record<string, unknown> = { quick, machine: { cores, bun: Bun.version, cpu: (require("node:fs").readFileSync("/proc/cpuinfo", "utf8").match(/model name\s*:\s*(.*)/) ?? [])[1], taskset: hasTaskset && cores > 1 } };
console.log(`switchyard bench${quick ? " --quick" : ""}: bun ${Bun.version}, ${cores} cores${hasTaskset && cores > 1 ? ", gateway and floor pinned to core 0, upstream and load generators to core 1" : ""}`);

// ---- A: added latency, one connection, non-stream ----
{
  const n = quick ? 400 : 2000;
  const p50: Record<string, number[]> = { direct: [], floor: [], gateway: [] };
  const p99: Record<string, number[]> = { direct: [], floor: [], gateway: [] };
  for (let round = -1; round < rounds; round++) {
    for (const t of targets()) {
      const payload = body(t.model);
      const times: number[] = [];
      for (let i = 0; i < n; i++) {
        const s = performance.now();
        await (await fetch(t.url, { method: "POST", headers, body: payload })).arrayBuffer();
        times.push(performance.now() - s);
      }
      if (round < 0) continue; // warm-up
      times.sort((a, b) => a - b);
      p50[t.name]!.push(pct(times, 0.5));
      p99[t.name]!.push(pct(times, 0.99));
    }
  }
  const added = (name: string, p: Record<string, number[]>) => p[name]!.map((v, i) => v - p.direct![i]!);
  const a = {
    gateway_added_p50_ms: median(added("gateway", p50)), gateway_added_p99_ms: median(added("gateway", p99)),
    floor_added_p50_ms: median(added("floor", p50)), floor_added_p99_ms: median(added("floor", p99)),
    direct_p50_ms: median(p50.direct!), spread_gateway_added_p50: spread(added("gateway", p50)),
  };
  results.A = a;
  console.log(`\nA  added latency, 1 connection, non-stream (${rounds} rounds × ${n})`);
  console.log(`   gateway − direct: p50 ${a.gateway_added_p50_ms.toFixed(3)} ms (rounds ${a.spread_gateway_added_p50}), p99 ${a.gateway_added_p99_ms.toFixed(3)} ms   [target ≤ 0.15 / ≤ 0.5]`);
  console.log(`   floor   − direct: p50 ${a.floor_added_p50_ms.toFixed(3)} ms, p99 ${a.floor_added_p99_ms.toFixed(3)} ms   (direct p50 ${a.direct_p50_ms.toFixed(3)} ms)`);
}

// ---- B: throughput with wrk ----
function ensureWrk(): boolean {
  if (spawnSync(["sh", "-c", "command -v wrk"]).exitCode === 0) return true;
  console.log("\nB  wrk is missing: install with: apt-get install -y wrk");
  if (process.getuid?.() === 0 && spawnSync(["sh", "-c", "command -v apt-get"]).exitCode === 0) {
    console.log("   running as root: installing wrk with apt-get");
    spawnSync(["sh", "-c", "apt-get update -qq >/dev/null 2>&1; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null 2>&1"]);
  }
  return spawnSync(["sh", "-c", "command -v wrk"]).exitCode === 0;
}
if (ensureWrk()) {
  const seconds = quick ? 2 : 5;
  const b: Record<string, unknown> = {};
  console.log(`\nB  throughput (wrk, ${seconds} s × ${rounds} rounds per target)`);
  for (const mode of ["non-stream", "stream-20"] as const) {
    for (const conns of [32, 128]) {
      const rps: Record<string, number[]> = { direct: [], floor: [], gateway: [] };
      const p99: Record<string, number[]> = { direct: [], floor: [], gateway: [] };
      const cpu: Record<string, number[]> = { floor: [], gateway: [] };
      for (let round = -1; round < rounds; round++) {
        for (const t of targets()) {
          const script = join(work, `${t.name}.lua`);
          writeFileSync(script, `wrk.method = "POST"\nwrk.body = ${JSON.stringify(body(t.model, mode === "stream-20" ? { stream: true } : {}))}\nwrk.headers["content-type"] = "application/json"\nwrk.headers["authorization"] = "Bearer ${key}"\n`);
          const pid = t.name === "gateway" ? gateway.proc.pid : t.name === "floor" ? floor.proc.pid : undefined;
          const before = pid ? cpuTicks(pid) : 0;
          const out = spawnSync(pin(1, ["wrk", "-t1", `-c${conns}`, `-d${round < 0 ? 1 : seconds}s`, "--latency", "-s", script, t.url])).stdout.toString();
          if (round < 0) continue;
          const requests = Number(out.match(/(\d+) requests in/)?.[1] ?? 0);
          rps[t.name]!.push(Number(out.match(/Requests\/sec:\s+([\d.]+)/)?.[1] ?? 0));
          const p = out.match(/99%\s+([\d.]+)(us|ms|s)/);
          p99[t.name]!.push(p ? Number(p[1]) * (p[2] === "us" ? 0.001 : p[2] === "s" ? 1000 : 1) : NaN);
          if (pid && requests > 0) cpu[t.name]!.push(((cpuTicks(pid) - before) * TICK_US) / requests);
        }
      }
      const row = {
        rps: { direct: median(rps.direct!), floor: median(rps.floor!), gateway: median(rps.gateway!) },
        gateway_vs_direct: median(rps.gateway!) / median(rps.direct!),
        gateway_vs_floor: median(rps.gateway!) / median(rps.floor!),
        p99_ms: { direct: median(p99.direct!), floor: median(p99.floor!), gateway: median(p99.gateway!) },
        cpu_us_per_response: { floor: median(cpu.floor!), gateway: median(cpu.gateway!) },
        cpu_gateway_vs_floor: median(cpu.gateway!) / median(cpu.floor!),
      };
      b[`${mode}@${conns}`] = row;
      console.log(`   ${mode.padEnd(10)} c=${String(conns).padEnd(3)}  rps direct ${row.rps.direct.toFixed(0)}, floor ${row.rps.floor.toFixed(0)}, gateway ${row.rps.gateway.toFixed(0)}  → gateway/floor ${(row.gateway_vs_floor * 100).toFixed(0)} %, gateway/direct ${(row.gateway_vs_direct * 100).toFixed(0)} %`);
      console.log(`   ${"".padEnd(16)}  p99 ms ${row.p99_ms.direct.toFixed(2)} / ${row.p99_ms.floor.toFixed(2)} / ${row.p99_ms.gateway.toFixed(2)}   CPU µs/response floor ${row.cpu_us_per_response.floor.toFixed(0)}, gateway ${row.cpu_us_per_response.gateway.toFixed(0)} → ${row.cpu_gateway_vs_floor.toFixed(2)}×  [targets: CPU ≤ 2× floor; @32 rps ≥ 50 % of floor]`);
    }
  }
  results.B = b;
}

// ---- C: streaming, 64 chunks: time to first byte and time per chunk ----
{
  const n = quick ? 100 : 300;
  const c: Record<string, unknown> = {};
  console.log(`\nC  streaming, 64 chunks (${rounds} rounds × ${n})`);
  for (const translated of [false, true]) {
    const ttfb: Record<string, number[][]> = { direct: [], floor: [], gateway: [] };
    const total: Record<string, number[]> = { direct: [], floor: [], gateway: [] };
    for (let round = -1; round < rounds; round++) {
      for (const t of targets(translated)) {
        const firsts: number[] = [];
        const totals: number[] = [];
        const payload = body(t.model, { stream: true, max_tokens: 64 });
        for (let i = 0; i < n; i++) {
          const s = performance.now();
          const res = await fetch(t.url, { method: "POST", headers, body: payload });
          const reader = res.body!.getReader();
          let first = 0;
          for (;;) {
            const { done } = await reader.read();
            if (!first) first = performance.now() - s;
            if (done) break;
          }
          firsts.push(first);
          totals.push(performance.now() - s);
        }
        if (round < 0) continue;
        ttfb[t.name]!.push(firsts.sort((a, b) => a - b));
        total[t.name]!.push(median(totals));
      }
    }
    const addedTtfb = (p: number) => median(ttfb.gateway!.map((g, i) => pct(g, p) - pct(ttfb.direct![i]!, p)));
    const perChunkUs = (median(total.gateway!) - median(total.direct!)) * 1000 / 64;
    const row = { added_ttfb_p50_ms: addedTtfb(0.5), added_ttfb_p99_ms: addedTtfb(0.99), added_per_chunk_us: perChunkUs, floor_added_per_chunk_us: (median(total.floor!) - median(total.direct!)) * 1000 / 64 };
    c[translated ? "openai_client_anthropic_upstream" : "openai_client_openai_upstream"] = row;
    console.log(`   ${translated ? "translated (OpenAI client → Anthropic upstream)" : "same format (OpenAI → OpenAI)"}: added TTFB p50 ${row.added_ttfb_p50_ms.toFixed(3)} ms, p99 ${row.added_ttfb_p99_ms.toFixed(3)} ms; added per chunk ${row.added_per_chunk_us.toFixed(1)} µs (floor ${row.floor_added_per_chunk_us.toFixed(1)} µs)  [targets ≤ 1 ms, ≤ 10 µs]`);
  }
  results.C = c;
}

// ---- D: many slow concurrent streams ----
{
  const streams = quick ? 500 : 2000;
  const chunks = 10;
  let peak = rssKb(gateway.proc.pid);
  const sampler = setInterval(() => (peak = Math.max(peak, rssKb(gateway.proc.pid))), 100);
  let completed = 0;
  let maxGap = 0;
  const started = performance.now();
  await Promise.all(Array.from({ length: streams }, async () => {
    const res = await fetch(`${gatewayUrl}/v1/chat/completions`, { method: "POST", headers, body: body("bench/gpt", { stream: true, max_tokens: chunks, bench_delay_ms: 500 }) });
    const reader = res.body!.getReader();
    let last = performance.now();
    let text = "";
    for (;;) {
      const { value, done } = await reader.read();
      const now = performance.now();
      maxGap = Math.max(maxGap, now - last);
      last = now;
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    if (text.endsWith("data: [DONE]\n\n")) completed += 1;
  }));
  clearInterval(sampler);
  const d = { streams, completed, max_gap_ms: maxGap, seconds: (performance.now() - started) / 1000, peak_rss_mb: peak / 1024 };
  results.D = d;
  console.log(`\nD  ${streams} concurrent streams, one chunk every 500 ms: ${completed}/${streams} complete in ${d.seconds.toFixed(1)} s, longest gap ${maxGap.toFixed(0)} ms, gateway peak RSS ${d.peak_rss_mb.toFixed(0)} MB  [target ≤ 300 MB]`);
}

// ---- E: soak with aborting clients ----
{
  const total = quick ? 10_000 : 100_000;
  const concurrency = 32;
  let sent = 0;
  let rssAfterWarmup = 0;
  const worker = async () => {
    while (sent < total) {
      const i = sent++;
      if (i === Math.floor(total / 10)) rssAfterWarmup = rssKb(gateway.proc.pid);
      if (i % 5 === 0) {
        const controller = new AbortController();
        const res = await fetch(`${gatewayUrl}/v1/chat/completions`, { method: "POST", headers, signal: controller.signal, body: body("bench/gpt", { stream: true, max_tokens: 20, bench_delay_ms: 5 }) });
        const reader = res.body!.getReader();
        await reader.read();
        controller.abort();
        await reader.cancel().catch(() => {});
      } else {
        await (await fetch(`${gatewayUrl}/v1/chat/completions`, { method: "POST", headers, body: body(i % 2 ? "bench/gpt" : "bench/claude") })).arrayBuffer();
      }
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: concurrency }, worker));
  await Bun.sleep(1000);
  Bun.gc(true);
  const rssEnd = rssKb(gateway.proc.pid);
  const open = ((await (await fetch(`${upstreamUrl}/__stats`)).json()) as { open: number }).open;
  const view = (await (await fetch(`${gatewayUrl}/v1/admin/accounts/${account.id}`, { headers: { authorization: "Bearer bench-admin" } })).json()) as { reserved: number };
  const reservations = view.reserved;
  const growthPer10k = ((rssEnd - rssAfterWarmup) / 1024) / ((total * 0.9) / 10_000);
  const e = { requests: total, seconds: (performance.now() - started) / 1000, rss_after_warmup_mb: rssAfterWarmup / 1024, rss_end_mb: rssEnd / 1024, growth_mb_per_10k: growthPer10k, open_upstream_streams: open, open_reservations: reservations };
  results.E = e;
  console.log(`\nE  soak: ${total} requests (20 % streams aborted midway) in ${e.seconds.toFixed(1)} s: RSS ${e.rss_after_warmup_mb.toFixed(0)} → ${e.rss_end_mb.toFixed(0)} MB (${growthPer10k.toFixed(2)} MB per 10k), open upstream streams ${open}, credits still reserved ${reservations}  [targets ≤ 1 MB/10k, 0, 0]`);
}

mkdirSync(join(ROOT, "bench", "results"), { recursive: true });
const json = JSON.stringify({ at: new Date().toISOString(), ...results }, null, 2);
writeFileSync(join(ROOT, "bench", "results", "latest.json"), json);
writeFileSync(join(ROOT, "bench", "results", `${new Date().toISOString().replace(/[:.]/g, "-")}.json`), json);
console.log("\nresults: bench/results/latest.json");
cleanup();
process.exit(0);
