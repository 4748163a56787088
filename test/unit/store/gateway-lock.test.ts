import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const dir = mkdtempSync(join(tmpdir(), "switchyard-lock-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const LOCK = join(import.meta.dir, "../../../src/store/sqlite/gateway-lock.ts");

/**
 * A process that takes the lock on `db` and says so (or why not), then holds it `holdMs`.
 * `noWrites`: run where no file may grow (ulimit -f 0, SIGXFSZ ignored): what a full disk answers.
 */
function locker(db: string, holdMs: number, noWrites = false) {
  const script = `import { lockDatabaseFile } from ${JSON.stringify(LOCK)};
let lock; try { lock = lockDatabaseFile(${JSON.stringify(db)}); console.log("locked"); } catch (err) { console.log("refused: " + err.message); }
await Bun.sleep(${holdMs}); lock?.release();`;
  const cmd = noWrites ? ["sh", "-c", `trap "" XFSZ; ulimit -f 0; exec bun -e '${script.replaceAll("'", "'\\''")}'`] : ["bun", "-e", script];
  const child = Bun.spawn(cmd, { stdout: "pipe", stderr: "inherit" });
  const reader = child.stdout.getReader();
  const first = reader.read().then(({ value }) => new TextDecoder().decode(value).trim());
  return { said: first, exited: child.exited };
}

test("a restart takes the gateway's lock without a write: where no file may grow (a full disk) it is taken, and still refuses a second process", async () => {
  const db = join(dir, "full.sqlite");
  // The first start made the lock file.
  const first = locker(db, 0);
  expect(await first.said).toBe("locked");
  await first.exited;
  const size = statSync(`${db}-gateway.lock`).size;
  const holder = locker(db, 1_500, true);
  expect(await holder.said).toBe("locked");
  // Nothing was written to take it.
  expect(statSync(`${db}-gateway.lock`).size).toBe(size);
  const second = locker(db, 0);
  expect(await second.said).toContain("refused: another Switchyard gateway is already running");
  await second.exited;
  await holder.exited;
  // Once the holder is gone the file is free again.
  const third = locker(db, 0);
  expect(await third.said).toBe("locked");
  await third.exited;
});
