/**
 * A log destination that fails does not take the gateway down: its stderr is a pipe whose reader
 * is gone (EPIPE, as when a log shipper dies; a log file on a full disk fails the same way, with
 * ENOSPC), and the gateway, logging every request at info, keeps answering. Before, the stream's
 * unhandled error event ended the process at its first log line (a disk-fault probe, 2026-11-30).
 */
import { expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const ROOT = join(import.meta.dir, "..", "..");

test("stderr's reader gone: the gateway keeps serving paid and free requests, and its log lines are simply lost", async () => {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-log-destination-"));
  const child = Bun.spawn(["bun", "src/index.ts"], {
    cwd: ROOT,
    env: { ...process.env, PORT: "0", HOST: "127.0.0.1", LOG_LEVEL: "info", SWITCHYARD_DEMO: "1", SWITCHYARD_DB: join(dir, "gw.sqlite"), OPENAI_API_KEY: "", ANTHROPIC_API_KEY: "", SWITCHYARD_CONFIG: "" },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  try {
    const reader = child.stdout.getReader();
    let banner = "";
    while (!banner.includes("curl")) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`the gateway exited (${await child.exited}): ${banner}`);
      banner += new TextDecoder().decode(value);
    }
    void (async () => {
      while (!(await reader.read()).done);
    })().catch(() => {});
    // The log's reader goes away (a log shipper that died): every later write to stderr fails with EPIPE.
    await child.stderr.cancel();
    const url = banner.match(/listening on (http:\/\/\S+)/)![1]!;
    const key = banner.match(/svc-sk-[A-Za-z0-9_-]+/)![0];
    for (let i = 0; i < 40; i++) {
      const model = i % 2 === 0 ? "switchyard/echo" : "switchyard/lorem";
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model, max_tokens: 8, messages: [{ role: "user", content: `hello ${i}` }] }),
      });
      expect([i, res.status]).toEqual([i, 200]);
      await res.arrayBuffer();
    }
    // A refusal logs a warning at once: still answered.
    expect((await fetch(`${url}/v1/models`, { headers: { authorization: "Bearer svc-sk-wrong" } })).status).toBe(401);
    await Bun.sleep(200);
    expect((await fetch(`${url}/health`)).status).toBe(200);
    expect(child.exitCode).toBeNull();
  } finally {
    child.kill("SIGKILL");
    await child.exited;
    rmSync(dir, { recursive: true, force: true });
  }
}, 60_000);
