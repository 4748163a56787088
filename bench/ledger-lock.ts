/**
 * Free requests while another connection holds SQLite's write lock, measured here rather than
 * asserted in a test (test/e2e/money-faults.test.ts checks they are all answered while it holds it):
 *
 *   bun bench/ledger-lock.ts [--seconds S]
 *
 * The real app on loopback in front of the fake upstream (test/helpers), 20 warm-up requests,
 * then another connection takes the write lock for S seconds (default 3) while one client sends
 * free requests back to back, both formats, a third of them streamed. Their latency's p99 while
 * the lock is held: target < 50 ms (a free request never waits for the ledger).
 */
import { Database } from "bun:sqlite";
import { startFakeUpstream } from "../test/helpers/fake-upstream.ts";
import { FREE_MODEL, post, startGateway } from "../test/helpers/gateway.ts";
import { parseArgs } from "./child-process.ts";

const seconds = Number(parseArgs().get("seconds") ?? 3);
const upstream = await startFakeUpstream();
const gw = await startGateway({ upstreamUrl: upstream.url, credits: 10_000, ledgerOptions: { busyLimitMs: 500, retryMaxMs: 50 } });
const other = new Database(gw.dbPath);
const ask = async (i: number) => {
  const res = await post(gw, i % 2 ? "/v1/chat/completions" : "/v1/messages", { model: FREE_MODEL, max_tokens: 200, stream: i % 3 === 0, messages: [{ role: "user", content: "Tell me something" }] });
  await res.arrayBuffer();
  if (res.status !== 200) throw new Error(`free request answered ${res.status}`);
};
try {
  for (let i = 0; i < 20; i++) await ask(i);
  other.exec("BEGIN IMMEDIATE");
  const lockedUntil = performance.now() + seconds * 1_000;
  const latencies: number[] = [];
  while (performance.now() < lockedUntil - 100) {
    const started = performance.now();
    await ask(latencies.length);
    latencies.push(performance.now() - started);
  }
  other.exec("COMMIT");
  latencies.sort((a, b) => a - b);
  const p = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * q))]!;
  const p99 = p(0.99);
  console.log(`ledger-lock: ${latencies.length} free requests in ${seconds} s of a held write lock; p50 ${p(0.5).toFixed(2)} ms, p99 ${p99.toFixed(2)} ms, max ${latencies.at(-1)!.toFixed(2)} ms`);
  console.log(`${p99 < 50 ? "met   " : "MISSED"}  ledger-lock: free requests' p99 while the write lock is held  ${p99.toFixed(2)} ms (target < 50 ms)`);
} finally {
  other.close();
  await gw.stop();
  await upstream.stop();
}
