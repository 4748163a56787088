import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { keepInSpill, readSpill } from "../../../src/store/spill-file.ts";

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
});
