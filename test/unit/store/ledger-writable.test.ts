import { afterEach, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cannotOpenLedger, mustBeWritable } from "../../../src/store/database.ts";

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** What access(2) says for a file this user may read but not write. */
const refuse = (refused: string) => (file: string) => {
  if (file === refused) throw Object.assign(new Error(`EACCES: permission denied, access '${file}'`), { code: "EACCES" });
};

test("a ledger the gateway may only read (the file, or the -wal or -shm beside it) is refused before SQLite opens it read-only; files not there yet are fine", () => {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-writable-"));
  dirs.push(dir);
  const path = join(dir, "ledger.sqlite");
  // Nothing there yet: SQLite makes them.
  expect(() => mustBeWritable(path, refuse("elsewhere"))).not.toThrow();
  writeFileSync(`${path}-shm`, "");
  for (const file of [path, `${path}-wal`, `${path}-shm`]) {
    let error: unknown;
    try {
      mustBeWritable(path, refuse(file));
    } catch (err) {
      error = err;
    }
    expect([file, (error as { code?: string } | undefined)?.code]).toEqual([file, "EACCES"]);
    expect(cannotOpenLedger(path, error)).toContain("Can the gateway write the file and its folder?");
  }
});
