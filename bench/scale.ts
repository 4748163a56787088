/**
 * `bun run bench --scale` — what the shared stores and workers cost, side by side in one run:
 * direct to the fake upstream; the gateway on SQLite (1 process); on PostgreSQL + Redis with 1 and
 * with 2 workers. For each: throughput under wrk (64 connections, non-streamed chat completions),
 * CPU per response (user + system time of the gateway's processes, supervisor included, over the
 * responses), over 32 accounts; and latency added to direct (sequential requests on one key, p50). Then the hot-account
 * admission rate (bench/hot-account.ts). Ratios compare figures of this run only.
 *   options: --seconds S (wrk time per target, default 5)  --force (run beside other gateways)
 * Uses a PostgreSQL database of its own (dropped after) and db 3 of Redis.
 */
import { SQL, type Subprocess } from "bun";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { hotAccount } from "./hot-account.ts";

const argv = process.argv.slice(2);
const opt = (name: string) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : undefined;
};
const SECONDS = Number(opt("seconds") ?? 5);
/** Accounts (one key each) the wrk load is spread over. */
const ACCOUNTS = 32;
const ROOT = join(import.meta.dir, "..");
const CLK_TCK = Number(Bun.spawnSync(["getconf", "CLK_TCK"]).stdout.toString().trim()) || 100;
const work = mkdtempSync(join(tmpdir(), "switchyard-scale-"));
const children: Subprocess[] = [];

/** Another gateway or benchmark on the machine would skew every figure. */
function otherLoad(): string | undefined {
  for (const entry of readdirSync("/proc")) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ");
      if (/\bsrc\/index\.ts|bench\/(run|fake-upstream)\.ts|^wrk /.test(cmd)) return `pid ${pid}: ${cmd.slice(0, 120)}`;
    } catch {}
  }
  return undefined;
}
const busy = otherLoad();
if (busy && !argv.includes("--force")) {
  console.error(`bench --scale: another gateway or benchmark runs on this machine (${busy}); figures would be skewed. Run when it is quiet, or pass --force.`);
  process.exit(3);
}

/** The pids of a process and all its descendants. */
function tree(root: number): number[] {
  const parent = new Map<number, number>();
  for (const entry of readdirSync("/proc")) {
    const pid = Number(entry);
    if (!Number.isInteger(pid)) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      parent.set(pid, Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
    } catch {}
  }
  const out = [root];
  for (let i = 0; i < out.length; i++) for (const [pid, ppid] of parent) if (ppid === out[i]) out.push(pid);
  return out;
}
function cpuMs(pids: number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {}
  }
  return (ticks * 1000) / CLK_TCK;
}

async function startUpstream(): Promise<{ url: string }> {
  const proc = Bun.spawn(["bun", join(import.meta.dir, "fake-upstream.ts"), "--exit-on-stdin-eof", "1"], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
  children.push(proc);
  const reader = proc.stdout.getReader();
  let text = "";
  while (!/READY (\d+)/.test(text)) {
    const { value, done } = await reader.read();
    if (done) throw new Error("fake upstream did not start");
    text += new TextDecoder().decode(value);
  }
  return { url: `http://127.0.0.1:${/READY (\d+)/.exec(text)![1]}` };
}

async function startGateway(env: Record<string, string>): Promise<{ url: string; key: string; proc: Subprocess }> {
  const proc = Bun.spawn(["bun", "src/index.ts"], {
    cwd: ROOT,
    env: { ...process.env, PORT: "0", HOST: "127.0.0.1", LOG_LEVEL: "info", BUN_CONFIG_MAX_HTTP_REQUESTS: "4096", SWITCHYARD_DEMO: "1", ...env },
    stdout: "pipe",
    stderr: "pipe",
  });
  children.push(proc);
  let log = "";
  void (async () => {
    for await (const chunk of proc.stderr) log += new TextDecoder().decode(chunk);
  })();
  const reader = proc.stdout.getReader();
  let text = "";
  while (!/svc-sk-\S+/.test(text) || !text.includes("curl")) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`gateway did not start: ${log}`);
    text += new TextDecoder().decode(value);
  }
  void (async () => {
    while (!(await reader.read()).done);
  })();
  const workers = Number(env.SWITCHYARD_WORKERS ?? 1);
  if (workers > 1) while (!log.includes('"workers listening"')) await Bun.sleep(50);
  return { url: /listening on (http:\/\/\S+)/.exec(text)![1]!, key: /svc-sk-[A-Za-z0-9_-]+/.exec(text)![0], proc };
}

const body = JSON.stringify({ model: "bench/gpt", max_tokens: 16, messages: [{ role: "user", content: "Hello there, how are you today?" }] });

/** wrk with requests spread over `keys` (one account each: a real load is many accounts, not one hot row). */
async function wrk(url: string, keys: string[]): Promise<{ rps: number; requests: number }> {
  const script = join(work, "post.lua");
  writeFileSync(script, [
    `local keys = { ${keys.map((k) => JSON.stringify(k)).join(", ")} }`,
    `local body = ${JSON.stringify(body)}`,
    "local i = 0",
    "request = function()",
    "  i = i % #keys + 1",
    `  return wrk.format("POST", nil, { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. keys[i] }, body)`,
    "end",
  ].join("\n"));
  const proc = Bun.spawn(["wrk", "-t1", "-c64", `-d${SECONDS}s`, "--timeout", "10s", "-s", script, `${url}/v1/chat/completions`], { stdout: "pipe", stderr: "pipe" });
  const out = await new Response(proc.stdout).text();
  await proc.exited;
  const requests = Number(/(\d+) requests in/.exec(out)?.[1] ?? 0);
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0);
  if (non2xx > 0) console.error(`  ${non2xx} responses were not 200`);
  return { rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? 0), requests: requests - non2xx };
}

async function p50(url: string, key: string, n = 400): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const res = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body });
    await res.arrayBuffer();
    if (i >= n / 4) times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)]!;
}

interface Row {
  target: string;
  rps: number;
  cpuMsPerResponse?: number;
  p50Ms: number;
}

const rows: Row[] = [];
const adminUrl = process.env.SWITCHYARD_TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const redisUrl = `${(process.env.SWITCHYARD_TEST_REDIS_URL ?? "redis://127.0.0.1:6379").replace(/\/\d+$/, "")}/3`;
const admin = new SQL({ url: adminUrl, max: 1 });
const dbs: string[] = [];
try {
  const upstream = await startUpstream();
  const config = join(work, "config.json");
  writeFileSync(config, JSON.stringify({
    providers: [{ id: "up", kind: "openai", base_url: `${upstream.url}/v1` }],
    models: [{ id: "bench/gpt", provider: "up", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: { input_per_mtok: 1, output_per_mtok: 1 } }],
    limits: { requests_per_minute: 100_000_000 },
  }));

  const direct = await wrk(upstream.url, ["direct"]);
  rows.push({ target: "direct", rps: direct.rps, p50Ms: await p50(upstream.url, "direct") });

  const targets: [string, Record<string, string>][] = [
    ["SQLite, 1 process", { SWITCHYARD_DB: join(work, "bench.sqlite") }],
    ["PostgreSQL + Redis, 1 process", { SWITCHYARD_REDIS_URL: redisUrl }],
    ["PostgreSQL + Redis, 2 workers", { SWITCHYARD_REDIS_URL: redisUrl, SWITCHYARD_WORKERS: "2" }],
  ];
  for (const [target, env] of targets) {
    if (env.SWITCHYARD_REDIS_URL) {
      const name = `switchyard_scale_${Date.now().toString(36)}`;
      await admin.unsafe(`CREATE DATABASE ${name}`);
      dbs.push(name);
      const url = new URL(adminUrl);
      url.pathname = `/${name}`;
      env.SWITCHYARD_DATABASE_URL = url.toString();
    }
    const gw = await startGateway({ SWITCHYARD_CONFIG: config, SWITCHYARD_ADMIN_TOKEN: "bench-admin-0123456789abcdef0123456789abcdef", ...env });
    const keys: string[] = [];
    for (let i = 0; i < ACCOUNTS; i++) {
      const admin = { authorization: "Bearer bench-admin", "content-type": "application/json" };
      const account = (await (await fetch(`${gw.url}/v1/admin/accounts`, { method: "POST", headers: admin, body: JSON.stringify({ name: `bench-${i}`, credits: 1_000_000 }) })).json()) as { id: string };
      keys.push(((await (await fetch(`${gw.url}/v1/admin/accounts/${account.id}/keys`, { method: "POST", headers: admin, body: "{}" })).json()) as { key: string }).key);
    }
    await p50(gw.url, gw.key, 200);
    const pids = tree(gw.proc.pid);
    const before = cpuMs(pids);
    const load = await wrk(gw.url, keys);
    const cpu = cpuMs(pids) - before;
    rows.push({ target, rps: load.rps, cpuMsPerResponse: cpu / Math.max(1, load.requests), p50Ms: await p50(gw.url, gw.key) });
    gw.proc.kill("SIGTERM");
    await gw.proc.exited;
  }

  console.log(`\nbench --scale: ${SECONDS} s of wrk (64 connections, ${ACCOUNTS} accounts) per target, then 300 sequential requests for p50\n`);
  console.log("| target | req/s | × direct | CPU ms / response | p50 ms | added p50 ms |");
  console.log("|---|---|---|---|---|---|");
  for (const r of rows) {
    console.log(`| ${r.target} | ${r.rps.toFixed(0)} | ${(r.rps / rows[0]!.rps).toFixed(2)} | ${r.cpuMsPerResponse?.toFixed(3) ?? "—"} | ${r.p50Ms.toFixed(3)} | ${r.target === "direct" ? "—" : (r.p50Ms - rows[0]!.p50Ms).toFixed(3)} |`);
  }
  const one = rows.find((r) => r.target.endsWith("1 process") && r.target.startsWith("PostgreSQL"))!;
  const two = rows.find((r) => r.target.endsWith("2 workers"))!;
  console.log(`\nthroughput 1 → 2 workers (PostgreSQL + Redis): × ${(two.rps / one.rps).toFixed(2)}`);

  const hot = await hotAccount({ seconds: SECONDS, clients: 64, ledgers: 1 });
  const hot2 = await hotAccount({ seconds: SECONDS, clients: 64, ledgers: 2 });
  for (const h of [hot, hot2]) {
    console.log(`hot account, ${h.ledgers} ledger(s): ${h.admittedPerSecond.toFixed(0)} admitted/s (reserve, settle, commit), reserve p50 ${h.reserveP50Ms.toFixed(2)} ms, p99 ${h.reserveP99Ms.toFixed(2)} ms`);
  }
} finally {
  for (const c of children) c.kill("SIGTERM");
  await Promise.all(children.map((c) => c.exited));
  for (const name of dbs) await admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {});
  await admin.close({ timeout: 0 });
  rmSync(work, { recursive: true, force: true });
}
