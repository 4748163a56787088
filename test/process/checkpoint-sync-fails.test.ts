/**
 * A disk that takes writes into the page cache and fails them at writeback (thin provisioning run
 * out, a failing device): ext4 on a loop device whose image sits on a tmpfs too small for it, all
 * in a private mount namespace of the test's own. With `synchronous = NORMAL` every commit still
 * "succeeds"; the checkpoint thread's fsync is the first to fail. A kill -9 and disk-fault probe
 * found the gateway serving paid answers and top-ups for 4 s after that failure, all lost; now the
 * checkpoint's failure pauses paid requests at once (the real process: index.ts passes it on).
 * Needs root, unshare, losetup and mkfs.ext4 (skipped without them).
 */
import { expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const ROOT = join(import.meta.dir, "..", "..");
const usable = process.getuid?.() === 0 && ["unshare", "losetup", "mkfs.ext4", "mount"].every((tool) => Bun.which(tool) !== null)
  && Bun.spawnSync(["losetup", "-f"]).exitCode === 0;

test.skipIf(!usable)("a checkpoint that cannot sync pauses paid requests at once (503, /ready 503), and the log says why", () => {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-sync-fails-"));
  try {
    const child = join(dir, "child.ts");
    writeFileSync(child, `
      import { closeSync, fsyncSync, openSync, writeSync } from "node:fs";
      import { randomBytes } from "node:crypto";
      import { startGatewayProcess } from ${JSON.stringify(join(ROOT, "test/helpers/gateway-process.ts"))};
      const disk = process.argv[2];
      const gw = await startGatewayProcess({ SWITCHYARD_DB: disk + "/ledger.sqlite" });
      const ask = async () => {
        const res = await fetch(gw.url + "/v1/chat/completions", { method: "POST", headers: { authorization: "Bearer " + gw.key, "content-type": "application/json" },
          body: JSON.stringify({ model: "switchyard/lorem", max_tokens: 16, messages: [{ role: "user", content: "hello there" }] }) });
        await res.arrayBuffer();
        return res.status;
      };
      const before = [];
      for (let i = 0; i < 20; i++) before.push(await ask());
      // ext4 sees room; the tmpfs under its image does not: writeback fails from here on.
      const fd = openSync(disk + "/filler", "w");
      try { for (let i = 0; i < 80; i++) writeSync(fd, randomBytes(1 << 20)); fsyncSync(fd); } catch {}
      try { closeSync(fd); } catch {}
      const filledAt = performance.now();
      // Asked every 20 ms without waiting for the one before: an answer admitted before the pause
      // may wait (up to 10 s) for the ledger to keep its charge, and must not hold up the next asks.
      let paused;
      const noted = (status) => void (status === 503 && paused === undefined && (paused = Math.round(performance.now() - filledAt)));
      while (performance.now() - filledAt < 4000 && paused === undefined) {
        ask().then(noted, () => {});
        await Bun.sleep(20);
      }
      const ready = (await fetch(gw.url + "/ready")).status;
      gw.child.kill("SIGKILL");
      await gw.child.exited;
      const failure = gw.stderr().split("\\n").find((l) => l.includes("ledger cannot write")) ?? "";
      console.log(JSON.stringify({ before: [...new Set(before)], paused, ready, failure }));
    `);
    const back = join(dir, "back");
    const disk = join(dir, "disk");
    const script = [
      `mkdir -p ${back} ${disk}`,
      `mount -t tmpfs -o size=40m tmpfs ${back}`,
      `truncate -s 200M ${back}/img`,
      `mkfs.ext4 -q -F ${back}/img`,
      `mount -o loop,errors=continue ${back}/img ${disk}`,
      `${JSON.stringify(process.execPath)} ${JSON.stringify(child)} ${disk}; status=$?`,
      `umount ${disk}; umount ${back}; exit $status`,
    ].join(" && ").replace("&& umount", "; umount");
    const run = Bun.spawnSync(["unshare", "-m", "sh", "-c", script], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
    const out = run.stdout.toString().trim().split("\n").at(-1) ?? "";
    let said: { before: number[]; paused?: number; ready: number; failure: string };
    try {
      said = JSON.parse(out);
    } catch {
      throw new Error(`the child said: ${out}\n${run.stderr.toString().slice(-2000)}`);
    }
    if (process.env.SYNC_FAILS_REPORT) console.log(said);
    expect(said.before).toEqual([200]);
    // Within the checkpoint thread's interval (a second) and the page cache's writeback, not when
    // ext4 finally gives up on its journal (seconds later, or never).
    expect(said.paused).toBeDefined();
    expect(said.paused!).toBeLessThan(2_500);
    expect(said.ready).toBe(503);
    // Whichever sync fails first says so: the checkpoint thread's, or (on a loaded machine) the
    // commit that starts a restarted log over, which syncs its new header on the request thread.
    expect(said.failure).toMatch(/a WAL checkpoint failed|SQLITE_IOERR_FSYNC/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 60_000);
