/**
 * PostgreSQL and Redis store figures on this machine (not a test; numbers go to docs/benchmarks.md):
 * - one reservation (the single RESERVE statement, through the ledger), sequential: p50/p99;
 * - settlements through the ledger's group commit: 20,000 reserved, then settled at once;
 * - 100 reservations at once on one account (row-lock contention);
 * - one rate-limit decision in Redis (one Lua call), sequential and 1,000 at once.
 * Uses a database of its own on SWITCHYARD_TEST_DATABASE_URL's server (dropped after) and db 3 of Redis.
 *   bun bench/stores.ts
 */
import { SQL } from "bun";
import { createPostgresAccounts } from "../src/store/postgres/pg-accounts.ts";
import { connectPostgres } from "../src/store/postgres/pg-client.ts";
import { createPostgresLedger } from "../src/store/postgres/pg-ledger.ts";
import { migratePostgres } from "../src/store/postgres/pg-migrations.ts";
import { createRedisRateLimiter } from "../src/store/redis/redis-rate-limiter.ts";
import type { Settlement } from "../src/billing/ledger.ts";

const adminUrl = process.env.SWITCHYARD_TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const redisUrl = `${(process.env.SWITCHYARD_TEST_REDIS_URL ?? "redis://127.0.0.1:6379").replace(/\/\d+$/, "")}/3`;
const name = `switchyard_bench_${Date.now().toString(36)}`;
const admin = new SQL({ url: adminUrl, max: 1 });
await admin.unsafe(`CREATE DATABASE ${name}`);
const url = new URL(adminUrl);
url.pathname = `/${name}`;

const quantile = (xs: number[], q: number) => xs.slice().sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;
const us = (ms: number) => `${(ms * 1000).toFixed(0)} µs`;

try {
  const sql = connectPostgres(url.toString(), { max: 8 });
  await migratePostgres(sql);
  let failed = 0;
  const ledger = await createPostgresLedger(sql, { now: Date.now, log: (level, message, fields) => level === "error" && failed++ < 3 && console.log(`  ledger: ${message} ${JSON.stringify(fields?.error ?? "")}`) });
  const accounts = createPostgresAccounts(sql, Date.now);
  const account = await accounts.createAccount("bench", 1e15);
  const key = (await accounts.createKey(account.id, "bench"))!;
  const who = { accountId: account.id, keyId: key.id };
  const settlement = (requestId: string): Settlement => ({ requestId, ...who, model: "bench/model", provider: "bench", promptTokens: 100, completionTokens: 50, estimated: false, costMicro: 700, status: "ok", latencyMs: 3 });

  // Warm the pool and the prepared statements.
  for (let i = 0; i < 200; i++) await ledger.reserve({ requestId: `warm_${i}`, ...who, amountMicro: 1_000 });
  await Promise.all(Array.from({ length: 200 }, (_, i) => ledger.settle(settlement(`warm_${i}`))));

  const times: number[] = [];
  for (let i = 0; i < 2_000; i++) {
    const t = performance.now();
    await ledger.reserve({ requestId: `seq_${i}`, ...who, amountMicro: 1_000 });
    times.push(performance.now() - t);
  }
  console.log(`reserve, one at a time (2,000): p50 ${us(quantile(times, 0.5))}, p99 ${us(quantile(times, 0.99))}`);
  await Promise.all(Array.from({ length: 2_000 }, (_, i) => ledger.settle(settlement(`seq_${i}`))));

  let t = performance.now();
  await Promise.all(Array.from({ length: 100 }, (_, i) => ledger.reserve({ requestId: `hot_${i}`, ...who, amountMicro: 1_000 })));
  console.log(`reserve, 100 at once on one account: ${(performance.now() - t).toFixed(1)} ms (${us((performance.now() - t) / 100)} each)`);
  await Promise.all(Array.from({ length: 100 }, (_, i) => ledger.settle(settlement(`hot_${i}`))));

  const n = 20_000;
  for (let i = 0; i < n; i += 500) await Promise.all(Array.from({ length: 500 }, (_, j) => ledger.reserve({ requestId: `bulk_${i + j}`, ...who, amountMicro: 1_000 })));
  t = performance.now();
  await Promise.all(Array.from({ length: n }, (_, i) => ledger.settle(settlement(`bulk_${i}`))));
  // settle() also resolves when the store is failing: count only what is written.
  while (ledger.health().queued > 0) {
    await ledger.flush();
    if (!ledger.health().writable) await Bun.sleep(10);
  }
  const ms = performance.now() - t;
  const [written] = await sql`SELECT COUNT(*)::int AS n FROM usage_records WHERE request_id LIKE 'bulk_%'`;
  if (written.n !== n) throw new Error(`only ${written.n} of ${n} settlements written`);
  const failures = ledger.health().lastError;
  if (failures) console.log(`  (the store reported: ${failures})`);
  console.log(`settle ${n.toLocaleString()} at once (group commit, ≤1,000 per transaction): ${ms.toFixed(0)} ms, ${Math.round(n / (ms / 1000)).toLocaleString()} settlements/s`);

  await ledger.close();
  await sql.close({ timeout: 1 });

  const limiter = createRedisRateLimiter(redisUrl, { prefix: `switchyard_bench:${Date.now()}:` });
  await limiter.ready();
  for (let i = 0; i < 500; i++) await limiter.take(`warm_${i % 10}`, 1e6);
  const rl: number[] = [];
  for (let i = 0; i < 5_000; i++) {
    const start = performance.now();
    await limiter.take(`key_${i % 100}`, 1e6);
    rl.push(performance.now() - start);
  }
  console.log(`rate limit (Redis Lua), one at a time (5,000): p50 ${us(quantile(rl, 0.5))}, p99 ${us(quantile(rl, 0.99))}`);
  t = performance.now();
  await Promise.all(Array.from({ length: 1_000 }, (_, i) => limiter.take(`key_${i % 100}`, 1e6)));
  console.log(`rate limit, 1,000 at once (auto-pipelined): ${(performance.now() - t).toFixed(1)} ms`);
  limiter.close();
} finally {
  await admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await admin.close();
}
