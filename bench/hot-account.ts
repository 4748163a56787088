/**
 * How many requests a second one hot account admits on PostgreSQL: every reservation (grouped
 * per account while one is in flight) and every settlement batch (one statement) lock the same
 * account row. C clients each reserve, then settle and wait for the commit (as a paid answer's
 * last frame does), for S seconds, through P ledgers (as P gateway processes would, each with its
 * own pool). Figures and what limits them: docs/benchmarks.md, "PostgreSQL and Redis".
 *   bun bench/hot-account.ts [--seconds 5] [--clients 64] [--ledgers 2]
 * Uses a database of its own on SWITCHYARD_TEST_DATABASE_URL's server (dropped after).
 */
import { SQL } from "bun";
import { createPostgresAccounts } from "../src/store/postgres/pg-accounts.ts";
import { connectPostgres } from "../src/store/postgres/pg-client.ts";
import { createPostgresLedger } from "../src/store/postgres/pg-ledger.ts";
import { migratePostgres } from "../src/store/postgres/pg-migrations.ts";

export interface HotAccountResult {
  admittedPerSecond: number;
  refused: number;
  reserveP50Ms: number;
  reserveP99Ms: number;
  clients: number;
  ledgers: number;
}

export async function hotAccount(o: { seconds?: number; clients?: number; ledgers?: number } = {}): Promise<HotAccountResult> {
  const seconds = o.seconds ?? 5;
  const clients = o.clients ?? 64;
  const ledgerCount = o.ledgers ?? 2;
  const adminUrl = process.env.SWITCHYARD_TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
  const name = `switchyard_hot_${Date.now().toString(36)}`;
  const admin = new SQL({ url: adminUrl, max: 1 });
  await admin.unsafe(`CREATE DATABASE ${name}`);
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  const pools = Array.from({ length: ledgerCount }, () => connectPostgres(url.toString(), { max: 8 }));
  try {
    await migratePostgres(pools[0]!);
    const ledgers = await Promise.all(pools.map((sql) => createPostgresLedger(sql, { now: Date.now })));
    const accounts = createPostgresAccounts(pools[0]!, Date.now);
    const account = await accounts.createAccount("hot", 1e15);
    const key = (await accounts.createKey(account.id, "hot"))!;
    const who = { accountId: account.id, keyId: key.id };
    let admitted = 0;
    let refused = 0;
    let n = 0;
    const reserveMs: number[] = [];
    let measuring = false;
    let stop = false;
    const loop = async (i: number) => {
      const ledger = ledgers[i % ledgers.length]!;
      while (!stop) {
        const requestId = `req_hot_${i}_${n++}`;
        const t0 = performance.now();
        const r = await ledger.reserve({ requestId, ...who, amountMicro: 5_000 });
        if (measuring) reserveMs.push(performance.now() - t0);
        if (!r.ok) {
          if (measuring) refused++;
          continue;
        }
        await ledger.settle({ requestId, ...who, model: "hot/model", provider: "hot", promptTokens: 100, completionTokens: 50, estimated: false, costMicro: 700, status: "ok", latencyMs: 3 });
        if (measuring) admitted++;
      }
    };
    const running = Array.from({ length: clients }, (_, i) => loop(i));
    await Bun.sleep(1_000);
    measuring = true;
    const started = performance.now();
    await Bun.sleep(seconds * 1_000);
    measuring = false;
    const elapsed = (performance.now() - started) / 1_000;
    const count = admitted;
    stop = true;
    await Promise.all(running);
    for (const l of ledgers) await l.close(5_000);
    const sorted = reserveMs.sort((a, b) => a - b);
    const q = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? 0;
    return { admittedPerSecond: count / elapsed, refused, reserveP50Ms: q(0.5), reserveP99Ms: q(0.99), clients, ledgers: ledgerCount };
  } finally {
    for (const sql of pools) await sql.close({ timeout: 1 }).catch(() => {});
    await admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {});
    await admin.close({ timeout: 0 });
  }
}

if (import.meta.main) {
  const arg = (flag: string) => {
    const i = process.argv.indexOf(`--${flag}`);
    return i >= 0 ? Number(process.argv[i + 1]) : undefined;
  };
  const r = await hotAccount({ seconds: arg("seconds"), clients: arg("clients"), ledgers: arg("ledgers") });
  console.log(`hot account: ${r.admittedPerSecond.toFixed(0)} admitted/s (reserve + settle + commit), ${r.clients} clients over ${r.ledgers} ledgers; reserve p50 ${r.reserveP50Ms.toFixed(2)} ms, p99 ${r.reserveP99Ms.toFixed(2)} ms; refused ${r.refused}`);
}
