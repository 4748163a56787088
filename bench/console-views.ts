/**
 * `bun run bench --console` — the console's views over a large ledger: N usage records (default
 * 10 million) spread over 90 days, 500 accounts (skewed: the first ones have most of the traffic,
 * as real tenants do), 2 keys each and 8 models, on SQLite and on PostgreSQL. Records are written
 * as the ledger writes them (INSERT into usage_records; SQLite's rollups folded behind them, PostgreSQL's by its trigger),
 * then every view's data request is timed through the real console routes on loopback: the
 * operator's and an account holder's (the busiest account). Each view is asked 5 times; the run
 * fails (exit 1) when any view's answer takes 1 s or more (the CSV download, every row of a month's
 * report by account, is timed and shown beside them).
 *   options: --records N   --store sqlite|postgres|both (default both)
 * SQLite writes a file under the system's temp folder; PostgreSQL a database of its own on
 * SWITCHYARD_TEST_DATABASE_URL's server (dropped after). Building 10 million records takes minutes.
 */
import { SQL } from "bun";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Database } from "bun:sqlite";
import { createApp } from "../src/app.ts";
import { loadSettings } from "../src/config/load-config.ts";
import { openDatabase } from "../src/store/database.ts";
import { openPostgresStores } from "../src/store/stores.ts";
import { silentLogger } from "../src/log/log.ts";
import { createRollupFolder } from "../src/store/sqlite/sqlite-rollups.ts";

const argv = process.argv.slice(2);
const opt = (name: string) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : undefined;
};
const RECORDS = Number(opt("records") ?? 10_000_000);
const STORES = (opt("store") ?? "both") === "both" ? ["sqlite", "postgres"] : [opt("store")!];
const ACCOUNTS = 500;
const KEYS = 2;
const MODELS = ["openai/gpt-4o-mini", "openai/gpt-4.1", "openai/gpt-5", "anthropic/claude-sonnet-4-5", "anthropic/claude-haiku-4-5", "anthropic/claude-opus-5-5", "switchyard/lorem", "switchyard/embed"];
const DAYS = 90;
const ADMIN = "admin-bench-console-0123456789abcdef0123456789";
const PASSWORD = "bench password, long enough";
const LIMIT_MS = 1_000;
const now = Date.now();
const accountId = (a: number) => `acct_bench_${String(a).padStart(4, "0")}`;
const keyId = (a: number, k: number) => `key_bench_${String(a).padStart(4, "0")}_${k}`;

/** Accounts and keys as the stores keep them (ids fixed, so the records can name them). */
const ACCOUNT_ROWS = Array.from({ length: ACCOUNTS }, (_, a) => a);

function fillSqlite(db: Database): void {
  const account = db.query("INSERT INTO accounts (id, name, balance_micro, created_at) VALUES (?, ?, ?, ?)");
  const key = db.query("INSERT INTO api_keys (id, account_id, name, key_hash, key_prefix, key_last4, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)");
  db.transaction(() => {
    for (const a of ACCOUNT_ROWS) {
      account.run(accountId(a), `tenant-${a}`, 1e15, now - DAYS * 86_400_000);
      for (let k = 0; k < KEYS; k++) key.run(keyId(a, k), accountId(a), `key-${k}`, `hash-${a}-${k}`, "svc-sk-bench", "0000", now - DAYS * 86_400_000);
    }
  })();
  const insert = db.query(`INSERT INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at,
    fresh_input_tokens, cache_read_tokens, cache_write_5m_tokens, reasoning_tokens, cache_savings_micro) VALUES (?, ?, ?, ?, 'bench', ?, ?, 0, ?, 'ok', ?, ?, ?, ?, ?, 0, ?)`);
  const rollups = createRollupFolder(db);
  const batch = db.transaction((from: number, to: number) => {
    for (let i = from; i < to; i++) {
      // Skewed toward the first accounts: a cube of a uniform draw.
      const a = Math.floor(ACCOUNTS * Math.random() ** 3);
      const prompt = 200 + Math.floor(Math.random() * 4000);
      const cached = Math.floor(prompt * Math.random() * 0.8);
      insert.run(`req_${i}`, accountId(a), keyId(a, i % KEYS), MODELS[Math.floor(MODELS.length * Math.random() ** 2)]!, prompt, 300, 1000 + prompt, 200 + (i % 900),
        now - Math.floor(Math.random() * DAYS * 86_400_000), prompt - cached, cached, 0, cached / 2);
    }
    // The ledger folds every quarter second; here once per batch, in its transaction as there.
    rollups.fold();
  });
  const started = performance.now();
  for (let i = 0; i < RECORDS; i += 100_000) {
    batch.immediate(i, Math.min(RECORDS, i + 100_000));
    if (i % 1_000_000 === 0) console.log(`  sqlite: ${i.toLocaleString("en-US")} records written (${((performance.now() - started) / 1000).toFixed(0)} s)`);
  }
  db.exec("ANALYZE");
}

async function fillPostgres(sql: SQL): Promise<void> {
  await sql.begin(async (tx) => {
    for (const a of ACCOUNT_ROWS) {
      await tx`INSERT INTO accounts (id, name, balance_micro, created_at) VALUES (${accountId(a)}, ${`tenant-${a}`}, ${1e15}, ${now - DAYS * 86_400_000})`;
      for (let k = 0; k < KEYS; k++) {
        await tx`INSERT INTO api_keys (id, account_id, name, key_hash, key_prefix, key_last4, created_at) VALUES (${keyId(a, k)}, ${accountId(a)}, ${`key-${k}`}, ${`hash-${a}-${k}`}, 'svc-sk-bench', '0000', ${now - DAYS * 86_400_000})`;
      }
    }
  });
  const models = `ARRAY[${MODELS.map((m) => `'${m}'`).join(",")}]`;
  const started = performance.now();
  // Generated by the server, 250,000 a statement: the rollup's statement trigger runs once for each.
  for (let i = 0; i < RECORDS; i += 250_000) {
    const to = Math.min(RECORDS, i + 250_000);
    await sql.unsafe(`
      INSERT INTO usage_records (request_id, account_id, key_id, model, provider, prompt_tokens, completion_tokens, estimated, cost_micro, status, latency_ms, created_at,
                                 fresh_input_tokens, cache_read_tokens, cache_write_5m_tokens, reasoning_tokens, cache_savings_micro)
      SELECT 'req_' || g, 'acct_bench_' || lpad(a::text, 4, '0'), 'key_bench_' || lpad(a::text, 4, '0') || '_' || (g % ${KEYS}),
             (${models})[1 + floor(${MODELS.length} * random() ^ 2)::int], 'bench', p, 300, false, 1000 + p, 'ok', 200 + g % 900,
             ${now} - floor(random() * ${DAYS * 86_400_000})::bigint, p - c, c, 0, 0, c / 2
        FROM (SELECT g, floor(${ACCOUNTS} * random() ^ 3)::int AS a, p, floor(p * random() * 0.8)::int AS c
                FROM (SELECT g, 200 + floor(random() * 4000)::int AS p FROM generate_series(${i}, ${to - 1}) g) s) t`);
    if (i % 1_000_000 === 0) console.log(`  postgres: ${i.toLocaleString("en-US")} records written (${((performance.now() - started) / 1000).toFixed(0)} s)`);
  }
  await sql.unsafe("ANALYZE");
}

/** A console user on loopback (cookie and CSRF token kept as a browser would). */
async function signIn(base: string, body: Record<string, string>, path = "/console/api/sign-in") {
  const res = await fetch(base + path, { method: "POST", headers: { "content-type": "application/json", origin: base }, body: JSON.stringify(body) });
  if (res.status !== 200) throw new Error(`sign-in: ${res.status} ${await res.text()}`);
  return { cookie: res.headers.get("set-cookie")!.split(";")[0]!, csrf: ((await res.json()) as { csrf: string }).csrf };
}

const HOUR = 3_600_000, DAY = 86_400_000;
const day = { from: Math.ceil((now + 1) / DAY) * DAY - 30 * DAY, to: Math.ceil((now + 1) / DAY) * DAY };
const hours = { from: Math.ceil((now + 1) / HOUR) * HOUR - 24 * HOUR, to: Math.ceil((now + 1) / HOUR) * HOUR };
const usage = (r: { from: number; to: number }, granularity: string, split: string, extra = "") => `/console/api/usage?from=${r.from}&to=${r.to}&granularity=${granularity}&group_by=${split}${extra}`;

async function measure(store: string, base: string): Promise<{ view: string; p50: number; max: number }[]> {
  const operator = await signIn(base, { token: ADMIN });
  const invite = await fetch(`${base}/v1/admin/accounts/${accountId(0)}/invites`, { method: "POST", headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify({ login: `holder-${store}` }) });
  const token = new URL(((await invite.json()) as { url: string }).url).hash.slice(8);
  const holder = await signIn(base, { token, password: PASSWORD }, "/console/api/invites/accept");
  const views: [string, typeof operator, string][] = [
    ["operator: overview (accounts)", operator, "/console/api/overview"],
    ["operator: busiest account", operator, `/console/api/accounts/${accountId(0)}`],
    ["operator: usage 24 h by model", operator, usage(hours, "hour", "model")],
    ["operator: usage 24 h by account", operator, usage(hours, "hour", "account")],
    ["operator: usage 24 h by key", operator, usage(hours, "hour", "key")],
    ["operator: usage 30 d by model", operator, usage(day, "day", "model")],
    ["operator: usage 30 d by account", operator, usage(day, "day", "account")],
    ["operator: usage 30 d by key", operator, usage(day, "day", "key")],
    ["download: usage 30 d by account, CSV", operator, usage(day, "day", "account", "&format=csv")],
    ["operator: recent requests", operator, "/console/api/requests?limit=100"],
    ["operator: catalogue", operator, "/console/api/catalogue"],
    ["holder: overview (account)", holder, "/console/api/overview"],
    ["holder: usage 24 h by model", holder, usage(hours, "hour", "model")],
    ["holder: usage 30 d by model", holder, usage(day, "day", "model")],
    ["holder: usage 30 d by key", holder, usage(day, "day", "key")],
    ["holder: recent requests", holder, "/console/api/requests?limit=100"],
  ];
  const out = [];
  for (const [view, who, path] of views) {
    const times: number[] = [];
    for (let i = 0; i < 5; i++) {
      const started = performance.now();
      const res = await fetch(base + path, { headers: { cookie: who.cookie } });
      await res.arrayBuffer();
      times.push(performance.now() - started);
      if (res.status !== 200) throw new Error(`${view}: ${res.status}`);
    }
    times.sort((a, b) => a - b);
    out.push({ view, p50: times[2]!, max: times[4]! });
  }
  return out;
}

const settings = loadSettings({ OPENAI_API_KEY: "", ANTHROPIC_API_KEY: "" });
// The figures mean little on a busy machine: say how busy it was.
const [load1] = (await Bun.file("/proc/loadavg").text().catch(() => "? ")).split(" ");
console.log(`load average at start: ${load1} (${navigator.hardwareConcurrency} cores)`);
let slow = 0;
for (const store of STORES) {
  console.log(`\n${store}: ${RECORDS.toLocaleString("en-US")} usage records`);
  const work = mkdtempSync(join(tmpdir(), "switchyard-console-bench-"));
  const name = `switchyard_bench_console_${Date.now().toString(36)}`;
  const adminUrl = process.env.SWITCHYARD_TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
  const admin = store === "postgres" ? new SQL({ url: adminUrl, max: 1 }) : undefined;
  try {
    let app;
    let close: () => Promise<void>;
    if (store === "sqlite") {
      const db = openDatabase(join(work, "bench.sqlite"));
      fillSqlite(db);
      app = createApp({ db, settings, log: silentLogger, adminToken: ADMIN });
      close = async () => {
        await app!.services.ledger.close();
        db.close();
      };
    } else {
      await admin!.unsafe(`CREATE DATABASE ${name}`);
      const url = new URL(adminUrl);
      url.pathname = `/${name}`;
      const stores = await openPostgresStores(url.toString(), { pool: { statementTimeoutMs: 600_000 } });
      await fillPostgres(stores.sql);
      app = createApp({ stores, settings, log: silentLogger, adminToken: ADMIN });
      close = () => stores.close(1_000);
    }
    app.listen({ port: 0, hostname: "127.0.0.1" });
    const rows = await measure(store, `http://127.0.0.1:${app.server!.port}`);
    await app.stop(true);
    await close();
    for (const r of rows) {
      // Views must answer within the limit; a download (every row of the report) is shown beside them.
      const flag = r.max >= LIMIT_MS ? (r.view.startsWith("download") ? "  (over 1 s; a download, not a view)" : "  SLOW") : "";
      if (flag === "  SLOW") slow++;
      console.log(`  ${r.view.padEnd(42)} p50 ${r.p50.toFixed(1).padStart(7)} ms   max ${r.max.toFixed(1).padStart(7)} ms${flag}`);
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
    if (admin) {
      await admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {});
      await admin.close();
    }
  }
}
console.log(slow === 0 ? `\nevery view answered in under ${LIMIT_MS} ms` : `\n${slow} views took ${LIMIT_MS} ms or more`);
process.exit(slow === 0 ? 0 : 1);
