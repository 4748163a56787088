/**
 * The real Claude Code CLI, end to end through the gateway: `claude -p` writes a file with its
 * `Write` tool, reads the tool result and answers, streaming, for the three configurations that
 * used to fail (budgeted thinking, adaptive thinking with a system turn, an OpenAI upstream). The
 * fake upstream plays the model and refuses what the real vendors refuse.
 *
 * The CLI is not a dependency of the project (its native binary is 175 MB to download, 381 MB
 * unpacked, and every `bun install` would fetch it). Set CLAUDE_CODE_BIN to the binary; `.ci/run`
 * installs `@anthropic-ai/claude-code` outside the clone and sets it. Without it, this file skips
 * with a message saying so. It runs offline: a temporary HOME, nonessential traffic disabled, and
 * ANTHROPIC_BASE_URL on loopback.
 */
import { describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { useGateway } from "../helpers/gateway.ts";
import { claudeCodeScript, FINAL_TEXT, WRITE_CONTENT, type TurnUsage } from "../helpers/claude-code.ts";

const bin = process.env.CLAUDE_CODE_BIN;
const available = bin !== undefined && existsSync(bin);
if (!available) {
  console.warn(`claude-code-cli.test.ts: SKIPPED — the Claude Code CLI is not installed (set CLAUDE_CODE_BIN to its binary; .ci/run installs @anthropic-ai/claude-code and sets it)${bin ? `; ${bin} does not exist` : ""}.`);
}

const upstream = useFakeUpstream({ strict: true });
const pricing = { input_per_mtok: 3000, output_per_mtok: 15000 };
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  credits: 100_000,
  extraModels: [
    { id: "cc/claude", provider: "fake-anthropic", upstream_model: "claude-sonnet-4-5", category: "text", context_length: 200_000, pricing, aliases: ["claude-*"] },
    { id: "openai/gpt-4.1", provider: "fake-openai", upstream_model: "gpt-4.1", category: "text", context_length: 1_047_576, pricing },
  ],
}));

/** Asynchronous: the gateway answering it runs on this process's event loop. */
async function runClaude(model: string, work: string, home: string) {
  const child = Bun.spawn({
    cmd: [bin!, "-p", "Write hello.txt containing a greeting", "--output-format", "json", "--model", model, "--allowedTools", "Write"],
    cwd: work,
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: home,
      ANTHROPIC_BASE_URL: gw.url,
      ANTHROPIC_API_KEY: gw.key,
      DISABLE_TELEMETRY: "1",
      DISABLE_AUTOUPDATER: "1",
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
    timeout: 25_000,
  });
  const [stdout, stderr, exitCode] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { stdout, stderr, exitCode };
}

describe.skipIf(!available)("Claude Code CLI through the gateway", () => {
  const cases = [
    { model: "claude-sonnet-4-5", upstream: "anthropic", what: "budgeted thinking, capped" },
    { model: "claude-opus-5-5", upstream: "anthropic", what: "adaptive thinking, a system turn" },
    { model: "openai/gpt-4.1", upstream: "openai", what: "translated to an OpenAI upstream" },
  ] as const;

  test.each(cases)("$model ($what): writes the file, reads the result, answers", async ({ model, upstream: kind }) => {
    const work = mkdtempSync(join(tmpdir(), "switchyard-cc-work-"));
    const home = mkdtempSync(join(tmpdir(), "switchyard-cc-home-"));
    try {
      writeFileSync(join(home, ".claude.json"), JSON.stringify({ hasCompletedOnboarding: true }));
      const target = join(work, "hello.txt");
      for (let i = 0; i < 10; i++) upstream.reply(claudeCodeScript(target, { strict: true }));
      const run = await runClaude(model, work, home);
      const stdout = run.stdout;
      expect(run.exitCode, `${stdout}\n${run.stderr}`).toBe(0);
      const result = JSON.parse(stdout);
      expect(result).toMatchObject({ type: "result", subtype: "success", is_error: false, result: FINAL_TEXT, num_turns: 2 });
      expect(readFileSync(target, "utf8")).toBe(WRITE_CONTENT);

      const calls = upstream.requests.filter((r) => r.path === (kind === "openai" ? "/v1/chat/completions" : "/v1/messages"));
      expect(calls).toHaveLength(2);
      const [first, second] = calls.map((c) => c.body);
      expect(first.stream).toBe(true);
      if (kind === "openai") {
        expect(second.messages.at(-1)).toMatchObject({ role: "tool", tool_call_id: "call_script1" });
        expect(second.messages.filter((m: any) => m.role === "system").length).toBeGreaterThan(1);
      } else {
        expect(second.messages.at(-1).content[0]).toMatchObject({ type: "tool_result", tool_use_id: "toolu_script1" });
        if (model === "claude-sonnet-4-5") expect(first.thinking).toMatchObject({ type: "enabled", budget_tokens: 6144 });
        else {
          // Claude Code asks Opus 5.5 for adaptive thinking; `claude-*` sends it to Sonnet 4.5, which
          // takes a budget (adaptive thinking starts with 4.6): the gateway turns the effort into one.
          expect(first.thinking.type).toBe("enabled");
          expect(first.thinking.budget_tokens).toBeGreaterThanOrEqual(1024);
          expect(first.thinking.budget_tokens).toBeLessThan(first.max_tokens);
          expect(first.output_config?.effort).toBeUndefined();
          expect(first.messages.some((m: any) => m.role === "system")).toBe(true);
        }
      }
    } finally {
      upstream.reset();
      rmSync(work, { recursive: true, force: true });
      rmSync(home, { recursive: true, force: true });
    }
  }, 30_000);

  test("a session whose every turn reports prompt caching is charged the vendor-priced sum, to the micro-credit", async () => {
    const work = mkdtempSync(join(tmpdir(), "switchyard-cc-work-"));
    const home = mkdtempSync(join(tmpdir(), "switchyard-cc-home-"));
    // Turn 1 writes the system prompt and tools to the cache (some for an hour); turn 2 reads them back.
    const turns: Record<1 | 2, TurnUsage> = {
      1: { input: 3, cacheRead: 0, cacheWrite5m: 1_500, cacheWrite1h: 500, output: 40 },
      2: { input: 7, cacheRead: 2_000, cacheWrite5m: 120, cacheWrite1h: 0, output: 25 },
    };
    // claude-sonnet-4-5 at 3,000 / 15,000 credits per million: reads 300, 5-minute writes 3,750, 1-hour writes 6,000.
    const priced = (u: TurnUsage) => u.input * 3_000 + u.cacheRead * 300 + u.cacheWrite5m * 3_750 + u.cacheWrite1h * 6_000 + u.output * 15_000;
    try {
      writeFileSync(join(home, ".claude.json"), JSON.stringify({ hasCompletedOnboarding: true }));
      const target = join(work, "hello.txt");
      for (let i = 0; i < 10; i++) upstream.reply(claudeCodeScript(target, { strict: true, usage: (turn) => turns[turn] }));
      const before = await gw.balanceMicro();
      const run = await runClaude("claude-sonnet-4-5", work, home);
      expect(run.exitCode, `${run.stdout}\n${run.stderr}`).toBe(0);
      const result = JSON.parse(run.stdout);
      expect(result).toMatchObject({ type: "result", subtype: "success", result: FINAL_TEXT, num_turns: 2 });
      await gw.app.services.settled();
      expect(before - (await gw.balanceMicro())).toBe(priced(turns[1]) + priced(turns[2]));
      // Claude Code read the cache counts the gateway sent it, as from Anthropic.
      expect(result.usage).toMatchObject({
        input_tokens: turns[1].input + turns[2].input,
        cache_read_input_tokens: turns[2].cacheRead,
        cache_creation_input_tokens: turns[1].cacheWrite5m + turns[1].cacheWrite1h + turns[2].cacheWrite5m,
        output_tokens: turns[1].output + turns[2].output,
      });
    } finally {
      upstream.reset();
      rmSync(work, { recursive: true, force: true });
      rmSync(home, { recursive: true, force: true });
    }
  }, 30_000);
});
