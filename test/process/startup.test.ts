/**
 * What the gateway refuses at start, and what it prints, as the real entry point runs
 * (`bun src/index.ts` in a child process): issue 32's start-up items.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runGatewayToExit, startGatewayProcess } from "../helpers/gateway-process.ts";
import { ConsoleClient } from "../helpers/console-client.ts";
import { openDatabase } from "../../src/store/database.ts";
import { startFakeUpstream } from "../helpers/fake-upstream.ts";
import { until } from "../helpers/until.ts";
import { DEMO_CREDITS_MICRO } from "../../src/accounts/demo-account.ts";
import { demoChoice } from "../../src/config/env.ts";
import { loadSettings } from "../../src/config/load-config.ts";
import { worstCaseMicro } from "../../src/billing/pricing.ts";

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "switchyard-startup-"));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Output that is one line of ours, not a stack trace. */
function expectOneLine(stderr: string): void {
  const lines = stderr.trim().split("\n");
  expect(lines).toHaveLength(1);
  expect(lines[0]).toStartWith("switchyard: ");
  expect(stderr).not.toMatch(/^\s+at /m);
}

test("a second gateway on a port in use exits non-zero with one line saying so; the first keeps answering", async () => {
  const first = await startGatewayProcess({ SWITCHYARD_DB: join(dir, "first.sqlite") });
  try {
    const port = new URL(first.url).port;
    // Its own database file, so it is the port, not the ledger's lock, that stops it.
    const second = await runGatewayToExit({ PORT: port, SWITCHYARD_DB: join(dir, "second.sqlite") });
    expect(second.code).not.toBe(0);
    expectOneLine(second.stderr);
    expect(second.stderr).toContain(`port ${port} on 127.0.0.1 is already in use`);
    expect(second.stderr).toContain("set PORT");
    // Nothing of the second one was served, and the first still answers every request.
    for (let i = 0; i < 5; i++) {
      const res = await fetch(`${first.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${first.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "switchyard/echo", messages: [{ role: "user", content: "still there?" }] }),
      });
      expect(res.status).toBe(200);
    }
  } finally {
    first.child.kill("SIGTERM");
    await first.child.exited;
  }
}, 30_000);

test("an admin or metrics token shorter than 32 characters is refused at start: one line naming the variable and the length, never the token", async () => {
  for (const name of ["SWITCHYARD_ADMIN_TOKEN", "SWITCHYARD_METRICS_TOKEN"]) {
    const token = "change-me-please";
    const run = await runGatewayToExit({ [name]: token, SWITCHYARD_DB: join(dir, "short-token.sqlite") });
    expect(run.code).not.toBe(0);
    expectOneLine(run.stderr);
    expect(run.stderr).toContain(`${name} must be at least 32 characters long`);
    expect(run.stderr + run.stdout).not.toContain(token);
  }
}, 30_000);

const ADMIN = "startup-admin-token-0123456789abcdef0123";

describe("the demo account", () => {
  test("on for the quick start; off by default with an admin token, a database URL or in the container; SWITCHYARD_DEMO decides when set", () => {
    expect(demoChoice({})).toEqual({ on: true });
    expect(demoChoice({ SWITCHYARD_DEMO: "" })).toEqual({ on: true });
    for (const env of [{ SWITCHYARD_ADMIN_TOKEN: ADMIN }, { SWITCHYARD_DATABASE_URL: "postgres://x@db/x" }, { SWITCHYARD_CONTAINER: "1" }, { SWITCHYARD_DEMO: "0" }]) {
      expect([env, demoChoice(env).on]).toEqual([env, false]);
      expect([env, demoChoice({ ...env, SWITCHYARD_DEMO: "1" }).on]).toEqual([env, true]);
    }
    expect(demoChoice({ SWITCHYARD_ADMIN_TOKEN: ADMIN })).toEqual({ on: false, reason: "SWITCHYARD_ADMIN_TOKEN is set" });
    expect(() => demoChoice({ SWITCHYARD_DEMO: "maybe" })).toThrow("SWITCHYARD_DEMO must be 1 or 0");
  });

  test("the container image says it is one: no demo account there unless asked for", () => {
    const dockerfile = readFileSync(join(import.meta.dir, "..", "..", "Dockerfile"), "utf8");
    const env = Object.fromEntries([...dockerfile.matchAll(/^ENV (.+)$/gm)].flatMap((m) => m[1]!.split(/\s+/).map((kv) => kv.split("=") as [string, string])));
    expect(env.SWITCHYARD_CONTAINER).toBeTruthy();
    expect(demoChoice(env).on).toBe(false);
  });

  test("with an admin token and SWITCHYARD_DEMO unset, the gateway starts without a demo key and says why", async () => {
    const child = Bun.spawn(["bun", "src/index.ts"], {
      cwd: join(import.meta.dir, "../.."),
      env: { ...process.env, PORT: "0", HOST: "127.0.0.1", LOG_LEVEL: "info", SWITCHYARD_DEMO: "", SWITCHYARD_ADMIN_TOKEN: ADMIN, SWITCHYARD_DB: join(dir, "no-demo.sqlite") },
      stdin: "ignore",
      stdout: "pipe",
      stderr: "pipe",
    });
    try {
      let log = "";
      const decoder = new TextDecoder();
      const reader = child.stderr.getReader();
      const deadline = Date.now() + 15_000;
      while (!log.includes("switchyard listening") && Date.now() < deadline) {
        const { value, done } = await reader.read();
        if (done) break;
        log += decoder.decode(value, { stream: true });
      }
      expect(log).toContain("no demo account: SWITCHYARD_ADMIN_TOKEN is set");
      expect(log).toContain("switchyard listening");
      child.kill("SIGTERM");
      expect(await child.exited).toBe(0);
      expect(await new Response(child.stdout).text()).not.toContain("svc-sk-");
      const db = new Database(join(dir, "no-demo.sqlite"), { readonly: true });
      expect(db.query("SELECT COUNT(*) AS n FROM accounts").get()).toEqual({ n: 0 });
      db.close();
    } finally {
      child.kill("SIGKILL");
    }
  }, 30_000);

  test("the banner says where the console is and prints the command that makes the demo account's invite link; that link signs in to its balance (a console probe: nothing told a key holder how to get in)", async () => {
    const env = { SWITCHYARD_DB: join(dir, "console-banner.sqlite") };
    const gw = await startGatewayProcess(env);
    try {
      expect(gw.banner).toContain(`Console (balance, usage, keys): ${gw.url}/console/`);
      const line = gw.banner.split("\n").find((l) => l.includes(" run admin invite "))!;
      expect(line.trim()).toStartWith(`SWITCHYARD_DB=${env.SWITCHYARD_DB} npx -y bun@${Bun.version} run admin invite acct_`);
      // Run as printed, but with this machine's bun (npx would fetch one).
      const args = line.trim().split(/\s+/).slice(line.trim().split(/\s+/).indexOf("admin") + 1);
      const admin = Bun.spawn([process.execPath, "run", "admin", ...args], { cwd: join(import.meta.dir, "../.."), env: { ...process.env, ...env }, stdout: "pipe", stderr: "pipe" });
      const out = await new Response(admin.stdout).text();
      expect(await admin.exited).toBe(0);
      const link = (JSON.parse(out) as { url: string }).url;
      expect(link).toStartWith(`${gw.url}/console/#invite=`);
      const holder = new ConsoleClient(gw.url);
      await holder.acceptInvite(link, "a long enough password for the demo holder");
      const overview = await holder.json("GET", "/console/api/overview");
      expect(JSON.stringify(overview)).toContain("demo");
    } finally {
      gw.child.kill("SIGTERM");
      await gw.child.exited;
    }
  }, 30_000);

  test("the banner reports what the demo account has left, not what it started with", async () => {
    const upstream = await startFakeUpstream();
    const config = join(dir, "paid.json");
    writeFileSync(config, JSON.stringify({
      providers: [{ id: "up", kind: "openai", base_url: `${upstream.url}/v1` }],
      models: [{ id: "test/paid", provider: "up", upstream_model: "m", category: "text", context_length: 100000, pricing: { input_per_mtok: 100_000, output_per_mtok: 100_000 } }],
    }));
    const env = { SWITCHYARD_CONFIG: config, SWITCHYARD_DB: join(dir, "banner.sqlite") };
    const creditsIn = (banner: string) => Number(banner.match(/account "demo", ([\d,.]+) credits left/)![1]!.replaceAll(",", ""));
    try {
      const first = await startGatewayProcess(env);
      expect(creditsIn(first.banner)).toBe(DEMO_CREDITS_MICRO / 1e6);
      const res = await fetch(`${first.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${first.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "test/paid", max_tokens: 100, messages: [{ role: "user", content: "Spend something" }] }),
      });
      expect(res.status).toBe(200);
      await res.text();
      first.child.kill("SIGTERM");
      await first.child.exited;
      const db = new Database(env.SWITCHYARD_DB, { readonly: true });
      const left = db.query<{ b: number }, []>("SELECT balance_micro AS b FROM accounts WHERE name = 'demo'").get()!.b;
      db.close();
      expect(left).toBeLessThan(DEMO_CREDITS_MICRO);

      const second = await startGatewayProcess(env);
      second.child.kill("SIGTERM");
      await second.child.exited;
      expect(creditsIn(second.banner)).toBe(left / 1e6);
    } finally {
      await upstream.stop();
    }
  }, 30_000);

  test("holds enough for Claude Code on Sonnet and Opus, and on the OpenAI models its names reach without Anthropic's key: a long conversation's worst case at the capped answer length fits (100 credits did not)", () => {
    const anthropic = loadSettings({ ANTHROPIC_API_KEY: "sk-ant-x" }, dir);
    const openai = loadSettings({ OPENAI_API_KEY: "sk-x" }, dir);
    for (const [settings, id] of [[anthropic, "anthropic/claude-sonnet-5-5"], [anthropic, "anthropic/claude-opus-5-5"], [openai, "openai/gpt-6-luna"], [openai, "openai/gpt-6-sol"]] as const) {
      const model = settings.models.find((m) => m.id === id)!;
      // Claude Code asks for 32,000 answer tokens; the gateway holds for its cap.
      const answer = Math.min(32_000, model.max_tokens_cap ?? settings.limits.max_tokens_cap);
      // Opus's answer alone is held for more than the 100 credits the demo account once had.
      if (id.includes("opus")) expect(worstCaseMicro(model.pricing, 0, answer, 0)).toBeGreaterThan(100 * 1e6);
      // A conversation of 100,000 prompt tokens, every one at the dearest input price, still fits.
      expect(worstCaseMicro(model.pricing, 100_000, answer, 0)).toBeLessThan(DEMO_CREDITS_MICRO);
    }
  });
});

test("SWITCHYARD_SQLITE_SYNC=full fsyncs every commit of the ledger (its start line says so); the default is normal", async () => {
  for (const [value, expected] of [[undefined, "normal"], ["full", "full"]] as const) {
    const dir = mkdtempSync(join(tmpdir(), "switchyard-sync-"));
    const gateway = await startGatewayProcess({ LOG_LEVEL: "info", SWITCHYARD_DB: join(dir, "gw.sqlite"), OPENAI_API_KEY: "", ANTHROPIC_API_KEY: "", SWITCHYARD_CONFIG: "", ...(value ? { SWITCHYARD_SQLITE_SYNC: value } : {}) });
    try {
      await until("the start line", 10_000, () => gateway.stderr().includes("switchyard listening"));
      const line = JSON.parse(gateway.stderr().split("\n").find((l) => l.includes("switchyard listening"))!);
      expect([value, line.sqliteSync]).toEqual([value, expected]);
      const res = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${gateway.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "switchyard/lorem", max_tokens: 8, messages: [{ role: "user", content: "hi" }] }),
      });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    } finally {
      gateway.child.kill("SIGKILL");
      await gateway.child.exited;
      rmSync(dir, { recursive: true, force: true });
    }
  }
}, 60_000);

test("LOG_LEVEL is read in any case (INFO writes the info start line); an unknown level stops the start naming the allowed ones", async () => {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-log-level-"));
  try {
    // Every line used to be dropped without a word: "INFO" and "verbose" ranked below no level.
    const gateway = await startGatewayProcess({ LOG_LEVEL: "INFO", SWITCHYARD_DB: join(dir, "gw.sqlite") });
    try {
      await until("the start line", 10_000, () => gateway.stderr().includes("switchyard listening"));
    } finally {
      gateway.child.kill("SIGKILL");
      await gateway.child.exited;
    }
    const run = await runGatewayToExit({ LOG_LEVEL: "verbose", SWITCHYARD_DB: join(dir, "refused.sqlite") });
    expect(run.code).not.toBe(0);
    expectOneLine(run.stderr);
    expect(run.stderr).toContain('LOG_LEVEL must be debug, info, warn or error, not "verbose"');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 30_000);

test("a numeric variable that is not a number stops the start (and the health check) with one line naming it", async () => {
  for (const [name, value] of [["SWITCHYARD_SHUTDOWN_GRACE_MS", "30s"], ["PORT", "eighty"]] as const) {
    const run = await runGatewayToExit({ [name]: value, SWITCHYARD_DB: join(dir, "numbers.sqlite") });
    expect([name, run.code]).toEqual([name, 1]);
    expectOneLine(run.stderr);
    expect(run.stderr).toContain(`${name} must be a whole number`);
  }
  const check = Bun.spawnSync(["bun", "src/index.ts", "--health-check"], { cwd: join(import.meta.dir, "..", ".."), env: { ...process.env, SWITCHYARD_HEALTH_CHECK_TIMEOUT_MS: "3s" }, stderr: "pipe" });
  expect(check.exitCode).toBe(1);
  expectOneLine(check.stderr.toString());
  expect(check.stderr.toString()).toContain('SWITCHYARD_HEALTH_CHECK_TIMEOUT_MS must be a whole number of milliseconds from 1 to 2147483647 (got "3s")');
}, 30_000);

// A kill -9 and disk-fault probe: a full disk (SQLITE_IOERR_SHMSIZE), a read-only or immutable
// folder (SQLITE_CANTOPEN) or a malformed file (SQLITE_CORRUPT) ended the start with a stack of
// database.ts; an orchestrator restarting it in a loop logged that and nothing else.
test("a start on a ledger it cannot open (a damaged file) stops with one line naming the file and what to do, no stack trace", async () => {
  const db = join(dir, "damaged.sqlite");
  writeFileSync(db, Buffer.alloc(8192, 0x5a));
  const run = await runGatewayToExit({ SWITCHYARD_DB: db });
  expect(run.code).toBe(1);
  expectOneLine(run.stderr);
  expect(run.stderr).toStartWith(`switchyard: cannot open the SQLite ledger ${db} (SWITCHYARD_DB): SQLITE_NOTADB`);
  expect(run.stderr).toContain("restore the ledger from a backup");
  // A path SQLite cannot open as a file (a folder there): the same one line, with its code.
  const folder = join(dir, "a-folder.sqlite");
  mkdirSync(folder);
  const second = await runGatewayToExit({ SWITCHYARD_DB: folder });
  expect(second.code).toBe(1);
  expectOneLine(second.stderr);
  expect(second.stderr).toStartWith(`switchyard: cannot open the SQLite ledger ${folder} (SWITCHYARD_DB): SQLITE_CANTOPEN`);
}, 30_000);

// A disk-fault probe: a ledger the gateway's user may read but not write (owned by root after a
// first run as root) was opened read-only without a word; the gateway said ready, served paid
// answers whose charges it could not write, then refused every paid request with 503 for good.
// Root may write any file: as root the start runs as nobody, which needs setpriv and bun and this
// checkout readable by nobody (bun under /root is not). Where it cannot, the check is still tested
// by unit/store/ledger-writable.test.ts, and this one shows as skipped, not passed.
const asRoot = process.getuid?.() === 0;
function canRunAsNobody(): boolean {
  try {
    return Bun.spawnSync(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bun", "-e", "require('./package.json')"], { cwd: join(import.meta.dir, "..", ".."), stderr: "ignore", stdout: "ignore" }).exitCode === 0;
  } catch {
    return false;
  }
}
const nobodyRunsBun = !asRoot || canRunAsNobody();
test.skipIf(!nobodyRunsBun)("a start on a ledger it may read but not write stops with one line saying so, before serving anything", async () => {
  const folder = mkdtempSync(join(tmpdir(), "switchyard-read-only-"));
  try {
    const db = join(folder, "ledger.sqlite");
    // Made and migrated as a first run would leave it, then closed (its -wal and -shm go with it).
    openDatabase(db).close();
    // The folder stays writable (SQLite's -wal and -shm go there); only the file is not.
    chmodSync(folder, 0o777);
    chmodSync(db, 0o444);
    const run = await runGatewayToExit({ SWITCHYARD_DB: db, HOME: folder }, 15_000, { unprivileged: true });
    expect(run.code).toBe(1);
    expectOneLine(run.stderr);
    expect(run.stderr).toStartWith(`switchyard: cannot open the SQLite ledger ${db} (SWITCHYARD_DB): EACCES`);
    expect(run.stderr).toContain("Can the gateway write the file and its folder?");
    expect(run.stdout).not.toContain("svc-sk-");
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
}, 40_000);
