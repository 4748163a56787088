/**
 * `bun run bench` — what Switchyard costs on top of an upstream, measured against going direct
 * and against the least a Bun proxy can do (the floor), on loopback only, in one bounded run.
 *
 *   bun run bench                 full run (≈ 7 min on 2 cores)
 *   bun run bench --quick         smoke run (≈ 1 min): every scenario, smaller, 3 rounds
 *   bun run bench --compare REF   scenario P: this checkout against git REF, both loaded at once (≈ 2 min)
 *   bun run bench --compare REF --only A   A with REF's gateway as one more target of the same
 *                        alternation: this − REF per round (a latency change, paired)
 *   bun run bench --compare floor scenario P against the pass-through floor, both loaded at once
 *   bun run bench --scenario iso  one key's flood of free counts against another key (bench/count-isolation.ts)
 *   bun run bench --scenario slow 20,000 slow streams alone (the same as --only S)
 *   options: --rounds N  --seconds S (wrk time per round)  --only A,B,C,D,E,S  --no-pin
 *            --streams N (S's streams, 20,000 by default: fewer for a smoke run)
 *            --profile   instead of the scenarios: CPU profile of the gateway under wrk load, and its
 *                        CPU by thread (PROFILE_MODE=stream-20|non-stream: one load; PROFILE_SAMPLER=off:
 *                        no sampler, the thread figures alone; PROFILE_KEEP_LOG=FILE keeps the gateway's log;
 *                        PROFILE_CONNECTIONS=N, 32 by default, 1 for the one-client case of A; PROFILE_SECONDS=S)
 *            --path cc   with --compare REF: P on the Claude Code path (an Anthropic client on an
 *                        OpenAI-kind upstream, translated both ways) instead of the same-format one
 *   env: BENCH_GATEWAY_ENV='{"NAME":"value"}' sets variables for this checkout's gateway alone
 *        (with --compare HEAD: an ablation of a setting, or a JavaScriptCore option, BUN_JSC_…)
 *
 * Processes, all on 127.0.0.1: the fake upstream (bench/fake-upstream.ts), the floor proxy
 * (bench/floor-proxy.ts), the gateway as users run it (`bun src/index.ts` with a config file and
 * `bun run start`'s defaults: the access log at info written to a file, metrics on, a SQLite ledger
 * with durable settlement, auth, rate limiter and usage records; B adds the same gateway with
 * LOG_LEVEL=warn as an extra, labelled row; S starts a fresh one of its own), wrk, and our own
 * client (bench/client.ts) for per-request timings. With taskset and ≥ 2 cores the gateway and
 * the floor get core 0, everything else core 1. Targets are measured in alternating rounds
 * (direct, floor, gateway, direct, …) and every ratio compares figures of the same run.
 * Ends with issue 30's targets in one table (bench/issue-30.ts), every one of them, measured or not.
 * Writes bench/results/latest.json (and a copy named by time) and bench/results/issue-30-latest.json.
 * See docs/benchmarks.md.
 */
import { Database } from "bun:sqlite";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { availableParallelism, release, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { summarize } from "./stats.ts";
import { f, lpad, pad, range } from "./format.ts";
import { idleRssKb, readStatusKb } from "./proc-status.ts";
import type { ClientSpec, RequestSpec, SlowResult } from "./client.ts";
import { agentConversation } from "./agent-conversation.ts";
import { baselineId, BASELINE_REF, cpuId, formatValue, issue30Table, issue30Target, latencyId, SLOW_RSS_ID, SLOW_STREAMS, type Target } from "./issue-30.ts";

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

const argv = process.argv.slice(2);
const flag = (name: string) => argv.includes(`--${name}`);
const option = (name: string) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : undefined;
};
for (const a of argv) {
  if (a.startsWith("--") && !["--quick", "--rounds", "--seconds", "--only", "--no-pin", "--profile", "--help", "--scale", "--force", "--compare", "--scenario", "--samples", "--console", "--records", "--store", "--streams", "--path"].includes(a)) {
    console.error(`bench: unknown option ${a}`);
    process.exit(2);
  }
}
if (flag("help")) {
  console.log("usage: bun run bench [--quick] [--rounds N] [--seconds S] [--only A,B,C,D,E,S,P] [--streams N] [--no-pin] [--profile] [--compare GIT-REF [--path cc]]\n       bun run bench --scenario slow [--streams N]   S alone: 20,000 slow streams, the gateway's peak RSS\n       bun run bench --scale [--seconds S] [--force]   SQLite vs PostgreSQL + Redis, 1 and 2 workers (bench/scale.ts)\n       bun run bench --scenario iso [--quick] [--samples N] [--seconds S]   one key's count flood against another key's counts and chat (bench/count-isolation.ts)\n       bun run bench --console [--records N] [--store sqlite|postgres|both]   the console's views over 10 million usage records (bench/console-views.ts)");
  process.exit(0);
}
if (flag("console")) {
  // The console's views at scale: a run of its own (bench/console-views.ts reads the same arguments).
  await import("./console-views.ts");
  process.exit(0);
}
if (option("scenario") === "iso") {
  // One key's flood of free counts against another key (issue 32 item 3): a run of its own (bench/count-isolation.ts).
  await import("./count-isolation.ts");
  process.exit(0);
}
if (option("scenario") !== undefined && !["iso", "slow"].includes(option("scenario")!)) {
  console.error(`bench: unknown scenario ${option("scenario")} (iso, slow)`);
  process.exit(2);
}
if (flag("scale")) {
  // Shared stores and workers: a run of its own (bench/scale.ts reads the same arguments).
  await import("./scale.ts");
  process.exit(0);
}
const QUICK = flag("quick");
/** Run beside other gateways or benchmarks (a smoke run): said in the output, and no target counts as met. */
const FORCE = flag("force");
const PROFILE = flag("profile");
const ROUNDS = Number(option("rounds") ?? (QUICK ? 3 : 5));
/** Another checkout (a git ref) to measure this one against in scenario P; alone, it runs only P. */
const COMPARE = option("compare");
/** `--path cc`: P compares the two checkouts on the Claude Code path. */
const P_CLAUDE_CODE = option("path") === "cc";
if (flag("compare") && !COMPARE) {
  console.error("bench: --compare needs a git ref (a commit, a tag, a branch)");
  process.exit(2);
}
// `--scenario slow` is S by name: a run of its own that still goes through the bench's checks.
const ONLY = new Set((option("only") ?? (option("scenario") === "slow" ? "S" : COMPARE ? "P" : "A,B,C,D,E,S")).toUpperCase().split(","));
const P = {
  // A's warm-up brings each target to its steady state first, the JIT included: a fresh gateway
  // compiles ~1.3 s of code in its first ~15,000 requests of a kind (BUN_JSC_reportCompileTimes=1),
  // FTL compilations of up to 5 ms each, and on A's one core each one holds a request up. With
  // 500 warm-up requests A measured that start (p99 per round 0.6–2.3 ms), not the gateway users
  // run for days (docs/decisions.md, "A measures a warm gateway"). 8,000 were not enough on a
  // slower machine: a lone client's p99 was 2.3 ms 3–13 s after the start, 0.65–0.8 ms from 20 s
  // on, and A's added p99 fell with every step (8,000 → 20,000 → 50,000 a target).
  A: { perRound: QUICK ? 300 : 2000, warmup: QUICK ? 100 : 50_000, chunks: 16, streamChunks: 20, largePerRound: QUICK ? 60 : 300, largeMessages: 200 },
  B: { seconds: Number(option("seconds") ?? (QUICK ? 1 : 4)), warmupSeconds: 1, coldWarmupSeconds: QUICK ? 2 : 10, conns: [32, 128], streamChunks: 20, jsonChunks: 16 },
  C: { perRound: QUICK ? 60 : 300, warmup: QUICK ? 30 : 100, chunks: 64 },
  D: { streams: 2000, chunks: QUICK ? 4 : 10, intervalMs: 500 },
  E: { total: QUICK ? 10_000 : 100_000, concurrency: 32, chunks: 20, dripMs: 2 },
  // Issue 30's slow streams: a frame a second, as a client reading a model that thinks. Opened at
  // `openPerSecond` (20,000 requests at once would overflow the listen backlog and queue behind one
  // another's admission), each lasting the opening's planned time plus `holdSeconds`, so that all
  // of them are open at once for about that long.
  S: { streams: Number(option("streams") ?? (QUICK ? 2000 : SLOW_STREAMS)), holdSeconds: QUICK ? 5 : 20, intervalMs: 1000, openPerSecond: 2000 },
  P: { rounds: Number(option("rounds") ?? (QUICK ? 4 : 8)), seconds: Number(option("seconds") ?? (QUICK ? 2 : 3)), conns: [32, 128], streamChunks: 20, jsonChunks: 16 },
};
const E_WARMUP = Math.max(1000, P.E.total / 10);
/** The run stops by itself past this, whatever happens. */
const DEADLINE_MS = (QUICK ? 5 : 18) * 60_000;

/** The Switchyard checkout whose `src/index.ts` is measured (this bench may live outside it). */
const ROOT = process.env.SWITCHYARD_ROOT ?? join(import.meta.dir, "..");
const RESULTS = join(import.meta.dir, "results");
const NPROC = availableParallelism();
const HAS_TASKSET = !flag("no-pin") && Bun.spawnSync(["sh", "-c", "command -v taskset"]).exitCode === 0;
const PIN = HAS_TASKSET && NPROC >= 2;
const CLK_TCK = Number(Bun.spawnSync(["getconf", "CLK_TCK"]).stdout.toString().trim()) || 100;
const LOOPBACK = "127.0.0.1";
/** How a complete Anthropic stream ends. */
const MESSAGE_STOP = 'data: {"type":"message_stop"}';

// ---------------------------------------------------------------------------------------------
// Child processes: every one is known, killed on exit, Ctrl-C, error, and by the watchdog if we die
// ---------------------------------------------------------------------------------------------

const work = mkdtempSync(join(tmpdir(), "switchyard-bench-"));
const children = new Set<Subprocess>();
/** Checkouts made for --compare, removed (with git's record of them) at exit. */
const worktrees: string[] = [];
let shuttingDown = false;

const watchdog = Bun.spawn(["bun", join(import.meta.dir, "watchdog.ts"), String(process.pid)], { stdin: "pipe", stdout: "ignore", stderr: "inherit" });
const tellWatchdog = (line: string) => {
  try {
    watchdog.stdin.write(line + "\n");
    watchdog.stdin.flush();
  } catch {}
};

function track(proc: Subprocess): Subprocess {
  children.add(proc);
  tellWatchdog(`add ${proc.pid}`);
  void proc.exited.then(() => {
    children.delete(proc);
    tellWatchdog(`del ${proc.pid}`);
  });
  return proc;
}

async function shutdown(code: number, why?: string): Promise<never> {
  if (shuttingDown) {
    // A second Ctrl-C: no more waiting.
    for (const c of children) c.kill("SIGKILL");
    process.exit(code);
  }
  shuttingDown = true;
  if (why) console.error(`\nbench: ${why}; stopping every process it started`);
  for (const c of children) c.kill("SIGTERM");
  await Promise.race([Promise.all([...children].map((c) => c.exited)), Bun.sleep(4000)]);
  for (const c of children) c.kill("SIGKILL");
  tellWatchdog("exit");
  for (const dir of worktrees) Bun.spawnSync(["git", "worktree", "remove", "--force", dir], { cwd: ROOT, stdout: "ignore", stderr: "ignore" });
  // BENCH_KEEP=1: the work folder (every process's log, the databases) stays for a look afterwards.
  if (process.env.BENCH_KEEP) console.error(`bench: kept ${work}`);
  else rmSync(work, { recursive: true, force: true });
  process.exit(code);
}
process.on("SIGINT", () => void shutdown(130, "interrupted"));
process.on("SIGTERM", () => void shutdown(143, "terminated"));
process.on("SIGHUP", () => void shutdown(129, "hung up"));
process.on("uncaughtException", (err) => {
  console.error(err);
  void shutdown(1, "failed");
});
process.on("unhandledRejection", (err) => {
  console.error(err);
  void shutdown(1, "failed");
});
setTimeout(() => void shutdown(3, `still running after ${DEADLINE_MS / 60_000} min (deadline)`), DEADLINE_MS);

/**
 * Another benchmark (or a gateway, a wrk) running on this machine at the same time would make
 * every figure of both runs wrong: refuse to start beside one, and stop if one appears.
 */
function foreignLoad(): string | undefined {
  const ours = new Set<number>([process.pid, ...[...children].map((c) => c.pid), watchdog.pid]);
  // Our own ancestors (bun run, timeout, a shell) are not someone else's load.
  for (let pid = process.ppid; pid > 1 && !ours.has(pid); ) {
    ours.add(pid);
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      pid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    } catch {
      break;
    }
  }
  for (const entry of readdirSync("/proc")) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || ours.has(pid)) continue;
    let cmd: string;
    let ppid: number;
    try {
      cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ").trim();
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    } catch {
      continue;
    }
    if (ppid === process.pid || ours.has(ppid)) continue;
    const argv0 = cmd.split(" ")[0]!.split("/").pop();
    if (argv0 === "wrk" || /bench\/(run|fake-upstream|floor-proxy|client)\.ts|\bsrc\/index\.ts/.test(cmd)) return `pid ${pid}: ${cmd.slice(0, 160)}`;
  }
  return undefined;
}

/** Command prefix pinning to one core, when taskset is there. */
const pin = (core: number, cmd: string[]) => (PIN ? ["taskset", "-c", String(core), ...cmd] : cmd);

/** 2,000 streams need ~4,000 descriptors in the gateway; raise the soft limit when it is lower. */
const softNofile = Number(Bun.spawnSync(["sh", "-c", "ulimit -n"]).stdout.toString().trim()) || 1024;
const hardNofile = Bun.spawnSync(["sh", "-c", "ulimit -Hn"]).stdout.toString().trim();
const NEED_NOFILE = 16384;
const withFds = (cmd: string[]) =>
  softNofile >= NEED_NOFILE ? cmd : ["sh", "-c", `ulimit -n ${NEED_NOFILE} 2>/dev/null || ulimit -n ${hardNofile} 2>/dev/null; exec "$@"`, "sh", ...cmd];

/**
 * A checkout of `ref` for --compare, beside this one: a git worktree in the run's folder. It shares
 * this checkout's node_modules when its runtime dependencies are the same, else installs its own.
 */
function checkoutRef(ref: string): { root: string; label: string } {
  const dir = join(work, "compared-checkout");
  const added = Bun.spawnSync(["git", "worktree", "add", "--detach", dir, ref], { cwd: ROOT, stdout: "ignore", stderr: "pipe" });
  if (added.exitCode !== 0) throw new Error(`--compare ${ref}: ${added.stderr.toString().trim()}`);
  worktrees.push(dir);
  const label = Bun.spawnSync(["git", "rev-parse", "--short", "HEAD"], { cwd: dir }).stdout.toString().trim();
  const deps = (root: string) => JSON.stringify(JSON.parse(readFileSync(join(root, "package.json"), "utf8")).dependencies ?? {});
  if (deps(dir) === deps(ROOT) && existsSync(join(ROOT, "node_modules"))) symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"));
  else {
    const installed = Bun.spawnSync(["bun", "install", "--frozen-lockfile", "--production", "--silent"], { cwd: dir, stdout: "ignore", stderr: "pipe" });
    if (installed.exitCode !== 0) throw new Error(`--compare ${ref}: bun install failed: ${installed.stderr.toString().trim()}`);
  }
  return { root: dir, label };
}

async function freePort(): Promise<number> {
  const s = Bun.listen({ hostname: LOOPBACK, port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}

function logTail(path: string, lines = 15): string {
  try {
    return readFileSync(path, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "";
  }
}

/** Starts a helper server of ours and waits for its `READY <port>` line. */
async function startHelper(name: string, core: number, script: string, args: string[], env: Record<string, string> = {}): Promise<{ proc: Subprocess; port: number; log: string }> {
  const log = join(work, `${name}.log`);
  const proc = track(Bun.spawn(pin(core, withFds(["bun", join(import.meta.dir, script), ...args, "--exit-on-stdin-eof", "1"])), {
    cwd: ROOT,
    env: { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "4096", ...env },
    stdin: "pipe",
    stdout: "pipe",
    stderr: Bun.file(log),
  }));
  const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
  let text = "";
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    const m = text.match(/READY (\d+)/);
    if (m) {
      reader.releaseLock();
      return { proc, port: Number(m[1]), log };
    }
    const { value, done } = await reader.read();
    if (done) break;
    text += new TextDecoder().decode(value);
  }
  throw new Error(`${name} did not start: ${text}\n${logTail(log)}`);
}

// ---------------------------------------------------------------------------------------------
// /proc readings
// ---------------------------------------------------------------------------------------------

/** The 1, 5 and 15 min load averages: printed at the start and the end, so a figure can be read against the machine's other work. */
function loadAverage(): number[] {
  return readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).map(Number);
}
function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(fields[11]) + Number(fields[12]); // utime + stime of all threads, in clock ticks
}
/**
 * utime + stime by thread, in clock ticks: the JavaScript thread as "main" (its system time also
 * apart, as "main (system)"), the others by name, threads of one name summed.
 */
function threadTicks(pid: number): Map<string, number> {
  const byName = new Map<string, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
      const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      // The main thread is the process's own id; other threads of the same name are its helpers.
      const name = tid === String(pid) ? "main" : comm.replace(/\d+$/, "#");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      byName.set(name, (byName.get(name) ?? 0) + Number(fields[11]) + Number(fields[12]));
      if (name === "main") byName.set("main (system)", Number(fields[12]));
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return byName;
}
const statusKb = readStatusKb;
function fdCount(pid: number): number {
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return NaN;
  }
}
/** A process's open-file limit now (its soft limit: Bun raises its own to the hard one at start). */
function openFilesLimit(pid: number): number {
  const m = /Max open files\s+(\S+)/.exec(readFileSync(`/proc/${pid}/limits`, "utf8"));
  return !m || m[1] === "unlimited" ? Infinity : Number(m[1]);
}
/** Established TCP connections with `port` as their remote end (sockets to that server). */
function establishedTo(port: number): number {
  const hex = port.toString(16).toUpperCase().padStart(4, "0");
  let n = 0;
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    if (!existsSync(file)) continue;
    for (const line of readFileSync(file, "utf8").split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length > 3 && f[2]!.endsWith(`:${hex}`) && f[3] === "01") n++;
    }
  }
  return n;
}

// ---------------------------------------------------------------------------------------------
// wrk
// ---------------------------------------------------------------------------------------------

function ensureWrk(): { ok: boolean; note?: string } {
  const has = () => Bun.spawnSync(["sh", "-c", "command -v wrk"]).exitCode === 0;
  if (has()) return { ok: true };
  console.log("wrk is not installed: install with: apt-get install -y wrk");
  const root = process.getuid?.() === 0;
  const apt = Bun.spawnSync(["sh", "-c", "command -v apt-get"]).exitCode === 0;
  if (!root || !apt) return { ok: false, note: "wrk missing (install with: apt-get install -y wrk); scenario B skipped" };
  console.log("running as root with apt-get: installing wrk now (apt-get install -y wrk)");
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  let r = Bun.spawnSync(["apt-get", "install", "-y", "-q", "wrk"], { env, stdout: "ignore", stderr: "pipe" });
  if (r.exitCode !== 0) {
    Bun.spawnSync(["apt-get", "update", "-q"], { env, stdout: "ignore", stderr: "ignore" });
    r = Bun.spawnSync(["apt-get", "install", "-y", "-q", "wrk"], { env, stdout: "ignore", stderr: "pipe" });
  }
  if (has()) return { ok: true, note: "wrk was installed by this run (apt-get install -y wrk)" };
  return { ok: false, note: `installing wrk failed: ${r.stderr.toString().trim().split("\n").pop()}; scenario B skipped` };
}

interface WrkResult {
  requests: number;
  duration_us: number;
  bytes: number;
  connect: number;
  read: number;
  write: number;
  status: number;
  timeout: number;
  p50_us: number;
  p99_us: number;
  max_us: number;
}

function wrkScript(name: string, body: string, headers: Record<string, string>): string {
  const path = join(work, `${name}.lua`);
  const lines = [
    `wrk.method = "POST"`,
    `wrk.body = [==[${body}]==]`,
    ...Object.entries(headers).map(([k, v]) => `wrk.headers[${JSON.stringify(k)}] = ${JSON.stringify(v)}`),
    `function done(summary, latency, requests)`,
    `  local e = summary.errors`,
    `  io.write(string.format('WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,"p50_us":%d,"p99_us":%d,"max_us":%d}\\n',`,
    `    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,`,
    `    latency:percentile(50), latency:percentile(99), latency.max))`,
    `end`,
  ];
  writeFileSync(path, lines.join("\n") + "\n");
  return path;
}

async function runWrk(url: string, script: string, conns: number, seconds: number): Promise<WrkResult> {
  const proc = track(Bun.spawn(pin(1, ["wrk", "-t1", `-c${conns}`, `-d${seconds}s`, "--timeout", "10s", "-s", script, url]), { stdout: "pipe", stderr: "pipe" }));
  const [out, err] = await Promise.all([new Response(proc.stdout as ReadableStream).text(), new Response(proc.stderr as ReadableStream).text()]);
  await proc.exited;
  const m = out.match(/WRKJSON (\{.*\})/);
  if (!m) throw new Error(`wrk printed no result:\n${out}\n${err}`);
  return JSON.parse(m[1]!) as WrkResult;
}

// ---------------------------------------------------------------------------------------------
// Our client
// ---------------------------------------------------------------------------------------------

let clientSeq = 0;
async function runClient<T>(spec: ClientSpec): Promise<T> {
  const file = join(work, `client-${++clientSeq}.json`);
  writeFileSync(file, JSON.stringify(spec));
  const proc = track(Bun.spawn(pin(1, withFds(["bun", join(import.meta.dir, "client.ts"), file])), {
    cwd: ROOT,
    env: { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "4096" },
    stdout: "pipe",
    stderr: "inherit",
  }));
  const out = await new Response(proc.stdout as ReadableStream).text();
  const code = await proc.exited;
  if (code !== 0) throw new Error(`client (${spec.task}) exited with ${code}: ${out.slice(-500)}`);
  return JSON.parse(out.trim().split("\n").pop()!) as T;
}

// ---------------------------------------------------------------------------------------------
// Formatting
// ---------------------------------------------------------------------------------------------

const out: string[] = [];
const say = (line = "") => {
  out.push(line);
  console.log(line);
};

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

interface TargetDef {
  /**
   * `gateway-warn`: the same gateway with LOG_LEVEL=warn (no access-log lines), an extra row of B.
   * `gateway-cc`: the Claude Code path (an Anthropic-format client, an OpenAI-kind upstream).
   * `least`: bench/least-gateway.ts, the defaults' duties done the plainest way (an extra row of B).
   */
  name: "direct" | "floor" | "gateway" | "gateway-warn" | "gateway-cc" | "least" | "ref";
  req: RequestSpec;
}

async function main() {
  const startedAt = new Date();
  const loadAtStart = loadAverage();
  const busy = foreignLoad();
  if (busy && !FORCE) throw new Error(`another benchmark or gateway is running on this machine (${busy}); its load would falsify both runs. Try again when it has finished (or pass --force for a smoke run).`);
  // --force: a smoke run beside other load; it says so, and proves no target.
  let forcedBeside = busy;
  const guardTimer = setInterval(() => {
    const other = foreignLoad();
    if (other && !FORCE) void shutdown(4, `another benchmark or gateway started on this machine (${other}); figures from now on would be wrong`);
    forcedBeside ??= other;
  }, 2000);
  guardTimer.unref();
  // The orchestrator itself keeps off the gateway's core.
  if (PIN) Bun.spawnSync(["taskset", "-a", "-cp", "1", String(process.pid)], { stdout: "ignore" });

  const cpuModel = (readFileSync("/proc/cpuinfo", "utf8").match(/model name\s*:\s*(.*)/) ?? [])[1] ?? "unknown";
  const git = Bun.spawnSync(["git", "rev-parse", "--short", "HEAD"], { cwd: ROOT }).stdout.toString().trim() || "unknown";
  const dirty = Bun.spawnSync(["git", "status", "--porcelain", "src"], { cwd: ROOT }).stdout.toString().trim().split("\n").filter(Boolean).length;
  const wrk = (ONLY.has("B") || ONLY.has("P")) && !PROFILE ? ensureWrk() : { ok: false, note: "scenarios B and P not selected" };

  const machine = {
    nproc: NPROC, cpu: cpuModel, bun: Bun.version, kernel: release(), memory_gb: Math.round(totalmem() / 2 ** 30),
    pinning: PIN ? "gateway and floor on core 0; wrk, our client and this orchestrator on core 1; the fake upstream on core 1 for B, D, E, S and on core 0 for A, C (taskset)" : HAS_TASKSET ? "none (fewer than 2 cores)" : "none (no taskset, or --no-pin)",
    nofile_soft: softNofile, nofile_raised_to: softNofile >= NEED_NOFILE ? null : NEED_NOFILE,
    git_head: git, src_files_modified_in_worktree: dirty,
  };
  say(`Switchyard benchmark — ${QUICK ? "QUICK smoke run (small, 3 rounds: figures are indicative only)" : "full run"}, ${startedAt.toISOString()}`);
  say(`machine: ${NPROC} cores, ${cpuModel}, ${machine.memory_gb} GB, Linux ${release()}, bun ${Bun.version}; git ${git}${dirty ? ` (+${dirty} modified files under src/)` : ""}`);
  say(`pinning: ${machine.pinning}`);
  say(`load average (1 / 5 / 15 min) at the start: ${loadAtStart.map((x) => f(x, 2)).join(" / ")}`);
  if (machine.nofile_raised_to) say(`fd limit: soft ${softNofile}; children start with ulimit -n ${NEED_NOFILE} (hard ${hardNofile})`);
  if (wrk.note) say(`wrk: ${wrk.note}`);
  if (busy) say(`FORCED beside other load (${busy}): figures are for a smoke run only`);

  // ---- processes ----
  const upstream = await startHelper("upstream", 1, "fake-upstream.ts", ["--port", "0"]);
  const up = `http://${LOOPBACK}:${upstream.port}`;
  const floor = await startHelper("floor", 0, "floor-proxy.ts", ["--upstream", up, "--port", "0"]);
  const fl = `http://${LOOPBACK}:${floor.port}`;

  const adminToken = `bench-admin-${crypto.randomUUID()}`;
  const configPath = join(work, "switchyard.json");
  const vendorKeys = { BENCH_OPENAI_KEY: "sk-bench-openai-not-a-real-key", BENCH_ANTHROPIC_KEY: "sk-ant-bench-not-a-real-key" };
  const provider = (id: string, kind: "openai" | "anthropic", intervalMs?: number) => ({
    id, kind,
    base_url: kind === "openai" ? `${up}/v1` : up,
    api_key_env: kind === "openai" ? "BENCH_OPENAI_KEY" : "BENCH_ANTHROPIC_KEY",
    ...(intervalMs ? { headers: { "x-bench-interval-ms": String(intervalMs) } } : {}),
  });
  const model = (id: string, providerId: string, upstreamModel: string, anthropic: boolean) => ({
    id, provider: providerId, upstream_model: upstreamModel, category: "text", context_length: anthropic ? 200_000 : 128_000,
    owned_by: anthropic ? "anthropic" : "openai",
    pricing: anthropic ? { input_per_mtok: 3000, output_per_mtok: 15000 } : { input_per_mtok: 150, output_per_mtok: 600 },
  });
  writeFileSync(configPath, JSON.stringify({
    providers: [
      provider("bench-openai", "openai"),
      provider("bench-anthropic", "anthropic"),
      provider("bench-openai-slow", "openai", P.D.intervalMs),
      provider("bench-openai-drip", "openai", P.E.dripMs),
      provider("bench-anthropic-drip", "anthropic", P.E.dripMs),
      provider("bench-openai-1s", "openai", P.S.intervalMs),
    ],
    models: [
      model("bench/gpt", "bench-openai", "gpt-4o-mini", false),
      model("bench/claude", "bench-anthropic", "claude-sonnet-4-5", true),
      model("bench/gpt-slow", "bench-openai-slow", "gpt-4o-mini", false),
      model("bench/gpt-drip", "bench-openai-drip", "gpt-4o-mini", false),
      model("bench/claude-drip", "bench-anthropic-drip", "claude-sonnet-4-5", true),
      // The Claude Code path: an Anthropic-format client (POST /v1/messages) on a model that an
      // OpenAI-kind upstream serves, so the gateway translates the request and the answer.
      model("bench/claude-code", "bench-openai", "gpt-4o-mini", false),
      model("bench/gpt-1s", "bench-openai-1s", "gpt-4o-mini", false),
    ],
    // Per-key limiter stays on, with a limit no run reaches.
    limits: { requests_per_minute: 1_000_000_000 },
  }, null, 2));

  /**
   * A gateway as users run it, from the checkout at `root` (this one, or --compare's), on its own
   * port and SQLite file, with an account and a key made through its admin API. Its defaults are
   * `bun run start`'s: the access log at info written to a file (stderr, as a container's log
   * driver takes it), metrics on, durable settlement; `env` changes one for an extra row.
   */
  async function startGateway(root: string, name: string, extraFlags: string[] = [], env: Record<string, string> = {}) {
    const port = await freePort();
    const log = join(work, `${name}.log`);
    const db = join(work, `${name}.sqlite`);
    const proc = track(Bun.spawn(pin(0, withFds(["bun", ...extraFlags, "src/index.ts"])), {
      cwd: root,
      env: {
        ...process.env,
        ...vendorKeys,
        PORT: String(port),
        HOST: LOOPBACK,
        SWITCHYARD_CONFIG: configPath,
        SWITCHYARD_DB: db,
        SWITCHYARD_ADMIN_TOKEN: adminToken,
        SWITCHYARD_DEMO: "0",
        // What `npm start` and the Docker image set.
        BUN_CONFIG_MAX_HTTP_REQUESTS: "4096",
        SWITCHYARD_SHUTDOWN_GRACE_MS: "2000",
        ...env,
        // BENCH_GATEWAY_ENV='{"NAME":"value"}': settings for this checkout's gateway alone (an
        // ablation against --compare HEAD, a JavaScriptCore option through BUN_JSC_…).
        ...(root === ROOT ? (JSON.parse(process.env.BENCH_GATEWAY_ENV ?? "{}") as Record<string, string>) : {}),
      },
      stdin: "ignore",
      stdout: Bun.file(join(work, `${name}.out`)),
      stderr: Bun.file(log),
    }));
    const url = `http://${LOOPBACK}:${port}`;
    for (let ready = false, until = Date.now() + 20_000; !ready; ) {
      if (proc.exitCode !== null) throw new Error(`${name} exited (${proc.exitCode}):\n${logTail(log)}`);
      if (Date.now() > until) throw new Error(`${name} did not start in 20 s:\n${logTail(log)}`);
      ready = await fetch(`${url}/v1/models`).then((r) => r.status > 0, () => false);
      if (!ready) await Bun.sleep(100);
    }
    const admin = async (path: string, body: unknown) => {
      const r = await fetch(`${url}/v1/admin${path}`, { method: "POST", headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" }, body: JSON.stringify(body) });
      if (r.status !== 201) throw new Error(`${name} admin ${path}: ${r.status} ${await r.text()}`);
      return (await r.json()) as any;
    };
    const account = await admin("/accounts", { name: "bench", credits: 1_000_000_000 });
    const { key } = (await admin(`/accounts/${account.id}/keys`, { name: "bench" })) as { key: string };
    return { proc, url, log, db, account, key: key as string };
  }

  /** PROFILE_SAMPLER=off: the profile's load and its CPU by thread, without the sampler's own cost. */
  const SAMPLER = process.env.PROFILE_SAMPLER !== "off";
  const profileFlags = PROFILE && SAMPLER ? ["--cpu-prof-md", `--cpu-prof-dir=${work}`, "--cpu-prof-name=gateway-profile.md"] : [];
  const started = await startGateway(ROOT, "gateway", profileFlags);
  const { proc: gateway, url: gw, log: gwLog, db: dbPath, account, key } = started;
  const gwPid = gateway.pid;
  const upstreamStats = async () => (await (await fetch(`${up}/__stats`)).json()) as { requests: number; completed: number; aborted: number; inflight: number; openStreams: number; pendingRequests: number; streams: number };
  /**
   * Credits still held for unfinished requests. Older ledgers keep them as rows of a `reservations`
   * table (read straight from the SQLite file); newer ones hold them in memory and report them as
   * the account's `reserved` through the admin API.
   */
  const openReservations = async (g: { db: string; url: string; account: { id: string } } = started): Promise<number> => {
    const db = new Database(g.db, { readonly: true });
    try {
      const table = db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' AND name = 'reservations'").get()!.n;
      if (table) return db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM reservations").get()!.n;
    } finally {
      db.close();
    }
    const acct = (await (await fetch(`${g.url}/v1/admin/accounts/${g.account.id}`, { headers: { authorization: `Bearer ${adminToken}` } })).json()) as { reserved?: number };
    if (typeof acct.reserved !== "number") throw new Error(`cannot read open reservations: ${JSON.stringify(acct)}`);
    return acct.reserved;
  };
  /**
   * After a scenario: the upstream's own counters until nothing is in flight there (up to 10 s),
   * then the credits the gateway `g` still holds until none are (up to 15 s from the start). What
   * a scenario left open shows as what is still there at the end of these waits.
   */
  const drained = async (g = started) => {
    const start = performance.now();
    let upstream = await upstreamStats();
    while ((upstream.inflight > 0 || upstream.openStreams > 0) && performance.now() - start < 10_000) {
      await Bun.sleep(50);
      upstream = await upstreamStats();
    }
    const upstreamDrainMs = performance.now() - start;
    let reservations = await openReservations(g);
    while (reservations > 0 && performance.now() - start < 15_000) {
      await Bun.sleep(50);
      reservations = await openReservations(g);
    }
    return { upstream, upstreamDrainMs, reservations };
  };
  /**
   * A gateway's peak RSS while `load` runs: the kernel's high-water mark, reset first (its owner
   * or root may), besides VmRSS samples every `everyMs`; its peak descriptors and the upstream's
   * open streams in the same samples.
   */
  const peakDuring = async <T>(pid: number, everyMs: number, load: () => Promise<T>) => {
    const rssBefore = statusKb(pid, "VmRSS") / 1024;
    let hwmReset = true;
    try {
      writeFileSync(`/proc/${pid}/clear_refs`, "5");
    } catch {
      hwmReset = false;
    }
    let peakRss = rssBefore;
    let peakFds = fdCount(pid);
    let peakUpstreamOpen = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        peakRss = Math.max(peakRss, statusKb(pid, "VmRSS") / 1024);
        peakFds = Math.max(peakFds, fdCount(pid));
        try {
          peakUpstreamOpen = Math.max(peakUpstreamOpen, (await upstreamStats()).openStreams);
        } catch {}
        await Bun.sleep(everyMs);
      }
    })();
    let result: T;
    try {
      result = await load();
    } finally {
      sampling = false;
      await sampler;
    }
    const hwm = statusKb(pid, "VmHWM") / 1024;
    return {
      result,
      peak: { rss_before_mb: rssBefore, peak_rss_sampled_mb: peakRss, vmhwm_mb: hwm, vmhwm_reset: hwmReset, peak_rss_mb: hwmReset ? Math.max(hwm, peakRss) : peakRss, peak_gateway_fds: peakFds, peak_upstream_open_streams: peakUpstreamOpen },
      how: hwmReset ? `VmHWM after clear_refs, and ${everyMs} ms VmRSS samples` : `${everyMs} ms VmRSS samples`,
    };
  };
  say(`processes: fake upstream ${up} (pid ${upstream.proc.pid}), floor ${fl} (pid ${floor.proc.pid}), gateway ${gw} (pid ${gwPid}; bun src/index.ts, config ${configPath})`);
  say(`gateway settings: as \`bun run start\` runs it — access log at info, one line per request, written to a file; metrics on; SQLite ledger, each paid answer's last byte after its settlement is durable`);
  // B's extra row: the same gateway without access-log lines, labelled as such.
  const quiet = ONLY.has("B") && !PROFILE ? await startGateway(ROOT, "gateway-warn", [], { LOG_LEVEL: "warn" }) : undefined;
  if (quiet) say(`processes: gateway-warn ${quiet.url} (pid ${quiet.proc.pid}): the same with LOG_LEVEL=warn (no access-log lines), an extra row of B only`);
  // The least gateway: what the defaults' duties (key, JSON in and out, a durable record before the
  // answer's end, an access line) cost any Bun gateway done the plainest way; where the targets stand
  // against what the duties themselves cost.
  const least = ONLY.has("B") && !PROFILE ? await startHelper("least", 0, "least-gateway.ts", ["--upstream", up, "--port", "0", "--db", join(work, "least.sqlite")]) : undefined;
  if (least) say(`processes: least http://${LOOPBACK}:${least.port} (pid ${least.proc.pid}): bench/least-gateway.ts, the same duties done the plainest way, an extra row of B only`);

  // ---- requests, the same for every target except for what each one needs to be addressed ----
  const vendorHeaders = { authorization: `Bearer ${vendorKeys.BENCH_OPENAI_KEY}`, "content-type": "application/json" };
  const anthropicHeaders = { "x-api-key": vendorKeys.BENCH_ANTHROPIC_KEY, "anthropic-version": "2023-06-01", "content-type": "application/json" };
  const gwHeaders = { authorization: `Bearer ${key}`, "content-type": "application/json" };
  const messages = [{ role: "user", content: "Tell me how a railway switchyard sorts its wagons." }];
  const largeConversation = agentConversation(P.A.largeMessages);
  const openaiBody = (modelId: string, chunks: number, stream: boolean, conversation: unknown[] = messages) =>
    JSON.stringify({ model: modelId, messages: conversation, max_tokens: chunks, ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}) });
  const anthropicBody = (chunks: number) => JSON.stringify({ model: "claude-sonnet-4-5", max_tokens: chunks, messages, stream: true });
  const openaiTargets = (chunks: number, stream: boolean, conversation?: unknown[]): TargetDef[] => {
    const common = { stream, chunks, endsWith: stream ? "data: [DONE]" : undefined };
    return [
      { name: "direct", req: { url: `${up}/v1/chat/completions`, headers: vendorHeaders, body: openaiBody("gpt-4o-mini", chunks, stream, conversation), ...common } },
      { name: "floor", req: { url: `${fl}/v1/chat/completions`, headers: vendorHeaders, body: openaiBody("gpt-4o-mini", chunks, stream, conversation), ...common } },
      { name: "gateway", req: { url: `${gw}/v1/chat/completions`, headers: gwHeaders, body: openaiBody("bench/gpt", chunks, stream, conversation), ...common } },
    ];
  };
  /**
   * The Claude Code path: an Anthropic-format client (`POST /v1/messages`) on bench/claude-code,
   * which the OpenAI-kind upstream serves, so the gateway translates both ways. Its direct and floor
   * are openaiTargets' plain OpenAI request for the same answer: the least that answer can cost.
   */
  const gwAnthropicHeaders = { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" };
  const claudeCodeTarget = (chunks: number, stream: boolean): TargetDef => ({
    name: "gateway-cc",
    req: { url: `${gw}/v1/messages`, headers: gwAnthropicHeaders, body: JSON.stringify({ model: "bench/claude-code", max_tokens: chunks, messages, ...(stream ? { stream: true } : {}) }), stream, chunks, endsWith: stream ? MESSAGE_STOP : undefined },
  });
  /** OpenAI client → Anthropic upstream: going direct (and through the floor) means speaking Anthropic. */
  const translatedTargets = (chunks: number): TargetDef[] => [
    { name: "direct", req: { url: `${up}/v1/messages`, headers: anthropicHeaders, body: anthropicBody(chunks), stream: true, chunks, endsWith: MESSAGE_STOP } },
    { name: "floor", req: { url: `${fl}/v1/messages`, headers: anthropicHeaders, body: anthropicBody(chunks), stream: true, chunks, endsWith: MESSAGE_STOP } },
    { name: "gateway", req: { url: `${gw}/v1/chat/completions`, headers: gwHeaders, body: openaiBody("bench/claude", chunks, true), stream: true, chunks, endsWith: "data: [DONE]" } },
  ];

  // ---- the truth guard: every target answers correctly before anything is timed ----
  {
    const text = (n: number) => {
      const words = ["Switchyard", "forwards", "each", "token", "as", "soon", "as", "it", "arrives,", "counting", "what", "was", "used", "and", "charging", "for", "it."];
      let s = "";
      for (let i = 0; i < n; i++) s += (i ? " " : "") + words[i % words.length];
      return s;
    };
    const contentOf = (sse: string) => sse.split("\n").filter((l) => l.startsWith("data: {")).map((l) => JSON.parse(l.slice(6)))
      .map((c: any) => c.choices?.[0]?.delta?.content ?? c.delta?.text ?? "").join("");
    for (const t of openaiTargets(P.A.chunks, false)) {
      const r = await fetch(t.req.url, { method: "POST", headers: t.req.headers, body: t.req.body });
      const j = (await r.json()) as any;
      if (r.status !== 200 || j.choices?.[0]?.message?.content !== text(P.A.chunks) || !(j.usage?.prompt_tokens > 0)) throw new Error(`${t.name} non-stream answer is wrong: ${r.status} ${JSON.stringify(j).slice(0, 300)}`);
    }
    {
      // The Claude Code path answers in Anthropic's format what the OpenAI-kind upstream said.
      const r = await fetch(`${gw}/v1/messages`, { method: "POST", headers: gwAnthropicHeaders, body: claudeCodeTarget(P.A.chunks, false).req.body });
      const j = (await r.json()) as any;
      if (r.status !== 200 || j.type !== "message" || j.content?.[0]?.text !== text(P.A.chunks) || !(j.usage?.input_tokens > 0)) throw new Error(`gateway-cc non-stream answer is wrong: ${r.status} ${JSON.stringify(j).slice(0, 300)}`);
    }
    for (const t of [...openaiTargets(P.C.chunks, true), ...translatedTargets(P.C.chunks), claudeCodeTarget(P.C.chunks, true)]) {
      const r = await fetch(t.req.url, { method: "POST", headers: t.req.headers, body: t.req.body });
      const s = await r.text();
      if (r.status !== 200 || contentOf(s) !== text(P.C.chunks) || !s.trimEnd().endsWith(t.req.endsWith!)) throw new Error(`${t.name} stream is wrong: ${r.status} ${s.slice(0, 300)}`);
      if (t.name === "gateway" && !s.includes(`"usage":{"prompt_tokens"`)) throw new Error(`gateway stream lacks the usage chunk asked for with include_usage: ${s.slice(-300)}`);
      if (t.name === "gateway-cc" && !/"type":"message_delta".*"output_tokens":\d/.test(s)) throw new Error(`gateway-cc stream lacks message_delta's usage: ${s.slice(-300)}`);
    }
    await Bun.sleep(200);
    const acct = (await (await fetch(`${gw}/v1/admin/accounts/${account.id}`, { headers: { authorization: `Bearer ${adminToken}` } })).json()) as any;
    if (!(acct.balance < 1_000_000_000)) throw new Error(`the ledger charged nothing: ${JSON.stringify(acct)}`);
    say(`check: all three targets answer identically (non-stream, stream, translated stream; the Claude Code path too); the gateway charged the account (balance ${acct.balance} credits) and left ${await openReservations()} reserved`);
  }

  /** Every figure checked against a target, in the order measured (results.targets). */
  const checked: Target[] = [];
  const results: Record<string, any> = {
    // 2: A has a row per mode (non-stream, stream-20) with the Claude Code path; issue 30's table.
    schema: 2,
    at: startedAt.toISOString(),
    command: `bun run bench${argv.length ? " " + argv.join(" ") : ""}`,
    quick: QUICK,
    rounds: ROUNDS,
    machine,
    parameters: P,
    scenarios: {} as Record<string, any>,
    targets: checked,
  };

  if (PROFILE) {
    await profile();
    return;
  }

  // ---------------------------------------------------------------------------------------------
  // A: added latency, 1 connection, non-stream and 20-chunk streams, same format and Claude Code path
  // ---------------------------------------------------------------------------------------------
  /**
   * Latency layout for A and C: the fake upstream moves to the gateway's core, so that going
   * direct crosses cores exactly as often as going through a proxy does (client ↔ proxy), and
   * the proxy's own hop to the upstream stays on its core. On this VM every wake-up across cores
   * costs about 50 µs; with the upstream beside the client, "direct" paid none of them while each
   * proxy paid four, and (floor − direct) alone came to 0.2 ms of scheduler time, not proxy work.
   * Throughput (B, D, E) keeps the upstream off the gateway's core, where it would steal its CPU.
   */
  const placeUpstream = (core: number) => {
    if (PIN) Bun.spawnSync(["taskset", "-a", "-cp", String(core), String(upstream.proc.pid)], { stdout: "ignore" });
  };
  const LATENCY_LAYOUT = PIN ? "latency layout: the fake upstream shares core 0 with the gateway and the floor; the client is on core 1" : "no pinning";

  /**
   * Each target's p50 and p99 over the rounds, and what each proxy adds in the same round: over
   * going direct, and over the floor (issue 30's "added latency" is gateway − floor: what is ours,
   * not what any Bun proxy costs).
   */
  /** `name`'s p50 and p99 minus `base`'s, round by round. */
  const pairedOver = (rounds: Record<string, any[]>, name: string, base: string) => {
    const per = (target: string, k: string) => rounds[target]!.map((x) => x[k] as number);
    const minus = (k: string) => per(name, k).map((v, i) => v - per(base, k)[i]!);
    return { p50: summarize(minus("p50")), p99: summarize(minus("p99")) };
  };
  const latencySummary = (rounds: Record<string, any[]>) => {
    const names = Object.keys(rounds);
    const per = (name: string, k: string) => rounds[name]!.map((x) => x[k] as number);
    const over = (base: string) => (name: string) => [name, pairedOver(rounds, name, base)] as const;
    return {
      latency_ms: Object.fromEntries(names.map((n) => [n, { p50: summarize(per(n, "p50")), p99: summarize(per(n, "p99")) }])),
      added_over_direct_ms: Object.fromEntries(names.filter((n) => n !== "direct").map(over("direct"))),
      added_over_floor_ms: Object.fromEntries(names.filter((n) => n !== "direct" && n !== "floor").map(over("floor"))),
    };
  };
  /** How a target is named in the tables. */
  const targetLabel = (name: string) => (name === "gateway-warn" ? "gw(warn)" : name === "gateway-cc" ? "gw(cc)" : name);
  /** The gateway's two paths in issue 30: its target name in a round, and the path's name. */
  const GATEWAY_PATHS = [["gateway", "same", "same format"], ["gateway-cc", "cc", "Claude Code path"]] as const;
  /**
   * `--compare REF` (not `floor`): REF's gateway, started once and shared by A (an extra target
   * in the same alternation, so a latency change is paired as P pairs CPU) and P.
   */
  let compared: Promise<Awaited<ReturnType<typeof startGateway>> & { label: string; root: string }> | undefined;
  const comparedGateway = () => {
    if (!COMPARE || COMPARE === "floor") return Promise.resolve(undefined);
    compared ??= (async () => {
      const ref = checkoutRef(COMPARE);
      return { ...(await startGateway(ref.root, "compared")), ...ref };
    })();
    return compared;
  };
  let latencyRef: Awaited<ReturnType<typeof comparedGateway>>;

  // ---------------------------------------------------------------------------------------------
  // P: this checkout against another one (--compare REF), loaded at once
  // ---------------------------------------------------------------------------------------------
  /**
   * Two gateways, this checkout's and REF's, on the same core with the same configuration and
   * upstream, each under its own wrk at the same time, round after round. Both meet the same
   * machine at every instant (steal, frequency, the other's load), so their ratio holds still
   * where figures of separate runs moved by ±30 %: the way to tell a before from an after on a
   * shared machine. The figures are CPU per response while sharing a core, not B's.
   */
  if (COMPARE && ONLY.has("P") && wrk.ok) {
    placeUpstream(1);
    // `--compare floor`: the pass-through floor instead of another checkout, both loaded at once,
    // so the gateway ÷ floor ratio of CPU per response is paired as a before/after is (B's
    // targets run one after the other, and on a shared machine B's ratio moved by ±30 %).
    const againstFloor = COMPARE === "floor";
    const started = againstFloor ? undefined : await comparedGateway();
    const ref = started ?? { label: "floor" };
    const other = !started
      ? { proc: floor.proc, url: fl, key: "", model: "gpt-4o-mini", headers: vendorHeaders }
      : { ...started, model: "bench/gpt", headers: undefined as Record<string, string> | undefined };
    const otherPid = other.proc.pid;
    if (!againstFloor) {
      // The same truth guard as above, for the other checkout.
      const r = await fetch(`${other.url}/v1/chat/completions`, { method: "POST", headers: { ...gwHeaders, authorization: `Bearer ${other.key}` }, body: openaiBody("bench/gpt", P.A.chunks, false) });
      const j = (await r.json()) as any;
      if (r.status !== 200 || !(j.usage?.prompt_tokens > 0)) throw new Error(`${ref.label} non-stream answer is wrong: ${r.status} ${JSON.stringify(j).slice(0, 300)}`);
      const st = await fetch(`${other.url}/v1/chat/completions`, { method: "POST", headers: { ...gwHeaders, authorization: `Bearer ${other.key}` }, body: openaiBody("bench/gpt", P.C.chunks, true) });
      const text = await st.text();
      if (st.status !== 200 || !text.trimEnd().endsWith("data: [DONE]")) throw new Error(`${ref.label} stream is wrong: ${st.status} ${text.slice(0, 300)}`);
    }
    const against = againstFloor ? "the pass-through floor — both on core 0, same upstream" : `${ref.label} — both gateways on core 0, same config and upstream`;
    say(`\nP  this checkout (${git}${dirty ? ", modified" : ""}) against ${against}, each under its own wrk -t1 at the same time;`);
    say(`   ${P.P.rounds} rounds × ${P.P.seconds} s after a 1 s warm-up; CPU = (utime+stime) ÷ responses of each; ratio = this ÷ ${ref.label}, per round`);
    const p: Record<string, any> = { ref: COMPARE, ref_label: ref.label };
    const claudeCode = P_CLAUDE_CODE && !againstFloor;
    if (claudeCode) say(`   on the Claude Code path: Anthropic-format requests to /v1/messages on bench/claude-code, an OpenAI-kind upstream`);
    const route = claudeCode ? "/v1/messages" : "/v1/chat/completions";
    p.path = claudeCode ? "claude-code" : "same-format";
    for (const mode of ["non-stream", "stream-20"] as const) {
      const stream = mode !== "non-stream";
      const chunks = stream ? P.P.streamChunks : P.P.jsonChunks;
      const body = claudeCode ? claudeCodeTarget(chunks, stream).req.body : openaiBody("bench/gpt", chunks, stream);
      const ours = wrkScript(`P-${mode}-this`, body, claudeCode ? gwAnthropicHeaders : gwHeaders);
      const theirs = againstFloor
        ? wrkScript(`P-${mode}-floor`, openaiBody(other.model, chunks, stream), other.headers!)
        : wrkScript(`P-${mode}-ref`, body, claudeCode ? { ...gwAnthropicHeaders, "x-api-key": other.key } : { ...gwHeaders, authorization: `Bearer ${other.key}` });
      for (const conns of P.P.conns) {
        const both = () => Promise.all([runWrk(`${gw}${route}`, ours, conns, P.P.seconds), runWrk(`${other.url}${route}`, theirs, conns, P.P.seconds)]);
        await Promise.all([runWrk(`${gw}${route}`, ours, conns, 1), runWrk(`${other.url}${route}`, theirs, conns, 1)]);
        const rounds: { this_us: number; ref_us: number; ratio: number; this_rps: number; ref_rps: number; errors: number }[] = [];
        for (let round = 0; round < P.P.rounds; round++) {
          const a0 = cpuTicks(gwPid);
          const b0 = cpuTicks(otherPid);
          const [wa, wb] = await both();
          const a = ((cpuTicks(gwPid) - a0) * (1e6 / CLK_TCK)) / wa.requests;
          const b = ((cpuTicks(otherPid) - b0) * (1e6 / CLK_TCK)) / wb.requests;
          const errors = [wa, wb].reduce((n, w) => n + w.connect + w.read + w.write + w.status + w.timeout, 0);
          rounds.push({ this_us: a, ref_us: b, ratio: a / b, this_rps: wa.requests / (wa.duration_us / 1e6), ref_rps: wb.requests / (wb.duration_us / 1e6), errors });
          await Bun.sleep(200);
        }
        const row = {
          cpu_us_this: summarize(rounds.map((r) => r.this_us)),
          cpu_us_ref: summarize(rounds.map((r) => r.ref_us)),
          ratio: summarize(rounds.map((r) => r.ratio)),
          rps_this: summarize(rounds.map((r) => r.this_rps)),
          rps_ref: summarize(rounds.map((r) => r.ref_rps)),
          errors: rounds.reduce((n, r) => n + r.errors, 0),
          raw_rounds: rounds,
        };
        p[`${mode}@${conns}`] = row;
        say(`   ${pad(`${mode} c=${conns}`, 19)} CPU µs/response: this ${f(row.cpu_us_this.median, 1)}, ${ref.label} ${f(row.cpu_us_ref.median, 1)} → ${range(row.ratio, 3)}× (req/s ${f(row.rps_this.median, 0)} vs ${f(row.rps_ref.median, 0)}; errors ${row.errors})`);
        if (againstFloor) {
          // Issue 15's stream goal (≤ 3× the floor); the non-stream line is for reading beside it.
          if (stream) checked.push({ id: `P.floor.${mode}@${conns}`, what: `P CPU/response ÷ the floor's, ${mode}, ${conns} conns`, target: "≤ 3×", value: row.ratio.median, unit: "×", met: row.ratio.median <= 3 });
        } else {
          if (mode === "non-stream") checked.push({ id: `P.cpu.${mode}@${conns}`, what: `P CPU/response ÷ ${ref.label}'s, ${mode}, ${conns} conns`, target: "≤ 1.05×", value: row.ratio.median, unit: "×", met: row.ratio.median <= 1.05 });
          // Issue 30's acceptance: with defaults, no worse per response than the commit it starts from.
          if (!claudeCode && (ref.label.startsWith(BASELINE_REF) || BASELINE_REF.startsWith(ref.label))) {
            checked.push(issue30Target(baselineId(mode, conns), row.ratio.median, P.P.rounds, `both gateways on one core, each under wrk -t1 -c${conns} at once, ${P.P.seconds} s per round`));
          }
        }
      }
    }
    results.scenarios.P = p;
    // A runs after P and pairs the same gateway: it stops it then.
    if (!againstFloor && !ONLY.has("A")) {
      other.proc.kill("SIGTERM");
      await other.proc.exited;
    }
  } else if (COMPARE && ONLY.has("P")) {
    results.scenarios.P = { skipped: wrk.note };
    say(`\nP  skipped: ${wrk.note}`);
  }

  if (ONLY.has("A")) {
    placeUpstream(0);
    latencyRef = await comparedGateway();
    say(`\nA  added latency (${LATENCY_LAYOUT}) — 1 keep-alive connection, sequential; ${ROUNDS} rounds × ${P.A.perRound} requests per target after ${P.A.warmup} warm-up (plus 10 unrecorded at each turn); our fetch client`);
    say(`   targets in turn: direct, the floor, the gateway (same format) and gw(cc), the Claude Code path (an Anthropic client on an OpenAI-kind upstream; its direct and floor are the plain OpenAI request)`);
    const a: Record<string, any> = {};
    for (const mode of ["non-stream", "stream-20"] as const) {
      const stream = mode !== "non-stream";
      const chunks = stream ? P.A.streamChunks : P.A.chunks;
      const what = stream ? `${chunks}-chunk stream, time to its last byte` : `${chunks}-word answer`;
      const refTarget: TargetDef[] = latencyRef ? [{ name: "ref", req: { ...openaiTargets(chunks, stream).find((t) => t.name === "gateway")!.req, url: `${latencyRef.url}/v1/chat/completions`, headers: { ...gwHeaders, authorization: `Bearer ${latencyRef.key}` } } }] : [];
      const r = await runClient<{ rounds: Record<string, any[]>; errors: Record<string, string[]> }>({ task: "alternate", targets: [...openaiTargets(chunks, stream), claudeCodeTarget(chunks, stream), ...refTarget], rounds: ROUNDS, perRound: P.A.perRound, warmup: P.A.warmup });
      const row = { ...latencySummary(r.rounds), errors: r.errors, raw_rounds: r.rounds };
      a[mode] = row;
      say(`   ${mode} (${what})`);
      say(`     ${pad("target", 9)} ${pad("p50 ms  median [min–max of rounds]", 36)} p99 ms`);
      for (const n of Object.keys(r.rounds)) say(`     ${pad(targetLabel(n), 9)} ${pad(range(row.latency_ms[n]!.p50), 36)} ${range(row.latency_ms[n]!.p99)}`);
      const settings = `1 connection, sequential, ${P.A.perRound} requests per target per round, alternating with the floor; ${what}`;
      for (const [name, path, label] of GATEWAY_PATHS) {
        const o = row.added_over_floor_ms[name]!;
        const d = row.added_over_direct_ms[name]!;
        say(`     added, ${pad(label + ":", 17)} p50 ${range(o.p50)} ms, p99 ${range(o.p99)} ms over the floor (over direct: p50 ${f(d.p50.median)}, p99 ${f(d.p99.median)})`);
        checked.push(issue30Target(latencyId(path, "p50", mode), o.p50.median, ROUNDS, settings), issue30Target(latencyId(path, "p99", mode), o.p99.median, ROUNDS, settings));
      }
      say(`     the floor over direct:    p50 ${range(row.added_over_direct_ms.floor!.p50)} ms, p99 ${range(row.added_over_direct_ms.floor!.p99)} ms`);
      if (latencyRef) {
        // Paired per round: this checkout's same-format figure minus the compared one's.
        const diff = pairedOver(r.rounds, "gateway", "ref");
        const o = row.added_over_floor_ms.ref!;
        (row as Record<string, unknown>).this_minus_ref_ms = { ref: latencyRef.label, ...diff };
        say(`     ${latencyRef.label} (--compare), same format: p50 ${range(o.p50)} ms, p99 ${range(o.p99)} ms over the floor; this − ${latencyRef.label}: p50 ${range(diff.p50)} ms, p99 ${range(diff.p99)} ms`);
      }
      if (Object.keys(r.errors).length) say(`     ERRORS: ${JSON.stringify(r.errors)}`);
    }
    results.scenarios.A = a;
    if (latencyRef) {
      latencyRef.proc.kill("SIGTERM");
      await latencyRef.proc.exited;
    }

    // Informative, no target: the same with an agent-sized request body, where reading,
    // checking and re-sending the body is most of what the gateway adds.
    const largeBytes = openaiBody("bench/gpt", P.A.chunks, false, largeConversation).length;
    say(`   agent-sized request (${P.A.largeMessages} messages, ${Math.round(largeBytes / 1024)} KB, non-stream, same format), ${ROUNDS} rounds × ${P.A.largePerRound} requests per target:`);
    const big = await runClient<{ rounds: Record<string, any[]>; errors: Record<string, string[]> }>({ task: "alternate", targets: openaiTargets(P.A.chunks, false, largeConversation), rounds: ROUNDS, perRound: P.A.largePerRound, warmup: 100 });
    const large = { messages: P.A.largeMessages, bytes: largeBytes, ...latencySummary(big.rounds), errors: big.errors };
    results.scenarios.A_large = large;
    say(`     added by the gateway: p50 ${range(large.added_over_floor_ms.gateway!.p50)} ms, p99 ${range(large.added_over_floor_ms.gateway!.p99)} ms over the floor; over direct p50 ${range(large.added_over_direct_ms.gateway!.p50)} ms (the floor's: ${range(large.added_over_direct_ms.floor!.p50)} ms)`);
    if (Object.keys(big.errors).length) say(`     ERRORS: ${JSON.stringify(big.errors)}`);
  }

  // ---------------------------------------------------------------------------------------------
  // B: throughput with wrk, CPU per response
  // ---------------------------------------------------------------------------------------------
  if (ONLY.has("B") && wrk.ok) {
    placeUpstream(1);
    say(`\nB  throughput — wrk -t1, ${P.B.seconds} s per target per round, ${ROUNDS} rounds after a ${P.B.warmupSeconds} s warm-up${ONLY.has("A") ? " (A warmed the gateway)" : ` (${P.B.coldWarmupSeconds} s per target before each mode's first load: no A before it)`}; CPU = (utime+stime) of the proxy process ÷ responses`);
    say(`   gw(cc): the same gateway on the Claude Code path (Anthropic-format requests to /v1/messages, an OpenAI-kind upstream), read against the same floor`);
    say(`   ${pad("load", 19)} ${pad("target", 8)} ${lpad("req/s", 9)} ${pad(" [min–max]", 19)} ${lpad("p99 ms", 8)} ${lpad("CPU µs/resp", 12)} ${lpad("upstream CPU", 13)}  errors`);
    const b: Record<string, any> = {};
    for (const mode of ["non-stream", "stream-20"] as const) {
      const stream = mode !== "non-stream";
      const base = openaiTargets(stream ? P.B.streamChunks : P.B.jsonChunks, stream);
      const gwTarget = base.find((t) => t.name === "gateway")!;
      const targets: TargetDef[] = [
        ...base,
        ...(quiet ? [{ name: "gateway-warn" as const, req: { ...gwTarget.req, url: `${quiet.url}/v1/chat/completions`, headers: { ...gwHeaders, authorization: `Bearer ${quiet.key}` } } }] : []),
        ...(least ? [{ name: "least" as const, req: { ...gwTarget.req, url: `http://${LOOPBACK}:${least.port}/v1/chat/completions`, headers: { ...gwHeaders, authorization: "Bearer svc-sk-least" } } }] : []),
        claudeCodeTarget(stream ? P.B.streamChunks : P.B.jsonChunks, stream),
      ];
      const names = targets.map((t) => t.name);
      const scripts = Object.fromEntries(targets.map((t) => [t.name, wrkScript(`${mode}-${t.name}`, t.req.body, t.req.headers)]));
      for (const conns of P.B.conns) {
        const rows: Record<string, { rps: number; p99_ms: number; cpu_us: number; upstream_cpu_us: number; errors: number; requests: number; upstream_answers: number }[]> = Object.fromEntries(names.map((n) => [n, []]));
        // A gateway users run has compiled its hot paths long ago: without A's 50,000 warm-up requests
        // before it, B warms each target of a mode for longer first (the least gateway and the
        // floor are small and warm within the usual second; ours compiles for ~15,000 requests).
        const cold = !ONLY.has("A") && conns === P.B.conns[0];
        for (const t of targets) await runWrk(t.req.url, scripts[t.name]!, conns, cold ? P.B.coldWarmupSeconds : P.B.warmupSeconds);
        for (let round = 0; round < ROUNDS; round++) {
          for (const t of targets) {
            const pid = t.name === "gateway" || t.name === "gateway-cc" ? gwPid : t.name === "gateway-warn" ? quiet!.proc.pid : t.name === "least" ? least!.proc.pid : t.name === "floor" ? floor.proc.pid : undefined;
            const before = pid ? cpuTicks(pid) : 0;
            const upBefore = cpuTicks(upstream.proc.pid);
            const sBefore = await upstreamStats();
            const w = await runWrk(t.req.url, scripts[t.name]!, conns, P.B.seconds);
            const sAfter = await upstreamStats();
            const cpu = pid ? ((cpuTicks(pid) - before) * (1e6 / CLK_TCK)) / w.requests : NaN;
            const upCpu = ((cpuTicks(upstream.proc.pid) - upBefore) * (1e6 / CLK_TCK)) / w.requests;
            rows[t.name]!.push({
              rps: w.requests / (w.duration_us / 1e6), p99_ms: w.p99_us / 1000, cpu_us: cpu, upstream_cpu_us: upCpu,
              errors: w.connect + w.read + w.write + w.status + w.timeout, requests: w.requests, upstream_answers: sAfter.requests - sBefore.requests,
            });
            await Bun.sleep(200); // let wrk's dropped connections settle before the next target
          }
        }
        const col = (n: string, k: "rps" | "p99_ms" | "cpu_us" | "upstream_cpu_us" | "errors") => rows[n]!.map((x) => x[k]);
        const ratio = (a: number[], c: number[]) => a.map((v, i) => v / c[i]!);
        const row = {
          rps: Object.fromEntries(names.map((n) => [n, summarize(col(n, "rps"))])),
          p99_ms: Object.fromEntries(names.map((n) => [n, summarize(col(n, "p99_ms"))])),
          cpu_us_per_response: Object.fromEntries(names.filter((n) => n !== "direct").map((n) => [n, summarize(col(n, "cpu_us"))])) as Record<string, ReturnType<typeof summarize>>,
          upstream_cpu_us_per_response: Object.fromEntries(names.map((n) => [n, summarize(col(n, "upstream_cpu_us"))])),
          gateway_vs_direct_rps: summarize(ratio(col("gateway", "rps"), col("direct", "rps"))),
          gateway_vs_floor_rps: summarize(ratio(col("gateway", "rps"), col("floor", "rps"))),
          gateway_vs_floor_cpu: summarize(ratio(col("gateway", "cpu_us"), col("floor", "cpu_us"))),
          /** The Claude Code path against the same floor (a plain OpenAI request for the same answer). */
          gateway_cc_vs_floor_cpu: summarize(ratio(col("gateway-cc", "cpu_us"), col("floor", "cpu_us"))),
          /** The LOG_LEVEL=warn row: what the access log's lines cost, read against the same floor. */
          ...(quiet ? { gateway_warn_vs_floor_cpu: summarize(ratio(col("gateway-warn", "cpu_us"), col("floor", "cpu_us"))) } : {}),
          /** The least gateway against the same floor: what the duties alone cost, done the plainest way. */
          ...(least ? { least_vs_floor_cpu: summarize(ratio(col("least", "cpu_us"), col("floor", "cpu_us"))) } : {}),
          errors: Object.fromEntries(names.map((n) => [n, col(n, "errors").reduce((x, y) => x + y, 0)])),
          raw_rounds: rows,
        };
        b[`${mode}@${conns}`] = row;
        for (const n of names) {
          const rps = row.rps[n]!;
          const cpu = n === "direct" ? "—" : f(row.cpu_us_per_response[n]!.median, 0);
          say(`   ${pad(`${mode} c=${conns}`, 19)} ${pad(targetLabel(n), 8)} ${lpad(f(rps.median, 0), 9)} ${pad(` [${f(rps.min, 0)}–${f(rps.max, 0)}]`, 19)} ${lpad(f(row.p99_ms[n]!.median, 2), 8)} ${lpad(cpu, 12)} ${lpad(f(row.upstream_cpu_us_per_response[n]!.median, 0), 13)}  ${row.errors[n]}`);
        }
        say(`   ${pad("", 19)} → gateway/direct ${range(row.gateway_vs_direct_rps, 2)}, gateway/floor ${range(row.gateway_vs_floor_rps, 2)} (req/s); gateway CPU ÷ floor CPU ${range(row.gateway_vs_floor_cpu, 2)}× (defaults)`
          + (row.gateway_warn_vs_floor_cpu ? `; with LOG_LEVEL=warn ${range(row.gateway_warn_vs_floor_cpu, 2)}×` : "")
          + `; Claude Code path ${range(row.gateway_cc_vs_floor_cpu, 2)}×`
          + (row.least_vs_floor_cpu ? `; the least gateway ${range(row.least_vs_floor_cpu, 2)}×` : ""));
        // Issue 30's targets, with defaults: ≤ 2× the floor per non-stream response, ≤ 3× per 20-chunk stream, on both paths.
        const settings = `wrk -t1 -c${conns}, ${P.B.seconds} s per target per round, alternating with the floor; ${stream ? `${P.B.streamChunks}-chunk stream` : `${P.B.jsonChunks}-word answer`}`;
        checked.push(
          issue30Target(cpuId("same", mode, conns), row.gateway_vs_floor_cpu.median, ROUNDS, settings),
          issue30Target(cpuId("cc", mode, conns), row.gateway_cc_vs_floor_cpu.median, ROUNDS, settings),
        );
        if (conns === 32) checked.push({ id: `B.rps.${mode}@32`, what: `B gateway throughput ÷ floor's, ${mode}, 32 conns`, target: "≥ 50 %", value: row.gateway_vs_floor_rps.median * 100, unit: "%", met: row.gateway_vs_floor_rps.median >= 0.5 });
      }
    }
    results.scenarios.B = b;
  } else if (ONLY.has("B")) {
    results.scenarios.B = { skipped: wrk.note };
    say(`\nB  skipped: ${wrk.note}`);
  }

  // ---------------------------------------------------------------------------------------------
  // C: streaming, 64 chunks — time to first byte and time per chunk
  // ---------------------------------------------------------------------------------------------
  if (ONLY.has("C")) {
    placeUpstream(0);
    say(`\nC  streaming (${LATENCY_LAYOUT}) — ${P.C.chunks} content chunks, each its own upstream write, 0 ms think time; 1 connection, ${ROUNDS} rounds × ${P.C.perRound} streams per target after ${P.C.warmup} warm-up (plus 10 unrecorded at each turn)`);
    say(`   per chunk = marginal cost of a chunk: (p50 time of a ${P.C.chunks}-chunk stream − p50 time of a 1-chunk stream) ÷ ${P.C.chunks - 1}, per target and round;`);
    say(`   "added" = gateway − direct in the same round. With no think time the gateway gets many frames per read and sends its first byte once that batch is handled.`);
    const c: Record<string, any> = {};
    const N = P.C.chunks;
    for (const [label, long, short] of [
      ["openai→openai", openaiTargets(N, true), openaiTargets(1, true)],
      ["openai→anthropic (translated)", translatedTargets(N), translatedTargets(1)],
    ] as const) {
      const targets = [...long, ...short.map((t) => ({ ...t, name: `${t.name}@1` }))] as { name: string; req: RequestSpec }[];
      const r = await runClient<{ rounds: Record<string, any[]>; errors: Record<string, string[]> }>({ task: "alternate", targets, rounds: ROUNDS, perRound: P.C.perRound, warmup: P.C.warmup });
      const per = (name: string, k: string) => r.rounds[name]!.map((x) => x[k] as number);
      const added = (name: string, k: string) => per(name, k).map((v, i) => v - per("direct", k)[i]!);
      const slope = (name: string) => per(name, "total_p50").map((v, i) => ((v - per(`${name}@1`, "total_p50")[i]!) * 1000) / (N - 1));
      const addedSlope = (name: string) => slope(name).map((v, i) => v - slope("direct")[i]!);
      const row = {
        ttfb_ms: Object.fromEntries(["direct", "floor", "gateway"].map((n) => [n, { p50: summarize(per(n, "ttfb_p50")), p99: summarize(per(n, "ttfb_p99")) }])),
        total_p50_ms: Object.fromEntries(["direct", "floor", "gateway"].flatMap((n) => [[n, summarize(per(n, "total_p50"))], [`${n}@1`, summarize(per(`${n}@1`, "total_p50"))]])),
        per_chunk_us: Object.fromEntries(["direct", "floor", "gateway"].map((n) => [n, summarize(slope(n))])),
        gateway_added: { ttfb_p50_ms: summarize(added("gateway", "ttfb_p50")), ttfb_p99_ms: summarize(added("gateway", "ttfb_p99")), per_chunk_us: summarize(addedSlope("gateway")) },
        floor_added: { ttfb_p50_ms: summarize(added("floor", "ttfb_p50")), ttfb_p99_ms: summarize(added("floor", "ttfb_p99")), per_chunk_us: summarize(addedSlope("floor")) },
        errors: r.errors,
        raw_rounds: r.rounds,
      };
      c[label] = row;
      say(`   ${label}`);
      say(`     ${pad("target", 9)} ${pad("TTFB p50 ms", 26)} ${pad("TTFB p99 ms", 26)} ${pad(`stream p50 ms (${N} / 1 chunk)`, 30)} per chunk µs`);
      for (const n of ["direct", "floor", "gateway"]) say(`     ${pad(n, 9)} ${pad(range(row.ttfb_ms[n]!.p50), 26)} ${pad(range(row.ttfb_ms[n]!.p99), 26)} ${pad(`${f(row.total_p50_ms[n]!.median)} / ${f(row.total_p50_ms[`${n}@1`]!.median)}`, 30)} ${range(row.per_chunk_us[n]!, 2)}`);
      say(`     added by the gateway: TTFB p50 ${range(row.gateway_added.ttfb_p50_ms)} ms, p99 ${range(row.gateway_added.ttfb_p99_ms)} ms, per chunk ${range(row.gateway_added.per_chunk_us, 2)} µs`);
      say(`     added by the floor:   TTFB p50 ${range(row.floor_added.ttfb_p50_ms)} ms, p99 ${range(row.floor_added.ttfb_p99_ms)} ms, per chunk ${range(row.floor_added.per_chunk_us, 2)} µs`);
      if (Object.keys(r.errors).length) say(`     ERRORS: ${JSON.stringify(r.errors)}`);
      checked.push(
        { id: `C.ttfb99.${label}`, what: `C added TTFB p99, ${label}`, target: "≤ 1 ms", value: row.gateway_added.ttfb_p99_ms.median, unit: "ms", met: row.gateway_added.ttfb_p99_ms.median <= 1 },
        { id: `C.chunk.${label}`, what: `C added time per chunk, ${label}`, target: "≤ 10 µs", value: row.gateway_added.per_chunk_us.median, unit: "µs", met: row.gateway_added.per_chunk_us.median <= 10 },
      );
    }
    results.scenarios.C = c;
  }

  // ---------------------------------------------------------------------------------------------
  // E: soak with clients going away midway (before D, whose 2,000 streams would inflate the baseline)
  // ---------------------------------------------------------------------------------------------
  if (ONLY.has("E")) {
    placeUpstream(1);
    say(`\nE  soak — ${P.E.total} requests through the gateway, ${P.E.concurrency} at a time: 20 % streams whose client goes away after ~3 of ${P.E.chunks} chunks (upstream ${P.E.dripMs} ms per chunk),`);
    say(`   40 % full streams (OpenAI→OpenAI, OpenAI→Anthropic), 40 % non-stream (OpenAI, Anthropic client); RSS idle (lowest over 25 s without load) after ${E_WARMUP} warm-up requests and at the end`);
    const eStartMs = Date.now();
    const upBefore = await upstreamStats();
    const r = await runClient<any>({ task: "soak", gateway: gw, key, total: P.E.total, warmup: E_WARMUP, concurrency: P.E.concurrency, checkpoint: P.E.total / 10, gatewayPid: gwPid, chunks: P.E.chunks });
    // Drain: the upstream's own counters, and what the ledger still holds (SQLite table or admin API).
    const { upstream: s, upstreamDrainMs, reservations } = await drained();
    const rssEnd = (await idleRssKb(gwPid)) / 1024;
    const db = new Database(dbPath, { readonly: true });
    const statuses = Object.fromEntries(db.query<{ status: string; n: number }, [number]>("SELECT status, COUNT(*) AS n FROM usage_records WHERE created_at >= ? GROUP BY status").all(eStartMs).map((x) => [x.status, x.n]));
    db.close();
    const measured = P.E.total - E_WARMUP;
    const growth = ((rssEnd - r.rss_after_warmup_mb) / measured) * 10_000;
    const e = {
      ...r,
      rss_end_mb: rssEnd,
      rss_growth_mb_per_10k: growth,
      upstream_in_flight_at_end: s.inflight,
      upstream_open_streams_at_end: s.openStreams,
      upstream_pending_requests_at_end: s.pendingRequests - 1, // less our own /__stats request
      upstream_drain_ms: upstreamDrainMs,
      upstream_aborted_streams: s.aborted - upBefore.aborted,
      upstream_requests: s.requests - upBefore.requests,
      idle_keepalive_sockets_to_upstream: establishedTo(upstream.port),
      open_reservations_at_end: reservations,
      usage_records_by_status: statuses,
    };
    results.scenarios.E = e;
    const errs = Object.values(r.errors as Record<string, number>).reduce((x, y) => x + y, 0);
    say(`   ${P.E.total} requests in ${f(r.seconds_after_warmup, 1)} s after warm-up (${f(r.requests_per_s, 0)} req/s); client errors ${errs}${errs ? " " + JSON.stringify(r.error_samples) : ""}; aborted midway ${r.aborted_midway} (ended before the abort: ${r.ended_before_abort})`);
    say(`   gateway RSS ${f(r.rss_after_warmup_mb, 1)} MB after warm-up → ${f(rssEnd, 1)} MB at the end: ${f(growth, 2)} MB per 10k requests; checkpoints ${r.checkpoints.map((c: any) => f(c.rss_mb, 0)).join(", ")} MB`);
    say(`   at the end: upstream requests in flight ${s.inflight}, open upstream streams ${s.openStreams} (fake upstream's counters; drained in ${f(upstreamDrainMs, 0)} ms), upstream saw ${e.upstream_aborted_streams} streams aborted; credits still reserved ${reservations}`);
    say(`   usage records written during E by status: ${JSON.stringify(statuses)}; idle keep-alive sockets to the upstream: ${e.idle_keepalive_sockets_to_upstream}`);
    checked.push(
      { id: "E.rss", what: "E gateway RSS growth per 10k requests", target: "≤ 1 MB", value: growth, unit: "MB", met: growth <= 1 },
      { id: "E.open", what: "E upstream requests in flight + open reservations at the end", target: "0", value: s.inflight + s.openStreams + reservations, unit: "", met: s.inflight === 0 && s.openStreams === 0 && reservations === 0 },
    );
  }

  // ---------------------------------------------------------------------------------------------
  // D: 2,000 slow concurrent streams
  // ---------------------------------------------------------------------------------------------
  if (ONLY.has("D")) {
    placeUpstream(1);
    say(`\nD  ${P.D.streams} concurrent slow streams through the gateway — one content chunk every ${P.D.intervalMs} ms, ${P.D.chunks} chunks each, all started at once`);
    const slowReq: RequestSpec = { url: `${gw}/v1/chat/completions`, headers: gwHeaders, body: JSON.stringify({ model: "bench/gpt-slow", messages, max_tokens: P.D.chunks, stream: true }), stream: true, chunks: P.D.chunks };
    const { result: r, peak: m, how } = await peakDuring(gwPid, 100, () => runClient<SlowResult>({ task: "slow", req: slowReq, streams: P.D.streams, chunks: P.D.chunks, intervalMs: P.D.intervalMs }));
    const { upstream: s, reservations } = await drained();
    const d = { ...r, ...m, upstream_open_after: s.openStreams, open_reservations_after: reservations };
    const peak = m.peak_rss_mb;
    results.scenarios.D = d;
    say(`   completed ${r.completed}/${r.streams} (failed ${r.failed}${r.failures.length ? ": " + r.failures.slice(0, 3).join(" | ") : ""}), stalled (gap > ${2 * P.D.intervalMs} ms) ${r.stalled}; gap between chunks p50 ${f(r.gap_p50_ms, 0)} ms, p99 ${f(r.gap_p99_ms, 0)} ms, max ${f(r.max_gap_ms, 0)} ms`);
    say(`   first byte p50 ${f(r.ttfb_p50_ms, 0)} ms, max ${f(r.ttfb_max_ms, 0)} ms; stream duration p50 ${f(r.duration_p50_ms, 0)} ms, max ${f(r.duration_max_ms, 0)} ms; ${m.peak_upstream_open_streams} streams open at once at the upstream`);
    say(`   gateway RSS ${f(m.rss_before_mb, 1)} MB before → peak ${f(peak, 1)} MB (${how}); peak fds ${m.peak_gateway_fds}; after: open upstream streams ${s.openStreams}, open reservations ${reservations}`);
    checked.push(
      { id: "D.rss", what: `D gateway peak RSS, ${P.D.streams} slow streams`, target: "≤ 300 MB", value: peak, unit: "MB", met: peak <= 300 },
      { id: "D.complete", what: `D streams complete, none stalled`, target: `${P.D.streams}/${P.D.streams}, 0 stalled`, value: r.completed, unit: "complete", met: r.completed === r.streams && r.stalled === 0 },
    );
  }

  // ---------------------------------------------------------------------------------------------
  // S: issue 30's 20,000 concurrent slow streams, on a gateway of their own
  // ---------------------------------------------------------------------------------------------
  if (ONLY.has("S")) {
    placeUpstream(1);
    // A fresh gateway with the defaults: its peak is what the streams cost, not that plus whatever
    // the scenarios before left in the shared gateway's heap.
    const slowGw = await startGateway(ROOT, "gateway-slow");
    const pid = slowGw.proc.pid;
    // A stream holds two descriptors in the gateway (its client's socket, its upstream's) and one
    // in the upstream and in our client: as many streams as the tightest of their limits leaves room for.
    const margin = 256;
    const clientLimit = hardNofile === "unlimited" ? Infinity : Number(hardNofile) || softNofile;
    const room = Math.floor(Math.min((openFilesLimit(pid) - fdCount(pid) - margin) / 2, openFilesLimit(upstream.proc.pid) - fdCount(upstream.proc.pid) - margin, clientLimit - margin));
    const streams = Math.min(P.S.streams, room);
    if (streams < 1) throw new Error(`S: no room for a single stream under the open-file limits (gateway ${openFilesLimit(pid)}, hard ${hardNofile})`);
    const chunks = P.S.holdSeconds + Math.ceil(streams / P.S.openPerSecond);
    say(`\nS  ${streams.toLocaleString("en-US")} concurrent slow streams through a fresh gateway with the defaults (pid ${pid}) — ${chunks} content chunks each, one a second (a client reading one frame per second),`);
    say(`   opened at ${P.S.openPerSecond}/s by our raw-socket client, so all are open at once for the last ~${P.S.holdSeconds} s; the gateway's peak RSS and its CPU`);
    if (streams < P.S.streams) say(`   ${P.S.streams.toLocaleString("en-US")} asked for, ${streams.toLocaleString("en-US")} fit: the gateway may open ${openFilesLimit(pid)} files and needs 2 a stream (hard limit ${hardNofile}; raise it as root with ulimit -Hn, or in the container's settings)`);
    const req: RequestSpec = { url: `${slowGw.url}/v1/chat/completions`, headers: { ...gwHeaders, authorization: `Bearer ${slowGw.key}` }, body: JSON.stringify({ model: "bench/gpt-1s", messages, max_tokens: chunks, stream: true }), stream: true, chunks };
    const cpuBefore = cpuTicks(pid);
    const { result: r, peak: m, how } = await peakDuring(pid, 500, () => runClient<SlowResult>({ task: "slow", req, streams, chunks, intervalMs: P.S.intervalMs, openPerSecond: P.S.openPerSecond }));
    // A gateway short of CPU queues frames and stalls streams: its share of a core says whether the figure is of streams served or of a backlog.
    const cpuShare = ((cpuTicks(pid) - cpuBefore) / CLK_TCK / r.wall_s) * 100;
    const { upstream: after, reservations } = await drained(slowGw);
    slowGw.proc.kill("SIGTERM");
    await slowGw.proc.exited;
    const peak = m.peak_rss_mb;
    const perStreamKb = ((peak - m.rss_before_mb) * 1024) / streams;
    // What the same slope gives at the target's count, when fewer streams ran: an estimate, never
    // the figure, and only from a quarter of the count up (below, the heap's own growth steps make the slope).
    const extrapolated = streams < SLOW_STREAMS && streams >= SLOW_STREAMS / 4 ? m.rss_before_mb + (perStreamKb * SLOW_STREAMS) / 1024 : undefined;
    results.scenarios.S = { ...r, ...m, asked: P.S.streams, chunks, fd_room: room, gateway_cpu_percent_of_a_core: cpuShare, per_stream_kb: perStreamKb, extrapolated_rss_mb_at_target: extrapolated ?? null, upstream_open_after: after.openStreams, open_reservations_after: reservations };
    say(`   completed ${r.completed}/${r.streams} (failed ${r.failed}${r.failures.length ? ": " + r.failures.slice(0, 3).join(" | ") : ""}), stalled (gap > ${2 * P.S.intervalMs} ms) ${r.stalled}; longest gap p50 ${f(r.gap_p50_ms, 0)} ms, p99 ${f(r.gap_p99_ms, 0)} ms, max ${f(r.max_gap_ms, 0)} ms`);
    say(`   all open after ${f(r.opened_in_s, 1)} s, ${r.peak_open_at_client} at once at the client, ${m.peak_upstream_open_streams} at the upstream; first byte p50 ${f(r.ttfb_p50_ms, 0)} ms, max ${f(r.ttfb_max_ms, 0)} ms; stream p50 ${f(r.duration_p50_ms / 1000, 1)} s; gateway CPU ${f(cpuShare, 0)} % of a core`);
    say(`   gateway RSS ${f(m.rss_before_mb, 1)} MB before → peak ${f(peak, 1)} MB (${how}), ${f(perStreamKb, 1)} KB a stream; peak fds ${m.peak_gateway_fds}${extrapolated === undefined ? "" : `; at ${SLOW_STREAMS.toLocaleString("en-US")} by the same slope ≈ ${f(extrapolated, 0)} MB (an estimate, not a measurement)`}`);
    say(`   after: open upstream streams ${after.openStreams}, open reservations ${reservations}`);
    // The figure is of N streams served at once, or it is not the target's: fewer streams, fewer
    // open at the same time (an opening slower than the streams), or streams failed or stalled.
    const atOnce = Math.min(r.peak_open_at_client, m.peak_upstream_open_streams);
    const short = [
      streams < SLOW_STREAMS ? `${streams.toLocaleString("en-US")} of ${SLOW_STREAMS.toLocaleString("en-US")} streams${streams < P.S.streams ? " (open-file limit)" : ""}` : "",
      atOnce < streams ? `only ${atOnce} open at once` : "",
      r.failed || r.stalled ? `${r.failed} failed, ${r.stalled} stalled` : "",
    ].filter(Boolean).join("; ");
    // One run, not rounds: a peak against a fixed limit, with no floor to pair it with.
    checked.push(issue30Target(SLOW_RSS_ID, peak, 1, `${streams.toLocaleString("en-US")} streams × ${chunks} frames 1 s apart, opened at ${P.S.openPerSecond}/s; a fresh gateway; one run (a peak, not paired)`, short || undefined));
  }

  // ---------------------------------------------------------------------------------------------
  // Summary
  // ---------------------------------------------------------------------------------------------
  // The access log fills the file at info: what matters here are its warnings and errors.
  // (grep, not a read into memory: a full run writes hundreds of MB of access lines).
  const grep = (pattern: string) => Bun.spawnSync(["grep", "-E", pattern, gwLog]).stdout.toString().split("\n").filter(Boolean);
  const logLines = Number(Bun.spawnSync(["wc", "-l", gwLog]).stdout.toString().trim().split(/\s+/)[0] ?? 0);
  const warnLines = grep('"level":"(warn|error)"').filter((l) => !l.includes('"message":"request"'));
  results.gateway_log = { lines: logLines, warnings: warnLines.length, last: warnLines.slice(-5) };
  say(`\ngateway log (defaults, at info): ${logLines} lines, ${warnLines.length} warnings or errors besides access lines${warnLines.length ? "; last: " + warnLines.slice(-2).join(" | ").slice(0, 400) : ""}`);
  say(`\nTargets${QUICK ? " (quick run: indicative only)" : ""}`);
  for (const t of checked) {
    // "unprvn": within its target, but on too few rounds or too few streams to count (issue 30's rule).
    say(`   ${t.met ? "met   " : t.within ? "unprvn" : "MISSED"}  ${pad(t.what, 68)} ${pad(formatValue(t), 12)} (target ${t.target})`);
  }
  const met = checked.filter((t) => t.met).length;
  const unproven = checked.filter((t) => !t.met && t.within).length;
  say(`   ${met} met, ${checked.length - met - unproven} missed${unproven ? `, ${unproven} within target but unproven` : ""}; wall time ${f((Date.now() - startedAt.getTime()) / 1000, 0)} s`);

  // Issue 30's targets, every one, in one table: what this run measured and what it did not.
  const load = { start: loadAtStart, end: loadAverage() };
  if (forcedBeside) results.forced_beside = forcedBeside;
  const caveat = forcedBeside ? "run beside other load (--force)" : QUICK ? "quick run" : undefined;
  const issue30 = issue30Table(checked, load, caveat);
  say("");
  for (const line of issue30.lines) say(line);
  results.load_average = load;
  results.issue_30 = issue30.rows;

  mkdirSync(RESULTS, { recursive: true });
  results.wall_s = (Date.now() - startedAt.getTime()) / 1000;
  results.table = out;
  const json = JSON.stringify(results, null, 2);
  const stamp = startedAt.toISOString().replace(/[:.]/g, "-");
  writeFileSync(join(RESULTS, "latest.json"), json);
  writeFileSync(join(RESULTS, `${stamp}${QUICK ? "-quick" : ""}.json`), json);
  writeFileSync(join(RESULTS, "issue-30-latest.json"), JSON.stringify({ at: results.at, command: results.command, git_head: git, quick: QUICK, rounds: ROUNDS, load_average: load, rows: issue30.rows }, null, 2));
  say(`\nresults: bench/results/latest.json, bench/results/${stamp}${QUICK ? "-quick" : ""}.json, and issue 30's table in bench/results/issue-30-latest.json`);

  // ---------------------------------------------------------------------------------------------
  /** --profile: the gateway under wrk load with Bun's sampling profiler; the profile is kept. */
  async function profile() {
    if (!ensureWrk().ok) throw new Error("--profile needs wrk");
    const seconds = Number(process.env.PROFILE_SECONDS ?? (QUICK ? 3 : 10));
    const connections = Number(process.env.PROFILE_CONNECTIONS ?? 32);
    // PROFILE_MODE=stream-20 (or non-stream) profiles one load alone, so its functions are not mixed with the other's.
    const modes = ([["non-stream", false], ["stream-20", true]] as const).filter(([m]) => !process.env.PROFILE_MODE || process.env.PROFILE_MODE === m);
    for (const [mode, stream] of modes) {
      const t = openaiTargets(stream ? 20 : 16, stream).find((x) => x.name === "gateway")!;
      const before = cpuTicks(gwPid);
      const threadsBefore = threadTicks(gwPid);
      const w = await runWrk(t.req.url, wrkScript(`profile-${mode}`, t.req.body, t.req.headers), connections, seconds);
      say(`profile load ${mode}, ${connections} connection${connections === 1 ? "" : "s"}: ${w.requests} responses, ${f(((cpuTicks(gwPid) - before) * (1e6 / CLK_TCK)) / w.requests, 0)} µs CPU each (profiler ${SAMPLER ? "on" : "off"})`);
      // Which threads the CPU went to: the JavaScript thread, the collector's helpers, the allocator's.
      const spent = [...threadTicks(gwPid)].map(([name, ticks]) => [name, ticks - (threadsBefore.get(name) ?? 0)] as const).filter(([, ticks]) => ticks > 0).sort((a, b) => b[1] - a[1]);
      say(`  by thread (µs per response): ${spent.map(([name, ticks]) => `${name} ${f((ticks * (1e6 / CLK_TCK)) / w.requests, 1)}`).join(", ")}`);
    }
    gateway.kill("SIGTERM");
    await gateway.exited;
    if (process.env.PROFILE_KEEP_LOG) writeFileSync(process.env.PROFILE_KEEP_LOG, readFileSync(gwLog));
    if (!SAMPLER) return;
    const file = join(work, "gateway-profile.md");
    if (!existsSync(file)) throw new Error(`no profile was written (looked for ${file})`);
    mkdirSync(RESULTS, { recursive: true });
    const dest = join(RESULTS, `profile-${startedAt.toISOString().replace(/[:.]/g, "-")}.md`);
    writeFileSync(dest, readFileSync(file));
    say(`profile: ${dest.replace(ROOT + "/", "")}`);
    say(readFileSync(file, "utf8").split("\n").slice(0, 60).join("\n"));
  }
}

try {
  await main();
  await shutdown(0);
} catch (err) {
  console.error(err instanceof Error ? err.stack ?? err.message : err);
  await shutdown(1, "failed");
}
