import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openDatabase } from "../../../src/store/database.ts";
import { keepInSpill, readSpill } from "../../../src/store/spill-file.ts";
import { fundedLedgerFile } from "../../helpers/funded-ledger-file.ts";
import { createSqliteLedger } from "../../../src/store/sqlite/sqlite-ledger.ts";

const dir = mkdtempSync(join(tmpdir(), "switchyard-spill-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const spilled = (n: number) => Array.from({ length: n }, (_, i) => ({
  settlement: { requestId: `req_${i}`, accountId: "acct", keyId: "key", model: "m", provider: "p", promptTokens: 10, completionTokens: 5, estimated: false, costMicro: 1_000, status: "ok", latencyMs: 3, clientRequestId: "x".repeat(100) },
  held: 1_000,
}));

describe("the spill file", () => {
  test("keeps every settlement it is given, read back whole", () => {
    const path = join(dir, "whole", "g.spill");
    keepInSpill(path, spilled(400) as never);
    expect(readSpill(path, () => {}).length).toBe(400);
  });

  test("on a disk that takes only part of it: an error, and nothing left (no cut file reported as kept; a kill -9 and disk-fault probe)", () => {
    // A file-size limit makes the kernel take part of the write and refuse the rest (EFBIG), as a
    // nearly full disk takes part and refuses the rest (ENOSPC). A child process, so the limit is its own.
    const out = join(dir, "short");
    const child = join(dir, "child.ts");
    writeFileSync(child, `
      import { keepInSpill } from ${JSON.stringify(join(import.meta.dir, "../../../src/store/spill-file.ts"))};
      const spilled = Array.from({ length: 400 }, (_, i) => ({ settlement: { requestId: "req_" + i, pad: "x".repeat(100) }, held: 1000 }));
      try {
        keepInSpill(${JSON.stringify(join(out, "g.spill"))}, spilled as never);
        console.log("kept");
      } catch (err) {
        console.log("refused " + String(err).slice(0, 80));
      }
    `);
    const run = Bun.spawnSync(["bash", "-c", `mkdir -p ${JSON.stringify(out)}; ulimit -f 16; trap '' XFSZ; exec ${JSON.stringify(process.execPath)} ${JSON.stringify(child)}`]);
    const said = run.stdout.toString();
    expect(said).toStartWith("refused");
    expect(existsSync(join(out, "g.spill"))).toBe(false);
    expect(readdirSync(out)).toEqual([]);
  });

  test("on a disk that fills up, the room held at start is given up for the spill, which is then written whole, and what it did not take is held again; without it the spill is refused (kill -9 and disk-fault probes)", () => {
    // A 1 MiB tmpfs of the child's own (a private mount namespace: nothing is left mounted), filled to the last byte.
    const child = join(dir, "full-disk.ts");
    writeFileSync(child, `
      import { keepInSpill, readSpill, reserveSpillRoom } from ${JSON.stringify(join(import.meta.dir, "../../../src/store/spill-file.ts"))};
      import { existsSync, openSync, writeSync, closeSync, statSync, statfsSync } from "node:fs";
      const at = process.argv[2];
      const spilled = Array.from({ length: 300 }, (_, i) => ({ settlement: { requestId: "req_" + i, pad: "x".repeat(200) }, held: 1000 }));
      const fill = (name) => {
        const fd = openSync(at + "/" + name, "w");
        const chunk = Buffer.alloc(4096, 1);
        try { for (;;) writeSync(fd, chunk); } catch {}
        closeSync(fd);
      };
      const kept = (path) => { try { keepInSpill(path, spilled); return readSpill(path, () => {}).length; } catch (err) { return String(err.code ?? err); } };
      reserveSpillRoom(at + "/a.spill", 256 * 1024);
      fill("filler-a");
      const withReserve = kept(at + "/a.spill");
      // A spill while the process runs must not hand the room it did not use to whoever filled the
      // disk (the database): it is held again at once, and the disk stays full.
      const reserveLeft = existsSync(at + "/a.spill.reserve") ? statSync(at + "/a.spill.reserve").size : 0;
      const spillSize = statSync(at + "/a.spill").size;
      const { bavail, bsize } = statfsSync(at);
      const freeAfter = Number(bavail) * Number(bsize);
      // So a second spill on the still full disk (the one at shutdown, after one while running) is kept too.
      const again = kept(at + "/a.spill");
      fill("filler-b");
      const without = kept(at + "/b.spill");
      console.log(JSON.stringify({ withReserve, reserveHeldAgain: reserveLeft > 256 * 1024 - spillSize - 64 * 1024, freeAfter, again, without }));
    `);
    const at = join(dir, "mnt");
    const run = Bun.spawnSync(["unshare", "-m", "sh", "-c", `mkdir -p ${JSON.stringify(at)} && mount -t tmpfs -o size=1m tmpfs ${JSON.stringify(at)} && ${JSON.stringify(process.execPath)} ${JSON.stringify(child)} ${JSON.stringify(at)}`]);
    const said = JSON.parse(run.stdout.toString().trim().split("\n").at(-1)!);
    expect(said).toEqual({ withReserve: 300, reserveHeldAgain: true, freeAfter: 0, again: 300, without: "ENOSPC" });
  });
  test("a ledger on a disk smaller than the room it asks for holds what fits (a 2 MiB volume held none, and a spill on it then found no room)", () => {
    const child = join(dir, "small-disk.ts");
    writeFileSync(child, `
      import { openDatabase } from ${JSON.stringify(join(import.meta.dir, "../../../src/store/database.ts"))};
      import { createSqliteLedger } from ${JSON.stringify(join(import.meta.dir, "../../../src/store/sqlite/sqlite-ledger.ts"))};
      import { existsSync, statSync } from "node:fs";
      const at = process.argv[2];
      const logs = [];
      const db = openDatabase(at + "/ledger.sqlite", { busyTimeoutMs: 0 });
      const ledger = createSqliteLedger(db, { now: Date.now, log: (level, message) => logs.push(message), spillReserveBytes: 4 * 1024 * 1024 });
      const reserve = at + "/ledger.sqlite.spill.reserve";
      console.log(JSON.stringify({ held: existsSync(reserve) ? statSync(reserve).size : 0, said: logs.filter((m) => m.includes("room held")) }));
      await ledger.close(0);
      db.close();
    `);
    const at = join(dir, "small");
    const run = Bun.spawnSync(["unshare", "-m", "sh", "-c", `mkdir -p ${JSON.stringify(at)} && mount -t tmpfs -o size=2m tmpfs ${JSON.stringify(at)} && ${JSON.stringify(process.execPath)} ${JSON.stringify(child)} ${JSON.stringify(at)}`]);
    const said = JSON.parse(run.stdout.toString().trim().split("\n").at(-1) || `{"stderr": ${JSON.stringify(run.stderr.toString().slice(-500))}}`);
    expect(said).toEqual({ held: 1024 * 1024, said: ["less room held for the spill file than asked: the disk has little"] });
  });

  test("a start removes the temporary file of a spill its process was killed in the middle of writing; the spill it was to replace is replayed, once", async () => {
    const folder = join(dir, "killed-mid-write");
    const path = join(folder, "ledger.sqlite");
    const { accountId, keyId } = fundedLedgerFile(path);
    const settlement = (n: number) => ({ settlement: { requestId: `req_mid_${n}`, accountId, keyId, model: "m", provider: "p", promptTokens: 10, completionTokens: 5, estimated: false, costMicro: 1_000, status: "ok", latencyMs: 3 }, held: 2_000 });
    // What was kept, and the rewrite a kill -9 cut short (a second settlement, half of a line; a
    // few MB of them when a full disk had given the spill its reserve): writeSpill's `<spill>.<pid>.tmp`.
    keepInSpill(`${path}.spill`, [settlement(1)] as never);
    writeFileSync(`${path}.spill.424242.tmp`, JSON.stringify(settlement(1)) + "\n" + JSON.stringify(settlement(2)).slice(0, 40));
    // Another ledger's in the same folder is not this one's to remove.
    writeFileSync(join(folder, "other.sqlite.spill.424242.tmp"), "");

    const db = openDatabase(path, { busyTimeoutMs: 0 });
    const said: string[] = [];
    const ledger = createSqliteLedger(db, { now: Date.now, log: (_level, message) => said.push(message) });
    await ledger.flush();
    expect(readdirSync(folder).filter((f) => f.endsWith(".tmp"))).toEqual(["other.sqlite.spill.424242.tmp"]);
    expect(said.some((m) => m.startsWith("removed the temporary spill file"))).toBe(true);
    expect(db.query("SELECT request_id FROM usage_records").all()).toEqual([{ request_id: "req_mid_1" }]);
    expect((await ledger.balance(accountId))!.balanceMicro).toBe(1_000_000 - 1_000);
    await ledger.close(0);
    db.close();
  });
});
