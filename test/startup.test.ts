/**
 * What the gateway refuses at start, and what it prints, as the real entry point runs
 * (`bun src/index.ts` in a child process): issue 32's start-up items.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runGatewayToExit, startGatewayProcess } from "./helpers/gateway-process.ts";

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "switchyard-startup-"));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Output that is one line of ours, not a stack trace. */
function expectOneLine(stderr: string): void {
  const lines = stderr.trim().split("\n");
  expect(lines).toHaveLength(1);
  expect(lines[0]).toStartWith("switchyard: ");
  expect(stderr).not.toMatch(/^\s+at /m);
}

test("a second gateway on a port in use exits non-zero with one line saying so; the first keeps answering", async () => {
  const first = await startGatewayProcess({ SWITCHYARD_DB: join(dir, "first.sqlite") });
  try {
    const port = new URL(first.url).port;
    // Its own database file, so it is the port, not the ledger's lock, that stops it.
    const second = await runGatewayToExit({ PORT: port, SWITCHYARD_DB: join(dir, "second.sqlite") });
    expect(second.code).not.toBe(0);
    expectOneLine(second.stderr);
    expect(second.stderr).toContain(`port ${port} on 127.0.0.1 is already in use`);
    expect(second.stderr).toContain("set PORT");
    // Nothing of the second one was served, and the first still answers every request.
    for (let i = 0; i < 5; i++) {
      const res = await fetch(`${first.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${first.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "switchyard/echo", messages: [{ role: "user", content: "still there?" }] }),
      });
      expect(res.status).toBe(200);
    }
  } finally {
    first.child.kill("SIGTERM");
    await first.child.exited;
  }
}, 30_000);

test("an admin or metrics token shorter than 32 characters is refused at start: one line naming the variable and the length, never the token", async () => {
  for (const name of ["SWITCHYARD_ADMIN_TOKEN", "SWITCHYARD_METRICS_TOKEN"]) {
    const token = "change-me-please";
    const run = await runGatewayToExit({ [name]: token, SWITCHYARD_DB: join(dir, "short-token.sqlite") });
    expect(run.code).not.toBe(0);
    expectOneLine(run.stderr);
    expect(run.stderr).toContain(`${name} must be at least 32 characters long`);
    expect(run.stderr + run.stdout).not.toContain(token);
  }
}, 30_000);
