/**
 * Which pages a lone settlement's commit writes to the SQLite log, by table or index: 3,000
 * settlements to grow the file, the log emptied, then 300 more, each alone in its commit (a lone
 * client's), with checkpoints off; the log's frames are then read back and named by `dbstat`.
 * Every frame is two \`pwrite\`s (its header, then the page): docs/benchmarks.md, "System calls".
 *
 *   bun bench/commit-pages.ts
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openDatabase } from "../src/store/database.ts";
import { createSqliteLedger } from "../src/store/sqlite/sqlite-ledger.ts";
import { createAccountStore } from "../src/store/sqlite/sqlite-accounts.ts";
import { createChangeWatch } from "../src/store/sqlite/change-watch.ts";
import { silentLogger } from "../src/log/log.ts";
const dir = mkdtempSync(join(tmpdir(), "walpages-"));
const path = join(dir, "g.sqlite");
const db = openDatabase(path);
db.exec("PRAGMA wal_autocheckpoint = 0; PRAGMA busy_timeout = 0");
const accounts = createAccountStore(db, Date.now);
const ledger = createSqliteLedger(db, { now: Date.now, changes: createChangeWatch(db), log: silentLogger, commitDelay: { ms: 1, inFlight: () => 1 } });
const account = await accounts.createAccount("a", 1e15);
const key = (await accounts.createKey(account.id, "k"))!;
const who = { accountId: account.id, keyId: key.id };
/** One settlement, alone: its request id as the gateway makes them (time-ordered). */
const one = async () => {
  const id = `req_${Bun.randomUUIDv7("hex")}`;
  await ledger.reserve({ requestId: id, ...who, amountMicro: 5000 });
  await ledger.settle({ requestId: id, ...who, model: "m/x", provider: "p", promptTokens: 100, completionTokens: 50, estimated: false, costMicro: 700, status: "ok", latencyMs: 3 });
};
for (let i = 0; i < 3000; i++) await one();
db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
for (let i = 0; i < 300; i++) await one();
const wal = readFileSync(path + "-wal");
const pageSize = wal.readUInt32BE(8);
const roots = new Map<number, string>();
for (const r of db.query<{ name: string; rootpage: number }, []>("SELECT name, rootpage FROM sqlite_schema WHERE rootpage > 0").all()) roots.set(r.rootpage, r.name);
let stat: Map<number, string> | undefined;
try { stat = new Map(db.query<{ name: string; pageno: number }, []>("SELECT name, pageno FROM dbstat").all().map((r) => [r.pageno, r.name])); } catch (e) { console.log("no dbstat", String(e)); }
let off = 32, frames = 0, commits = 0; const byPage = new Map<string, number>();
while (off + 24 + pageSize <= wal.length) {
  const pg = wal.readUInt32BE(off); const size = wal.readUInt32BE(off + 4);
  frames++; const name = stat?.get(pg) ?? roots.get(pg) ?? (pg === 1 ? "page 1" : `page ${pg}`);
  byPage.set(name, (byPage.get(name) ?? 0) + 1);
  if (size > 0) commits++;
  off += 24 + pageSize;
}
console.log({ frames, commits, perCommit: frames / commits });
console.log([...byPage].sort((a, b) => b[1] - a[1]).map(([n, c]) => `${n}: ${(c / commits).toFixed(2)}`).join("\n"));
await ledger.close();
db.close();
rmSync(dir, { recursive: true, force: true });
