/**
 * .ci/test-summary: the last line of a CI run, read from bun test's own summary. A skipped test
 * fails CI (every service a test needs is provided there), and so does a run with no summary.
 */
import { describe, expect, test } from "bun:test";

const SCRIPT = new URL("../../.ci/test-summary", import.meta.url).pathname;

function summarize(log: string): { line: string; stderr: string; exitCode: number } {
  const run = Bun.spawnSync(["bash", SCRIPT], { stdin: new TextEncoder().encode(log) });
  const lines = run.stdout.toString().trimEnd().split("\n");
  return { line: lines.at(-1)!, stderr: run.stderr.toString(), exitCode: run.exitCode };
}

/** bun test 1.4's summary block, as it ends a run. */
const summary = (counts: { pass: number; skip?: number; todo?: number; fail?: number; error?: number }) =>
  [
    "",
    `(pass) a test whose name ends in 3 pass [0.10ms]`,
    "",
    ` ${counts.pass} pass`,
    ...(counts.skip ? [` ${counts.skip} skip`] : []),
    ...(counts.todo ? [` ${counts.todo} todo`] : []),
    ` ${counts.fail ?? 0} fail`,
    ...(counts.error ? [` ${counts.error} error`] : []),
    ` 4000 expect() calls`,
    `Ran ${counts.pass + (counts.skip ?? 0) + (counts.todo ?? 0) + (counts.fail ?? 0)} tests across 70 files. [180.00s]`,
    "",
  ].join("\n");

describe(".ci/test-summary", () => {
  test("all passed: the counts, 0 skipped, exit 0", () => {
    expect(summarize(summary({ pass: 1733 }))).toEqual({ line: "1733 passed, 0 failed, 0 skipped", stderr: "", exitCode: 0 });
  });

  test("skips and todos are counted as skipped and fail the run", () => {
    const result = summarize(summary({ pass: 1670, skip: 62, todo: 1 }));
    expect(result.line).toBe("1670 passed, 0 failed, 63 skipped");
    expect(result.stderr).toBe("ci: 63 tests skipped; in CI every test must run\n");
    expect(result.exitCode).toBe(1);
  });

  test("failures are counted and fail the run", () => {
    const result = summarize(summary({ pass: 1730, fail: 3, error: 1 }));
    expect(result.line).toBe("1730 passed, 3 failed, 0 skipped");
    expect(result.exitCode).toBe(1);
  });

  test("each failure's error is printed again just above the last line (a CI page shows a long run's end; bun's closing list names failures without their errors)", () => {
    const log = [
      "test/e2e/a.test.ts:",
      "(pass) one [1.00ms]",
      "error: expect(received).toBe(expected)",
      "Expected: 429",
      "Received: 200",
      "      at <anonymous> (test/e2e/a.test.ts:12:3)",
      "(pass) a test of another file that ran beside it [2.00ms]",
      "(fail) shared > B refuses what A spent [10.00ms]",
      "(pass) two [1.00ms]",
      "",
      "1 tests failed:",
      "(fail) shared > B refuses what A spent [10.00ms]",
      summary({ pass: 2, fail: 1 }),
    ].join("\n");
    const run = Bun.spawnSync(["bash", SCRIPT], { stdin: new TextEncoder().encode(log) });
    const lines = run.stdout.toString().trimEnd().split("\n");
    expect(lines).toEqual([
      "ci: ── (fail) shared > B refuses what A spent [10.00ms]",
      "ci: test/e2e/a.test.ts:",
      "ci: error: expect(received).toBe(expected)",
      "ci: Expected: 429",
      "ci: Received: 200",
      "ci:       at <anonymous> (test/e2e/a.test.ts:12:3)",
      "2 passed, 1 failed, 0 skipped",
    ]);
    expect(run.exitCode).toBe(1);
    // None when all passed.
    expect(Bun.spawnSync(["bash", SCRIPT], { stdin: new TextEncoder().encode(summary({ pass: 3 })) }).stdout.toString()).toBe("3 passed, 0 failed, 0 skipped\n");
  });

  test("no summary at all (bun test never finished): 0 passed, and the run fails", () => {
    const result = summarize("error: could not load test/contract/ledger.test.ts\n");
    expect(result.line).toBe("0 passed, 0 failed, 0 skipped");
    expect(result.stderr).toBe("ci: no test ran\n");
    expect(result.exitCode).toBe(1);
  });

  test(".ci/run and .ci/test-summary are valid bash", () => {
    for (const file of ["../../.ci/run", "../../.ci/test-summary"]) {
      const check = Bun.spawnSync(["bash", "-n", new URL(file, import.meta.url).pathname]);
      expect(check.stderr.toString()).toBe("");
      expect(check.exitCode).toBe(0);
    }
  });
});
