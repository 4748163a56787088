import { Database } from "bun:sqlite";
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startFakeUpstream, type FakeUpstream } from "../helpers/fake-upstream.ts";
import { runAdminCli, startGatewayProcess, type GatewayProcess } from "../helpers/gateway-process.ts";
import { load, type AskOptions } from "../helpers/client-load.ts";
import { until } from "../helpers/until.ts";

/**
 * Issue 14, "Money that survives faults": the gateway runs as a real process under a few hundred
 * concurrent clients and is killed with SIGKILL mid-load, several times on the same SQLite file.
 * Whatever a client saw complete must have been charged exactly once, every charge must be in the
 * balance, and the audit must find the books clean, round after round.
 */

const OPENAI_MODEL = "crash/gpt";
const ANTHROPIC_MODEL = "crash/claude";
const CLIENTS = 200;
const ROUNDS = 4;
const DEMO_CREDITS_MICRO = 1_000_000_000;

let upstream: FakeUpstream;
let dir: string;
const children: GatewayProcess[] = [];

beforeAll(async () => {
  // A few milliseconds between frames: a stream lasts tens of milliseconds, so kills land mid-answer.
  upstream = await startFakeUpstream({ streamDelayMs: 3 });
  dir = mkdtempSync(join(tmpdir(), "switchyard-kill9-"));
});
afterAll(async () => {
  for (const gw of children) if (gw.child.exitCode === null && gw.child.signalCode === null) gw.child.kill("SIGKILL");
  await Promise.all(children.map((gw) => gw.child.exited));
  await upstream.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A configuration with one paid model per provider kind, both answered by the fake upstream. */
function gatewayEnv(name: string): Record<string, string> {
  const config = join(dir, `${name}.json`);
  // ~20 tokens in, ~15 out: about 2,500 micro-credits a request, so thousands of requests a round
  // stay far inside the demo account's 1,000 credits (no 402 can blur the picture).
  const pricing = { input_per_mtok: 50, output_per_mtok: 100 };
  writeFileSync(config, JSON.stringify({
    providers: [
      { id: "up-openai", kind: "openai", base_url: `${upstream.url}/v1` },
      { id: "up-anthropic", kind: "anthropic", base_url: upstream.url },
    ],
    models: [
      { id: OPENAI_MODEL, provider: "up-openai", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing },
      { id: ANTHROPIC_MODEL, provider: "up-anthropic", upstream_model: "claude-sonnet-4-5", category: "text", context_length: 200_000, pricing },
    ],
    limits: { requests_per_minute: 10_000_000 },
  }));
  return { SWITCHYARD_CONFIG: config, SWITCHYARD_DB: join(dir, `${name}.sqlite`), SWITCHYARD_ADMIN_TOKEN: "kill9-admin-0123456789abcdef0123456789abcdef" };
}

async function start(env: Record<string, string>): Promise<GatewayProcess> {
  const gw = await startGatewayProcess(env);
  children.push(gw);
  return gw;
}

/** What a client asks for: both client formats, streamed or not, on the same and the other vendor's model. */
const KINDS: (AskOptions & { kind: string })[] = [
  { kind: "openai json → openai", model: OPENAI_MODEL },
  { kind: "openai json → anthropic", model: ANTHROPIC_MODEL },
  { kind: "openai sse+usage → openai", model: OPENAI_MODEL, stream: true, includeUsage: true },
  { kind: "openai sse → openai", model: OPENAI_MODEL, stream: true },
  { kind: "openai sse+usage → anthropic", model: ANTHROPIC_MODEL, stream: true, includeUsage: true },
  { kind: "openai sse → anthropic", model: ANTHROPIC_MODEL, stream: true },
  { kind: "anthropic json → anthropic", anthropic: true, model: ANTHROPIC_MODEL },
  { kind: "anthropic json → openai", anthropic: true, model: OPENAI_MODEL },
  { kind: "anthropic sse → anthropic", anthropic: true, model: ANTHROPIC_MODEL, stream: true },
  { kind: "anthropic sse → openai", anthropic: true, model: OPENAI_MODEL, stream: true },
];

/** Clients that each send one request after another until the gateway is gone. */
const loadOf = (gw: GatewayProcess, round: number) =>
  load(gw.url, gw.key, CLIENTS, (i, n) => ({ ...KINDS[i % KINDS.length]!, maxTokens: 64, text: `round ${round} client ${i} request ${n}: alpha beta gamma delta epsilon zeta eta theta` }));

interface Books {
  balance: number;
  records: number;
  chargedMicro: number;
  byStatus: Record<string, number>;
}

function readBooks(dbPath: string): Books & { recordOf(requestId: string): { cost_micro: number; status: string }[] } {
  const db = new Database(dbPath, { readonly: true });
  try {
    const account = db.query<{ id: string; balance_micro: number }, []>("SELECT id, balance_micro FROM accounts WHERE name = 'demo'").get()!;
    const totals = db.query<{ n: number; charged: number | null }, [string]>("SELECT COUNT(*) AS n, SUM(cost_micro) AS charged FROM usage_records WHERE account_id = ?").get(account.id)!;
    const byStatus: Record<string, number> = {};
    for (const row of db.query<{ status: string; n: number }, []>("SELECT status, COUNT(*) AS n FROM usage_records GROUP BY status").all()) byStatus[row.status] = row.n;
    const records = new Map<string, { cost_micro: number; status: string }[]>();
    for (const row of db.query<{ request_id: string; cost_micro: number; status: string }, []>("SELECT request_id, cost_micro, status FROM usage_records").all()) {
      const list = records.get(row.request_id) ?? [];
      list.push({ cost_micro: row.cost_micro, status: row.status });
      records.set(row.request_id, list);
    }
    return { balance: account.balance_micro, records: totals.n, chargedMicro: totals.charged ?? 0, byStatus, recordOf: (id) => records.get(id) ?? [] };
  } finally {
    db.close();
  }
}

/** `chatcmpl-<uuid>` / `msg_<uuid>` → `req_<uuid>`: an answer's id names its usage record. */
const requestIdOf = (answerId: string) => `req_${answerId.replace(/^(chatcmpl-|msg_)/, "")}`;

test(`kill -9 under ${CLIENTS} concurrent clients, ${ROUNDS} times on one file: every completed answer charged once, the books balance`, async () => {
  const env = gatewayEnv("ledger");
  const seen = new Set<string>();
  let completedTotal = 0;

  for (let round = 1; round <= ROUNDS; round++) {
    // Rounds after the first restart on the file a SIGKILLed process left: its lock died with it.
    const gw = await start(env);
    const before = readBooks(env.SWITCHYARD_DB);
    if (round === 1) {
      expect(before.balance).toBe(DEMO_CREDITS_MICRO);
      expect(before.records).toBe(0);
    }

    const clients = loadOf(gw, round);
    // Every kind of request completes at least once before the kill, so every round proves something.
    await until("one completed answer of every kind", 15_000, () => KINDS.every((k) => clients.outcomes.some((o) => o.kind === k.kind && o.completed)));
    await Bun.sleep(150 + Math.floor(Math.random() * 450));
    const ended = clients.stop();
    gw.child.kill("SIGKILL");
    await gw.child.exited;
    expect(gw.child.signalCode).toBe("SIGKILL");
    await ended;

    const outcomes = clients.outcomes;
    const answered = outcomes.filter((o) => o.status !== undefined);
    // Nothing was refused: the account, the rate limit and the ledger all had room for the load.
    expect(answered.filter((o) => o.status !== 200).map((o) => `${o.kind}: ${o.status}`)).toEqual([]);
    const completed = outcomes.filter((o) => o.completed);
    expect(completed.length).toBeGreaterThan(0);

    const after = readBooks(env.SWITCHYARD_DB);
    const problems: string[] = [];
    for (const o of completed) {
      if (!o.id || !/^(chatcmpl-|msg_)[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(o.id)) {
        problems.push(`${o.kind}: the answer's id ${o.id} is not the gateway's`);
        continue;
      }
      if (seen.has(o.id)) problems.push(`${o.kind}: answer id ${o.id} seen twice`);
      seen.add(o.id);
      const records = after.recordOf(requestIdOf(o.id));
      if (records.length !== 1) problems.push(`${o.kind}: ${o.id} completed for its client and has ${records.length} usage records`);
      else if (records[0]!.status !== "ok" || !(records[0]!.cost_micro > 0)) problems.push(`${o.kind}: ${o.id} completed and was recorded as ${JSON.stringify(records[0])}`);
    }
    expect(problems).toEqual([]);

    // Every charge is in the balance, answers cut off by the kill included (partial answers may be billed).
    expect(before.balance - after.balance).toBe(after.chargedMicro - before.chargedMicro);
    expect(DEMO_CREDITS_MICRO - after.balance).toBe(after.chargedMicro);
    expect(after.records - before.records).toBeGreaterThanOrEqual(completed.length);

    const audit = await runAdminCli(["audit"], env);
    if (audit.code !== 0) console.error(audit.out);
    expect(audit.code).toBe(0);

    completedTotal += completed.length;
    if (process.env.KILL9_REPORT) {
      const cut = outcomes.filter((o) => o.status === 200 && !o.completed);
      console.log(`round ${round}: ${outcomes.length} requests sent, ${completed.length} completed, ${cut.length} cut off after their headers (${cut.filter((o) => o.id).length} after their first frame); ` +
        `${after.records - before.records} usage records (${JSON.stringify(after.byStatus)} in all), ${after.chargedMicro - before.chargedMicro} micro-credits charged`);
    }
  }
  expect(seen.size).toBe(completedTotal);

  // After the last kill the file still serves a gateway that answers and shuts down cleanly.
  const gw = await start(env);
  const res = await fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: OPENAI_MODEL, max_tokens: 64, messages: [{ role: "user", content: "still here?" }] }),
  });
  expect(res.status).toBe(200);
  await res.json();
  gw.child.kill("SIGTERM");
  expect(await gw.child.exited).toBe(0);
  expect((await runAdminCli(["audit"], env)).code).toBe(0);
}, 90_000);

test("a second gateway on the same SQLite file refuses to start, naming the file; the first keeps serving", async () => {
  const env = gatewayEnv("locked");
  const first = await start(env);
  const ask = () => fetch(`${first.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${first.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: OPENAI_MODEL, max_tokens: 64, messages: [{ role: "user", content: "hello" }] }),
  });
  expect((await ask()).status).toBe(200);

  const second = Bun.spawn(["bun", "src/index.ts"], {
    cwd: join(import.meta.dir, "../.."),
    env: { ...process.env, PORT: "0", HOST: "127.0.0.1", LOG_LEVEL: "warn", ...env },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(second.stdout).text(), new Response(second.stderr).text(), second.exited]);
  expect(code).not.toBe(0);
  expect(stderr).toContain("another Switchyard gateway");
  expect(stderr).toContain(env.SWITCHYARD_DB);
  // It never got as far as issuing a demo key (which would have revoked the first one's).
  expect(stdout).not.toContain("svc-sk-");

  const res = await ask();
  expect(res.status).toBe(200);
  const { id } = (await res.json()) as { id: string };
  first.child.kill("SIGTERM");
  expect(await first.child.exited).toBe(0);
  expect(readBooks(env.SWITCHYARD_DB).recordOf(requestIdOf(id))).toHaveLength(1);
}, 30_000);
