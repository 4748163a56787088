import { afterEach, expect, test } from "bun:test";
import { mkdtempSync, openSync, readSync, rmSync, statSync, closeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Database } from "bun:sqlite";
import { openDatabase } from "../../../src/store/database.ts";
import { startWalCheckpointer, type WalCheckpointer } from "../../../src/store/wal-checkpointer.ts";
import { until } from "../../helpers/until.ts";

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

const cookie = (path: string) => {
  const fd = openSync(path, "r");
  try {
    const b = Buffer.alloc(100);
    readSync(fd, b, 0, 100, 0);
    return b.readUInt32BE(40);
  } finally {
    closeSync(fd);
  }
};

/*
 * A VACUUM by another connection (the admin's sqlite3 shell), while a reader holds the snapshot
 * right after it and the gateway commits on: one pass copies the VACUUM's pages (page 1 with the
 * new schema cookie) without truncating (not every frame is backfilled); the next, once the
 * reader leaves, truncates the file. Against the shape before that pass, the file shrank and the
 * cookie did not move: shapeChange calls it an overwrite.
 */
test("a VACUUM by another connection, applied over two passes (a reader held the first back), is not taken for an overwrite: the thread goes on", async () => {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-vacuum-"));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, "gateway.sqlite");
  const db = openDatabase(path);
  cleanup.push(() => db.close());
  db.exec("CREATE TABLE IF NOT EXISTS scratch (id INTEGER PRIMARY KEY, payload BLOB)");
  const insert = db.query("INSERT INTO scratch (payload) VALUES (?)");
  db.transaction(() => {
    for (let i = 0; i < 2000; i++) insert.run(new Uint8Array(4096).fill(i % 251));
  })();
  const failures: string[] = [];
  const checkpointer: WalCheckpointer = startWalCheckpointer(db, path, { intervalMs: 40, onFailure: (m) => failures.push(m) });
  cleanup.push(() => checkpointer.stop());
  expect(await checkpointer.ready).toBe(true);
  await until("rows checkpointed", 5_000, () => statSync(path).size > 8_000_000);
  db.exec("DELETE FROM scratch");
  await Bun.sleep(200);
  const big = statSync(path).size;
  const c0 = cookie(path);

  const admin = new Database(path);
  cleanup.push(() => admin.close());
  const reader = new Database(path, { readonly: true });
  cleanup.push(() => reader.close());
  // VACUUM, the reader's snapshot right after it, then a gateway commit: back to back.
  admin.exec("VACUUM");
  reader.exec("BEGIN");
  reader.query("SELECT count(*) FROM scratch").get();
  // A settlement-like commit that neither changes the schema nor grows the file (page 1 untouched).
  db.exec("INSERT INTO scratch (payload) VALUES (x'00')");
  await Bun.sleep(300); // several passes: each copies up to the reader's snapshot, none truncates
  const mid = { size: statSync(path).size, cookie: cookie(path) };
  reader.exec("COMMIT");
  await Bun.sleep(300);
  // The pass that copied the last of the VACUUM's frames truncated the file to its new size.
  expect(statSync(path).size).toBeLessThan(big);
  // Only meaningful when the scenario happened: page 1 copied before the truncation.
  expect(mid.cookie).toBeGreaterThan(c0);
  expect(mid.size).toBe(big);
  expect(failures).toEqual([]);
});
