/**
 * Settlements on the SQLite ledger alone: one client reserves, settles and waits for the commit,
 * N times (or `--batch B` at once, sharing a commit), with the WAL checkpointer thread running as
 * the gateway runs it. Prints CPU per settlement, the commit wait's p50 / p99 / p999 / max, and
 * the log file's size at the end (its largest extent: the log is reused after a restart).
 *   bun bench/lone-commit.ts [--n 20000] [--batch 1] [--page-size 1024] [--gap-us 0]
 * `--page-size` makes the file with other pages than the gateway's; `--gap-us` spins that long
 * between settlements, as a request's own handling would (300: ~2,800 a second, A's pace).
 */
import { Database } from "bun:sqlite";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openDatabase, PAGE_SIZE } from "../src/store/database.ts";
import { createSqliteLedger } from "../src/store/sqlite/sqlite-ledger.ts";
import { createAccountStore } from "../src/store/sqlite/sqlite-accounts.ts";
import { createChangeWatch } from "../src/store/sqlite/change-watch.ts";
import { startWalCheckpointer } from "../src/store/wal-checkpointer.ts";
import { silentLogger } from "../src/log/log.ts";

const arg = (flag: string, d: number) => {
  const i = process.argv.indexOf(`--${flag}`);
  return i >= 0 ? Number(process.argv[i + 1]) : d;
};
const N = arg("n", 20_000);
const dir = mkdtempSync(join(tmpdir(), "lone-commit-"));
const path = join(dir, "g.sqlite");
{
  // The page size asked for (the gateway's by default): set before the file's first write.
  const pre = new Database(path, { create: true });
  pre.exec(`PRAGMA page_size = ${arg("page-size", PAGE_SIZE)}; PRAGMA journal_mode = WAL;`);
  pre.close();
}
const db = openDatabase(path);
const checkpointer = startWalCheckpointer(db, path);
await checkpointer.ready;
db.exec("PRAGMA busy_timeout = 0");
const accounts = createAccountStore(db, Date.now);
const ledger = createSqliteLedger(db, { now: Date.now, changes: createChangeWatch(db), log: silentLogger, commitDelay: { ms: 1, inFlight: () => 1 } });
const account = await accounts.createAccount("a", 1e15);
const key = (await accounts.createKey(account.id, "k"))!;
const who = { accountId: account.id, keyId: key.id };
const waits: number[] = [];
/** Work between settlements (µs, spun on the thread), as a request's own handling would be: `--gap-us`. */
const GAP_US = arg("gap-us", 0);
const spin = (us: number) => {
  const end = performance.now() + us / 1000;
  while (performance.now() < end);
};
/** Settlements per commit (`--batch`): that many settle in one turn and share its commit. */
const BATCH = arg("batch", 1);
const settleOne = async (requestId: string, tag: string) => {
  await ledger.reserve({ requestId, ...who, amountMicro: 5_000 });
  const t0 = performance.now();
  await ledger.settle({ requestId, ...who, model: "m/x", provider: "p", promptTokens: 100, completionTokens: 50, estimated: false, costMicro: 700, status: "ok", latencyMs: 3 });
  if (tag === "m") waits.push(performance.now() - t0);
};
const run = async (n: number, tag: string) => {
  for (let i = 0; i < n; i += BATCH) {
    if (GAP_US > 0) spin(GAP_US);
    const all: Promise<void>[] = [];
    for (let j = 0; j < BATCH; j++) all.push(settleOne(`req_${tag}_${i + j}`, tag));
    await Promise.all(all);
  }
};
await run(2000, "w");
const c0 = process.cpuUsage();
const t0 = performance.now();
await run(N, "m");
const elapsed = performance.now() - t0;
const c = process.cpuUsage(c0);
waits.sort((a, b) => a - b);
const q = (p: number) => waits[Math.floor(p * (waits.length - 1))]!.toFixed(3);
console.log(`page ${db.query<{ page_size: number }, []>("PRAGMA page_size").get()?.page_size ?? "?"}: ${((c.user + c.system) / N).toFixed(1)} µs CPU a settlement (user ${(c.user / N).toFixed(1)}, sys ${(c.system / N).toFixed(1)}), ${(elapsed * 1000 / N).toFixed(1)} µs wall; commit wait p50 ${q(0.5)} ms p99 ${q(0.99)} ms p999 ${q(0.999)} max ${q(1)}; wal ${(statSync(path + "-wal").size / 1e6).toFixed(1)} MB`);
await ledger.close();
await checkpointer.stop();
db.close();
rmSync(dir, { recursive: true, force: true });
