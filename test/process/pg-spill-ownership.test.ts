/**
 * Charges settled while PostgreSQL is unreachable are kept in the process's own spill file
 * (fsynced) before the paid answer's last byte, as on SQLite, and that file is replayed by
 * another process only once its owner is gone (store/postgres/pg-spill.ts). Real gateway
 * processes on a database reached through a relay the test cuts (tcp-proxy.ts); the second
 * process of the ownership test is this test process itself, on the same spill folder.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { SQL } from "bun";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createPostgresLedger } from "../../src/store/postgres/pg-ledger.ts";
import { openPostgresStores, type SharedStores } from "../../src/store/stores.ts";
import type { Pg } from "../../src/store/postgres/pg-client.ts";
import { postgresMissing, useTestDatabase } from "../helpers/backends.ts";
import { startFakeUpstream, type FakeUpstream } from "../helpers/fake-upstream.ts";
import { startGatewayProcess, type GatewayProcess, killGatewayProcesses } from "../helpers/gateway-process.ts";
import { tcpProxy } from "../helpers/tcp-proxy.ts";
import { until } from "../helpers/until.ts";

const MODEL = "slow/gpt";
const CREDITS_MICRO = 100_000_000;
const missing = await postgresMissing();
const database = useTestDatabase();
const dir = mkdtempSync(join(tmpdir(), "switchyard-pg-spill-owner-"));
const children: GatewayProcess[] = [];
const cleanups: (() => unknown)[] = [];
afterAll(async () => {
  await killGatewayProcesses(children);
  for (const fn of cleanups.reverse()) await fn();
  rmSync(dir, { recursive: true, force: true });
});

let upstream: FakeUpstream;
let stores: SharedStores & { sql: Pg };
/** The database's URL through the relay: every gateway uses it, so all of them name their spill files alike. */
let viaRelay: string;
let relay: ReturnType<typeof tcpProxy>;

async function setUp(): Promise<void> {
  if (upstream) return;
  // Frames 80 ms apart: an answer runs for most of a second, long enough to cut the database under it.
  upstream = await startFakeUpstream({ streamDelayMs: 80 });
  const url = await database();
  stores = await openPostgresStores(url, { pool: { max: 2 } });
  relay = tcpProxy(Number(new URL(url).port || 5432));
  cleanups.push(() => upstream.stop(), () => stores.close(100), () => relay.stop());
  const through = new URL(url);
  through.port = String(relay.port);
  viaRelay = through.toString();
  writeFileSync(join(dir, "config.json"), JSON.stringify({
    providers: [{ id: "slow-openai", kind: "openai", base_url: `${upstream.url}/v1` }],
    models: [{ id: MODEL, provider: "slow-openai", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: { input_per_mtok: 150, output_per_mtok: 600 } }],
    limits: { requests_per_minute: 1_000_000 },
  }));
}

/** A gateway process on the relayed database, with short heartbeats and sweeps, sharing the spill folder `spillDir`. */
async function gateway(spillDir: string): Promise<GatewayProcess> {
  const gw = await startGatewayProcess({
    SWITCHYARD_CONFIG: join(dir, "config.json"),
    SWITCHYARD_DATABASE_URL: viaRelay,
    SWITCHYARD_SPILL_DIR: spillDir,
    SWITCHYARD_PG_HEARTBEAT_MS: "100",
    // Long enough that the answers run whole through the outage: a process cut off for nearly
    // this long cuts what it serves (pg-ledger.ts, onHoldsAtRisk; ~2.9 s here).
    SWITCHYARD_PG_STALE_AFTER_MS: "5000",
    SWITCHYARD_PG_SWEEP_MS: "200",
    SWITCHYARD_SHUTDOWN_GRACE_MS: "300",
  });
  children.push(gw);
  return gw;
}

async function account(): Promise<{ id: string; key: string }> {
  const made = await stores.accounts.createAccount(`spill-${Math.random().toString(36).slice(2, 8)}`, CREDITS_MICRO);
  return { id: made.id, key: (await stores.accounts.createKey(made.id, "k"))!.key };
}

/**
 * `n` paid streams started (each has its hold once its headers are here), then the database cut
 * under them: each still ends whole, its charge kept while the ledger cannot write.
 */
async function paidAnswersThroughAnOutage(gw: GatewayProcess, key: string, n: number): Promise<void> {
  const started = await Promise.all(Array.from({ length: n }, (_, i) => fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, stream: true, messages: [{ role: "user", content: `answer number ${i} of several words` }] }),
  })));
  expect(started.map((r) => r.status)).toEqual(Array(n).fill(200));
  relay.cut();
  const bodies = await Promise.all(started.map((r) => r.text()));
  for (const body of bodies) expect(body.trimEnd().endsWith("data: [DONE]")).toBe(true);
}

const spillFiles = (spillDir: string) => readdirSync(spillDir).filter((f) => f.endsWith(".spill"));

/** The account's records (exactly one per whole answer) and its books: every charge in the balance once, nothing held. */
async function expectChargedOnce(accountId: string, answers: number): Promise<void> {
  const records = (await stores.sql`SELECT request_id, cost_micro FROM usage_records WHERE account_id = ${accountId}`) as { request_id: string; cost_micro: string }[];
  expect(records.length).toBe(answers);
  expect(new Set(records.map((r) => r.request_id)).size).toBe(answers);
  for (const r of records) expect(Number(r.cost_micro)).toBeGreaterThan(0);
  const [books] = await stores.sql`SELECT balance_micro, held_micro FROM accounts WHERE id = ${accountId}`;
  expect(Number(books.balance_micro)).toBe(CREDITS_MICRO - records.reduce((sum, r) => sum + Number(r.cost_micro), 0));
  expect(Number(books.held_micro)).toBe(0);
}

const recordsOf = async (accountId: string) => Number((await stores.sql`SELECT COUNT(*) AS n FROM usage_records WHERE account_id = ${accountId}`)[0].n);

if (missing) {
  test.skip(`Spill files on PostgreSQL — skipped: ${missing}`, () => {});
} else {
  describe("spill files on PostgreSQL", () => {
    test("database cut, paid answers served whole, kill -9, database back, restart: every charge recorded exactly once", async () => {
      await setUp();
      const spillDir = join(dir, "killed");
      const first = await gateway(spillDir);
      const acct = await account();
      await paidAnswersThroughAnOutage(first, acct.key, 4);
      first.child.kill("SIGKILL");
      await first.child.exited;
      relay.restore();

      // The next start on the folder takes the dead process's file: its charges are written, once, and the file goes.
      const next = await gateway(spillDir);
      await until("the killed process's charges written", 5_000, async () => (await recordsOf(acct.id)) === 4 && spillFiles(spillDir).length === 0);
      await expectChargedOnce(acct.id, 4);
      // Its lock file goes with it (just after its spill file: asked at once, it was still there in
      // a loaded CI run); the new process holds only its own.
      await until("the killed process's lock file gone", 5_000, async () => readdirSync(spillDir).filter((f) => f.endsWith(".lock")).length === 1);
      next.child.kill("SIGTERM");
      await next.child.exited;
    }, 30_000);

    describe("a process that lives keeps its file to itself", () => {
      const spillDir = join(dir, "shared");
      let owner: GatewayProcess;
      let acct: { id: string; key: string };

      test("a second process starting on the same spill folder (and sweeping it) does not replay the first's live file", async () => {
        await setUp();
        owner = await gateway(spillDir);
        acct = await account();
        await paidAnswersThroughAnOutage(owner, acct.key, 3);
        // The owner keeps its three charges in its own file while the database is away.
        const [file] = spillFiles(spillDir);
        expect(spillFiles(spillDir)).toHaveLength(1);
        const kept = readFileSync(join(spillDir, file!), "utf8");
        expect(kept.trim().split("\n")).toHaveLength(3);

        // This test process is the second one: it reaches the database directly, names its files as the owner does.
        const sql = new SQL({ url: await database(), max: 2 });
        const second = await createPostgresLedger(sql, { now: Date.now, spill: { dir: spillDir, database: viaRelay }, sweepIntervalMs: 50, heartbeatMs: 50, staleAfterMs: 150 });
        try {
          // Its start and a few sweeps later, nothing replayed: the file is the owner's, untouched.
          await Bun.sleep(400);
          expect(await recordsOf(acct.id)).toBe(0);
          expect(readFileSync(join(spillDir, file!), "utf8")).toBe(kept);
        } finally {
          await second.close(100);
          await sql.close({ timeout: 0 });
        }
      }, 30_000);

      test("the owner writes its own file once the database is back, then removes it", async () => {
        expect(spillFiles(spillDir)).toHaveLength(1);
        relay.restore();
        await until("the owner's charges written and its file gone", 5_000, async () => (await recordsOf(acct.id)) === 3 && spillFiles(spillDir).length === 0);
        await expectChargedOnce(acct.id, 3);
        expect(owner.child.exitCode).toBeNull();
        owner.child.kill("SIGTERM");
        await owner.child.exited;
        // A clean stop leaves nothing behind: no spill file, no lock file.
        expect(readdirSync(spillDir)).toEqual([]);
      }, 15_000);
    });
  });
}
